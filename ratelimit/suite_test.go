package ratelimit_test

import (
	"testing"

	"github.com/toolgate/toolgate/ratelimit"
	"github.com/toolgate/toolgate/ratelimit/ratelimittest"
)

// TestMemorySuite runs the shared backend suite against the in-process limiter.
func TestMemorySuite(t *testing.T) {
	ratelimittest.Run(t, func(*testing.T) ratelimit.MultiLimiter {
		return ratelimit.NewMemory(ratelimit.MemoryOptions{})
	})
}

// TestMemoryTakeAllTinyShard takes two buckets that share a shard holding
// one bucket: the second's allocation evicts the first, which then counts
// as a full bucket, and the call never panics or corrupts the shard.
func TestMemoryTakeAllTinyShard(t *testing.T) {
	m := ratelimit.NewMemory(ratelimit.MemoryOptions{MaxKeys: 1, Shards: 1})
	lim := ratelimit.Limit{Rate: 1.0 / 3600, Burst: 1}
	bs := []ratelimit.Bucket{{Key: ratelimit.Key{ToolID: "a"}, Limit: lim}, {Key: ratelimit.Key{ToolID: "b"}, Limit: lim}}
	r, _, err := m.TakeAll(t.Context(), bs)
	if err != nil || !r.Allowed {
		t.Fatalf("TakeAll %+v %v", r, err)
	}
	if m.Len() != 1 {
		t.Fatalf("Len %d, want 1", m.Len())
	}
}

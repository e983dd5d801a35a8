package ratelimit_test

import (
	"context"
	"errors"
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

// plain is a Limiter that is not a MultiLimiter.
type plain struct{ m *ratelimit.Memory }

func (p plain) Take(ctx context.Context, k ratelimit.Key, l ratelimit.Limit) (ratelimit.Result, error) {
	return p.m.Take(ctx, k, l)
}

// TestTakeAllOnPlainLimiter: one bucket is a plain Take (with the rule
// named); several fail closed with ErrNotAtomic and take nothing.
func TestTakeAllOnPlainLimiter(t *testing.T) {
	l := plain{ratelimit.NewMemory(ratelimit.MemoryOptions{})}
	lim := ratelimit.Limit{Rate: 1.0 / 3600, Burst: 1}
	a := ratelimit.Bucket{Key: ratelimit.Key{ToolID: "a"}, Limit: lim, Rule: "ratelimits[0]", Per: "tool"}
	b := ratelimit.Bucket{Key: ratelimit.Key{ToolID: "b"}, Limit: lim, Rule: "ratelimits[1]", Per: "tool"}
	if _, _, err := ratelimit.TakeAll(t.Context(), l, []ratelimit.Bucket{a, b}); !errors.Is(err, ratelimit.ErrNotAtomic) {
		t.Fatalf("two buckets on a plain Limiter: %v", err)
	}
	r, i, err := ratelimit.TakeAll(t.Context(), l, []ratelimit.Bucket{a})
	if err != nil || !r.Allowed || i != 0 || r.Rule != "ratelimits[0]" {
		t.Fatalf("one bucket: %+v %d %v", r, i, err)
	}
	if r, _, _ := ratelimit.TakeAll(t.Context(), l, []ratelimit.Bucket{b}); !r.Allowed {
		t.Fatal("the refused TakeAll took from b")
	}
	if _, _, err := ratelimit.TakeAll(t.Context(), l, nil); !errors.Is(err, ratelimit.ErrNoBuckets) {
		t.Fatalf("no buckets: %v", err)
	}
}

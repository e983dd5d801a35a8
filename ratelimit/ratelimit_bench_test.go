package ratelimit_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/toolgate/toolgate/ratelimit"
)

// The benchmarks use the real clock (time.Now), as production does, and a
// limit that never refuses, so every take runs the full refill-and-take path.
var benchLimit = ratelimit.Limit{Rate: ratelimit.MaxRate, Burst: ratelimit.MaxBurst}

func benchKeys(n int) []ratelimit.Key {
	keys := make([]ratelimit.Key, n)
	for i := range keys {
		keys[i] = ratelimit.Key{Tenant: "acme", Principal: "user-" + strconv.Itoa(i) + "@example.com", ToolID: "mcp:github.create_issue"}
	}
	return keys
}

// BenchmarkTakeSameKey: one goroutine, one hot bucket.
func BenchmarkTakeSameKey(b *testing.B) {
	m := ratelimit.NewMemory(ratelimit.MemoryOptions{})
	key := benchKeys(1)[0]
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := m.Take(ctx, key, benchLimit); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkTakeParallel: GOMAXPROCS goroutines over 1024 held keys in the
// default 64 shards.
func BenchmarkTakeParallel(b *testing.B) {
	m := ratelimit.NewMemory(ratelimit.MemoryOptions{})
	keys := benchKeys(1024)
	ctx := context.Background()
	var goroutine atomic.Uint32
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := int(goroutine.Add(1)) * 7919
		for pb.Next() {
			if _, err := m.Take(ctx, keys[i&1023], benchLimit); err != nil {
				b.Error(err)
				return
			}
			i++
		}
	})
}

// BenchmarkTakeDistinctKeys: every take is a new key at a full limiter, so
// each one also evicts (the worst case: 1<<18 keys cycled through
// MaxKeys 1<<16, least recently used first).
func BenchmarkTakeDistinctKeys(b *testing.B) {
	m := ratelimit.NewMemory(ratelimit.MemoryOptions{MaxKeys: 1 << 16})
	keys := benchKeys(1 << 18)
	ctx := context.Background()
	for _, k := range keys[:1<<16] { // fill the limiter
		if _, err := m.Take(ctx, k, benchLimit); err != nil {
			b.Fatal(err)
		}
	}
	i := 1 << 16
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := m.Take(ctx, keys[i&(1<<18-1)], benchLimit); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

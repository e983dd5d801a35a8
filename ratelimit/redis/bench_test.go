package redis_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/toolgate/toolgate/ratelimit"
	"github.com/toolgate/toolgate/ratelimit/redis"
)

// BenchmarkTakeLatency measures one take's latency, p50 and p99 (reported as
// p50-ns and p99-ns), of the Redis limiter against the in-process Memory
// baseline in the same run: one bucket (per: principal_tool) and three
// stacked buckets taken all or none.
//
//	go test -run '^$' -bench TakeLatency ./ratelimit/redis/
func BenchmarkTakeLatency(b *testing.B) {
	lim := ratelimit.Limit{Rate: ratelimit.MaxRate, Burst: ratelimit.MaxBurst}
	one := []ratelimit.Bucket{{Key: ratelimit.Key{Tenant: "a", Principal: "p", ToolID: "mcp:fs.read", Rule: "ratelimits[0]"}, Limit: lim}}
	three := append(slices.Clone(one),
		ratelimit.Bucket{Key: ratelimit.Key{Tenant: "a", ToolID: "mcp:fs.read", Rule: "ratelimits[1]"}, Limit: lim},
		ratelimit.Bucket{Key: ratelimit.Key{ToolID: "mcp:fs.read", Rule: "ratelimits[2]"}, Limit: lim})
	for _, backend := range []string{"memory", "redis"} {
		for _, bs := range []struct {
			name    string
			buckets []ratelimit.Bucket
		}{{"1bucket", one}, {"3buckets", three}} {
			b.Run(backend+"/"+bs.name, func(b *testing.B) {
				var l ratelimit.MultiLimiter = ratelimit.NewMemory(ratelimit.MemoryOptions{})
				if backend == "redis" {
					l = newLimiter(b, redis.Options{})
				}
				ctx := context.Background()
				lat := make([]time.Duration, 0, b.N)
				for b.Loop() {
					start := time.Now()
					if _, _, err := l.TakeAll(ctx, bs.buckets); err != nil {
						b.Fatal(err)
					}
					lat = append(lat, time.Since(start))
				}
				slices.Sort(lat)
				b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "p50-ns")
				b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "p99-ns")
			})
		}
	}
}

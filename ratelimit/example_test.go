package ratelimit_test

import (
	"context"
	"fmt"
	"time"

	"github.com/toolgate/toolgate/ratelimit"
)

func Example() {
	// A fake clock makes the example deterministic; production code leaves
	// Now nil (time.Now).
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	lim := ratelimit.NewMemory(ratelimit.MemoryOptions{
		MaxKeys: 10000,
		Now:     func() time.Time { return now },
	})

	rate, err := ratelimit.ParseRate("10/m") // policy: rate: 10/m, burst: 2
	if err != nil {
		panic(err)
	}
	limit := ratelimit.Limit{Rate: rate, Burst: 2}
	key := ratelimit.Key{Tenant: "acme", Principal: "alice", ToolID: "mcp:github.create_issue"}

	for i := 0; i < 3; i++ {
		r, err := lim.Take(context.Background(), key, limit)
		if err != nil {
			panic(err) // the pipeline would deny: fail closed
		}
		if r.Allowed {
			fmt.Printf("call %d: allowed, %d left\n", i+1, r.Remaining)
		} else {
			fmt.Printf("call %d: %v (Retry-After: %d)\n", i+1, r.Err(), r.RetryAfterSeconds())
		}
	}
	now = now.Add(6 * time.Second)
	r, _ := lim.Take(context.Background(), key, limit)
	fmt.Printf("6s later: allowed=%v\n", r.Allowed)
	// Output:
	// call 1: allowed, 1 left
	// call 2: allowed, 0 left
	// call 3: rate_limited: rate limit for this tool exceeded; retry after 6s (Retry-After: 6)
	// 6s later: allowed=true
}

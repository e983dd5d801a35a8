// Package ratelimittest is the behaviour suite every ratelimit.MultiLimiter
// backend must pass (the in-process Memory and ratelimit/redis), so that the
// backends keep one semantics: token buckets that start full, take one token
// per call, refuse with a RetryAfter after which a take is allowed, keep
// keys apart field by field, take several buckets all or none, and apply a
// changed Limit from the next take.
//
// The suite runs on the backend's real clock (Redis reads its own TIME), so
// it uses rates slow enough that nothing refills during a test, except in
// the refill test, which polls with a deadline.
package ratelimittest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolgate/toolgate/ratelimit"
)

// slow refills one token per hour: nothing refills during a test.
const slow = 1.0 / 3600

// Run runs the suite as subtests of t. newLimiter returns a limiter whose
// buckets are all full (fresh state) for one subtest; it registers its own
// cleanup with t.Cleanup.
func Run(t *testing.T, newLimiter func(t *testing.T) ratelimit.MultiLimiter) {
	for _, c := range []struct {
		name string
		fn   func(*testing.T, ratelimit.MultiLimiter)
	}{
		{"BurstThenRefuse", testBurstThenRefuse},
		{"KeysApart", testKeysApart},
		{"Refill", testRefill},
		{"TakeAllAllOrNone", testTakeAllAllOrNone},
		{"TakeAllNamesLongestWait", testTakeAllLongestWait},
		{"TakeAllAllowedFewestRemaining", testTakeAllFewestRemaining},
		{"InvalidArguments", testInvalid},
		{"LimitChange", testLimitChange},
		{"ConcurrentTakes", testConcurrent},
		{"ConcurrentTakeAll", testConcurrentTakeAll},
	} {
		t.Run(c.name, func(t *testing.T) { c.fn(t, newLimiter(t)) })
	}
}

func key(s string) ratelimit.Key {
	return ratelimit.Key{Tenant: "acme", Principal: "alice", ToolID: "mcp:fs." + s, Rule: "ratelimits[0]"}
}

func take(t *testing.T, l ratelimit.Limiter, k ratelimit.Key, lim ratelimit.Limit) ratelimit.Result {
	t.Helper()
	r, err := l.Take(context.Background(), k, lim)
	if err != nil {
		t.Fatalf("Take(%v): %v", k, err)
	}
	return r
}

func takeAll(t *testing.T, l ratelimit.MultiLimiter, bs ...ratelimit.Bucket) (ratelimit.Result, int) {
	t.Helper()
	r, i, err := l.TakeAll(context.Background(), bs)
	if err != nil {
		t.Fatalf("TakeAll: %v", err)
	}
	return r, i
}

func testBurstThenRefuse(t *testing.T, l ratelimit.MultiLimiter) {
	lim := ratelimit.Limit{Rate: slow, Burst: 3}
	for i := range 3 {
		r := take(t, l, key("a"), lim)
		if !r.Allowed || r.Remaining != 2-i || r.RetryAfter != 0 || r.Limit != lim {
			t.Fatalf("take %d: %+v, want allowed with Remaining %d", i, r, 2-i)
		}
	}
	r := take(t, l, key("a"), lim)
	if r.Allowed || r.Remaining != 0 {
		t.Fatalf("take 4: %+v, want refused", r)
	}
	// One token per hour: the wait is at most an hour and, since a test
	// takes far less, more than 59 minutes.
	if r.RetryAfter > time.Hour || r.RetryAfter < 59*time.Minute {
		t.Fatalf("RetryAfter %v, want about 1h", r.RetryAfter)
	}
	if got := r.RetryAfterSeconds(); got < 59*60 || got > 3600 {
		t.Fatalf("RetryAfterSeconds %d", got)
	}
	var ec interface{ Error() string } = r.Err()
	if ec == nil {
		t.Fatal("Err() nil for a refusal")
	}
	if d := r.Details(); d["limit"] != 3 || d["current"] != 3 || d["retryAfterSeconds"] != r.RetryAfterSeconds() {
		t.Fatalf("Details %v", d)
	}
}

func testKeysApart(t *testing.T, l ratelimit.MultiLimiter) {
	lim := ratelimit.Limit{Rate: slow, Burst: 1}
	base := key("apart")
	keys := []ratelimit.Key{base, base, base, base, base}
	keys[1].Tenant = "globex"
	keys[2].Principal = "bob"
	keys[3].ToolID = "mcp:fs.other"
	keys[4].Rule = "ratelimits[1]"
	for i, k := range keys {
		if r := take(t, l, k, lim); !r.Allowed {
			t.Fatalf("key %d %+v: first take refused; keys that differ in one field share a bucket", i, k)
		}
	}
	for i, k := range keys {
		if r := take(t, l, k, lim); r.Allowed {
			t.Fatalf("key %d: second take allowed with burst 1", i)
		}
	}
	// Empty fields are a key like any other (no separator ambiguity).
	a := ratelimit.Key{Tenant: "a", Principal: "b"}
	b := ratelimit.Key{Tenant: "a\x00b"}
	take(t, l, a, lim)
	if r := take(t, l, b, lim); !r.Allowed {
		t.Fatal("keys with shifted fields share a bucket")
	}
}

func testRefill(t *testing.T, l ratelimit.MultiLimiter) {
	lim := ratelimit.Limit{Rate: 20, Burst: 1} // a token every 50ms
	if r := take(t, l, key("refill"), lim); !r.Allowed {
		t.Fatal("first take refused")
	}
	// Take until refused: a slow machine may refill between two takes.
	r := take(t, l, key("refill"), lim)
	for deadline := time.Now().Add(5 * time.Second); r.Allowed; r = take(t, l, key("refill"), lim) {
		if time.Now().After(deadline) {
			t.Fatal("never refused with burst 1")
		}
	}
	if r.RetryAfter <= 0 || r.RetryAfter > 50*time.Millisecond {
		t.Fatalf("RetryAfter %v, want in (0, 50ms]", r.RetryAfter)
	}
	deadline := time.Now().Add(5 * time.Second)
	for !take(t, l, key("refill"), lim).Allowed {
		if time.Now().After(deadline) {
			t.Fatal("the bucket never refilled")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func bucket(k ratelimit.Key, rate float64, burst int, rule string) ratelimit.Bucket {
	k.Rule = rule
	return ratelimit.Bucket{Key: k, Limit: ratelimit.Limit{Rate: rate, Burst: burst}, Rule: rule, Per: "principal_tool"}
}

func testTakeAllAllOrNone(t *testing.T, l ratelimit.MultiLimiter) {
	a := bucket(key("x"), slow, 1, "ratelimits[0]")
	b := bucket(key("x"), slow, 3, "ratelimits[1]")
	if r, _ := takeAll(t, l, a, b); !r.Allowed {
		t.Fatalf("first TakeAll refused: %+v", r)
	}
	r, i := takeAll(t, l, a, b)
	if r.Allowed || i != 0 || r.Rule != "ratelimits[0]" || r.Per != "principal_tool" {
		t.Fatalf("second TakeAll: %+v index %d, want refused by ratelimits[0]", r, i)
	}
	if d := r.Details(); d["rule"] != "ratelimits[0]" || d["per"] != "principal_tool" {
		t.Fatalf("Details %v do not name the rule", d)
	}
	// Nothing was taken from b by the refused call: 2 tokens remain.
	for n := range 2 {
		if r := take(t, l, b.Key, b.Limit); !r.Allowed {
			t.Fatalf("take %d on b refused: the refused TakeAll took from it", n)
		}
	}
	if r := take(t, l, b.Key, b.Limit); r.Allowed {
		t.Fatal("b has more than its burst")
	}
}

func testTakeAllLongestWait(t *testing.T, l ratelimit.MultiLimiter) {
	a := bucket(key("w"), 1, 1, "ratelimits[0]")    // empty for 1s
	b := bucket(key("w"), slow, 1, "ratelimits[1]") // empty for 1h
	c := bucket(key("w"), slow, 5, "ratelimits[2]") // has room
	takeAll(t, l, a, b)
	r, i := takeAll(t, l, a, b, c)
	if r.Allowed || i != 1 || r.Rule != "ratelimits[1]" || r.RetryAfter < 59*time.Minute {
		t.Fatalf("TakeAll %+v index %d, want refused by ratelimits[1] with about 1h", r, i)
	}
	if r, _ := takeAll(t, l, c); !r.Allowed || r.Remaining != 4 {
		t.Fatalf("c after the refusal: %+v, want 4 remaining", r)
	}
}

func testTakeAllFewestRemaining(t *testing.T, l ratelimit.MultiLimiter) {
	a := bucket(key("f"), slow, 10, "ratelimits[0]")
	b := bucket(key("f"), slow, 2, "ratelimits[3]")
	r, i := takeAll(t, l, a, b)
	if !r.Allowed || i != 1 || r.Remaining != 1 || r.Rule != "ratelimits[3]" || r.Limit.Burst != 2 {
		t.Fatalf("TakeAll %+v index %d, want allowed, ratelimits[3] with 1 remaining", r, i)
	}
}

func testInvalid(t *testing.T, l ratelimit.MultiLimiter) {
	ctx := context.Background()
	good := bucket(key("inv"), slow, 1, "ratelimits[0]")
	for _, lim := range []ratelimit.Limit{{Rate: 0, Burst: 1}, {Rate: slow, Burst: 0}, {Rate: slow, Burst: ratelimit.MaxBurst + 1}} {
		if _, err := l.Take(ctx, good.Key, lim); !errors.Is(err, ratelimit.ErrInvalidLimit) {
			t.Errorf("Take with %+v: %v, want ErrInvalidLimit", lim, err)
		}
		bad := bucket(key("inv2"), lim.Rate, lim.Burst, "ratelimits[1]")
		if _, _, err := l.TakeAll(ctx, []ratelimit.Bucket{good, bad}); !errors.Is(err, ratelimit.ErrInvalidLimit) {
			t.Errorf("TakeAll with %+v: %v, want ErrInvalidLimit", lim, err)
		}
	}
	if _, _, err := l.TakeAll(ctx, nil); !errors.Is(err, ratelimit.ErrNoBuckets) {
		t.Errorf("TakeAll(nil): %v", err)
	}
	if _, _, err := l.TakeAll(ctx, []ratelimit.Bucket{good, good}); !errors.Is(err, ratelimit.ErrDuplicateBucket) {
		t.Errorf("TakeAll(dup): %v", err)
	}
	done, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := l.Take(done, good.Key, good.Limit); !errors.Is(err, context.Canceled) {
		t.Errorf("Take on a done ctx: %v", err)
	}
	// None of the failed calls took the token.
	if r := take(t, l, good.Key, good.Limit); !r.Allowed {
		t.Fatal("a failed call took a token")
	}
}

func testLimitChange(t *testing.T, l ratelimit.MultiLimiter) {
	k := key("change")
	for range 3 {
		take(t, l, k, ratelimit.Limit{Rate: slow, Burst: 5})
	}
	// 2 tokens left; burst 1 clamps them to 1.
	small := ratelimit.Limit{Rate: slow, Burst: 1}
	if r := take(t, l, k, small); !r.Allowed || r.Remaining != 0 {
		t.Fatalf("after shrinking: %+v", r)
	}
	if r := take(t, l, k, small); r.Allowed {
		t.Fatal("the shrunk bucket allowed a second take")
	}
	// Growing the burst keeps the debt: still empty.
	if r := take(t, l, k, ratelimit.Limit{Rate: slow, Burst: 5}); r.Allowed {
		t.Fatalf("growing the burst refilled the bucket: %+v", r)
	}
}

func testConcurrent(t *testing.T, l ratelimit.MultiLimiter) {
	lim := ratelimit.Limit{Rate: slow, Burst: 10}
	var allowed atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 40)
	for range 40 {
		wg.Go(func() {
			r, err := l.Take(context.Background(), key("conc"), lim)
			if err != nil {
				errs <- err
				return
			}
			if r.Allowed {
				allowed.Add(1)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if n := allowed.Load(); n != 10 {
		t.Fatalf("%d of 40 concurrent takes allowed with burst 10", n)
	}
}

func testConcurrentTakeAll(t *testing.T, l ratelimit.MultiLimiter) {
	a := bucket(key("ca"), slow, 8, "ratelimits[0]")
	b := bucket(key("ca"), slow, 5, "ratelimits[1]")
	var allowed atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 30)
	for range 30 {
		wg.Go(func() {
			r, _, err := l.TakeAll(context.Background(), []ratelimit.Bucket{a, b})
			if err != nil {
				errs <- fmt.Errorf("TakeAll: %w", err)
				return
			}
			if r.Allowed {
				allowed.Add(1)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if n := allowed.Load(); n != 5 {
		t.Fatalf("%d of 30 concurrent TakeAll allowed with burst 5", n)
	}
	// a lost exactly the 5 allowed tokens: 3 remain.
	for range 3 {
		if r := take(t, l, a.Key, a.Limit); !r.Allowed {
			t.Fatal("a lost tokens to refused TakeAll calls")
		}
	}
	if r := take(t, l, a.Key, a.Limit); r.Allowed {
		t.Fatal("a has more than its burst")
	}
}

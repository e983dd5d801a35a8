package ratelimit_test

import (
	"context"
	"errors"
	"math"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolgate/toolgate/ratelimit"
)

// fakeClock is a settable clock, safe for concurrent use.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func newLimiter(t testing.TB, opts ratelimit.MemoryOptions) (*ratelimit.Memory, *fakeClock) {
	t.Helper()
	clk := newFakeClock()
	if opts.Now == nil {
		opts.Now = clk.Now
	}
	return ratelimit.NewMemory(opts), clk
}

func take(t testing.TB, m ratelimit.Limiter, key ratelimit.Key, limit ratelimit.Limit) ratelimit.Result {
	t.Helper()
	r, err := m.Take(context.Background(), key, limit)
	if err != nil {
		t.Fatalf("Take(%v, %v): %v", key, limit, err)
	}
	return r
}

var alice = ratelimit.Key{Tenant: "acme", Principal: "alice", ToolID: "mcp:fs.read_file"}

func TestBurstThenRefused(t *testing.T) {
	m, _ := newLimiter(t, ratelimit.MemoryOptions{})
	limit := ratelimit.Limit{Rate: 10, Burst: 3}
	for i, wantRemaining := range []int{2, 1, 0} {
		r := take(t, m, alice, limit)
		want := ratelimit.Result{Allowed: true, Limit: limit, Remaining: wantRemaining}
		if r != want {
			t.Fatalf("take %d = %+v, want %+v", i+1, r, want)
		}
		if got := r.RetryAfterSeconds(); got != 0 {
			t.Errorf("take %d: RetryAfterSeconds = %d, want 0", i+1, got)
		}
	}
	// The burst+1-th immediate call: 0 tokens, RetryAfter = (1 - 0)/10 s.
	for i := 0; i < 3; i++ {
		r := take(t, m, alice, limit)
		want := ratelimit.Result{Allowed: false, Limit: limit, Remaining: 0, RetryAfter: 100 * time.Millisecond}
		if r != want {
			t.Fatalf("refused take %d = %+v, want %+v", i+1, r, want)
		}
		if got := r.RetryAfterSeconds(); got != 1 {
			t.Errorf("RetryAfterSeconds = %d, want 1", got)
		}
	}
}

func TestRefillFollowsInjectedClock(t *testing.T) {
	m, clk := newLimiter(t, ratelimit.MemoryOptions{})
	limit := ratelimit.Limit{Rate: 10, Burst: 3}
	for i := 0; i < 3; i++ {
		take(t, m, alice, limit)
	}
	clk.Advance(50 * time.Millisecond) // 0.5 token
	if r := take(t, m, alice, limit); r.Allowed || r.RetryAfter != 50*time.Millisecond {
		t.Fatalf("after 50ms: %+v, want refused with RetryAfter 50ms", r)
	}
	clk.Advance(50 * time.Millisecond) // 1 token
	if r := take(t, m, alice, limit); !r.Allowed || r.Remaining != 0 {
		t.Fatalf("after 100ms: %+v, want allowed with 0 remaining", r)
	}
	clk.Advance(250 * time.Millisecond) // 2.5 tokens
	if r := take(t, m, alice, limit); !r.Allowed || r.Remaining != 1 {
		t.Fatalf("after 250ms more: %+v, want allowed with 1 remaining", r)
	}
	clk.Advance(time.Hour) // refills to Burst, not beyond
	for i, want := range []int{2, 1, 0} {
		if r := take(t, m, alice, limit); !r.Allowed || r.Remaining != want {
			t.Fatalf("after an hour, take %d: %+v, want allowed with %d remaining", i+1, r, want)
		}
	}
	if r := take(t, m, alice, limit); r.Allowed {
		t.Fatalf("after an hour, take 4: %+v, want refused (capacity is Burst)", r)
	}
}

func TestWaitingRetryAfterSuffices(t *testing.T) {
	for _, limit := range []ratelimit.Limit{
		{Rate: 0.5, Burst: 1},
		{Rate: 3, Burst: 2},
		{Rate: 7, Burst: 5},
		{Rate: 1000, Burst: 10},
		{Rate: 5.0 / 60, Burst: 5}, // the openwop-app reference: 5 per 60 s
		{Rate: 1.0 / 3600, Burst: 1},
		{Rate: 1e9, Burst: 1},
	} {
		m, clk := newLimiter(t, ratelimit.MemoryOptions{})
		for i := 0; i < limit.Burst; i++ {
			take(t, m, alice, limit)
		}
		for round := 0; round < 5; round++ {
			r := take(t, m, alice, limit)
			if r.Allowed {
				t.Fatalf("%+v round %d: allowed with an empty bucket", limit, round)
			}
			// (1 - 0)/Rate, give or take the 1e-9 token float tolerance.
			want := time.Duration(1e9 / limit.Rate)
			tol := time.Duration(1/limit.Rate) + 2
			if d := r.RetryAfter - want; d < -tol || d > tol {
				t.Fatalf("%+v round %d: RetryAfter = %v, want %v ± %v", limit, round, r.RetryAfter, want, tol)
			}
			if r.RetryAfter > 1 {
				clk.Advance(r.RetryAfter - 1)
				if early := take(t, m, alice, limit); early.Allowed {
					t.Fatalf("%+v round %d: allowed 1ns before RetryAfter", limit, round)
				}
				clk.Advance(1)
			} else {
				clk.Advance(r.RetryAfter)
			}
			if late := take(t, m, alice, limit); !late.Allowed {
				t.Fatalf("%+v round %d: refused after waiting RetryAfter %v: %+v", limit, round, r.RetryAfter, late)
			}
		}
	}
}

func TestRetryAfterSeconds(t *testing.T) {
	for _, tc := range []struct {
		r    ratelimit.Result
		want int
	}{
		{ratelimit.Result{Allowed: true}, 0},
		{ratelimit.Result{Allowed: true, RetryAfter: 5 * time.Second}, 0},
		{ratelimit.Result{Allowed: false, RetryAfter: 0}, 1},
		{ratelimit.Result{Allowed: false, RetryAfter: time.Nanosecond}, 1},
		{ratelimit.Result{Allowed: false, RetryAfter: 999 * time.Millisecond}, 1},
		{ratelimit.Result{Allowed: false, RetryAfter: time.Second}, 1},
		{ratelimit.Result{Allowed: false, RetryAfter: time.Second + time.Nanosecond}, 2},
		{ratelimit.Result{Allowed: false, RetryAfter: 59500 * time.Millisecond}, 60},
		{ratelimit.Result{Allowed: false, RetryAfter: time.Hour}, 3600},
	} {
		if got := tc.r.RetryAfterSeconds(); got != tc.want {
			t.Errorf("%+v.RetryAfterSeconds() = %d, want %d", tc.r, got, tc.want)
		}
	}
}

func TestLimitChangeAppliesFromThenOn(t *testing.T) {
	t.Run("smaller burst clamps tokens", func(t *testing.T) {
		m, _ := newLimiter(t, ratelimit.MemoryOptions{})
		take(t, m, alice, ratelimit.Limit{Rate: 1, Burst: 10}) // 9 left
		small := ratelimit.Limit{Rate: 1, Burst: 3}
		for i, want := range []int{2, 1, 0} {
			if r := take(t, m, alice, small); !r.Allowed || r.Remaining != want || r.Limit != small {
				t.Fatalf("take %d under %+v: %+v, want allowed with %d remaining", i+1, small, r, want)
			}
		}
		if r := take(t, m, alice, small); r.Allowed {
			t.Fatalf("take 4 under %+v: %+v, want refused", small, r)
		}
	})
	t.Run("larger burst grants no tokens at once", func(t *testing.T) {
		m, clk := newLimiter(t, ratelimit.MemoryOptions{})
		one := ratelimit.Limit{Rate: 1, Burst: 1}
		take(t, m, alice, one)
		big := ratelimit.Limit{Rate: 1, Burst: 5}
		if r := take(t, m, alice, big); r.Allowed || r.RetryAfter != time.Second {
			t.Fatalf("empty bucket under %+v: %+v, want refused with RetryAfter 1s", big, r)
		}
		clk.Advance(time.Minute) // refills to the new burst
		for i := 0; i < 5; i++ {
			if r := take(t, m, alice, big); !r.Allowed || r.Remaining != 4-i {
				t.Fatalf("take %d under %+v: %+v", i+1, big, r)
			}
		}
	})
	t.Run("new rate sets RetryAfter and refill", func(t *testing.T) {
		m, clk := newLimiter(t, ratelimit.MemoryOptions{})
		slow := ratelimit.Limit{Rate: 1, Burst: 1}
		take(t, m, alice, slow)
		if r := take(t, m, alice, slow); r.RetryAfter != time.Second {
			t.Fatalf("under %+v: RetryAfter = %v, want 1s", slow, r.RetryAfter)
		}
		fast := ratelimit.Limit{Rate: 10, Burst: 1}
		if r := take(t, m, alice, fast); r.Allowed || r.RetryAfter != 100*time.Millisecond {
			t.Fatalf("under %+v: %+v, want refused with RetryAfter 100ms", fast, r)
		}
		clk.Advance(100 * time.Millisecond)
		if r := take(t, m, alice, fast); !r.Allowed {
			t.Fatalf("under %+v after 100ms: %+v, want allowed", fast, r)
		}
	})
	t.Run("time before the change refills at the old rate", func(t *testing.T) {
		m, clk := newLimiter(t, ratelimit.MemoryOptions{})
		fast := ratelimit.Limit{Rate: 10, Burst: 2}
		take(t, m, alice, fast)
		take(t, m, alice, fast)
		clk.Advance(100 * time.Millisecond) // 1 token at 10/s (0.1 at 1/s)
		slow := ratelimit.Limit{Rate: 1, Burst: 2}
		if r := take(t, m, alice, slow); !r.Allowed {
			t.Fatalf("under %+v: %+v, want allowed from the token refilled at the old rate", slow, r)
		}
	})
}

func TestKeysDoNotShare(t *testing.T) {
	m, _ := newLimiter(t, ratelimit.MemoryOptions{})
	limit := ratelimit.Limit{Rate: 1, Burst: 2}
	keys := []ratelimit.Key{
		{Tenant: "acme", Principal: "alice", ToolID: "mcp:fs.read_file"},
		{Tenant: "globex", Principal: "alice", ToolID: "mcp:fs.read_file"}, // same principal id, other tenant
		{Tenant: "acme", Principal: "bob", ToolID: "mcp:fs.read_file"},
		{Tenant: "acme", Principal: "alice", ToolID: "mcp:fs.write_file"},
		{Tenant: "acme", Principal: "", ToolID: "mcp:fs.read_file"},
		// Field boundaries matter: these concatenate to the same bytes.
		{Tenant: "ab", Principal: "c", ToolID: "t"},
		{Tenant: "a", Principal: "bc", ToolID: "t"},
		{Tenant: "a\x00b", Principal: "c", ToolID: "t"},
		{Tenant: "a", Principal: "b\x00c", ToolID: "t"},
	}
	for _, k := range keys {
		for i, want := range []int{1, 0} {
			if r := take(t, m, k, limit); !r.Allowed || r.Remaining != want {
				t.Fatalf("%q take %d: %+v, want its own full bucket", k, i+1, r)
			}
		}
	}
	for _, k := range keys {
		if r := take(t, m, k, limit); r.Allowed {
			t.Fatalf("%q take 3: %+v, want refused", k, r)
		}
	}
	// Equal keys share, however their strings were built.
	same := ratelimit.Key{Tenant: string([]byte("ac")) + "me", Principal: strconv.Itoa(0)[:0] + "alice", ToolID: "mcp:fs." + "read_file"}
	if r := take(t, m, same, limit); r.Allowed {
		t.Fatalf("%q rebuilt from other strings: %+v, want the original's empty bucket", same, r)
	}
	if got := m.Len(); got != len(keys) {
		t.Errorf("Len() = %d, want %d", got, len(keys))
	}
}

func TestConcurrentTakesOnOneKeyAllowExactlyBurst(t *testing.T) {
	m, _ := newLimiter(t, ratelimit.MemoryOptions{}) // the clock never moves
	const (
		goroutines = 32
		perG       = 100
		burst      = 257
	)
	limit := ratelimit.Limit{Rate: 1, Burst: burst}
	other := ratelimit.Key{Tenant: "acme", Principal: "bob", ToolID: "mcp:fs.read_file"}
	var allowed, allowedOther atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for i := 0; i < perG; i++ {
				r, err := m.Take(context.Background(), alice, limit)
				if err != nil {
					t.Error(err)
					return
				}
				if r.Allowed {
					allowed.Add(1)
				} else if r.RetryAfter <= 0 {
					t.Errorf("refused with RetryAfter %v", r.RetryAfter)
				}
				if r, _ := m.Take(context.Background(), other, limit); r.Allowed {
					allowedOther.Add(1)
				}
			}
		}()
	}
	close(start)
	wg.Wait()
	if got := allowed.Load(); got != burst {
		t.Errorf("%d goroutines × %d takes on one key at a frozen clock: %d allowed, want exactly Burst = %d", goroutines, perG, got, burst)
	}
	if got := allowedOther.Load(); got != burst {
		t.Errorf("second key: %d allowed, want %d", got, burst)
	}
}

func TestConcurrentDistinctKeysStayBounded(t *testing.T) {
	const maxKeys = 512
	m, clk := newLimiter(t, ratelimit.MemoryOptions{MaxKeys: maxKeys, Shards: 8})
	limit := ratelimit.Limit{Rate: 100, Burst: 2}
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 2000; i++ {
				k := ratelimit.Key{Principal: "p" + strconv.Itoa(g), ToolID: strconv.Itoa(i % 1000)}
				if _, err := m.Take(context.Background(), k, limit); err != nil {
					t.Error(err)
					return
				}
				if i%100 == 0 {
					clk.Advance(time.Millisecond)
					if n := m.Len(); n > maxKeys {
						t.Errorf("Len() = %d > MaxKeys %d", n, maxKeys)
					}
				}
			}
		}()
	}
	wg.Wait()
	if n := m.Len(); n != maxKeys {
		t.Errorf("Len() = %d after 8000 distinct keys, want MaxKeys %d", n, maxKeys)
	}
}

// TestMillionKeysBoundedMemory takes 1,000,000 distinct keys with MaxKeys
// 65,536 and checks Len and the heap.
//
// Heap bound: a held bucket is a 48-byte entry (hash, tokens, last, rate,
// burst, two int32 links) plus its slot in the shard's map[uint64]int32. A
// swiss-table slot for that map is 16 bytes (8-byte key, 4-byte value,
// padding) plus one control byte, so 17 bytes; the table is at most 7/8 full
// and its capacity a power of two, so a held key costs at most
// 17 / (7/8) × 2 ≈ 39 bytes of map. 48 + 39 = 87 bytes per key, or 5.4 MiB for
// 65,536 keys. The bound below allows twice that (a map keeps its size after
// deletions, and tombstones may trigger one extra growth) plus 1 MiB for the
// shard headers and runtime noise: 11.9 MiB. Without a bound, a million
// buckets alone would be at least 48 MB.
func TestMillionKeysBoundedMemory(t *testing.T) {
	const (
		maxKeys  = 65536
		distinct = 1_000_000
		perKey   = 48 + 39
		bound    = 2*maxKeys*perKey + 1<<20
	)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)

	m, clk := newLimiter(t, ratelimit.MemoryOptions{MaxKeys: maxKeys})
	limit := ratelimit.Limit{Rate: 1, Burst: 5}
	ctx := context.Background()
	buf := make([]byte, 0, 32)
	for i := 0; i < distinct; i++ {
		buf = strconv.AppendInt(append(buf[:0], "principal-"...), int64(i), 10)
		r, err := m.Take(ctx, ratelimit.Key{Tenant: "acme", Principal: string(buf), ToolID: "mcp:fs.read_file"}, limit)
		if err != nil || !r.Allowed || r.Remaining != 4 {
			t.Fatalf("key %d: %+v, %v; want a fresh bucket", i, r, err)
		}
		if i%8192 == 0 {
			clk.Advance(time.Millisecond)
			if n := m.Len(); n > maxKeys {
				t.Fatalf("after %d keys: Len() = %d > %d", i+1, n, maxKeys)
			}
		}
	}
	if n := m.Len(); n > maxKeys || n < maxKeys*99/100 {
		t.Fatalf("after %d keys: Len() = %d, want ≤ %d and close to it", distinct, n, maxKeys)
	}
	st := m.Stats()
	if ev := st.EvictedFull + st.EvictedActive; ev != uint64(distinct-st.Buckets) {
		t.Errorf("evictions %d + held %d != %d keys taken", ev, st.Buckets, distinct)
	}

	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(m)
	delta := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("heap delta %.2f MiB for %d held buckets (%.0f B/bucket); bound %.2f MiB",
		float64(delta)/(1<<20), st.Buckets, float64(delta)/float64(st.Buckets), float64(bound)/(1<<20))
	if delta > bound {
		t.Errorf("heap in use grew by %d bytes, bound %d", delta, bound)
	}
}

func TestShardSharesSumToMaxKeys(t *testing.T) {
	for _, tc := range []struct{ maxKeys, shards int }{
		{1, 0}, {3, 0}, {100, 0}, {100, 64}, {1000, 7}, {65, 64}, {5, 1},
	} {
		m, _ := newLimiter(t, ratelimit.MemoryOptions{MaxKeys: tc.maxKeys, Shards: tc.shards})
		limit := ratelimit.Limit{Rate: 1, Burst: 1}
		keys := 50 * tc.maxKeys
		for i := 0; i < keys; i++ {
			take(t, m, ratelimit.Key{Principal: strconv.Itoa(i)}, limit)
			if n := m.Len(); i%97 == 0 && n > tc.maxKeys {
				t.Fatalf("%+v: Len() = %d after %d keys", tc, n, i+1)
			}
		}
		// Every shard has seen far more keys than its share, so all are full.
		if n := m.Len(); n != tc.maxKeys {
			t.Errorf("%+v: Len() = %d after %d keys, want exactly MaxKeys", tc, n, keys)
		}
	}
}

// In these eviction tests one shard makes the LRU order global.

func keyN(n int) ratelimit.Key {
	return ratelimit.Key{Tenant: "acme", Principal: "p" + strconv.Itoa(n), ToolID: "native:echo"}
}

func TestEvictionPrefersRefilledBuckets(t *testing.T) {
	m, clk := newLimiter(t, ratelimit.MemoryOptions{MaxKeys: 3, Shards: 1})
	slow := ratelimit.Limit{Rate: 1.0 / 60, Burst: 1} // refills in a minute
	fast := ratelimit.Limit{Rate: 10, Burst: 1}       // refills in 100ms

	take(t, m, keyN(1), slow) // least recently used, empty
	take(t, m, keyN(2), fast)
	take(t, m, keyN(3), slow) // most recently used, empty
	clk.Advance(time.Second)  // key 2 has refilled; keys 1 and 3 have not

	take(t, m, keyN(4), slow) // shard full: evicts key 2, not the LRU key 1
	if st := m.Stats(); st.EvictedFull != 1 || st.EvictedActive != 0 || st.Buckets != 3 {
		t.Fatalf("Stats() = %+v, want one lossless eviction and 3 buckets", st)
	}
	for _, n := range []int{1, 3, 4} {
		if r := take(t, m, keyN(n), slow); r.Allowed {
			t.Errorf("key %d: %+v, want refused: its debt must survive the eviction", n, r)
		}
	}
	// Key 2 comes back to a full bucket, exactly as if it had been kept.
	if r := take(t, m, keyN(2), fast); !r.Allowed {
		t.Errorf("key 2: %+v, want allowed", r)
	}
}

func TestEvictionFallsBackToLeastRecentlyUsed(t *testing.T) {
	m, _ := newLimiter(t, ratelimit.MemoryOptions{MaxKeys: 3, Shards: 1})
	limit := ratelimit.Limit{Rate: 1.0 / 60, Burst: 1}

	take(t, m, keyN(1), limit)
	take(t, m, keyN(2), limit)
	take(t, m, keyN(3), limit)
	take(t, m, keyN(1), limit) // refused, but a use: key 2 is now the LRU

	take(t, m, keyN(4), limit) // nothing refilled: evicts key 2
	if st := m.Stats(); st.EvictedActive != 1 || st.EvictedFull != 0 {
		t.Fatalf("Stats() = %+v, want one lossy eviction", st)
	}
	for _, n := range []int{1, 3, 4} {
		if r := take(t, m, keyN(n), limit); r.Allowed {
			t.Errorf("key %d: %+v, want refused (still held)", n, r)
		}
	}
	// The documented permissiveness: the evicted key gets a fresh bucket.
	if r := take(t, m, keyN(2), limit); !r.Allowed {
		t.Errorf("evicted key 2: %+v, want allowed (fresh bucket)", r)
	}
}

func TestClockGoingBackwardsRefillsNothing(t *testing.T) {
	clk := newFakeClock()
	m := ratelimit.NewMemory(ratelimit.MemoryOptions{Now: clk.Now})
	limit := ratelimit.Limit{Rate: 1, Burst: 1}
	take(t, m, alice, limit)
	clk.Advance(-time.Hour)
	if r := take(t, m, alice, limit); r.Allowed || r.RetryAfter != time.Second {
		t.Fatalf("after the clock went back: %+v, want refused with RetryAfter 1s", r)
	}
	clk.Advance(time.Hour + time.Second)
	if r := take(t, m, alice, limit); !r.Allowed {
		t.Fatalf("one second after the original reading: %+v, want allowed", r)
	}
}

func TestTakeErrors(t *testing.T) {
	m, _ := newLimiter(t, ratelimit.MemoryOptions{})
	limit := ratelimit.Limit{Rate: 1, Burst: 1}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := m.Take(ctx, alice, limit); !errors.Is(err, context.Canceled) {
		t.Errorf("Take with a cancelled context: err = %v, want context.Canceled", err)
	}
	for _, bad := range []ratelimit.Limit{
		{Rate: 0, Burst: 1},
		{Rate: -1, Burst: 1},
		{Rate: math.NaN(), Burst: 1},
		{Rate: math.Inf(1), Burst: 1},
		{Rate: 1, Burst: 0},
		{Rate: 1, Burst: -3},
	} {
		if _, err := m.Take(context.Background(), alice, bad); !errors.Is(err, ratelimit.ErrInvalidLimit) {
			t.Errorf("Take(%+v): err = %v, want ErrInvalidLimit", bad, err)
		}
		if err := bad.Validate(); !errors.Is(err, ratelimit.ErrInvalidLimit) {
			t.Errorf("%+v.Validate() = %v, want ErrInvalidLimit", bad, err)
		}
	}
	if n := m.Len(); n != 0 {
		t.Errorf("Len() = %d after failed takes, want 0", n)
	}
	if r := take(t, m, alice, limit); !r.Allowed {
		t.Errorf("first valid take: %+v, want allowed (failed takes consume nothing)", r)
	}
	if err := limit.Validate(); err != nil {
		t.Errorf("%+v.Validate() = %v", limit, err)
	}
}

func TestZeroOptionsUseRealClock(t *testing.T) {
	m := ratelimit.NewMemory(ratelimit.MemoryOptions{})
	limit := ratelimit.Limit{Rate: 1e-3, Burst: 2}
	for i, want := range []bool{true, true, false} {
		if r := take(t, m, alice, limit); r.Allowed != want {
			t.Fatalf("take %d: %+v, want Allowed %v", i+1, r, want)
		}
	}
}

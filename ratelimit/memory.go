package ratelimit

import (
	"context"
	"fmt"
	"hash/maphash"
	"slices"
	"sync"
	"time"
	"unsafe"
)

// Defaults for MemoryOptions.
const (
	DefaultMaxKeys = 1 << 20 // buckets held by a Memory limiter
	DefaultShards  = 64      // independently locked shards
)

// maxMaxKeys caps MemoryOptions.MaxKeys so bucket indices fit in an int32.
const maxMaxKeys = 1 << 30

// maxShards caps MemoryOptions.Shards.
const maxShards = 1 << 16

// evictScan is how many of a shard's least recently used buckets are checked
// for a lossless (refilled) victim before the least recently used one is
// evicted regardless.
const evictScan = 8

// MemoryOptions configures NewMemory. The zero value is valid: every field
// has a default.
type MemoryOptions struct {
	// MaxKeys bounds the number of buckets held (Len never exceeds it).
	// Zero or negative means DefaultMaxKeys; values above 1<<30 are clamped.
	// Each bucket costs about 100 bytes of heap (a 48-byte entry plus its
	// index slot), whatever the length of the key's strings, so the default
	// of 1<<20 buckets is at most about 100 MiB and is only reached when that
	// many keys are in use at once.
	MaxKeys int
	// Now is the clock. Nil means time.Now. Tests inject a fake clock; the
	// limiter only ever looks at differences between two readings, and a
	// reading earlier than a previous one refills nothing (no tokens are
	// taken back).
	Now func() time.Time
	// Shards is the number of independently locked shards. Zero or negative
	// means DefaultShards; other values are rounded up to a power of two,
	// capped at 1<<16, and halved until it is at most MaxKeys, so that every
	// shard holds at least one bucket.
	Shards int
}

// Memory is the in-process Limiter: token buckets (RFC 0064 §D) kept in
// memory, for a single node (DESIGN decision 10). Memory is safe for
// concurrent use; takes on keys in different shards do not contend. Its Take
// never blocks on I/O and returns an error only when ctx is already done or
// the Limit is invalid.
//
// # Bounded state
//
// Buckets are spread over Shards shards by a 64-bit hash of the Key; shard i
// holds at most its share of MaxKeys (the shares sum to exactly MaxKeys), in
// a slice of fixed-size, pointer-free entries linked into an intrusive
// least-recently-used list, plus a map from hash to entry. The slice grows to
// its share and then stays put: in steady state Take allocates nothing, also
// when it evicts.
//
// # Eviction
//
// A bucket that has refilled to Burst is equivalent to no bucket at all: a
// fresh bucket starts full too. So when a new key arrives at a shard that
// holds its share of MaxKeys, the limiter looks at the shard's evictScan (8)
// least recently used buckets, oldest first, and evicts the first one that
// has refilled (lossless: nothing is forgotten). Only if none of them has, it
// evicts the least recently used bucket, the one most likely to have
// refilled since it has been idle longest (lossy). A lossy eviction forgets
// that bucket's debt: if its key comes back it gets a full bucket, so it can
// make at most Burst more calls than an unbounded limiter would have allowed,
// once per lossy eviction. That only happens when a shard's share of MaxKeys
// keys were all used within their refill time (Burst/Rate), that is when
// MaxKeys is too small for the number of keys in active use;
// Stats().EvictedActive counts these events so an operator can raise MaxKeys.
//
// # Hash collisions
//
// A bucket is identified by a 64-bit maphash of its Key (all three fields,
// structurally, so no separator ambiguity) under a random per-process seed;
// the Key's strings are not stored, which keeps each entry fixed-size and the
// memory bound independent of key length. Two different Keys with the same
// hash share one bucket. Sharing only ever makes both keys stricter, never
// more permissive (fail-safe), it cannot be provoked because the seed is
// secret and never leaves the process, and its probability is about
// n/2^64 per new key while n buckets are held (below 10^-13 for n = 2^20).
type Memory struct {
	now    func() time.Time
	base   time.Time // first clock reading; bucket times are offsets from it
	seed   maphash.Seed
	mask   uint64 // len(shards) - 1
	shards []shard
}

var _ Limiter = (*Memory)(nil)

// NewMemory returns an empty in-process limiter configured by opts (see
// MemoryOptions for the defaults). It allocates the shard headers only;
// bucket storage grows with use up to MaxKeys.
func NewMemory(opts MemoryOptions) *Memory {
	maxKeys := opts.MaxKeys
	if maxKeys <= 0 {
		maxKeys = DefaultMaxKeys
	}
	maxKeys = min(maxKeys, maxMaxKeys)
	n := opts.Shards
	if n <= 0 {
		n = DefaultShards
	}
	n = min(n, maxShards)
	p := 1
	for p < n {
		p <<= 1
	}
	for p > maxKeys {
		p >>= 1
	}
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	m := &Memory{
		now:    now,
		base:   now(),
		seed:   maphash.MakeSeed(),
		mask:   uint64(p - 1),
		shards: make([]shard, p),
	}
	per, extra := maxKeys/p, maxKeys%p
	for i := range m.shards {
		c := per
		if i < extra {
			c++
		}
		m.shards[i].init(c)
	}
	return m
}

// Take takes one token from key's bucket under limit (RFC 0064 §D); see the
// package doc for the token bucket semantics and Memory for eviction. A new
// key starts with a full bucket; a limit different from the one the bucket
// last saw applies from this take on (tokens refilled so far are kept,
// clamped to the new Burst). Take returns an error only if ctx is already
// done (wrapping ctx.Err()) or limit is invalid (wrapping ErrInvalidLimit);
// in both cases no token is taken and no bucket is created. It is safe for
// concurrent use.
func (m *Memory) Take(ctx context.Context, key Key, limit Limit) (Result, error) {
	if err := ctx.Err(); err != nil {
		return Result{Limit: limit}, fmt.Errorf("take rate limit token: %w", err)
	}
	if err := limit.Validate(); err != nil {
		return Result{Limit: limit}, err
	}
	h := maphash.Comparable(m.seed, key)
	now := m.elapsed()
	s := &m.shards[(h>>32)&m.mask] // high bits; the shard map hashes h again
	s.mu.Lock()
	r := s.take(h, now, limit)
	s.mu.Unlock()
	return r, nil
}

// Len returns the number of buckets currently held, at most MaxKeys. It is
// safe for concurrent use; under concurrent takes the count is a snapshot
// taken shard by shard.
func (m *Memory) Len() int {
	n := 0
	for i := range m.shards {
		s := &m.shards[i]
		s.mu.Lock()
		n += len(s.buckets)
		s.mu.Unlock()
	}
	return n
}

// MemoryStats are counters of a Memory limiter, for metrics.
type MemoryStats struct {
	// Buckets is Len().
	Buckets int
	// EvictedFull counts evictions of buckets that had refilled to Burst:
	// lossless, the limiter behaves as if they were still held.
	EvictedFull uint64
	// EvictedActive counts evictions of buckets that had not refilled: each
	// may let its key make up to Burst extra calls (see Memory). A
	// growing count means MaxKeys is too small for the active key set.
	EvictedActive uint64
}

// Stats returns the limiter's counters. It is safe for concurrent use; under
// concurrent takes the figures are a snapshot taken shard by shard.
func (m *Memory) Stats() MemoryStats {
	var st MemoryStats
	for i := range m.shards {
		s := &m.shards[i]
		s.mu.Lock()
		st.Buckets += len(s.buckets)
		st.EvictedFull += s.evictedFull
		st.EvictedActive += s.evictedActive
		s.mu.Unlock()
	}
	return st
}

// elapsed returns the clock reading as nanoseconds since m.base. Using
// time.Time.Sub keeps the monotonic reading of time.Now, so wall clock steps
// do not refill or drain buckets.
func (m *Memory) elapsed() int64 {
	return int64(m.now().Sub(m.base))
}

// bucket is one token bucket and its LRU links. It holds no pointers, so the
// garbage collector never scans the bucket slices.
type bucket struct {
	hash   uint64  // maphash of the Key
	tokens float64 // tokens at time last
	last   int64   // ns since Memory.base of the last refill
	rate   float64 // Limit.Rate last applied, tokens/s
	burst  int     // Limit.Burst last applied, tokens
	prev   int32   // more recently used neighbour, or -1
	next   int32   // less recently used neighbour, or -1
}

// refill adds the tokens accrued since b.last at b.rate, up to b.burst. A
// clock reading before b.last adds nothing and keeps b.last.
func (b *bucket) refill(now int64) {
	if now <= b.last {
		return
	}
	b.tokens = min(float64(b.burst), b.tokens+float64(now-b.last)*b.rate/1e9)
	b.last = now
}

// full reports whether b has refilled to b.burst by now, without changing it.
func (b *bucket) full(now int64) bool {
	t := b.tokens
	if now > b.last {
		t += float64(now-b.last) * b.rate / 1e9
	}
	return t+tokenEpsilon >= float64(b.burst)
}

// take takes one token from a refilled b under limit.
func (b *bucket) take(limit Limit) Result {
	if b.tokens >= 1 {
		b.tokens--
		return Result{Allowed: true, Limit: limit, Remaining: int(b.tokens)}
	}
	return Result{Limit: limit, RetryAfter: retryAfter(b.tokens, limit.Rate)}
}

// shardState is one shard: a mutex, the buckets and the index over them.
type shardState struct {
	mu      sync.Mutex
	index   map[uint64]int32 // bucket hash → position in buckets
	buckets []bucket         // len ≤ max; cap grows to max and no further
	max     int              // this shard's share of MaxKeys
	head    int32            // most recently used, or -1
	tail    int32            // least recently used, or -1

	evictedFull, evictedActive uint64 // see MemoryStats
}

// shard pads shardState to a multiple of 128 bytes so that neighbouring
// shards' mutexes do not share a cache line (or an adjacent-line prefetch pair).
type shard struct {
	shardState
	_ [128 - unsafe.Sizeof(shardState{})%128]byte
}

// init prepares an empty shard holding at most capacity buckets.
func (s *shard) init(capacity int) {
	s.max = capacity
	s.head, s.tail = -1, -1
	s.index = make(map[uint64]int32)
}

// take finds or creates the bucket of hash h and takes a token from it. The
// caller holds s.mu.
func (s *shard) take(h uint64, now int64, limit Limit) Result {
	i, ok := s.index[h]
	if !ok {
		i = s.alloc(now)
		s.index[h] = i
		s.buckets[i] = bucket{hash: h, tokens: float64(limit.Burst), last: now, rate: limit.Rate, burst: limit.Burst}
		s.pushFront(i)
		return s.buckets[i].take(limit)
	}
	b := &s.buckets[i]
	b.refill(now)
	if b.rate != limit.Rate || b.burst != limit.Burst {
		b.rate, b.burst = limit.Rate, limit.Burst
		b.tokens = min(b.tokens, float64(limit.Burst))
	}
	if s.head != i {
		s.unlink(i)
		s.pushFront(i)
	}
	return b.take(limit)
}

// alloc returns the position for a new bucket: a fresh one while the shard is
// below its share, else an evicted one (see Memory), unlinked and removed
// from the index. The caller holds s.mu and links the result.
func (s *shard) alloc(now int64) int32 {
	if n := len(s.buckets); n < s.max {
		if n == cap(s.buckets) {
			grown := make([]bucket, n, min(s.max, max(16, 2*n)))
			copy(grown, s.buckets)
			s.buckets = grown
		}
		s.buckets = s.buckets[:n+1]
		return int32(n)
	}
	victim := s.tail
	for i, k := s.tail, 0; i >= 0 && k < evictScan; i, k = s.buckets[i].prev, k+1 {
		if s.buckets[i].full(now) {
			victim = i
			break
		}
	}
	if s.buckets[victim].full(now) {
		s.evictedFull++
	} else {
		s.evictedActive++
	}
	delete(s.index, s.buckets[victim].hash)
	s.unlink(victim)
	return victim
}

// pushFront links bucket i as the most recently used.
func (s *shard) pushFront(i int32) {
	b := &s.buckets[i]
	b.prev, b.next = -1, s.head
	if s.head >= 0 {
		s.buckets[s.head].prev = i
	} else {
		s.tail = i
	}
	s.head = i
}

// unlink removes bucket i from the LRU list.
func (s *shard) unlink(i int32) {
	b := &s.buckets[i]
	if b.prev >= 0 {
		s.buckets[b.prev].next = b.next
	} else {
		s.head = b.next
	}
	if b.next >= 0 {
		s.buckets[b.next].prev = b.prev
	} else {
		s.tail = b.prev
	}
	b.prev, b.next = -1, -1
}

var _ MultiLimiter = (*Memory)(nil)

// TakeAll takes one token from each of buckets, all or none (MultiLimiter):
// the shards involved are locked together, in ascending order, so no other
// take sees a partial result. Errors are those of Take, plus ErrNoBuckets
// and ErrDuplicateBucket. It is safe for concurrent use.
func (m *Memory) TakeAll(ctx context.Context, buckets []Bucket) (Result, int, error) {
	if err := checkBuckets(ctx, buckets); err != nil {
		return Result{}, -1, err
	}
	hs := make([]uint64, len(buckets))
	var locked []uint64
	for i, b := range buckets {
		hs[i] = maphash.Comparable(m.seed, b.Key)
		if si := (hs[i] >> 32) & m.mask; !slices.Contains(locked, si) {
			locked = append(locked, si)
		}
	}
	slices.Sort(locked)
	now := m.elapsed()
	for _, si := range locked {
		m.shards[si].mu.Lock()
	}
	defer func() {
		for _, si := range locked {
			m.shards[si].mu.Unlock()
		}
	}()
	// Phase 1: refill every bucket (creating a full one for a new key,
	// which is the same as no bucket) and see whether each has a token.
	rs := make([]Result, len(buckets))
	allowed := true
	for i, b := range buckets {
		s := &m.shards[(hs[i]>>32)&m.mask]
		bk := s.touch(hs[i], now, b.Limit)
		if bk.tokens >= 1 {
			rs[i] = Result{Allowed: true, Limit: b.Limit, Remaining: int(bk.tokens - 1)}
		} else {
			allowed = false
			rs[i] = Result{Limit: b.Limit, RetryAfter: retryAfter(bk.tokens, b.Limit.Rate)}
		}
	}
	if !allowed {
		for i := range rs {
			rs[i].Allowed, rs[i].Remaining = false, 0
		}
		r, idx := combine(buckets, rs)
		return r, idx, nil
	}
	// Phase 2: take one token from each. A bucket evicted by a later
	// bucket's allocation in phase 1 (a shard smaller than the call) was
	// forgotten and counts as full, as in Memory's lossy eviction.
	for i := range buckets {
		s := &m.shards[(hs[i]>>32)&m.mask]
		if j, ok := s.index[hs[i]]; ok {
			s.buckets[j].tokens--
		}
	}
	r, idx := combine(buckets, rs)
	return r, idx, nil
}

// touch finds or creates the bucket of hash h, refills it and applies limit,
// as take does, and returns it without taking a token. The caller holds s.mu.
func (s *shard) touch(h uint64, now int64, limit Limit) *bucket {
	i, ok := s.index[h]
	if !ok {
		i = s.alloc(now)
		s.index[h] = i
		s.buckets[i] = bucket{hash: h, tokens: float64(limit.Burst), last: now, rate: limit.Rate, burst: limit.Burst}
		s.pushFront(i)
		return &s.buckets[i]
	}
	b := &s.buckets[i]
	b.refill(now)
	if b.rate != limit.Rate || b.burst != limit.Burst {
		b.rate, b.burst = limit.Rate, limit.Burst
		b.tokens = min(b.tokens, float64(limit.Burst))
	}
	if s.head != i {
		s.unlink(i)
		s.pushFront(i)
	}
	return b
}

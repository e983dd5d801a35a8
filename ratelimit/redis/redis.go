// Package redis is the shared rate-limit backend: token buckets kept in
// Redis so that several toolgate replicas share one set of limits (DESIGN
// decision 10, issue 14). It has the semantics of the in-process
// ratelimit.Memory, checked by the same ratelimittest suite.
//
// # Algorithm
//
// Each bucket is GCRA, the generic cell rate algorithm, which admits exactly
// the calls a token bucket admits. With emission interval T = 1/Rate, a
// bucket's state is its theoretical arrival time TAT, the instant it is full
// again; a take at time t is allowed iff TAT - t <= (Burst-1)·T and then
// TAT becomes max(TAT, t) + T. The script stores TAT as an integer
// microsecond base (when it was written) plus the float debt TAT - base, so
// that fast rates keep their precision (an absolute TAT in microseconds as a
// Lua double would lose sub-microsecond intervals). The bucket also keeps
// the Rate and Burst it last saw; a changed Limit converts the debt to
// tokens, clamps them to the new Burst and back, as Memory does.
//
// # One round trip
//
// Take and TakeAll run one Lua script (EVALSHA, falling back to EVAL on
// NOSCRIPT; the script is loaded at New) over every bucket of the call: it
// reads the clock with TIME inside the script, so replica clock skew plays no
// part, evaluates every bucket and writes them only if all have room (take
// all or none), atomically on the server. Each written bucket expires
// (PEXPIRE) when it would be full again, the "a full bucket is no bucket"
// rule Memory uses for eviction, so Redis holds only active buckets.
//
// # Keys
//
// A bucket's Redis key is Options.Prefix followed by the length-prefixed
// fields of the ratelimit.Key (Rule, Tenant, Principal, ToolID), so no two
// Keys share a Redis key. All buckets of one call are touched by one
// script, so a Redis Cluster would need them in one slot; this backend
// targets a single Redis (or a primary with replicas).
//
// # Redis down
//
// When Redis cannot answer (connection refused, timeout, a script error)
// Take and TakeAll return an error wrapping ratelimit.ErrUnavailable, and the
// pipeline refuses the call with ratelimit_unavailable (fail closed), unless
// Options.AllowUnavailable is set: then the call is allowed, logged at warn
// and counted in Stats().Unavailable.
package redis

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/toolgate/toolgate/ratelimit"
)

//go:embed gcra.lua
var gcraSource string

var gcra = goredis.NewScript(gcraSource)

// DefaultPrefix is the key prefix when Options.Prefix is empty.
const DefaultPrefix = "toolgate:rl:"

// DefaultTimeout bounds one round trip when Options.Timeout is zero.
const DefaultTimeout = 500 * time.Millisecond

// Options configures New and NewFromClient.
type Options struct {
	// URL is the Redis URL (redis://[user:password@]host:port[/db] or
	// rediss:// for TLS), as go-redis ParseURL reads it. New only.
	URL string
	// Prefix starts every key this limiter writes; "" means DefaultPrefix.
	// Replicas that share limits use the same prefix.
	Prefix string
	// AllowUnavailable lets calls through when Redis cannot answer
	// (ratelimit.on_unavailable: allow) instead of failing them with
	// ratelimit.ErrUnavailable (deny, the default).
	AllowUnavailable bool
	// Timeout bounds one take's round trip; 0 means DefaultTimeout.
	Timeout time.Duration
	// Logger receives a warning per call let through while Redis is
	// unavailable; nil means slog.Default().
	Logger *slog.Logger
}

// Limiter is the Redis ratelimit.MultiLimiter. It is safe for concurrent
// use; go-redis pools the connections.
type Limiter struct {
	client      goredis.UniversalClient
	owned       bool
	prefix      string
	allow       bool
	timeout     time.Duration
	log         *slog.Logger
	unavailable atomic.Uint64
}

var _ ratelimit.MultiLimiter = (*Limiter)(nil)

// New connects to opts.URL, checks within ctx that Redis answers and loads
// the script, so that a gateway fails fast at start when Redis is down. Its
// errors: a malformed URL (wrapping go-redis's parse error) or an
// unreachable Redis (wrapping ratelimit.ErrUnavailable).
func New(ctx context.Context, opts Options) (*Limiter, error) {
	o, err := goredis.ParseURL(opts.URL)
	if err != nil {
		return nil, fmt.Errorf("ratelimit.url: %w", err)
	}
	c := goredis.NewClient(o)
	l := NewFromClient(c, opts)
	l.owned = true
	if err := gcra.Load(ctx, c).Err(); err != nil {
		c.Close()
		return nil, fmt.Errorf("%w: redis at %s: %v", ratelimit.ErrUnavailable, o.Addr, err)
	}
	return l, nil
}

// NewFromClient returns a Limiter over an existing client, without checking
// that Redis answers (the script is loaded on first use). opts.URL is
// ignored. Close does not close c.
func NewFromClient(c goredis.UniversalClient, opts Options) *Limiter {
	l := &Limiter{client: c, prefix: opts.Prefix, allow: opts.AllowUnavailable, timeout: opts.Timeout, log: opts.Logger}
	if l.prefix == "" {
		l.prefix = DefaultPrefix
	}
	if l.timeout <= 0 {
		l.timeout = DefaultTimeout
	}
	if l.log == nil {
		l.log = slog.Default()
	}
	return l
}

// Close closes the client New opened. It is safe to call once.
func (l *Limiter) Close() error {
	if l.owned {
		return l.client.Close()
	}
	return nil
}

// Stats are counters of a Limiter, for metrics.
type Stats struct {
	// Unavailable counts takes Redis could not answer (each was refused
	// with ratelimit.ErrUnavailable, or let through with AllowUnavailable).
	Unavailable uint64
}

// Stats returns the limiter's counters. Safe for concurrent use.
func (l *Limiter) Stats() Stats { return Stats{Unavailable: l.unavailable.Load()} }

// Ping checks within ctx that Redis answers (for `toolgate validate`).
func (l *Limiter) Ping(ctx context.Context) error {
	if err := l.client.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("%w: %v", ratelimit.ErrUnavailable, err)
	}
	return nil
}

// Key returns the Redis key of k under the limiter's prefix.
func (l *Limiter) Key(k ratelimit.Key) string {
	var b strings.Builder
	b.WriteString(l.prefix)
	for _, f := range [...]string{k.Rule, k.Tenant, k.Principal, k.ToolID} {
		b.WriteString(strconv.Itoa(len(f)))
		b.WriteByte(':')
		b.WriteString(f)
	}
	return b.String()
}

// Take takes one token from key's bucket under limit (ratelimit.Limiter):
// TakeAll with one bucket.
func (l *Limiter) Take(ctx context.Context, key ratelimit.Key, limit ratelimit.Limit) (ratelimit.Result, error) {
	r, _, err := l.TakeAll(ctx, []ratelimit.Bucket{{Key: key, Limit: limit}})
	if err != nil {
		r = ratelimit.Result{Limit: limit}
	}
	return r, err
}

// TakeAll takes one token from each bucket, all or none, in one round trip
// (ratelimit.MultiLimiter). Errors: ctx already done, an empty or
// duplicate-keyed slice, an invalid Limit (nothing is sent), or Redis not
// answering (wrapping ratelimit.ErrUnavailable; with AllowUnavailable the
// call is allowed instead).
func (l *Limiter) TakeAll(ctx context.Context, buckets []ratelimit.Bucket) (ratelimit.Result, int, error) {
	if err := ctx.Err(); err != nil {
		return ratelimit.Result{}, -1, fmt.Errorf("take rate limit tokens: %w", err)
	}
	if len(buckets) == 0 {
		return ratelimit.Result{}, -1, ratelimit.ErrNoBuckets
	}
	keys := make([]string, len(buckets))
	args := make([]any, 0, 2*len(buckets))
	for i, b := range buckets {
		if err := b.Limit.Validate(); err != nil {
			return ratelimit.Result{}, -1, fmt.Errorf("bucket %d (%s): %w", i, b.Rule, err)
		}
		for _, o := range buckets[:i] {
			if o.Key == b.Key {
				return ratelimit.Result{}, -1, fmt.Errorf("%w: bucket %d (%s)", ratelimit.ErrDuplicateBucket, i, b.Rule)
			}
		}
		keys[i] = l.Key(b.Key)
		args = append(args, strconv.FormatFloat(b.Limit.Rate, 'g', -1, 64), b.Limit.Burst)
	}
	tctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	v, err := gcra.Run(tctx, l.client, keys, args...).StringSlice()
	if err == nil && len(v) != len(buckets)+1 {
		err = fmt.Errorf("script answered %d values for %d buckets", len(v), len(buckets))
	}
	if err != nil {
		return l.unavailableResult(ctx, buckets, err)
	}
	allowed := v[0] == "1"
	rs := make([]ratelimit.Result, len(buckets))
	for i, b := range buckets {
		tokens, perr := strconv.ParseFloat(v[i+1], 64)
		if perr != nil || math.IsNaN(tokens) {
			return l.unavailableResult(ctx, buckets, fmt.Errorf("script answered %q", v[i+1]))
		}
		rs[i] = result(b.Limit, tokens, allowed)
	}
	r, i := combine(buckets, rs)
	return r, i, nil
}

// result turns the tokens a bucket held before the take into its Result.
func result(lim ratelimit.Limit, tokens float64, allowed bool) ratelimit.Result {
	switch {
	case allowed:
		return ratelimit.Result{Allowed: true, Limit: lim, Remaining: int(tokens - 1)}
	case tokens >= 1:
		return ratelimit.Result{Limit: lim} // had room; another bucket refused
	}
	return ratelimit.Result{Limit: lim, RetryAfter: ratelimit.RetryAfter(tokens, lim.Rate)}
}

// combine picks TakeAll's answer, as ratelimit.Memory does.
func combine(buckets []ratelimit.Bucket, rs []ratelimit.Result) (ratelimit.Result, int) {
	best := -1
	allowed := rs[0].Allowed
	for i, r := range rs {
		switch {
		case allowed && (best < 0 || r.Remaining < rs[best].Remaining):
			best = i
		case !allowed && r.RetryAfter > 0 && (best < 0 || r.RetryAfter > rs[best].RetryAfter):
			best = i
		}
	}
	r := rs[best]
	r.Rule, r.Per = buckets[best].Rule, buckets[best].Per
	return r, best
}

// unavailableResult answers a take Redis could not: an error wrapping
// ratelimit.ErrUnavailable, or (AllowUnavailable) an allowed Result. A done
// caller ctx is reported as such.
func (l *Limiter) unavailableResult(ctx context.Context, buckets []ratelimit.Bucket, err error) (ratelimit.Result, int, error) {
	if cerr := ctx.Err(); cerr != nil && errors.Is(err, cerr) {
		return ratelimit.Result{}, -1, fmt.Errorf("take rate limit tokens: %w", cerr)
	}
	l.unavailable.Add(1)
	if !l.allow {
		return ratelimit.Result{}, -1, fmt.Errorf("%w: redis: %v", ratelimit.ErrUnavailable, err)
	}
	l.log.Warn("rate limiter unavailable; call let through (ratelimit.on_unavailable: allow)", "err", err.Error())
	b := buckets[0]
	return ratelimit.Result{Allowed: true, Limit: b.Limit, Rule: b.Rule, Per: b.Per}, 0, nil
}

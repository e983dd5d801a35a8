package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/toolgate/toolgate/errcode"
)

// Limit is a token bucket's parameters (RFC 0064 §D): Rate is the refill rate
// in tokens per second and Burst the capacity in tokens. A valid Limit has a
// finite Rate > 0 and Burst >= 1 (see Validate). Limit is a plain value, safe
// to copy and to share between goroutines.
type Limit struct {
	Rate  float64 // refill rate, tokens per second; finite and > 0
	Burst int     // capacity, tokens; in [1, MaxBurst]; a new bucket starts with Burst tokens
}

// ErrInvalidLimit is wrapped by the error Validate returns for a Limit whose
// Rate is not a finite number > 0 or whose Burst is not in [1, MaxBurst]. Take returns it too:
// an invalid Limit is a configuration bug, and an error makes the caller deny
// (fail closed, DESIGN decision 1) rather than guess.
var ErrInvalidLimit = errors.New("invalid rate limit")

// Validate returns nil if l.Rate is a finite number > 0 tokens/s and
// 1 <= l.Burst <= MaxBurst, and otherwise an error wrapping ErrInvalidLimit that names the
// offending field.
func (l Limit) Validate() error {
	if !(l.Rate > 0) || math.IsInf(l.Rate, 1) {
		return fmt.Errorf("%w: rate %v tokens/s is not a finite number > 0", ErrInvalidLimit, l.Rate)
	}
	if l.Burst < 1 || l.Burst > MaxBurst {
		return fmt.Errorf("%w: burst %d is not between 1 and %d", ErrInvalidLimit, l.Burst, MaxBurst)
	}
	return nil
}

// Key identifies one token bucket: RFC 0064 §D keys buckets on
// (principal, toolName); toolgate uses the canonical toolId (DESIGN decision
// 3) and adds Tenant so that the same principal id in two tenants never shares
// a bucket. All fields take part in equality; none is special when
// empty (see the package doc). Key is a comparable value, safe to copy.
type Key struct {
	Tenant    string // tenant of the principal; "" for a single-tenant deployment
	Principal string // principal id the call is attributed to
	ToolID    string // canonical toolId, for example "mcp:fs.read_file"
	// Rule separates the buckets of different policy rules (for example
	// "ratelimits[2]"); "" for a bucket that belongs to no rule. A rule
	// that keys on fewer fields leaves the others "" (per: tool keeps only
	// ToolID and Rule).
	Rule string
}

// Result is the outcome of one Take (RFC 0064 §D). It is a plain value.
type Result struct {
	// Allowed reports whether a token was taken; when false the tool must not
	// be invoked and the call is answered rate_limited.
	Allowed bool
	// Limit is the Limit the take was evaluated against.
	Limit Limit
	// Remaining is the number of whole tokens left after this take, in
	// [0, Limit.Burst-1] when Allowed and 0 when refused.
	Remaining int
	// RetryAfter is 0 when Allowed; otherwise the time until one whole token
	// is available, (1 - tokens)/Rate seconds, rounded up to the nanosecond:
	// a take exactly RetryAfter later by the limiter's clock, with no other
	// take on the key in between, is allowed.
	RetryAfter time.Duration
	// Rule and Per name the policy rule whose bucket this is (Bucket.Rule,
	// Bucket.Per) when the Result comes from TakeAll; "" from Take.
	Rule, Per string
}

// RetryAfterSeconds returns the value of the HTTP Retry-After header in whole
// seconds: 0 when r.Allowed, otherwise RetryAfter rounded up, and at least 1
// (a refused call is never told to retry immediately).
func (r Result) RetryAfterSeconds() int {
	if r.Allowed {
		return 0
	}
	return ceilSeconds(r.RetryAfter)
}

// Details returns the details object of the rate_limited error envelope
// (CONTRACT §1.6, RFC 0064 §D) for a refused take, and nil when r.Allowed:
//
//	scope             "tool" (a per-(principal, toolId) bucket, RFC 0064 §D)
//	limit             Limit.Burst: calls allowed per window
//	window            seconds for an empty bucket to refill to Burst
//	                  (Burst/Rate, rounded up, at least 1)
//	current           calls counted against the bucket (Burst - Remaining)
//	retryAfterSeconds RetryAfterSeconds(), equal to the Retry-After header
//	rule, per         Rule and Per, the rule that refused (only when Rule
//	                  is set, that is from TakeAll)
//
// All values are ints except scope. The caller owns the returned map.
func (r Result) Details() map[string]any {
	if r.Allowed {
		return nil
	}
	window := 1
	if r.Limit.Rate > 0 {
		window = ceilSeconds(refillTime(float64(r.Limit.Burst), r.Limit.Rate))
	}
	d := map[string]any{
		"scope":             "tool",
		"limit":             r.Limit.Burst,
		"window":            window,
		"current":           r.Limit.Burst - r.Remaining,
		"retryAfterSeconds": r.RetryAfterSeconds(),
	}
	if r.Rule != "" {
		d["rule"], d["per"] = r.Rule, r.Per
	}
	return d
}

// Err returns nil when r.Allowed, and otherwise an *errcode.Error with code
// rate_limited (RFC 0064 §D), a message the model can read that names the
// retry delay, and Details() as its details. The message holds no principal,
// tenant or tool identifier.
func (r Result) Err() error {
	if r.Allowed {
		return nil
	}
	return errcode.Errorf(errcode.RateLimited,
		"rate limit for this tool exceeded; retry after %ds", r.RetryAfterSeconds()).
		WithDetails(r.Details())
}

// Limiter takes one token from the bucket of key, evaluated against limit
// (RFC 0064 §D). Implementations must be safe for concurrent use by many
// goroutines. A changed limit for an existing key applies from that take on.
//
// A nil error means Result is authoritative (allowed or refused). A non-nil
// error means the limiter could not decide (for example a shared Redis is
// unreachable, ctx is done, or limit is invalid); the Result is then
// meaningless and the caller decides, failing closed by default (DESIGN
// decision 1).
type Limiter interface {
	Take(ctx context.Context, key Key, limit Limit) (Result, error)
}

// tokenEpsilon absorbs float64 rounding where an exact threshold does not
// matter: a bucket within tokenEpsilon of Burst counts as refilled for
// eviction. Allowing a take and Remaining use exact thresholds, so Remaining
// is always the number of immediate takes that will be allowed.
const tokenEpsilon = 1e-9

// refillTime returns the time to accrue need (> 0) tokens at rate tokens/s,
// rounded up to the nanosecond, clamped to [1ns, the largest Duration]. A
// relative 1e-12 is discounted before rounding up so that float noise does
// not turn 100ms into 100.000001ms; retryAfter corrects any undershoot.
func refillTime(need, rate float64) time.Duration {
	ns := need / rate * 1e9
	ns = math.Ceil(ns - ns*1e-12)
	switch {
	case !(ns < math.MaxInt64): // also catches NaN
		return time.Duration(math.MaxInt64)
	case ns < 1:
		return 1
	}
	return time.Duration(ns)
}

// retryAfter returns the wait until a bucket holding tokens (< 1) refilling
// at rate tokens/s holds one token. It repeats the refill arithmetic, so a
// take exactly retryAfter later is allowed.
func retryAfter(tokens, rate float64) time.Duration {
	d := refillTime(1-tokens, rate)
	for i := 0; i < 8 && tokens+float64(d)*rate/1e9 < 1 && d < math.MaxInt64; i++ {
		d++
	}
	return d
}

// ceilSeconds returns d in whole seconds, rounded up, at least 1.
func ceilSeconds(d time.Duration) int {
	s := d / time.Second
	if d%time.Second != 0 {
		s++
	}
	return int(max(s, 1))
}

// RetryAfter returns the wait until a bucket holding tokens (< 1 tokens)
// and refilling at rate tokens/s holds one whole token, rounded up to the
// nanosecond so that a take exactly that much later is allowed: the
// Result.RetryAfter of a refusal. Backends other than Memory (ratelimit/redis)
// use it so every backend answers the same Retry-After.
func RetryAfter(tokens, rate float64) time.Duration { return retryAfter(tokens, rate) }

package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"slices"
)

// Bucket is one bucket a call takes a token from: its Key, the Limit it is
// evaluated against and Rule, the label of the policy rule that asked for
// it (for example "ratelimits[1]"), which a refusal names. A plain value.
type Bucket struct {
	Key   Key
	Limit Limit
	Rule  string // label of the rule, copied into Result.Rule; may be ""
	Per   string // the rule's bucket key kind ("principal_tool", "tool", …), copied into Result.Per
}

// MultiLimiter is a Limiter that takes one token from each of several
// buckets atomically: either every bucket has a whole token and one is taken
// from each, or none is taken (take all or none). Implementations must be
// safe for concurrent use.
//
// TakeAll returns, when every bucket had room, Allowed with the Result of
// the bucket with the fewest Remaining tokens and its index; otherwise the
// refusal of the bucket with the longest RetryAfter (the wait until every
// bucket has room, absent other takes) and its index. Its Result carries
// the bucket's Rule and Per. An error (an empty or duplicate-keyed slice,
// an invalid Limit, a done ctx, an unreachable backend) means nothing was
// taken and the Result is meaningless.
type MultiLimiter interface {
	Limiter
	TakeAll(ctx context.Context, buckets []Bucket) (Result, int, error)
}

// ErrUnavailable is wrapped by the error of a shared backend (Redis) that
// cannot answer: connection refused, timeout, script error. The pipeline
// refuses the call with ratelimit_unavailable (fail closed).
var ErrUnavailable = errors.New("rate limiter unavailable")

// ErrNoBuckets is returned by TakeAll for an empty slice of buckets.
var ErrNoBuckets = errors.New("rate limit: no buckets to take from")

// ErrDuplicateBucket is returned by TakeAll when two buckets share a Key.
var ErrDuplicateBucket = errors.New("rate limit: two buckets share one key")

// ErrNotAtomic is returned by TakeAll for several buckets on a Limiter that
// is not a MultiLimiter: it cannot take all or none, so it fails closed.
var ErrNotAtomic = errors.New("rate limit: the limiter cannot take several buckets atomically")

// TakeAll takes one token from each bucket on l, all or none (see
// MultiLimiter). A single bucket on any Limiter is a plain Take; several
// buckets need a MultiLimiter (else ErrNotAtomic).
func TakeAll(ctx context.Context, l Limiter, buckets []Bucket) (Result, int, error) {
	if ml, ok := l.(MultiLimiter); ok {
		return ml.TakeAll(ctx, buckets)
	}
	switch len(buckets) {
	case 0:
		return Result{}, -1, ErrNoBuckets
	case 1:
		r, err := l.Take(ctx, buckets[0].Key, buckets[0].Limit)
		r.Rule, r.Per = buckets[0].Rule, buckets[0].Per
		return r, 0, err
	}
	return Result{}, -1, ErrNotAtomic
}

// checkBuckets validates the arguments of a TakeAll.
func checkBuckets(ctx context.Context, buckets []Bucket) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("take rate limit tokens: %w", err)
	}
	if len(buckets) == 0 {
		return ErrNoBuckets
	}
	for i, b := range buckets {
		if err := b.Limit.Validate(); err != nil {
			return fmt.Errorf("bucket %d (%s): %w", i, b.Rule, err)
		}
		if slices.ContainsFunc(buckets[:i], func(o Bucket) bool { return o.Key == b.Key }) {
			return fmt.Errorf("%w: bucket %d (%s)", ErrDuplicateBucket, i, b.Rule)
		}
	}
	return nil
}

// combine picks TakeAll's answer from per-bucket results (see MultiLimiter).
func combine(buckets []Bucket, rs []Result) (Result, int) {
	best := -1
	allowed := true
	for _, r := range rs {
		allowed = allowed && r.Allowed
	}
	for i, r := range rs {
		switch {
		case allowed && (best < 0 || r.Remaining < rs[best].Remaining):
			best = i
		case !allowed && !r.Allowed && (best < 0 || r.RetryAfter > rs[best].RetryAfter):
			best = i
		}
	}
	r := rs[best]
	r.Rule, r.Per = buckets[best].Rule, buckets[best].Per
	return r, best
}

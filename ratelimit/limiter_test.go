package ratelimit_test

import (
	"errors"
	"maps"
	"testing"
	"time"

	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/ratelimit"
)

func TestDetailsAndErr(t *testing.T) {
	// The openwop-app reference limit: 5 tokens per 60 s.
	m, clk := newLimiter(t, ratelimit.MemoryOptions{})
	limit := ratelimit.Limit{Rate: 5.0 / 60, Burst: 5}
	for i := 0; i < 5; i++ {
		r := take(t, m, alice, limit)
		if r.Details() != nil || r.Err() != nil {
			t.Fatalf("allowed take %d: Details() = %v, Err() = %v, want nil", i+1, r.Details(), r.Err())
		}
	}
	clk.Advance(3 * time.Second) // 0.25 token; 9 s to go
	r := take(t, m, alice, limit)
	if r.Allowed || r.RetryAfter != 9*time.Second {
		t.Fatalf("take 6: %+v, want refused with RetryAfter 9s", r)
	}
	want := map[string]any{
		"scope":             "tool",
		"limit":             5,
		"window":            60,
		"current":           5,
		"retryAfterSeconds": 9,
	}
	if got := r.Details(); !maps.Equal(got, want) {
		t.Errorf("Details() = %v, want %v", got, want)
	}

	err := r.Err()
	if !errors.Is(err, &errcode.Error{Code: errcode.RateLimited}) {
		t.Fatalf("Err() = %v, want code rate_limited", err)
	}
	e := errcode.As(err)
	if !maps.Equal(e.Details, want) {
		t.Errorf("Err().Details = %v, want %v", e.Details, want)
	}
	if e.Message != "rate limit for this tool exceeded; retry after 9s" {
		t.Errorf("Err().Message = %q", e.Message)
	}
	if got := e.Code.HTTPStatus(); got != 429 {
		t.Errorf("HTTP status of Err() = %d, want 429", got)
	}
}

func TestDetailsWindowRounding(t *testing.T) {
	for _, tc := range []struct {
		limit ratelimit.Limit
		want  int
	}{
		{ratelimit.Limit{Rate: 10, Burst: 20}, 2},
		{ratelimit.Limit{Rate: 100, Burst: 1}, 1}, // 10ms rounds up to 1 s
		{ratelimit.Limit{Rate: 3, Burst: 10}, 4},  // 3.33 s
		{ratelimit.Limit{Rate: 1.0 / 3600, Burst: 2}, 7200},
	} {
		r := ratelimit.Result{Limit: tc.limit, RetryAfter: time.Second}
		if got := r.Details()["window"]; got != tc.want {
			t.Errorf("%+v: window = %v, want %d", tc.limit, got, tc.want)
		}
	}
}

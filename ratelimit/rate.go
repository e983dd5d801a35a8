package ratelimit

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Bounds of a configured rate and burst (ParseRate, Limit.Validate).
const (
	// MinRate is the slowest rate accepted, in tokens per second: one token
	// per 100 years (365.25-day years). A slower rate refills nothing in
	// any deployment's lifetime; deny the tool with a policy rule instead.
	MinRate = 1.0 / (100 * 365.25 * 24 * 3600)
	// MaxRate is the fastest rate accepted, in tokens per second.
	MaxRate = 1e9
	// MaxBurst is the largest burst accepted, in tokens.
	MaxBurst = 1_000_000_000
)

// ParseRate parses a rate written "N/unit" (unit s, m or h; for example
// "10/s", "100/m", "0.5/s") and returns it in tokens per second. N must be a
// positive finite number, and the rate after conversion must lie in
// [MinRate, MaxRate] tokens per second (so "5e-324/h", which underflows to
// 0 tokens/s, is an error, not a limiter that refuses every call). Errors
// name the offending text.
func ParseRate(s string) (float64, error) {
	num, unit, ok := strings.Cut(strings.TrimSpace(s), "/")
	if !ok {
		return 0, fmt.Errorf("rate %q: want N/s, N/m or N/h", s)
	}
	n, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
	if err != nil || !(n > 0) || n > 1e9 { // !(n > 0) also rejects NaN
		return 0, fmt.Errorf("rate %q: %q is not a positive number", s, num)
	}
	var per time.Duration
	switch strings.TrimSpace(unit) {
	case "s", "sec", "second":
		per = time.Second
	case "m", "min", "minute":
		per = time.Minute
	case "h", "hour":
		per = time.Hour
	default:
		return 0, fmt.Errorf("rate %q: unit %q is not s, m or h", s, unit)
	}
	r := n / per.Seconds()
	if !(r >= MinRate) || r > MaxRate { // !(r >= MinRate) also rejects NaN
		return 0, fmt.Errorf("rate %q is %.3g tokens/s; want between %.3g tokens/s (one per 100 years) and %.3g tokens/s", s, r, MinRate, float64(MaxRate))
	}
	return r, nil
}

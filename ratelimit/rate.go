package ratelimit

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// ParseRate parses a rate written "N/unit" (unit s, m or h; for example
// "10/s", "100/m", "0.5/s") and returns it in tokens per second. N must be a
// positive finite number. Errors name the offending text.
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
	return n / per.Seconds(), nil
}

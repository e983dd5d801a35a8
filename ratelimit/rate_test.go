package ratelimit_test

import (
	"math"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/ratelimit"
)

func TestParseRate(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want float64 // tokens per second
	}{
		{"10/s", 10},
		{"0.5/s", 0.5},
		{"100/m", 100.0 / 60},
		{"3600/h", 1},
		{"5/min", 5.0 / 60},
		{"2/sec", 2},
		{"1/second", 1},
		{"60/minute", 1},
		{"7200/hour", 2},
		{" 10 / s ", 10},
		{"1e9/s", 1e9},
	} {
		got, err := ratelimit.ParseRate(tc.in)
		if err != nil {
			t.Errorf("ParseRate(%q): %v", tc.in, err)
			continue
		}
		if math.Abs(got-tc.want) > 1e-12*tc.want {
			t.Errorf("ParseRate(%q) = %v tokens/s, want %v", tc.in, got, tc.want)
		}
		if err := (ratelimit.Limit{Rate: got, Burst: 1}).Validate(); err != nil {
			t.Errorf("ParseRate(%q) = %v, which Limit.Validate rejects: %v", tc.in, got, err)
		}
	}
}

func TestParseRateErrors(t *testing.T) {
	for _, in := range []string{
		"", "10", "/s", "10/", "10/d", "10/S", "10/ms",
		"0/s", "-1/s", "abc/s", "NaN/s", "Inf/s", "1e10/s", "10/s/s",
	} {
		got, err := ratelimit.ParseRate(in)
		if err == nil {
			t.Errorf("ParseRate(%q) = %v, want an error", in, got)
			continue
		}
		if !strings.Contains(err.Error(), "rate "+quote(in)) {
			t.Errorf("ParseRate(%q) error %q does not name the input", in, err)
		}
	}
}

func quote(s string) string { return `"` + s + `"` }

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
		{"0.00001/h", 1e-5 / 3600}, // one token per 11.4 years
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
		// Positive numbers that are (nearly) 0 tokens/s after conversion
		// (issue 13.10): 5e-324/h underflows to 0.
		"5e-324/h", "5e-324/s", "1e-300/m", "1e-12/h", "1e-6/h",
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

// TestParseRateUnderflow: a rate that is a positive number but (nearly) 0
// tokens/s after conversion is refused with a message giving the converted
// rate, so `validate` reports it instead of `serve` refusing every call
// "rate limiter unavailable" (issue 13.10).
func TestParseRateUnderflow(t *testing.T) {
	_, err := ratelimit.ParseRate("5e-324/h")
	if err == nil || !strings.Contains(err.Error(), "is 0 tokens/s") || !strings.Contains(err.Error(), "one per 100 years") {
		t.Fatalf("ParseRate(5e-324/h) error = %v", err)
	}
	if err := (ratelimit.Limit{Rate: 1, Burst: ratelimit.MaxBurst + 1}).Validate(); err == nil {
		t.Fatal("Limit.Validate accepted a burst above MaxBurst")
	}
}

package cli

import (
	"strings"
	"testing"
)

// TestValidateRejectsUnderflowingRate: a rate that is a positive number but
// 0 tokens/s after conversion (5e-324/h) is a located validate issue, not
// an OK that serve then turns into "rate limiter unavailable" for every
// call (issue 13.10); so is a burst beyond the limiter's bound.
func TestValidateRejectsUnderflowingRate(t *testing.T) {
	for _, c := range []struct{ limit, want string }{
		{`{tools: ["*"], per: principal_tool, rate: 5e-324/h, burst: 1}`, `:15:49: ratelimit: rate "5e-324/h" is 0 tokens/s; want between 3.17e-10 tokens/s (one per 100 years) and 1e+09 tokens/s`},
		{`{tools: ["*"], per: principal_tool, rate: 1e-9/m, burst: 1}`, `:15:49: ratelimit: rate "1e-9/m" is 1.67e-11 tokens/s`},
		{`{tools: ["*"], per: principal_tool, rate: 1/s, burst: 1000000001}`, `:15:61: ratelimit: burst must be at most 1000000000, got 1000000001`},
	} {
		cfg := strings.Replace(string(demoConfig), `{tools: ["native:clock.now"], per: principal_tool, rate: 1/m, burst: 2}`, c.limit, 1)
		if cfg == string(demoConfig) {
			t.Fatal("demo.yaml no longer has the rate limit this test replaces")
		}
		p := writeFile(t, "rate.yaml", cfg)
		code, out, errOut := run(t, "", "validate", "--config", p)
		if code != ExitFailure || out != "" || !strings.Contains(errOut, p+c.want) {
			t.Errorf("%s: code %d out %q err %q, want %q", c.limit, code, out, errOut, c.want)
		}
	}
}

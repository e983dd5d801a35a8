package cli

import (
	"net"
	"os"
	"strings"
	"testing"
)

// testRedisURL is the Redis the tests use: TOOLGATE_TEST_REDIS, by default
// the machine's redis://127.0.0.1:6379.
func testRedisURL() string {
	if u := os.Getenv("TOOLGATE_TEST_REDIS"); u != "" {
		return u
	}
	return "redis://127.0.0.1:6379"
}

// TestValidateRedisBackend: validate accepts ratelimit.backend redis when
// Redis answers, reports ratelimit.url with its line when it does not, and
// --offline skips the check; serve fails fast on an unreachable Redis.
func TestValidateRedisBackend(t *testing.T) {
	live := writeFile(t, "live.yaml", string(demoConfig)+"\nratelimit: {backend: redis, url: '"+testRedisURL()+"', key_prefix: 'toolgate-test:validate:'}\n")
	if code, out, errOut := run(t, "", "validate", "--config", live); code != ExitOK || !strings.Contains(out, "OK") {
		t.Fatalf("validate with a live Redis (required at %s): %d %q %q", testRedisURL(), code, out, errOut)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "redis://" + ln.Addr().String()
	ln.Close()
	deadCfg := writeFile(t, "dead.yaml", string(demoConfig)+"\nratelimit:\n  backend: redis\n  url: '"+dead+"'\n")
	code, out, errOut := run(t, "", "validate", "--config", deadCfg)
	if code != ExitFailure || out != "" || !strings.Contains(errOut, "dead.yaml:") || !strings.Contains(errOut, "rate limiter unavailable") {
		t.Fatalf("validate with a dead Redis: %d %q %q", code, out, errOut)
	}
	if code, out, errOut := run(t, "", "validate", "--offline", "--config", deadCfg); code != ExitOK || !strings.Contains(out, "OK") {
		t.Fatalf("validate --offline: %d %q %q", code, out, errOut)
	}
	code, _, errOut = run(t, "", "serve", "--config", deadCfg, "--listen", "127.0.0.1:0")
	if code == ExitOK || !strings.Contains(errOut, "ratelimit.backend redis") || !strings.Contains(errOut, "rate limiter unavailable") {
		t.Fatalf("serve with a dead Redis: %d %q", code, errOut)
	}
}

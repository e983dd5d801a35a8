package cli

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
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

// pathWarnConfig is demo.yaml with a rule that confines reads with
// startsWith on args.path: valid, but ".." escapes it.
func pathWarnConfig(t *testing.T, dir string) string {
	t.Helper()
	cfg := strings.Replace(string(demoConfig), "  ratelimits:\n",
		"    - {id: data-only, effect: deny, tools: [\"native:files.read\"], when: 'has(args.path) && !args.path.startsWith(\"/srv/data\")'}\n  ratelimits:\n", 1)
	if cfg == string(demoConfig) {
		t.Fatal("demo.yaml no longer has the ratelimits this test inserts before")
	}
	cfg += "store: {driver: sqlite, dsn: " + yamlString(filepath.Join(dir, "toolgate.db")) + "}\n" +
		"signing: {key_file: " + yamlString(filepath.Join(dir, "toolgate.key")) + "}\n"
	return cfg
}

func yamlString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

const pathWarning = `rule "data-only": args.path.startsWith(…) can be escaped with ".." ("/srv/data/../etc/passwd" starts with "/srv/data"); use path.isUnder(args.path, dir)`

// TestValidateWarnsStartsWithOnPath: validate says OK but warns, located,
// about startsWith on a path argument (issue 13.8).
func TestValidateWarnsStartsWithOnPath(t *testing.T) {
	p := writeFile(t, "warn.yaml", pathWarnConfig(t, t.TempDir()))
	code, out, errOut := run(t, "", "validate", "--config", p)
	if code != ExitOK || !strings.Contains(out, "OK") || !strings.Contains(errOut, "warning: "+p+":14:") || !strings.Contains(errOut, pathWarning) {
		t.Fatalf("validate: code %d out %q err %q", code, out, errOut)
	}
}

// A file with issues elsewhere still gets its warnings: validate reports
// everything at once.
func TestValidateWarnsAlongsideIssues(t *testing.T) {
	p := writeFile(t, "warn.yaml", pathWarnConfig(t, t.TempDir())+"mcp: {max_sessions: -1}\n")
	code, out, errOut := run(t, "", "validate", "--config", p)
	if code != ExitFailure || !strings.Contains(errOut+out, "mcp.max_sessions -1") || !strings.Contains(errOut, pathWarning) {
		t.Fatalf("validate: code %d out %q err %q; want the issue and the warning", code, out, errOut)
	}
}

// lockedBuffer is a strings.Builder safe for one writer and one reader.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestServeLogsPolicyWarnings: serve logs the same warning at start.
func TestServeLogsPolicyWarnings(t *testing.T) {
	dir := t.TempDir()
	p := writeFile(t, "warn.yaml", pathWarnConfig(t, dir))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var outb, errb lockedBuffer
	exited := make(chan int, 1)
	go func() {
		exited <- Main(ctx, []string{"serve", "--config", p, "--listen", "127.0.0.1:0"}, strings.NewReader(""), &outb, &errb)
	}()
	// Serving (so that cancelling is a shutdown, not an aborted start).
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(outb.String(), "MCP gateway at") {
		select {
		case code := <-exited:
			t.Fatalf("serve exited %d; stderr: %s", code, errb.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve did not start; stderr: %s", errb.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if code := <-exited; code != ExitOK {
		t.Errorf("serve exited %d; stderr: %s", code, errb.String())
	}
	log := errb.String()
	if !strings.Contains(log, "level=WARN msg=\"policy warning\" at="+p+":14:") || !strings.Contains(log, "data-only") {
		t.Errorf("serve log: %s", log)
	}
}

//go:build unix

package mcpgw_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestConformanceThroughGateway is issue 4, acceptance 2: the MCP
// conformance suite (server scenarios, --suite all) run against the go-sdk
// conformance everything-server directly and through toolgate (allow-all
// policy). Every scenario that passes directly must pass through toolgate.
//
// It needs the Node tree of scripts/npm-setup.sh (which scripts/
// conformance.sh runs on demand) and the module proxy to build the
// everything-server; it fails, never skips, when either is missing.
func TestConformanceThroughGateway(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	bin := conformanceBuildServer(t)

	direct := conformanceStartServer(t, bin)
	directRes := conformanceRun(t, root, direct+"/mcp", filepath.Join(t.TempDir(), "direct"))

	upstream := conformanceStartServer(t, bin)
	through := conformanceStartGateway(t, upstream+"/mcp")
	throughRes := conformanceRun(t, root, through+"/mcp", filepath.Join(t.TempDir(), "through"))

	t.Logf("direct: %d/%d scenarios passed; through toolgate: %d/%d", directRes.Passed, directRes.Total, throughRes.Passed, throughRes.Total)
	if directRes.Passed == 0 {
		t.Fatalf("no scenario passed directly against the everything-server: the baseline is empty\n%s", directRes.failures())
	}
	for _, s := range directRes.Scenarios {
		if s.Status != "passed" {
			t.Logf("scenario %s fails directly too (not required through toolgate)", s.Name)
		}
	}
	got := map[string]conformanceScenario{}
	for _, s := range throughRes.Scenarios {
		got[s.Name] = s
	}
	var regressions []string
	for _, s := range directRes.Scenarios {
		if s.Status != "passed" {
			continue
		}
		ts, ok := got[s.Name]
		switch {
		case !ok:
			regressions = append(regressions, fmt.Sprintf("%s: not run through toolgate", s.Name))
		case ts.Status != "passed":
			regressions = append(regressions, fmt.Sprintf("%s:%s", s.Name, ts.failureLines()))
		}
	}
	if len(regressions) > 0 {
		t.Errorf("%d scenario(s) pass directly but not through toolgate:\n%s", len(regressions), strings.Join(regressions, "\n"))
	}
}

// conformanceResults is scripts/conformance.sh's results.json (the parts
// read here).
type conformanceResults struct {
	Total     int                   `json:"total"`
	Passed    int                   `json:"passed"`
	Failed    int                   `json:"failed"`
	Scenarios []conformanceScenario `json:"scenarios"`
}

type conformanceScenario struct {
	Name     string `json:"name"`
	Status   string `json:"status"`
	Failures []struct {
		ID      string `json:"id"`
		Message string `json:"message"`
	} `json:"failures"`
}

func (s conformanceScenario) failureLines() string {
	var b strings.Builder
	for _, f := range s.Failures {
		fmt.Fprintf(&b, "\n\t%s: %s", f.ID, f.Message)
	}
	return b.String()
}

func (r *conformanceResults) failures() string {
	var b strings.Builder
	for _, s := range r.Scenarios {
		if s.Status != "passed" {
			fmt.Fprintf(&b, "%s:%s\n", s.Name, s.failureLines())
		}
	}
	return b.String()
}

// conformanceBuildServer builds the go-sdk conformance everything-server of
// the SDK version in go.mod into a temporary directory. It builds in the
// SDK's module directory (with the SDK's own go.sum), since toolgate's
// go.sum lacks the server's dependencies.
func conformanceBuildServer(t *testing.T) string {
	t.Helper()
	bin, err := conformanceGoBuild(t.TempDir())
	if err != nil {
		t.Fatalf("building the everything-server: %v", err)
	}
	return bin
}

// conformanceGoBuild builds the everything-server into dir and returns its
// path.
func conformanceGoBuild(dir string) (string, error) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/modelcontextprotocol/go-sdk").Output()
	if err != nil {
		return "", fmt.Errorf("go list -m github.com/modelcontextprotocol/go-sdk: %v%s", err, conformanceStderr(err))
	}
	sdk := strings.TrimSpace(string(out))
	if sdk == "" {
		return "", fmt.Errorf("go list -m github.com/modelcontextprotocol/go-sdk: no module directory (run go mod download)")
	}
	bin := filepath.Join(dir, "everything-server")
	cmd := exec.Command("go", "build", "-o", bin, "./conformance/everything-server")
	cmd.Dir = sdk
	cmd.Env = append(os.Environ(), "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./conformance/everything-server in %s: %v\n%s", sdk, err, out)
	}
	return bin, nil
}

func conformanceStderr(err error) string {
	if ee, ok := err.(*exec.ExitError); ok && len(ee.Stderr) > 0 {
		return "\n" + string(ee.Stderr)
	}
	return ""
}

// conformanceStartServer runs bin (stateful Streamable HTTP) on a free
// loopback port until the test ends and returns its base URL.
func conformanceStartServer(t *testing.T, bin string) string {
	t.Helper()
	var lastErr error
	for range 3 { // the port may be taken between picking and binding
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		var logs bytes.Buffer
		cmd := exec.Command(bin, "-http="+addr, "-stateless=false")
		cmd.Stdout, cmd.Stderr = &logs, &logs
		if err := cmd.Start(); err != nil {
			t.Fatalf("starting the everything-server: %v", err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		if lastErr = conformanceWaitListening(addr, exited); lastErr == nil {
			t.Cleanup(func() {
				cmd.Process.Kill()
				<-exited
			})
			return "http://" + addr
		}
		cmd.Process.Kill()
		<-exited
		lastErr = fmt.Errorf("%v\n%s", lastErr, logs.String())
	}
	t.Fatalf("the everything-server did not start: %v", lastErr)
	return ""
}

// conformanceWaitListening waits until addr accepts connections, the
// process exits, or 10 s pass.
func conformanceWaitListening(addr string, exited <-chan error) error {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		select {
		case err := <-exited:
			return fmt.Errorf("exited: %v", err)
		case <-time.After(20 * time.Millisecond):
		}
	}
	return fmt.Errorf("not listening on %s after 10s", addr)
}

// conformanceStartGateway serves toolgate (allow-all policy) in front of
// upstreamURL, behind a reverse proxy that adds the API key (the conformance
// suite sends no credentials) and keeps the client's Host header. It
// returns the proxy's base URL.
func conformanceStartGateway(t *testing.T, upstreamURL string) string {
	t.Helper()
	gwURL, key := startAllowAllGateway(t, upstreamURL)
	target, err := url.Parse(gwURL)
	if err != nil {
		t.Fatal(err)
	}
	target.Path = "" // the proxy keeps the client's path (/mcp)
	proxy := httptest.NewServer(&httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target)
			r.Out.Host = r.In.Host
			r.Out.Header.Set("Authorization", "Bearer "+key)
		},
		FlushInterval: -1,
		ErrorLog:      slog.NewLogLogger(slog.NewTextHandler(t.Output(), nil), slog.LevelWarn),
	})
	t.Cleanup(proxy.Close)
	return proxy.URL
}

// conformanceRun runs scripts/conformance.sh against mcpURL into outDir and
// returns its results.
func conformanceRun(t *testing.T, root, mcpURL, outDir string) *conformanceResults {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(root, "scripts", "conformance.sh"), mcpURL, outDir)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CONFORMANCE_TIMEOUT=240")
	// Own process group, so that the suite's node process dies with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if cmd.Process != nil {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // stragglers, if any
	}
	if err != nil {
		t.Fatalf("scripts/conformance.sh %s: %v (if the Node tree is missing: bash scripts/npm-setup.sh)\n%s%s", mcpURL, err, stdout.String(), stderr.String())
	}
	raw, err := os.ReadFile(filepath.Join(outDir, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	var res conformanceResults
	if err := json.Unmarshal(raw, &res); err != nil {
		t.Fatalf("results.json: %v", err)
	}
	if res.Total == 0 || len(res.Scenarios) != res.Total {
		t.Fatalf("results.json lists %d scenarios, total %d", len(res.Scenarios), res.Total)
	}
	sort.Slice(res.Scenarios, func(i, j int) bool { return res.Scenarios[i].Name < res.Scenarios[j].Name })
	return &res
}

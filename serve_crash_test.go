package toolgate_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/internal/auth"
	"github.com/toolgate/toolgate/internal/cli"
	"github.com/toolgate/toolgate/receipt"
	"github.com/toolgate/toolgate/store/sqlite"
)

// serveChildEnv, when set, makes the test binary run `toolgate <args>`
// (the arguments separated by U+001F): a real toolgate serve in its own
// process, for tests that kill it.
const serveChildEnv = "TOOLGATE_TEST_SERVE_ARGS"

// startServeChild starts `toolgate serve --config cfg` in a child process
// and returns it with its MCP URL once /readyz answers 200.
func startServeChild(t *testing.T, cfg string) (*exec.Cmd, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), serveChildEnv+"="+strings.Join([]string{"serve", "--config", cfg}, "\x1f"))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	sc := bufio.NewScanner(out)
	url := ""
	for url == "" && sc.Scan() {
		url, _ = strings.CutPrefix(sc.Text(), "toolgate: MCP gateway at ")
	}
	go io.Copy(io.Discard, out)
	if url == "" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("serve printed no URL; stderr: %s", stderr.String())
	}
	ready := strings.TrimSuffix(url, "/mcp") + "/readyz"
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(ready)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return cmd, url
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve did not become ready; stderr: %s", stderr.String())
		}
		select { // poll the condition
		case <-t.Context().Done():
			t.Fatal("test context ended")
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// TestKill9ServeClosesInterruptedCalls (issue 13 point 13): a real
// `toolgate serve` is killed with SIGKILL while slow calls run upstream.
// Their agent.toolCalled is durable, their outcome never came. The next
// start closes each with agent.toolReturned {status: error, error.code:
// gateway_restarted} and a receipt, so every call in the store is paired,
// and `receipts verify --config` verifies the chain and says so.
func TestKill9ServeClosesInterruptedCalls(t *testing.T) {
	const slowCalls = 4
	var started atomic.Int64
	release := make(chan struct{})
	server := mcp.NewServer(&mcp.Implementation{Name: "slow", Version: "1"}, nil)
	addWaitTool(server, &started, release, "late")
	server.AddTool(&mcp.Tool{Name: "quick", InputSchema: map[string]any{"type": "object"}},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "ok"}}}, nil
		})
	up := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, nil))
	defer up.Close()
	defer close(release)

	dir := t.TempDir()
	key := "tg_crash_test_key"
	cfg := filepath.Join(dir, "toolgate.yaml")
	db := filepath.Join(dir, "toolgate.db")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, `listen: 127.0.0.1:0
store: {driver: sqlite, dsn: %q}
signing: {key_file: %q}
auth:
  api_keys:
    - {id: alice, key_sha256: %q, tenant: acme}
servers:
  - {name: slow, url: %q}
policy:
  rules:
    - {id: all, effect: allow, tools: ["*"]}
`, db, filepath.Join(dir, "toolgate.key"), auth.HashKey(key), up.URL), 0o600); err != nil {
		t.Fatal(err)
	}

	cmd, url := startServeChild(t, cfg)
	connect := func(url string) *mcp.ClientSession {
		c := mcp.NewClient(&mcp.Implementation{Name: "crash-test", Version: "1"}, nil)
		cs, err := c.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: url,
			HTTPClient: &http.Client{Transport: bearerRT{key: key}}, MaxRetries: -1}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return cs
	}
	cs := connect(url)
	if res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "slow__quick"}); err != nil || res.IsError {
		t.Fatalf("a quick call before the kill: %+v, %v", res, err)
	}
	for range slowCalls {
		go cs.CallTool(context.WithoutCancel(t.Context()), &mcp.CallToolParams{Name: "slow__wait"})
	}
	// Each slow call reached the upstream, so its agent.toolCalled is
	// durable (it is written before the tool is invoked).
	deadline := time.Now().Add(60 * time.Second)
	for started.Load() < slowCalls {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d slow calls reached the upstream", started.Load(), slowCalls)
		}
		select { // poll the condition
		case <-t.Context().Done():
			t.Fatal("test context ended")
		case <-time.After(10 * time.Millisecond):
		}
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()

	open := openCalls(t, db, filepath.Join(dir, "toolgate.key"))
	if len(open) != slowCalls {
		t.Fatalf("after kill -9: %d open calls in the store, want the %d slow calls", len(open), slowCalls)
	}

	// The restart closes them before it serves.
	cmd, url = startServeChild(t, cfg)
	cs = connect(url)
	if res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "slow__quick"}); err != nil || res.IsError {
		t.Fatalf("a quick call after the restart: %+v, %v", res, err)
	}
	cs.Close()
	cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("serve after SIGTERM: %v", err)
	}

	if left := openCalls(t, db, filepath.Join(dir, "toolgate.key")); len(left) != 0 {
		t.Fatalf("after the restart %d calls are still open", len(left))
	}
	st := openStoreAt(t, db, filepath.Join(dir, "toolgate.key"))
	defer st.Close()
	for _, ev := range open {
		evs, err := st.EventsByRun(t.Context(), ev.Tenant, ev.RunID, -1, 1000)
		if err != nil {
			t.Fatal(err)
		}
		var ret *struct {
			Status     string `json:"status"`
			DurationMs *int64 `json:"durationMs"`
			Error      struct {
				Code    string         `json:"code"`
				Details map[string]any `json:"details"`
			} `json:"error"`
		}
		for _, e := range evs {
			if e.Type == audit.TypeToolReturned && e.CausationID == ev.EventID {
				if err := json.Unmarshal(e.Payload, &ret); err != nil {
					t.Fatal(err)
				}
			}
		}
		if ret == nil || ret.Status != "error" || ret.Error.Code != "gateway_restarted" || ret.DurationMs != nil || ret.Error.Details["ran"] != "unknown" {
			t.Errorf("interrupted call %s: agent.toolReturned %+v; want status error, gateway_restarted, ran unknown, no durationMs", ev.EventID, ret)
		}
	}
	var buf bytes.Buffer
	if err := st.ExportReceipts(t.Context(), &buf, st.ChainID(), 0); err != nil {
		t.Fatal(err)
	}
	rep, err := receipt.Verify(bytes.NewReader(buf.Bytes()), st.PublicKey(), receipt.VerifyOptions{})
	if err != nil {
		t.Fatalf("receipts do not verify: %v", err)
	}
	if want := 2 + slowCalls; rep.Receipts != want {
		t.Errorf("%d receipts; want %d (two quick calls and the interrupted ones)", rep.Receipts, want)
	}
	restarted := strings.Count(buf.String(), `"code":"gateway_restarted"`)
	if restarted != slowCalls {
		t.Errorf("%d gateway_restarted receipts; want %d", restarted, slowCalls)
	}

	var out, errOut bytes.Buffer
	if code := cli.Main(t.Context(), []string{"receipts", "verify", "--config", cfg}, strings.NewReader(""), &out, &errOut); code != cli.ExitOK ||
		!strings.Contains(out.String(), "every agent.toolCalled has its agent.toolReturned") {
		t.Fatalf("receipts verify --config: %d %q %q", code, out.String(), errOut.String())
	}
}

// openStoreAt opens the existing store at db with the gateway's key.
func openStoreAt(t *testing.T, db, keyFile string) *sqlite.Store {
	t.Helper()
	key, _, err := receipt.LoadOrCreateKey(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	st, err := sqlite.Open(t.Context(), db, sqlite.Options{Signer: receipt.NewSigner(key), Existing: true})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// openCalls opens the store at db and returns its open calls.
func openCalls(t *testing.T, db, keyFile string) []audit.Event {
	t.Helper()
	st := openStoreAt(t, db, keyFile)
	defer st.Close()
	open, err := st.OpenCalls(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return open
}

// bearerRT adds "Authorization: Bearer <key>" to every request.
type bearerRT struct{ key string }

func (b bearerRT) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.key)
	return http.DefaultTransport.RoundTrip(r)
}

// addWaitTool adds to server the tool "wait", which counts its start in
// started and answers text once release is closed (or its ctx ends).
func addWaitTool(server *mcp.Server, started *atomic.Int64, release <-chan struct{}, text string) {
	server.AddTool(&mcp.Tool{Name: "wait", InputSchema: map[string]any{"type": "object"}},
		func(ctx context.Context, _ *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			started.Add(1)
			select {
			case <-ctx.Done():
			case <-release:
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}, nil
		})
}

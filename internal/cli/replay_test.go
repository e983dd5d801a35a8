package cli

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolgate/toolgate/internal/auth"
)

// replayUpstream is a Streamable HTTP MCP server whose tools count their
// invocations: rand (non-deterministic: a new number each call), echo
// (deterministic: its arguments back) and fail (an isError result).
type replayUpstream struct {
	url              string
	rand, echo, fail atomic.Int64
}

func newReplayUpstream(t *testing.T) *replayUpstream {
	t.Helper()
	u := &replayUpstream{}
	s := mcp.NewServer(&mcp.Implementation{Name: "up", Version: "1"}, nil)
	obj := map[string]any{"type": "object"}
	s.AddTool(&mcp.Tool{Name: "rand", InputSchema: obj}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		n := u.rand.Add(1)
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("random-%d", n*7919)}}}, nil
	})
	s.AddTool(&mcp.Tool{Name: "echo", InputSchema: obj}, func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		u.echo.Add(1)
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: string(req.Params.Arguments)}}}, nil
	})
	s.AddTool(&mcp.Tool{Name: "fail", InputSchema: obj}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		u.fail.Add(1)
		return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "disk on fire"}}}, nil
	})
	srv := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil))
	t.Cleanup(srv.Close)
	u.url = srv.URL
	return u
}

// replayGateway is a real `toolgate serve` (sqlite store) in front of a
// replayUpstream, with a key that holds audit.record_scope and one that
// does not.
type replayGateway struct {
	base, cfg, db   string
	key, noScopeKey string
	strangerKey     string // tenant other, with the record scope
	up              *replayUpstream
}

func newReplayGateway(t *testing.T) *replayGateway {
	t.Helper()
	g := &replayGateway{up: newReplayUpstream(t)}
	dir := t.TempDir()
	var err error
	if g.key, err = auth.NewKey(); err != nil {
		t.Fatal(err)
	}
	if g.noScopeKey, err = auth.NewKey(); err != nil {
		t.Fatal(err)
	}
	if g.strangerKey, err = auth.NewKey(); err != nil {
		t.Fatal(err)
	}
	g.cfg = filepath.Join(dir, "toolgate.yaml")
	g.db = filepath.Join(dir, "toolgate.db")
	if err := os.WriteFile(g.cfg, fmt.Appendf(nil, `listen: 127.0.0.1:0
store: {driver: sqlite, dsn: %s}
signing: {key_file: %s}
audit: {record_scope: "toolgate:record", record_retention: 7d}
auth:
  api_keys:
    - {id: agent, key_sha256: "%s", tenant: acme, scopes: ["toolgate:record"]}
    - {id: plain, key_sha256: "%s", tenant: acme}
    - {id: stranger, key_sha256: "%s", tenant: other, scopes: ["toolgate:record"]}
servers:
  - {name: up, url: "%s"}
tools:
  - {match: "mcp:up.rand", safety_tier: read, replay_policy: non-deterministic}
  - {match: "mcp:up.fail", safety_tier: read, replay_policy: idempotent}
  - {match: "mcp:up.echo", safety_tier: read, replay_policy: deterministic}
policy:
  default: deny
  rules:
    - {id: up, effect: allow, tools: ["mcp:up.*"]}
    - {id: no-etc, effect: deny, tools: ["mcp:up.*"], when: 'has(args.path) && args.path.startsWith("/etc")'}
`, filepath.Join(dir, "toolgate.db"), filepath.Join(dir, "toolgate.key"), auth.HashKey(g.key), auth.HashKey(g.noScopeKey), auth.HashKey(g.strangerKey), g.up.url), 0o600); err != nil {
		t.Fatal(err)
	}
	g.base, _ = startServeInProcess(t, g.cfg)
	return g
}

// mcpSession connects to the gateway's /mcp with key.
func (g *replayGateway) mcpSession(t *testing.T, key string) *mcp.ClientSession {
	t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil)
	cs, err := c.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: g.base + "/mcp", HTTPClient: &http.Client{Transport: bearerTransport{key: key}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// scenario is the five scenarios of issue 18 as one scripted agent run:
// a normal call, arguments whose key order differs between record and
// replay, a policy denial, an upstream error, and a call graph three
// levels deep (n1 → n2 → n3).
type scenarioStep struct {
	id, parent, tool string
	args, replayArgs string // replayArgs: the replay's arguments, when they differ (key order)
}

var scenario = []scenarioStep{
	{id: "normal", tool: "rand", args: `{"q":"weather"}`},
	{id: "order", tool: "rand", args: `{"a":1,"b":{"y":2,"x":1}}`, replayArgs: `{"b":{"x":1,"y":2},"a":1}`},
	{id: "denied", tool: "rand", args: `{"path":"/etc/shadow"}`},
	{id: "upstream-error", tool: "fail", args: `{}`},
	{id: "n1", tool: "rand", args: `{"level":1}`},
	{id: "n2", parent: "n1", tool: "echo", args: `{"level":2}`},
	{id: "n3", parent: "n2", tool: "rand", args: `{"level":3}`},
}

// mcpOutcome is what the agent saw of one call over MCP.
type mcpOutcome struct {
	callID, text, code string
	isError            bool
}

// runMCP runs the scenario over MCP as run runID, recording it or
// replaying replayOf.
func runMCP(t *testing.T, cs *mcp.ClientSession, runID, replayOf string, steps []scenarioStep) map[string]mcpOutcome {
	t.Helper()
	out := map[string]mcpOutcome{}
	for _, s := range steps {
		args := s.args
		meta := mcp.Meta{"toolgate/runId": runID}
		if replayOf == "" {
			meta["toolgate/record"] = true
		} else {
			meta["toolgate/replayOf"] = replayOf
			if s.replayArgs != "" {
				args = s.replayArgs
			}
		}
		if s.parent != "" {
			meta["toolgate/parentCallId"] = out[s.parent].callID
		}
		res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "up__" + s.tool, Arguments: json.RawMessage(args), Meta: meta})
		if err != nil {
			t.Fatalf("%s %s: %v", runID, s.id, err)
		}
		o := mcpOutcome{isError: res.IsError}
		o.callID, _ = res.Meta["toolgate/callId"].(string)
		if len(res.Content) > 0 {
			if tc, ok := res.Content[0].(*mcp.TextContent); ok {
				o.text = tc.Text
			}
		}
		if e, ok := res.Meta["toolgate/error"].(map[string]any); ok {
			o.code, _ = e["code"].(string)
		}
		out[s.id] = o
	}
	return out
}

// TestRecordReplayVerifyMCP (issue 18 acceptance 1, MCP door): the five
// scenarios recorded, replayed and verified through a real gateway and a
// real upstream that counts calls: replayed non-deterministic and
// idempotent calls reach it zero times, the deterministic one once; the
// agent sees the same answers; `replay verify` passes on both runs and
// finds them equal. Then a replay with other arguments diverges.
func TestRecordReplayVerifyMCP(t *testing.T) {
	g := newReplayGateway(t)
	cs := g.mcpSession(t, g.key)
	rec := runMCP(t, cs, "rec-mcp", "", scenario)
	if !rec["denied"].isError || rec["denied"].code != "forbidden" {
		t.Fatalf("denied call recorded as %+v", rec["denied"])
	}
	if !rec["upstream-error"].isError || rec["upstream-error"].text != "disk on fire" {
		t.Fatalf("upstream error recorded as %+v", rec["upstream-error"])
	}
	randN, failN, echoN := g.up.rand.Load(), g.up.fail.Load(), g.up.echo.Load()
	if randN != 4 || failN != 1 || echoN != 1 {
		t.Fatalf("recording reached the upstream rand %d, fail %d, echo %d; want 4, 1, 1", randN, failN, echoN)
	}
	rep := runMCP(t, cs, "rep-mcp", "rec-mcp", scenario)
	if d := g.up.rand.Load() - randN; d != 0 {
		t.Errorf("replayed non-deterministic calls reached the upstream %d times, want 0", d)
	}
	if d := g.up.fail.Load() - failN; d != 0 {
		t.Errorf("replayed idempotent calls reached the upstream %d times, want 0", d)
	}
	if d := g.up.echo.Load() - echoN; d != 1 {
		t.Errorf("the deterministic call reached the upstream %d times on replay, want 1", d)
	}
	for _, s := range scenario {
		a, b := rec[s.id], rep[s.id]
		if a.text != b.text || a.isError != b.isError || a.code != b.code {
			t.Errorf("%s: recorded %+v, replayed %+v", s.id, a, b)
		}
	}
	if code, out, errOut := run(t, "", "replay", "verify", "--config", g.cfg, "--tenant", "acme", "--run", "rec-mcp", "--against", "rep-mcp"); code != ExitOK {
		t.Fatalf("replay verify: exit %d\n%s\n%s", code, out, errOut)
	}

	// A replay whose agent now sends other arguments diverges at that call.
	changed := append([]scenarioStep(nil), scenario...)
	changed[0].args = `{"q":"stocks"}`
	div := runMCP(t, cs, "div-mcp", "rec-mcp", changed[:1])["normal"]
	if !div.isError || div.code != "replay_divergence" {
		t.Fatalf("diverging call answered %+v, want isError replay_divergence", div)
	}
	code, out, _ := run(t, "", "replay", "verify", "--config", g.cfg, "--tenant", "acme", "--run", "rec-mcp", "--against", "div-mcp")
	if code != ExitFailure || !strings.Contains(out, "DIFF call #0: argsHash differs") {
		t.Errorf("verify --against a diverged run: exit %d, output\n%s", code, out)
	}
	if code, _, errOut := run(t, "", "replay", "verify", "--config", g.cfg, "--tenant", "acme", "--run", "no-such-run"); code != ExitUsage {
		t.Errorf("verify of an unknown run: exit %d (%s), want 2", code, errOut)
	}
	if code, _, _ := run(t, "", "replay", "verify", "--config", g.cfg, "--tenant", "other", "--run", "rec-mcp"); code != ExitUsage {
		t.Errorf("verify of another tenant's run: exit %d, want 2 (not found)", code)
	}

	// Without audit.record_scope, asking to record is refused and recorded.
	plain := g.mcpSession(t, g.noScopeKey)
	res, err := plain.CallTool(t.Context(), &mcp.CallToolParams{Name: "up__rand", Arguments: map[string]any{}, Meta: mcp.Meta{"toolgate/record": true}})
	if err != nil {
		t.Fatal(err)
	}
	e, _ := res.Meta["toolgate/error"].(map[string]any)
	if !res.IsError || e["code"] != "forbidden" || !strings.Contains(fmt.Sprint(e["details"]), "record_scope") {
		t.Errorf("record without the scope: %+v", res)
	}
}

// postCall POSTs body to /v1/calls with key and returns the status and the
// decoded answer.
func postCall(t *testing.T, base, key string, body map[string]any) (int, map[string]any) {
	t.Helper()
	raw, _ := json.Marshal(body)
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, base+"/v1/calls", bytes.NewReader(raw))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatalf("answer %s: %v", data, err)
	}
	return resp.StatusCode, m
}

// TestRecordReplayVerifyHTTP (issue 18 acceptance 1, /v1/calls): the five
// scenarios recorded over POST /v1/calls (record: true), replayed by the
// scripted `toolgate replay --run` (which sends them through /v1/calls
// with replayOf) without reaching the upstream for the non-deterministic
// and idempotent tools, and verified with `replay verify --against`.
func TestRecordReplayVerifyHTTP(t *testing.T) {
	g := newReplayGateway(t)
	ids := map[string]string{}
	for _, s := range scenario {
		body := map[string]any{"toolId": "mcp:up." + s.tool, "args": json.RawMessage(s.args), "runId": "rec-http", "record": true}
		if s.parent != "" {
			body["parentCallId"] = ids[s.parent]
		}
		status, ans := postCall(t, g.base, g.key, body)
		switch s.id {
		case "denied":
			if status != http.StatusForbidden || ans["error"] != "forbidden" {
				t.Fatalf("denied: %d %v", status, ans)
			}
			d, _ := ans["details"].(map[string]any)
			ids[s.id], _ = d["callId"].(string)
		default:
			if status != http.StatusOK {
				t.Fatalf("%s: %d %v", s.id, status, ans)
			}
			ids[s.id], _ = ans["callId"].(string)
		}
		if s.id == "upstream-error" && ans["status"] != "error" {
			t.Fatalf("upstream error answered %v", ans)
		}
	}
	randN, failN, echoN := g.up.rand.Load(), g.up.fail.Load(), g.up.echo.Load()
	code, out, errOut := run(t, "", "replay", "--config", g.cfg, "--tenant", "acme", "--run", "rec-http", "--url", g.base, "--key", g.key, "--new-run", "rep-http")
	if code != ExitOK {
		t.Fatalf("replay: exit %d\n%s\n%s", code, out, errOut)
	}
	if strings.Count(out, `"recordedCallId"`) != len(scenario) {
		t.Errorf("replay printed\n%s\nwant one line per recorded call", out)
	}
	if g.up.rand.Load() != randN || g.up.fail.Load() != failN || g.up.echo.Load() != echoN+1 {
		t.Errorf("replay reached the upstream rand +%d, fail +%d, echo +%d; want 0, 0, 1",
			g.up.rand.Load()-randN, g.up.fail.Load()-failN, g.up.echo.Load()-echoN)
	}
	if code, out, errOut := run(t, "", "replay", "verify", "--config", g.cfg, "--tenant", "acme", "--run", "rec-http", "--against", "rep-http"); code != ExitOK {
		t.Fatalf("replay verify: exit %d\n%s\n%s", code, out, errOut)
	}
	// A run the tenant does not have is not found in the store (exit 2);
	// another tenant's key cannot replay it through the gateway either:
	// the gateway does not find it (not_found), nothing reaches the
	// upstream, and the replay ends with exit 1.
	if code, _, _ := run(t, "", "replay", "--config", g.cfg, "--tenant", "other", "--run", "rec-http", "--url", g.base, "--key", g.key); code != ExitUsage {
		t.Errorf("replay of a run the tenant does not have: exit %d, want 2", code)
	}
	randN = g.up.rand.Load()
	code, out, errOut = run(t, "", "replay", "--config", g.cfg, "--tenant", "acme", "--run", "rec-http", "--url", g.base, "--key", g.strangerKey)
	if code != ExitFailure || !strings.Contains(errOut, "not_found") || g.up.rand.Load() != randN {
		t.Errorf("replay with another tenant's key: exit %d\n%s\n%s (upstream +%d)", code, out, errOut, g.up.rand.Load()-randN)
	}
	// Over /v1/calls a divergence is a 200 with status error, code
	// replay_divergence, naming both calls.
	status, ans := postCall(t, g.base, g.key, map[string]any{"toolId": "mcp:up.echo", "args": map[string]any{}, "runId": "div-http", "replayOf": "rec-http"})
	e, _ := ans["error"].(map[string]any)
	d, _ := e["details"].(map[string]any)
	recd, _ := d["recorded"].(map[string]any)
	if status != http.StatusOK || ans["status"] != "error" || e["code"] != "replay_divergence" || d["differs"] != "toolId" || recd["callId"] != ids["normal"] {
		t.Errorf("diverging /v1/calls: %d %v", status, ans)
	}
	status, ans = postCall(t, g.base, g.noScopeKey, map[string]any{"toolId": "mcp:up.rand", "args": map[string]any{}, "replayOf": "rec-http"})
	if status != http.StatusForbidden || !strings.Contains(fmt.Sprint(ans["details"]), "record_scope") {
		t.Errorf("replayOf without the scope: %d %v", status, ans)
	}
}

// TestReplayVerifyFailures: `replay verify` exits 1 naming the problem
// when a stored recording no longer matches what the events and receipts
// bind (arguments changed after the fact, an isError result recorded as
// ok), and when the call graph has a parent outside the run.
func TestReplayVerifyFailures(t *testing.T) {
	g := newReplayGateway(t)
	for i, args := range []string{`{"q":"one"}`, `{"q":"two"}`} {
		if status, ans := postCall(t, g.base, g.key, map[string]any{"toolId": "mcp:up.rand", "args": json.RawMessage(args), "runId": "rec-t", "record": true}); status != http.StatusOK {
			t.Fatalf("call %d: %d %v", i, status, ans)
		}
	}
	if code, out, _ := run(t, "", "replay", "verify", "--config", g.cfg, "--tenant", "acme", "--run", "rec-t"); code != ExitOK {
		t.Fatalf("untampered run: exit %d\n%s", code, out)
	}
	db, err := sql.Open("sqlite", g.db+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, tc := range []struct{ name, update, want string }{
		{"forged arguments", `UPDATE recorded_calls SET body = json_set(body, '$.args', json('{"q":"forged"}')) WHERE body LIKE '%"one"%'`,
			"is not the hash of the stored redacted arguments"},
		{"error recorded as ok", `UPDATE recorded_calls SET body = json_set(body, '$.result', json('{"content":[],"isError":true}')) WHERE body LIKE '%"two"%'`,
			"failure honesty: an isError result recorded as ok"},
	} {
		if _, err := db.Exec(tc.update); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		code, out, _ := run(t, "", "replay", "verify", "--config", g.cfg, "--tenant", "acme", "--run", "rec-t")
		if code != ExitFailure || !strings.Contains(out, tc.want) {
			t.Errorf("%s: exit %d, output\n%s\nwant exit 1 and %q", tc.name, code, out, tc.want)
		}
	}
	if status, ans := postCall(t, g.base, g.key, map[string]any{"toolId": "mcp:up.rand", "args": map[string]any{}, "runId": "orphan", "parentCallId": "ghost"}); status != http.StatusOK {
		t.Fatalf("orphan call: %d %v", status, ans)
	}
	code, out, _ := run(t, "", "replay", "verify", "--config", g.cfg, "--tenant", "acme", "--run", "orphan")
	if code != ExitFailure || !strings.Contains(out, "has parent ghost, which is not a call of the run") {
		t.Errorf("orphan parent: exit %d, output\n%s", code, out)
	}
}

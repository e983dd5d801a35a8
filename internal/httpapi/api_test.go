package httpapi_test

import (
	"context"
	"encoding/json"
	"net/url"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolgate/toolgate/receipt"
	"github.com/toolgate/toolgate/store/sqlite"
)

// event is an event document as the event reads return it.
type event struct {
	EventID     string         `json:"eventId"`
	RunID       string         `json:"runId"`
	Type        string         `json:"type"`
	Sequence    int            `json:"sequence"`
	CausationID string         `json:"causationId"`
	Timestamp   string         `json:"timestamp"`
	Payload     map[string]any `json:"payload"`
}

func runEvents(t *testing.T, s *server, who, runID string) []event {
	t.Helper()
	r := s.do(t, who, "GET", "/v1/runs/"+url.PathEscape(runID)+"/events", nil)
	if r.status != 200 {
		t.Fatalf("events of %s as %s: %d %s", runID, who, r.status, r.body)
	}
	var doc struct{ Events []event }
	r.json(t, &doc)
	return doc.Events
}

// openStore opens the stopped server's SQLite store with its signing key.
func openStore(t *testing.T, s *server) *sqlite.Store {
	t.Helper()
	key, _, err := receipt.LoadOrCreateKey(filepath.Join(s.dir, "toolgate.key"))
	if err != nil {
		t.Fatal(err)
	}
	st, err := sqlite.Open(context.Background(), s.db, sqlite.Options{Signer: receipt.NewSigner(key)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// TestSameAnswerOverMCPAndHTTP is issue 5 acceptance 3: the same tool,
// called by the same principal with the same arguments over MCP (go-sdk
// client on /mcp) and over POST /v1/calls, gets the same decision (the
// receipts' effect, rule and policy version), the same argsHash (events and
// receipts), the same status, and events that differ only in transport,
// callId and timing (eventId, timestamp, durationMs, causationId). Checked
// for an allowed call, a call denied by an argument rule, and a tool
// failure.
func TestSameAnswerOverMCPAndHTTP(t *testing.T) {
	s := startServe(t, false)
	cs := s.mcpSession(t, "alice")
	defer cs.Close()
	cases := []struct {
		name, tool, surface string
		args                map[string]any
		status              string
	}{
		{"allowed", "mcp:up.echo", "echo", map[string]any{"text": "hello", "n": 1.5}, "ok"},
		{"denied by an argument rule", "mcp:up.echo", "echo", map[string]any{"text": "forbidden"}, "forbidden"},
		{"tool failure", "mcp:up.fail", "fail", map[string]any{"text": "x"}, "error"},
	}
	type receipts struct{ mcp, http string }
	var rcpts []receipts
	for i, c := range cases {
		mcpRun, httpRun := "run-mcp-"+string(rune('a'+i)), "run-http-"+string(rune('a'+i))
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: c.surface, Arguments: c.args,
			Meta: mcp.Meta{"toolgate/runId": mcpRun}})
		if err != nil {
			t.Fatalf("%s: MCP call: %v", c.name, err)
		}
		if res.IsError != (c.status != "ok") {
			t.Fatalf("%s: MCP isError %v", c.name, res.IsError)
		}
		r := s.do(t, "alice", "POST", "/v1/calls", map[string]any{"toolId": c.tool, "args": c.args, "runId": httpRun})
		var httpReceipt string
		switch c.status {
		case "forbidden":
			if r.status != 403 {
				t.Fatalf("%s: HTTP %d %s", c.name, r.status, r.body)
			}
			var env struct {
				Error   string
				Details map[string]any
			}
			r.json(t, &env)
			sc, _ := json.Marshal(res.Meta["toolgate/error"])
			var mcpErr struct{ Code string }
			json.Unmarshal(sc, &mcpErr)
			if env.Error != "forbidden" || mcpErr.Code != "forbidden" || env.Details["ruleId"] != "no-forbidden-text" {
				t.Fatalf("%s: HTTP %s / MCP %s", c.name, r.body, sc)
			}
			httpReceipt, _ = env.Details["receiptId"].(string)
		default:
			if r.status != 200 {
				t.Fatalf("%s: HTTP %d %s", c.name, r.status, r.body)
			}
			var cr struct {
				Status, ReceiptID string
				Outcome           json.RawMessage
				Error             *struct{ Code string }
			}
			r.json(t, &cr)
			if cr.Status != c.status {
				t.Fatalf("%s: HTTP status %s", c.name, cr.Status)
			}
			if c.status == "error" && (cr.Error == nil || cr.Error.Code != "tool_execution_failed" || cr.Outcome != nil) {
				t.Fatalf("%s: HTTP answer %s", c.name, r.body)
			}
			httpReceipt = cr.ReceiptID
		}
		mcpReceipt, _ := res.Meta["toolgate/receiptId"].(string)
		if mcpReceipt == "" || httpReceipt == "" {
			t.Fatalf("%s: receipt ids mcp %q http %q", c.name, mcpReceipt, httpReceipt)
		}
		rcpts = append(rcpts, receipts{mcpReceipt, httpReceipt})

		me, he := runEvents(t, s, "alice", mcpRun), runEvents(t, s, "alice", httpRun)
		if len(me) != 2 || len(he) != 2 {
			t.Fatalf("%s: events mcp %d http %d", c.name, len(me), len(he))
		}
		if me[0].Payload["transport"] != "mcp" || he[0].Payload["transport"] != "http" {
			t.Errorf("%s: transports %v / %v", c.name, me[0].Payload["transport"], he[0].Payload["transport"])
		}
		if me[0].Payload["argsHash"] == nil || me[0].Payload["argsHash"] != he[0].Payload["argsHash"] {
			t.Errorf("%s: argsHash %v / %v", c.name, me[0].Payload["argsHash"], he[0].Payload["argsHash"])
		}
		if me[1].Payload["receiptId"] != mcpReceipt || he[1].Payload["receiptId"] != httpReceipt {
			t.Errorf("%s: agent.toolReturned names receipts %v / %v, the answers %s / %s", c.name,
				me[1].Payload["receiptId"], he[1].Payload["receiptId"], mcpReceipt, httpReceipt)
		}
		for i := range me {
			m, h := normalize(me[i]), normalize(he[i])
			if !reflect.DeepEqual(m, h) {
				t.Errorf("%s: event %d differs beyond transport, callId and timing:\nmcp  %v\nhttp %v", c.name, i, m, h)
			}
			if i == 1 && (me[1].CausationID != me[0].EventID || he[1].CausationID != he[0].EventID) {
				t.Errorf("%s: toolReturned.causationId is not its toolCalled's eventId", c.name)
			}
		}
	}
	cs.Close()
	s.stop()
	st := openStore(t, s)
	for i, rc := range rcpts {
		m, err := st.ReceiptByID(context.Background(), "a", rc.mcp)
		if err != nil {
			t.Fatal(err)
		}
		h, err := st.ReceiptByID(context.Background(), "a", rc.http)
		if err != nil {
			t.Fatal(err)
		}
		if m.Transport != "mcp" || h.Transport != "http" {
			t.Errorf("%s: receipt transports %s / %s", cases[i].name, m.Transport, h.Transport)
		}
		if m.Decision != h.Decision || m.Decision.Effect == "" {
			t.Errorf("%s: decisions differ: %+v / %+v", cases[i].name, m.Decision, h.Decision)
		}
		if m.RequestedArgsHash != h.RequestedArgsHash || m.Status != h.Status || m.ToolID != h.ToolID || m.Principal != h.Principal {
			t.Errorf("%s: receipts differ: %+v / %+v", cases[i].name, m, h)
		}
		if want := map[string]string{"ok": "allow", "forbidden": "deny", "error": "allow"}[cases[i].status]; string(m.Decision.Effect) != want {
			t.Errorf("%s: decision %s, want %s", cases[i].name, m.Decision.Effect, want)
		}
	}
}

// normalize drops what may differ between the two doors: transport,
// callId, receiptId and timing (eventId, timestamp, durationMs,
// causationId) and the run id the test chose.
func normalize(e event) map[string]any {
	p := map[string]any{}
	for k, v := range e.Payload {
		switch k {
		case "transport", "callId", "durationMs", "receiptId":
			continue
		}
		p[k] = v
	}
	return map[string]any{"type": e.Type, "sequence": e.Sequence, "payload": p}
}

// TestCrossTenant is issue 5 acceptance 4. Tools are scoped to tenants by
// policy rules on principal.tenant (tenant-a-notes, tenant-b-notes): a
// principal of tenant a does not see tenant b's tool in GET /v1/tools, and
// gets for b's tool id and b's run the very 404 an unknown id gets (same
// status, headers and body, the requested id aside), from GET
// /v1/tools/{id}, POST /v1/calls (also with malformed arguments, which a
// visible tool answers 400), POST /v1/policy/explain and GET
// /v1/runs/{id}/events; the event-log seam shows a's caller nothing of b's
// run.
func TestCrossTenant(t *testing.T) {
	s := startServe(t, true)
	ids := func(who string) []string {
		var items []struct{ ToolID string }
		s.do(t, who, "GET", "/v1/tools", nil).json(t, &items)
		var out []string
		for _, it := range items {
			out = append(out, it.ToolID)
		}
		return out
	}
	a, b := strings.Join(ids("alice"), ","), strings.Join(ids("bob"), ",")
	if a != "mcp:up.a_notes,mcp:up.echo,mcp:up.fail,mcp:up.limited" {
		t.Errorf("alice (tenant a) sees %s", a)
	}
	if b != "mcp:up.b_notes,mcp:up.echo,mcp:up.fail,mcp:up.limited" {
		t.Errorf("bob (tenant b) sees %s", b)
	}
	if strings.Contains(a, "b_notes") || strings.Contains(b, "a_notes") {
		t.Fatal("a tenant sees another tenant's tool")
	}
	// ?source= keeps one source; the write tool needs notes:write.
	if r := s.do(t, "alice", "GET", "/v1/tools?source=host-extension", nil); string(r.body) != "[]\n" {
		t.Errorf("source=host-extension: %s", r.body)
	}
	if r := s.do(t, "alice", "GET", "/v1/tools?source=bogus", nil); r.status != 400 {
		t.Errorf("source=bogus: %d", r.status)
	}

	same := func(what string, hidden, unknown response, hiddenID, unknownID string) {
		t.Helper()
		if hidden.status != 404 || unknown.status != 404 {
			t.Fatalf("%s: %d / %d, want 404", what, hidden.status, unknown.status)
		}
		hb := strings.ReplaceAll(string(hidden.body), hiddenID, "ID")
		ub := strings.ReplaceAll(string(unknown.body), unknownID, "ID")
		if hb != ub {
			t.Errorf("%s: hidden and unknown answers differ:\n%s\n%s", what, hidden.body, unknown.body)
		}
		for _, h := range []string{"Content-Type", "Cache-Control", "Www-Authenticate", "Retry-After"} {
			if hidden.header.Get(h) != unknown.header.Get(h) {
				t.Errorf("%s: header %s differs: %q / %q", what, h, hidden.header.Get(h), unknown.header.Get(h))
			}
		}
	}
	const hiddenTool, unknownTool = "mcp:up.b_notes", "mcp:up.z_notes"
	same("GET /v1/tools/{id}",
		s.do(t, "alice", "GET", "/v1/tools/"+url.PathEscape(hiddenTool), nil),
		s.do(t, "alice", "GET", "/v1/tools/"+url.PathEscape(unknownTool), nil), hiddenTool, unknownTool)
	call := func(tool string, args any) response {
		return s.do(t, "alice", "POST", "/v1/calls", map[string]any{"toolId": tool, "args": args})
	}
	same("POST /v1/calls", call(hiddenTool, map[string]any{"text": "x"}), call(unknownTool, map[string]any{"text": "x"}), hiddenTool, unknownTool)
	// Arguments the pipeline refuses (a duplicate key) must not tell a
	// hidden tool from an unknown one either; for a visible tool they are 400.
	dup := func(tool string) response {
		return s.do(t, "alice", "POST", "/v1/calls", []byte(`{"toolId":"`+tool+`","args":{"text":"x","text":"y"}}`))
	}
	same("POST /v1/calls with bad args", dup(hiddenTool), dup(unknownTool), hiddenTool, unknownTool)
	if r := dup("mcp:up.a_notes"); r.status != 400 {
		t.Errorf("bad args on a visible tool: %d %s", r.status, r.body)
	}
	explain := func(tool string) response {
		return s.do(t, "root", "POST", "/v1/policy/explain", map[string]any{"toolId": tool})
	}
	same("POST /v1/policy/explain", explain(hiddenTool), explain(unknownTool), hiddenTool, unknownTool)

	// b's run: 404 for a, like a run that does not exist.
	r := s.do(t, "bob", "POST", "/v1/calls", map[string]any{"toolId": hiddenTool, "args": map[string]any{"text": "b"}, "runId": "run-of-b"})
	if r.status != 200 {
		t.Fatalf("bob's call: %d %s", r.status, r.body)
	}
	if evs := runEvents(t, s, "bob", "run-of-b"); len(evs) != 2 {
		t.Fatalf("bob reads %d events of his run", len(evs))
	}
	same("GET /v1/runs/{id}/events",
		s.do(t, "alice", "GET", "/v1/runs/run-of-b/events", nil),
		s.do(t, "alice", "GET", "/v1/runs/run-of-nobody/events", nil), "run-of-b", "run-of-nobody")
	if r := s.do(t, "alice", "GET", "/v1/host/sample/test/runs/run-of-b/events", nil); r.status != 200 || string(r.body) != "{\"events\":[]}\n" {
		t.Errorf("event-log seam for another tenant's run: %d %s", r.status, r.body)
	}
	// The same run id in tenant a is a's own, independent run.
	if r := s.do(t, "alice", "POST", "/v1/calls", map[string]any{"toolId": "mcp:up.a_notes", "runId": "run-of-b"}); r.status != 200 {
		t.Fatalf("alice's call: %d %s", r.status, r.body)
	}
	if evs := runEvents(t, s, "alice", "run-of-b"); len(evs) != 2 || evs[0].Sequence != 0 || evs[0].Payload["principal"] != "alice" {
		t.Errorf("alice's run-of-b: %+v", evs)
	}
}

// TestCallsOverHTTP covers POST /v1/calls answers beyond the equivalence
// test: the 200 body (outcome, durationMs, receiptId), a visible tool
// refused for lack of scopes (403 with details scope, toolName,
// requiredScopes), the rate limit (429 with Retry-After and details),
// malformed bodies (400), an oversize body (413), 401 and 405, each as the
// validated envelope.
func TestCallsOverHTTP(t *testing.T) {
	s := startServe(t, false)
	r := s.do(t, "alice", "POST", "/v1/calls", map[string]any{"toolId": "mcp:up.echo", "args": map[string]any{"text": "hi"}, "agentId": "agent-7"})
	var ok struct {
		CallID, RunID, ToolID, Status, ReceiptID string
		Outcome                                  struct{ StructuredContent struct{ Text string } }
		DurationMs                               *int64
	}
	r.json(t, &ok)
	if r.status != 200 || ok.Status != "ok" || ok.Outcome.StructuredContent.Text != "hi" || ok.DurationMs == nil ||
		ok.CallID == "" || ok.RunID == "" || ok.ReceiptID == "" || ok.ToolID != "mcp:up.echo" {
		t.Fatalf("ok call: %d %s", r.status, r.body)
	}
	if evs := runEvents(t, s, "alice", ok.RunID); evs[0].Payload["agentId"] != "agent-7" || evs[0].Payload["callId"] != ok.CallID {
		t.Errorf("events of the call: %+v", evs)
	}

	// carol (tenant a, no scopes) may not see a_notes (it needs notes:read):
	// 404. The shared write tool needs notes:write, which nobody holds, so
	// it is hidden too; refusals of visible tools come from argument rules.
	if r := s.do(t, "carol", "POST", "/v1/calls", map[string]any{"toolId": "mcp:up.a_notes"}); r.status != 404 {
		t.Errorf("carol a_notes: %d %s", r.status, r.body)
	}
	r = s.do(t, "alice", "POST", "/v1/calls", map[string]any{"toolId": "mcp:up.echo", "args": map[string]any{"text": "forbidden"}})
	var env struct {
		Error   string
		Message string
		Details map[string]any
	}
	r.json(t, &env)
	if r.status != 403 || env.Error != "forbidden" || env.Details["scope"] != "tool" || env.Details["toolName"] != "mcp:up.echo" ||
		env.Details["requiredScopes"] == nil || env.Details["callId"] == nil {
		t.Errorf("forbidden: %d %s", r.status, r.body)
	}

	first := s.do(t, "alice", "POST", "/v1/calls", map[string]any{"toolId": "mcp:up.limited"})
	second := s.do(t, "alice", "POST", "/v1/calls", map[string]any{"toolId": "mcp:up.limited"})
	second.json(t, &env)
	if first.status != 200 || second.status != 429 || second.header.Get("Retry-After") == "" || env.Error != "rate_limited" ||
		env.Details["scope"] != "tool" || env.Details["retryAfterSeconds"] == nil {
		t.Errorf("rate limit: %d then %d %v %s", first.status, second.status, second.header, second.body)
	}

	for _, c := range []struct {
		body   string
		status int
		field  string
	}{
		{`not json`, 400, ""},
		{`[]`, 400, ""},
		{``, 400, ""},
		{`{"toolId": 7}`, 400, "toolId"},
		{`{"toolId": "mcp:up.echo", "args": [1]}`, 400, "args"},
		{`{"toolId": "mcp:up.echo", "argz": {}}`, 400, "argz"},
		{`{"toolId": ""}`, 400, "toolId"},
		{`{"toolId": "mcp:up.echo"} {}`, 400, ""},
		{`{"toolId": "mcp:up.echo", "runId": "` + strings.Repeat("r", 200) + `"}`, 400, ""},
		{`{"toolId": "mcp:up.echo", "args": {"text": "` + strings.Repeat("x", 5<<20) + `"}}`, 413, ""},
	} {
		r := s.do(t, "alice", "POST", "/v1/calls", []byte(c.body))
		r.json(t, &env)
		if r.status != c.status || env.Error != "invalid_argument" || (c.field != "" && env.Details["field"] != c.field) {
			t.Errorf("body %.60q: %d %s", c.body, r.status, r.body)
		}
	}
	if r := s.do(t, "", "POST", "/v1/calls", map[string]any{"toolId": "mcp:up.echo"}); r.status != 401 || r.header.Get("WWW-Authenticate") == "" {
		t.Errorf("no credentials: %d %v", r.status, r.header)
	}
	r = s.do(t, "alice", "GET", "/v1/calls", nil)
	if r.status != 405 || !strings.Contains(r.header.Get("Allow"), "POST") {
		t.Errorf("GET /v1/calls: %d %v %s", r.status, r.header, r.body)
	}
	if r := s.do(t, "alice", "GET", "/v1/nothing-here", nil); r.status != 404 {
		t.Errorf("unknown route: %d", r.status)
	}
	if r := s.do(t, "alice", "GET", "/not-v1-either", nil); r.status != 404 {
		t.Errorf("unknown route outside /v1: %d", r.status)
	}
	// Run reads: paging and type filter.
	r = s.do(t, "alice", "GET", "/v1/runs/"+ok.RunID+"/events?type=agent.toolReturned", nil)
	var doc struct{ Events []event }
	r.json(t, &doc)
	if len(doc.Events) != 1 || doc.Events[0].Type != "agent.toolReturned" {
		t.Errorf("type filter: %s", r.body)
	}
	r = s.do(t, "alice", "GET", "/v1/runs/"+ok.RunID+"/events?after=0&limit=1", nil)
	var page struct {
		Events    []event
		NextAfter *int
	}
	r.json(t, &page)
	if len(page.Events) != 1 || page.Events[0].Sequence != 1 || page.NextAfter == nil || *page.NextAfter != 1 {
		t.Errorf("after=0&limit=1: %s", r.body)
	}
	if r := s.do(t, "alice", "GET", "/v1/runs/"+ok.RunID+"/events?after=x", nil); r.status != 400 {
		t.Errorf("after=x: %d", r.status)
	}
}

// TestExplain covers POST /v1/policy/explain: a caller explains for itself
// (decision, rule, layer, reason; no rule trace without the admin scope);
// explaining for another principal needs toolgate:admin (403 otherwise),
// and an admin may not reach into another tenant.
func TestExplain(t *testing.T) {
	s := startServe(t, false)
	var x struct {
		ToolID, Principal, Decision, Rule, Layer, Reason string
		Disclosed                                        bool
		Rules                                            []map[string]any
		MissingScopes                                    []string
	}
	r := s.do(t, "alice", "POST", "/v1/policy/explain", map[string]any{"toolId": "mcp:up.echo", "args": map[string]any{"text": "forbidden"}})
	r.json(t, &x)
	if r.status != 200 || x.Decision != "deny" || x.Rule != "no-forbidden-text" || x.Layer != "rule" || x.Reason != "that text is not allowed" ||
		!x.Disclosed || x.Rules != nil || x.Principal != "alice" {
		t.Fatalf("self explain: %d %s", r.status, r.body)
	}
	r = s.do(t, "alice", "POST", "/v1/policy/explain", map[string]any{"toolId": "mcp:up.a_notes"})
	r.json(t, &x)
	if x.Decision != "allow" || x.Rule != "tenant-a-notes" {
		t.Errorf("self explain a_notes: %s", r.body)
	}
	// Scopes in the body are ignored when explaining for oneself.
	r = s.do(t, "alice", "POST", "/v1/policy/explain", map[string]any{"toolId": "mcp:up.a_notes", "principal": map[string]any{"id": "alice", "scopes": []string{}}})
	r.json(t, &x)
	if x.Decision != "allow" {
		t.Errorf("self explain with body scopes: %s", r.body)
	}
	if r := s.do(t, "alice", "POST", "/v1/policy/explain", map[string]any{"toolId": "mcp:up.echo", "principal": map[string]any{"id": "carol"}}); r.status != 403 {
		t.Errorf("non-admin for another principal: %d %s", r.status, r.body)
	}
	r = s.do(t, "root", "POST", "/v1/policy/explain", map[string]any{"toolId": "mcp:up.a_notes", "principal": map[string]any{"id": "carol"}})
	r.json(t, &x)
	if r.status != 200 || x.Principal != "carol" || x.Decision != "deny" || x.Layer != "scopes" || len(x.MissingScopes) != 1 || x.Rules == nil {
		t.Errorf("admin for carol: %d %s", r.status, r.body)
	}
	if r := s.do(t, "root", "POST", "/v1/policy/explain", map[string]any{"toolId": "mcp:up.echo", "principal": map[string]any{"id": "bob", "tenant": "b"}}); r.status != 403 {
		t.Errorf("admin across tenants: %d %s", r.status, r.body)
	}
	for _, body := range []string{`{}`, `{"toolId":"mcp:up.echo","principal":{}}`, `{"toolId":"mcp:up.echo","args":"x"}`, `{"toolId":"mcp:up.echo","extra":1}`} {
		if r := s.do(t, "alice", "POST", "/v1/policy/explain", []byte(body)); r.status != 400 {
			t.Errorf("explain %s: %d %s", body, r.status, r.body)
		}
	}
}

// TestSeamsDisabled: without openwop.test_seams the seam paths answer 404
// (the envelope) exactly like an unknown route, and discovery still
// advertises the production capabilities.
func TestSeamsDisabled(t *testing.T) {
	s := startServe(t, false)
	for _, c := range []struct{ method, path string }{
		{"POST", "/v1/host/sample/toolhooks/invoke"},
		{"POST", "/v1/host/sample/tools/session-run"},
		{"GET", "/v1/host/sample/test/runs/__probe__/events"},
		{"POST", "/v1/host/sample/test/reset"},
	} {
		if r := s.do(t, "alice", c.method, c.path, map[string]any{}); r.status != 404 {
			t.Errorf("%s %s: %d %s", c.method, c.path, r.status, r.body)
		}
	}
	c := discover(t, s)
	if c.ToolCatalog == nil || !*c.ToolCatalog.Supported || !*c.ToolCatalog.SessionLifecycle || c.Capabilities.ToolHooks == nil {
		t.Errorf("discovery without seams: %+v", c)
	}
}

// TestSessionLifecycleOverMCP backs the sessionLifecycle advertisement with
// the production path: an MCP client's first call to a per_client upstream
// opens an upstream session (tool.session.opened in the run named after the
// MCP session), and closing the client closes it (tool.session.closed,
// same sessionId and toolId, outcome completed, after every call event);
// the events are readable over HTTP; tool.session.opened is the run's first
// event, before the call's agent.toolCalled.
func TestSessionLifecycleOverMCP(t *testing.T) {
	s := startServe(t, false)
	cs := s.mcpSession(t, "alice")
	if _, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "x"}}); err != nil {
		t.Fatal(err)
	}
	sid := cs.ID()
	cs.Close()
	deadline := time.Now().Add(20 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		r := s.do(t, "alice", "GET", "/v1/runs/"+url.PathEscape(sid)+"/events?type=tool.session.closed", nil)
		var doc struct{ Events []event }
		if r.status == 200 {
			r.json(t, &doc)
		}
		if len(doc.Events) == 1 {
			all := runEvents(t, s, "alice", sid)
			closed := doc.Events[0]
			var opened []event
			for _, e := range all {
				if e.Type == "tool.session.opened" {
					opened = append(opened, e)
				}
			}
			if len(opened) != 1 || opened[0].Payload["sessionId"] != closed.Payload["sessionId"] || opened[0].Payload["toolId"] != closed.Payload["toolId"] ||
				closed.Payload["outcome"] != "completed" || all[len(all)-1].Type != "tool.session.closed" || all[0].Type != "tool.session.opened" {
				t.Fatalf("session bracket: %+v", all)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no tool.session.closed in run %s: %d %s", sid, r.status, r.body)
		}
		<-tick.C
	}
}

// TestExplainTargets: POST /v1/policy/explain answers for the gate's
// resource and prompt ids (mcp:<server>/resource with args.uri,
// mcp:<server>#<prompt>) as the MCP surfaces decide them, and such an id of
// an unconfigured server, or one the caller may not use at all, answers
// 404 exactly as an unknown tool.
func TestExplainTargets(t *testing.T) {
	s := startServeWith(t, false, `policy:
  default: deny
  rules:
    - {id: docs, effect: allow, tools: ["mcp:up/resource"], when: 'args.uri.startsWith("docs://")', reason: "docs only"}
    - {id: greet, effect: allow, tools: ["mcp:up#greet"], when: 'principal.tenant == "a"'}
`)
	var x struct{ ToolID, Decision, Rule, Reason string }
	explain := func(who string, body map[string]any) response {
		t.Helper()
		return s.do(t, who, "POST", "/v1/policy/explain", body)
	}
	r := explain("alice", map[string]any{"toolId": "mcp:up/resource", "args": map[string]any{"uri": "docs://readme"}})
	r.json(t, &x)
	if r.status != 200 || x.ToolID != "mcp:up/resource" || x.Decision != "allow" || x.Rule != "docs" {
		t.Fatalf("resource explain: %d %s", r.status, r.body)
	}
	r = explain("alice", map[string]any{"toolId": "mcp:up/resource", "args": map[string]any{"uri": "file:///etc/passwd"}})
	r.json(t, &x)
	if r.status != 200 || x.Decision != "deny" {
		t.Errorf("resource explain of another URI: %d %s", r.status, r.body)
	}
	r = explain("alice", map[string]any{"toolId": "mcp:up#greet"})
	r.json(t, &x)
	if r.status != 200 || x.ToolID != "mcp:up#greet" || x.Decision != "allow" || x.Rule != "greet" {
		t.Errorf("prompt explain: %d %s", r.status, r.body)
	}
	unknown := explain("alice", map[string]any{"toolId": "mcp:nope/resource"})
	if unknown.status != 404 {
		t.Fatalf("unconfigured server: %d %s", unknown.status, unknown.body)
	}
	// bob (tenant b) may use no prompt greet: the prompt is hidden from him,
	// and hidden answers like unknown.
	hidden := explain("bob", map[string]any{"toolId": "mcp:up#greet"})
	if hidden.status != 404 {
		t.Errorf("hidden prompt: %d %s", hidden.status, hidden.body)
	}
}

// TestExplainConfiguredPrincipal: an admin naming another principal by id
// alone gets the answer for that configured principal of its own tenant
// (its scopes), not for a scopeless stranger of that id; an id that is no
// configured principal of the admin's tenant (made up, or another
// tenant's) answers 404; given scopes, the principal is hypothetical and
// of the admin's tenant.
func TestExplainConfiguredPrincipal(t *testing.T) {
	s := startServe(t, false)
	var x struct {
		Principal, Decision, Rule, Layer string
		MissingScopes                    []string
	}
	r := s.do(t, "root", "POST", "/v1/policy/explain", map[string]any{"toolId": "mcp:up.a_notes", "principal": map[string]any{"id": "alice"}})
	r.json(t, &x)
	if r.status != 200 || x.Principal != "alice" || x.Decision != "allow" || x.Rule != "tenant-a-notes" || len(x.MissingScopes) != 0 {
		t.Errorf("admin for configured alice: %d %s", r.status, r.body)
	}
	for _, id := range []string{"mallory", "bob"} { // made up; tenant b's
		var env struct {
			Error   string
			Details map[string]any
		}
		r := s.do(t, "root", "POST", "/v1/policy/explain", map[string]any{"toolId": "mcp:up.a_notes", "principal": map[string]any{"id": id}})
		r.json(t, &env)
		if r.status != 404 || env.Error != "not_found" || env.Details["field"] != "principal.id" || strings.Contains(string(r.body), `"tenant"`) {
			t.Errorf("admin for %s (not of tenant a): %d %s", id, r.status, r.body)
		}
	}
	r = s.do(t, "root", "POST", "/v1/policy/explain", map[string]any{"toolId": "mcp:up.a_notes", "principal": map[string]any{"id": "mallory", "scopes": []string{"notes:read"}}})
	r.json(t, &x)
	if r.status != 200 || x.Principal != "mallory" || x.Decision != "allow" || x.Rule != "tenant-a-notes" {
		t.Errorf("admin for a hypothetical mallory with notes:read: %d %s", r.status, r.body)
	}
	r = s.do(t, "root", "POST", "/v1/policy/explain", map[string]any{"toolId": "mcp:up.a_notes", "principal": map[string]any{"id": "alice", "scopes": []string{}}})
	r.json(t, &x)
	if r.status != 200 || x.Decision != "deny" || x.Layer != "scopes" {
		t.Errorf("admin for a hypothetical scopeless alice: %d %s", r.status, r.body)
	}
}

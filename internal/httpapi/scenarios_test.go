package httpapi_test

import (
	"encoding/json"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/schematest"
)

// capabilities is the part of the discovery document the scenarios read,
// from where the conformance suite reads it: toolHooks from the
// `capabilities` mirror (lib/toolHooks.ts), toolCatalog from the root
// (lib/toolCatalog.ts).
type capabilities struct {
	ToolCatalog *struct {
		Supported        *bool    `json:"supported"`
		Sources          []string `json:"sources"`
		SessionLifecycle *bool    `json:"sessionLifecycle"`
	} `json:"toolCatalog"`
	Capabilities *struct {
		ToolHooks *struct {
			Supported            *bool `json:"supported"`
			PrePostEvents        *bool `json:"prePostEvents"`
			PerToolAuthorization *bool `json:"perToolAuthorization"`
			PerToolRateLimit     *bool `json:"perToolRateLimit"`
		} `json:"toolHooks"`
	} `json:"capabilities"`
}

func discover(t *testing.T, s *server) capabilities {
	t.Helper()
	r := s.do(t, "", "GET", "/.well-known/openwop", nil)
	if r.status != 200 {
		t.Fatalf("discovery: %d %s", r.status, r.body)
	}
	var c capabilities
	r.json(t, &c)
	return c
}

// requireHooks asserts that the toolHooks family is advertised in the
// mirror with flag true (strict mode: a gated scenario must not skip).
func requireHooks(t *testing.T, s *server, flag string) {
	t.Helper()
	c := discover(t, s)
	if c.Capabilities == nil || c.Capabilities.ToolHooks == nil {
		t.Fatal("capabilities.toolHooks is not advertised: the scenario would soft-skip")
	}
	h := c.Capabilities.ToolHooks
	v := map[string]*bool{"supported": h.Supported, "prePostEvents": h.PrePostEvents,
		"perToolAuthorization": h.PerToolAuthorization, "perToolRateLimit": h.PerToolRateLimit}[flag]
	if v == nil || !*v {
		t.Fatalf("capabilities.toolHooks.%s is not true: the scenario would soft-skip", flag)
	}
}

// invokeAnswer is the invoke seam's answer, decoded loosely like the suite.
type invokeAnswer struct {
	ToolCalled   map[string]any `json:"toolCalled"`
	ToolReturned map[string]any `json:"toolReturned"`
}

func invoke(t *testing.T, s *server, body map[string]any) (invokeAnswer, []byte) {
	t.Helper()
	r := s.do(t, "alice", "POST", "/v1/host/sample/toolhooks/invoke", body)
	if r.status != 200 {
		t.Fatalf("invoke seam: %d %s", r.status, r.body)
	}
	var a invokeAnswer
	r.json(t, &a)
	if a.ToolCalled == nil || a.ToolReturned == nil {
		t.Fatalf("invoke seam answer lacks the payload pair: %s", r.body)
	}
	return a, r.body
}

// TestOpenWOPScenarios runs, against a running `toolgate serve` with the
// seams enabled, each assertion of the nine OpenWOP conformance scenarios
// of CONTRACT.md §3, in strict mode: every capability a scenario is gated
// on is asserted advertised first, and every soft-skip condition of the
// suite is an assertion failure here.
func TestOpenWOPScenarios(t *testing.T) {
	s := startServe(t, true)

	t.Run("1-tool-hooks-shape", func(t *testing.T) {
		r := s.do(t, "", "GET", "/.well-known/openwop", nil)
		if cc := r.header.Get("Cache-Control"); cc != "public, max-age=300" {
			t.Errorf("Cache-Control %q", cc)
		}
		var raw map[string]json.RawMessage
		r.json(t, &raw)
		var mirror map[string]json.RawMessage
		json.Unmarshal(raw["capabilities"], &mirror)
		for _, fam := range []string{"toolHooks", "toolCatalog"} {
			if raw[fam] == nil || mirror[fam] == nil {
				t.Fatalf("%s must be at the root and in the capabilities mirror: %s", fam, r.body)
			}
			if string(raw[fam]) != string(mirror[fam]) {
				t.Errorf("%s differs between root %s and mirror %s", fam, raw[fam], mirror[fam])
			}
		}
		var hooks map[string]any
		json.Unmarshal(mirror["toolHooks"], &hooks)
		if _, ok := hooks["supported"].(bool); !ok {
			t.Fatalf("toolHooks.supported is not a boolean: %v", hooks)
		}
		for _, f := range []string{"prePostEvents", "perToolAuthorization", "perToolRateLimit"} {
			if v, present := hooks[f]; present {
				if _, ok := v.(bool); !ok {
					t.Errorf("toolHooks.%s is not a boolean: %v", f, v)
				}
			}
		}
	})

	t.Run("2-tool-hooks-content-free", func(t *testing.T) {
		requireHooks(t, s, "prePostEvents")
		a, _ := invoke(t, s, map[string]any{"principal": "core.system", "toolName": "web.search", "args": map[string]any{"q": "openwop"}})
		if h, _ := a.ToolCalled["argsHash"].(string); h == "" {
			t.Fatalf("toolCalled.argsHash is not a non-empty string: %v", a.ToolCalled)
		}
		if _, ok := a.ToolCalled["inputs"]; ok {
			t.Errorf("content-free toolCalled carries inputs: %v", a.ToolCalled)
		}
		st, _ := a.ToolReturned["status"].(string)
		if !slices.Contains([]string{"ok", "error", "forbidden", "rate_limited"}, st) {
			t.Fatalf("toolReturned.status %q", st)
		}
		if st != "ok" { // strict: nothing here should stop the call
			t.Fatalf("status %q, want ok: %v", st, a.ToolReturned)
		}
		if d, ok := a.ToolReturned["durationMs"].(float64); !ok || d < 0 {
			t.Fatalf("ok without durationMs ≥ 0: %v", a.ToolReturned)
		}
		for k, want := range map[string]string{"principal": "core.system", "transport": "native", "agentId": "core.system"} {
			if a.ToolCalled[k] != want {
				t.Errorf("toolCalled.%s = %v, want %s", k, a.ToolCalled[k], want)
			}
		}
	})

	t.Run("3-tool-hooks-authorization-fail-closed", func(t *testing.T) {
		requireHooks(t, s, "perToolAuthorization")
		a, _ := invoke(t, s, map[string]any{"principal": "conformance-unprivileged", "toolName": "db.delete",
			"requiredScopes": []string{"db:write"}, "args": map[string]any{}})
		if a.ToolReturned["status"] != "forbidden" {
			t.Fatalf("status %v, want forbidden", a.ToolReturned["status"])
		}
		if _, ok := a.ToolReturned["durationMs"]; ok {
			t.Fatalf("forbidden carries durationMs: %v", a.ToolReturned)
		}
		// The same with the scope granted runs; with a wrong scope it does not.
		if a, _ := invoke(t, s, map[string]any{"principal": "p1", "toolName": "db.delete", "requiredScopes": []string{"db:write"},
			"grantedScopes": []string{"db:write"}}); a.ToolReturned["status"] != "ok" {
			t.Errorf("granted scope: status %v", a.ToolReturned["status"])
		}
		if a, _ := invoke(t, s, map[string]any{"principal": "p1", "toolName": "db.delete", "requiredScopes": []string{"db:write"},
			"grantedScopes": []string{"db:read"}}); a.ToolReturned["status"] != "forbidden" {
			t.Errorf("lacking scope: status %v", a.ToolReturned["status"])
		}
	})

	t.Run("4-tool-hooks-rate-limit", func(t *testing.T) {
		requireHooks(t, s, "perToolRateLimit")
		a, _ := invoke(t, s, map[string]any{"principal": "core.system", "toolName": "web.search", "args": map[string]any{"q": "x"},
			"simulateRateLimitExhausted": true})
		if a.ToolReturned["status"] != "rate_limited" {
			t.Fatalf("status %v, want rate_limited", a.ToolReturned["status"])
		}
		if _, ok := a.ToolReturned["durationMs"]; ok {
			t.Errorf("rate_limited carries durationMs: %v", a.ToolReturned)
		}
	})

	t.Run("5-tool-hooks-secret-redaction", func(t *testing.T) {
		requireHooks(t, s, "prePostEvents")
		const canary = "sk-canary-rfc0064-do-not-leak-xyz789"
		a, raw := invoke(t, s, map[string]any{"principal": "core.system", "toolName": "web.search",
			"args": map[string]any{"apiKey": canary, "q": "openwop"}})
		if strings.Contains(string(raw), canary) {
			t.Fatalf("the answer leaks the canary: %s", raw)
		}
		// Nor is it in the stored events of the run.
		runs := s.do(t, "alice", "GET", "/v1/runs/"+runOf(t, s, a)+"/events", nil)
		if runs.status != 200 || strings.Contains(string(runs.body), canary) {
			t.Fatalf("stored events: %d, leak %v", runs.status, strings.Contains(string(runs.body), canary))
		}
		// argsHash is over the redacted args: the same for any apiKey value.
		b, _ := invoke(t, s, map[string]any{"principal": "core.system", "toolName": "web.search",
			"args": map[string]any{"apiKey": "sk-another-secret-value-0123456789", "q": "openwop"}})
		if a.ToolCalled["argsHash"] != b.ToolCalled["argsHash"] {
			t.Errorf("argsHash depends on the secret: %v vs %v", a.ToolCalled["argsHash"], b.ToolCalled["argsHash"])
		}
	})

	t.Run("6-tool-hooks-failure-honesty", func(t *testing.T) {
		requireHooks(t, s, "supported")
		a, _ := invoke(t, s, map[string]any{"principal": "core.system", "toolName": "web.search", "simulateToolError": true})
		e, ok := a.ToolReturned["error"].(map[string]any)
		if !ok {
			t.Fatalf("no error object (the suite would soft-skip as blocked): %v", a.ToolReturned)
		}
		if c, _ := e["code"].(string); c != "tool_execution_failed" {
			t.Errorf("error.code %v, want tool_execution_failed", e["code"])
		}
		if _, ok := e["message"].(string); !ok {
			t.Errorf("error.message is not a string: %v", e)
		}
		if _, ok := a.ToolReturned["outcome"]; ok {
			t.Errorf("outcome present beside error: %v", a.ToolReturned)
		}
		requireHooks(t, s, "prePostEvents")
		if a.ToolReturned["status"] != "error" {
			t.Errorf("status %v, want error", a.ToolReturned["status"])
		}
		if d, ok := a.ToolReturned["durationMs"].(float64); !ok || d < 0 {
			t.Errorf("the tool ran: durationMs ≥ 0 expected: %v", a.ToolReturned)
		}
	})

	t.Run("7-tool-descriptor-shape", func(t *testing.T) {
		good := `{"toolId":"mcp:fs.read","source":"mcp","title":"Read file","inputSchema":{"type":"object"},"auth":{"scopes":["tools:fs:read"]},"egress":"none","approval":"never","replayPolicy":"idempotent","safetyTier":"read","costHint":"low","latencyHint":"low"}`
		cases := []struct {
			name, ref, doc string
			ok             bool
		}{
			{"conforming descriptor", "tool-descriptor.schema.json", good, true},
			{"no safetyTier", "tool-descriptor.schema.json", `{"toolId":"mcp:fs.read","source":"mcp"}`, false},
			{"exec host-extension", "tool-descriptor.schema.json", `{"toolId":"x-host-acme-sh","source":"host-extension","safetyTier":"exec"}`, true},
			{"exec node-pack", "tool-descriptor.schema.json", `{"toolId":"openwop:sh","source":"node-pack","safetyTier":"exec"}`, false},
			{"unknown property", "tool-descriptor.schema.json", `{"toolId":"mcp:fs.read","source":"mcp","safetyTier":"read","annotations":{}}`, false},
			{"session opened", "run-event-payloads.schema.json#/$defs/toolSessionOpened", `{"sessionId":"s1","toolId":"mcp:fs.read"}`, true},
			{"session opened without sessionId", "run-event-payloads.schema.json#/$defs/toolSessionOpened", `{"toolId":"mcp:fs.read"}`, false},
			{"session closed completed", "run-event-payloads.schema.json#/$defs/toolSessionClosed", `{"sessionId":"s1","toolId":"t","outcome":"completed"}`, true},
			{"session closed without outcome", "run-event-payloads.schema.json#/$defs/toolSessionClosed", `{"sessionId":"s1","toolId":"t"}`, false},
			{"session closed exploded", "run-event-payloads.schema.json#/$defs/toolSessionClosed", `{"sessionId":"s1","toolId":"t","outcome":"exploded"}`, false},
		}
		for _, c := range cases {
			err := schematest.Check(c.ref, json.RawMessage(c.doc))
			if (err == nil) != c.ok {
				t.Errorf("%s: valid=%v, want %v (%v)", c.name, err == nil, c.ok, err)
			}
		}
		var caps struct {
			Properties struct {
				ToolCatalog struct {
					Properties map[string]any `json:"properties"`
				} `json:"toolCatalog"`
			} `json:"properties"`
		}
		readSchema(t, "capabilities.schema.json", &caps)
		for _, k := range []string{"supported", "sources", "sessionLifecycle"} {
			if caps.Properties.ToolCatalog.Properties[k] == nil {
				t.Errorf("capabilities.schema.json does not declare toolCatalog.%s", k)
			}
		}
		var ev struct {
			Defs struct {
				RunEventType struct {
					Enum []string `json:"enum"`
				} `json:"RunEventType"`
			} `json:"$defs"`
		}
		readSchema(t, "run-event.schema.json", &ev)
		for _, typ := range []string{"tool.session.opened", "tool.session.closed"} {
			if !slices.Contains(ev.Defs.RunEventType.Enum, typ) {
				t.Errorf("RunEventType lacks %s", typ)
			}
		}
		// And every descriptor the server serves is conforming (the
		// validating transport checks each one).
		if r := s.do(t, "alice", "GET", "/v1/tools", nil); r.status != 200 {
			t.Fatalf("GET /v1/tools: %d", r.status)
		}
	})

	t.Run("8-tool-catalog-projection", func(t *testing.T) {
		c := discover(t, s)
		if c.ToolCatalog == nil || c.ToolCatalog.Supported == nil || !*c.ToolCatalog.Supported {
			t.Fatal("root toolCatalog.supported is not true: the scenario would soft-skip")
		}
		if r := s.do(t, "", "GET", "/v1/tools", nil); r.status != 401 {
			t.Fatalf("unauthenticated GET /v1/tools: %d, want 401", r.status)
		}
		first := s.do(t, "alice", "GET", "/v1/tools", nil)
		if first.status != 200 {
			t.Fatalf("GET /v1/tools: %d %s", first.status, first.body)
		}
		var items []map[string]any
		first.json(t, &items)
		if len(items) == 0 {
			t.Fatal("the catalog is empty: nothing would be checked")
		}
		banned := []string{"secret", "credential", "credentials", "token", "apiKey", "password"}
		var ids []string
		for _, it := range items {
			if !slices.Contains([]string{"node-pack", "workflow", "mcp", "connector", "host-extension"}, it["source"].(string)) {
				t.Errorf("source %v", it["source"])
			}
			if !slices.Contains([]string{"pure", "read", "write", "exec"}, it["safetyTier"].(string)) {
				t.Errorf("safetyTier %v", it["safetyTier"])
			}
			for _, b := range banned {
				if _, ok := it[b]; ok {
					t.Errorf("descriptor %v carries banned key %s", it["toolId"], b)
				}
				if a, ok := it["auth"].(map[string]any); ok && a[b] != nil {
					t.Errorf("descriptor %v auth carries banned key %s", it["toolId"], b)
				}
			}
			ids = append(ids, it["toolId"].(string))
		}
		one := s.do(t, "alice", "GET", "/v1/tools/"+url.PathEscape(ids[0]), nil)
		if one.status != 200 {
			t.Fatalf("GET /v1/tools/%s: %d %s", ids[0], one.status, one.body)
		}
		var d map[string]any
		one.json(t, &d)
		if d["toolId"] != ids[0] {
			t.Errorf("descriptor.toolId %v, want %s", d["toolId"], ids[0])
		}
		if r := s.do(t, "alice", "GET", "/v1/tools/__conformance_nonexistent_tool__", nil); r.status != 404 {
			t.Errorf("nonexistent tool: %d, want 404", r.status)
		}
		// OPENWOP_CROSS_PRINCIPAL_TOOL_ID: a tool only tenant b may see.
		if r := s.do(t, "alice", "GET", "/v1/tools/"+url.PathEscape("mcp:up.b_notes"), nil); r.status != 404 {
			t.Errorf("cross-principal tool: %d, want 404", r.status)
		}
		// Advisory leg, asserted: two reads are identical and sorted.
		second := s.do(t, "alice", "GET", "/v1/tools", nil)
		if string(first.body) != string(second.body) {
			t.Errorf("two list reads differ:\n%s\n%s", first.body, second.body)
		}
		if !sort.StringsAreSorted(ids) {
			t.Errorf("not sorted by toolId: %v", ids)
		}
	})

	t.Run("9-tool-session-lifecycle", func(t *testing.T) {
		c := discover(t, s)
		if c.ToolCatalog == nil || c.ToolCatalog.SessionLifecycle == nil || !*c.ToolCatalog.SessionLifecycle {
			t.Fatal("toolCatalog.sessionLifecycle is not true: the scenario would soft-skip")
		}
		if r := s.do(t, "alice", "GET", "/v1/host/sample/test/runs/__probe__/events", nil); r.status != 200 || string(r.body) != "{\"events\":[]}\n" {
			t.Fatalf("probe: %d %s", r.status, r.body)
		}
		run := s.do(t, "alice", "POST", "/v1/host/sample/tools/session-run", map[string]any{})
		if run.status != 200 {
			t.Fatalf("session-run: %d %s", run.status, run.body)
		}
		var sr struct{ RunID, SessionID, ToolID string }
		run.json(t, &sr)
		if sr.RunID == "" {
			t.Fatalf("session-run answered no runId: %s", run.body)
		}
		evr := s.do(t, "alice", "GET", "/v1/host/sample/test/runs/"+url.PathEscape(sr.RunID)+"/events", nil)
		var doc struct {
			Events []struct {
				Type     string         `json:"type"`
				Sequence int            `json:"sequence"`
				Payload  map[string]any `json:"payload"`
			} `json:"events"`
		}
		evr.json(t, &doc)
		evs := doc.Events
		sort.Slice(evs, func(i, j int) bool { return evs[i].Sequence < evs[j].Sequence })
		opened, closed, firstCall, lastCall := -1, -1, -1, -1
		var openedP, closedP map[string]any
		for _, e := range evs {
			switch {
			case e.Type == "tool.session.opened" && opened < 0:
				opened, openedP = e.Sequence, e.Payload
			case e.Type == "tool.session.closed":
				closed, closedP = e.Sequence, e.Payload
			case e.Type == "agent.toolCalled" || e.Type == "agent.toolReturned" || strings.HasPrefix(e.Type, "tool.call"):
				if firstCall < 0 {
					firstCall = e.Sequence
				}
				lastCall = e.Sequence
			}
		}
		if opened < 0 || closed < 0 || firstCall < 0 {
			t.Fatalf("want opened, call events and closed; got %+v", evs)
		}
		if !(opened < firstCall && closed > lastCall) {
			t.Errorf("bracket order: opened %d, calls %d–%d, closed %d", opened, firstCall, lastCall, closed)
		}
		if openedP["sessionId"] == nil || openedP["sessionId"] != closedP["sessionId"] || openedP["sessionId"] != sr.SessionID {
			t.Errorf("sessionId: opened %v closed %v answer %s", openedP["sessionId"], closedP["sessionId"], sr.SessionID)
		}
		for _, p := range []map[string]any{openedP, closedP} {
			if _, ok := p["toolId"].(string); !ok {
				t.Errorf("bracket event without a string toolId: %v", p)
			}
		}
		if !slices.Contains([]string{"completed", "failed", "aborted", "expired"}, closedP["outcome"].(string)) || closedP["outcome"] != "completed" {
			t.Errorf("outcome %v", closedP["outcome"])
		}
		for _, e := range evs {
			for _, b := range []string{"secret", "credential", "credentials", "token", "apiKey", "password", "inputs", "outcome_value"} {
				if _, ok := e.Payload[b]; ok {
					t.Errorf("%s payload carries %s", e.Type, b)
				}
			}
		}
		if r := s.do(t, "alice", "POST", "/v1/host/sample/test/reset", map[string]any{}); r.status != 200 {
			t.Errorf("reset: %d %s", r.status, r.body)
		}
	})
}

// runOf finds the run of an invoke seam answer: the seam answers payloads
// only, so look the callId up in the caller's event stream from the start.
func runOf(t *testing.T, s *server, a invokeAnswer) string {
	t.Helper()
	callID, _ := a.ToolCalled["callId"].(string)
	for _, f := range readStream(t, s, "alice", "/v1/events/stream?from=start", "", func(got []streamed) bool {
		for _, g := range got {
			if g.payload["callId"] == callID {
				return true
			}
		}
		return false
	}) {
		if f.payload["callId"] == callID {
			return f.runID
		}
	}
	t.Fatalf("call %s not found in the event stream", callID)
	return ""
}

func readSchema(t *testing.T, name string, v any) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(schematest.Dir(), name))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, v); err != nil {
		t.Fatal(err)
	}
}

package httpapi_test

import (
	"strings"
	"testing"
)

// TestHiddenToolEventsNotDisclosed: against a running `toolgate serve`,
// carol (tenant a, no scopes) calls mcp:up.a_notes, which needs notes:read
// and is hidden from her, with runId probe1: 404 like an unknown tool. The
// refusal is recorded, yet GET /v1/runs/probe1/events answers her exactly
// as a run never written, the event-log seam shows her nothing, and her
// stream does not deliver it; audra (tenant a, notes:read and the audit
// scope toolgate:audit), who may see the tool and read every principal's
// events, reads the refusal by every door.
func TestHiddenToolEventsNotDisclosed(t *testing.T) {
	s := startServe(t, true)
	if r := s.do(t, "carol", "POST", "/v1/calls", map[string]any{"toolId": "mcp:up.a_notes", "runId": "probe1"}); r.status != 404 {
		t.Fatalf("carol's call of a hidden tool: %d %s", r.status, r.body)
	}
	hidden := s.do(t, "carol", "GET", "/v1/runs/probe1/events", nil)
	unknown := s.do(t, "carol", "GET", "/v1/runs/probe0/events", nil)
	if hidden.status != 404 || strings.ReplaceAll(string(hidden.body), "probe1", "X") != strings.ReplaceAll(string(unknown.body), "probe0", "X") {
		t.Errorf("carol reads probe1: %d %s\nunknown run: %d %s", hidden.status, hidden.body, unknown.status, unknown.body)
	}
	for _, h := range []string{"Content-Type", "Cache-Control"} {
		if hidden.header.Get(h) != unknown.header.Get(h) {
			t.Errorf("header %s: %q / %q", h, hidden.header.Get(h), unknown.header.Get(h))
		}
	}
	if r := s.do(t, "carol", "GET", "/v1/host/sample/test/runs/probe1/events", nil); r.status != 200 || string(r.body) != "{\"events\":[]}\n" {
		t.Errorf("carol's seam read of probe1: %d %s", r.status, r.body)
	}
	// carol's visible call after it is the sentinel of her stream.
	if r := s.do(t, "carol", "POST", "/v1/calls", map[string]any{"toolId": "mcp:up.echo", "runId": "after1"}); r.status != 200 {
		t.Fatalf("carol's echo: %d %s", r.status, r.body)
	}
	for _, e := range readStream(t, s, "carol", "/v1/events/stream?from=start", "", func(g []streamed) bool {
		return len(g) > 0 && g[len(g)-1].runID == "after1" && g[len(g)-1].typ == "agent.toolReturned"
	}) {
		if e.runID == "probe1" {
			t.Fatalf("carol's stream delivered %s of probe1: %v", e.typ, e.payload)
		}
	}
	evs := runEvents(t, s, "audra", "probe1")
	if len(evs) != 2 || evs[1].Payload["toolName"] != "mcp:up.a_notes" || evs[1].Payload["status"] != "forbidden" {
		t.Errorf("audra reads probe1: %+v", evs)
	}
	if r := s.do(t, "audra", "GET", "/v1/host/sample/test/runs/probe1/events", nil); r.status != 200 || !strings.Contains(string(r.body), `"status":"forbidden"`) {
		t.Errorf("audra's seam read of probe1: %d %s", r.status, r.body)
	}
	got := readStream(t, s, "audra", "/v1/events/stream?from=start&runId=probe1", "", func(g []streamed) bool { return len(g) >= 2 })
	if got[0].runID != "probe1" || got[1].payload["status"] != "forbidden" {
		t.Errorf("audra's stream of probe1: %+v", got)
	}
}

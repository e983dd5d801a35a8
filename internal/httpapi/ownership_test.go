package httpapi_test

import (
	"context"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Issue 12 point 7: a principal reads its own calls' events, not the
// other principals' of its tenant; a holder of the audit scope
// (toolgate:audit, config audit.readers_scope) reads every principal's.
// One run holds calls of alice (HTTP), carol (HTTP and MCP) and erin:
// each reads exactly her own events of it (and carol alone her MCP
// session's tool.session.opened, in the session's run), by the run read and the SSE stream, and a cursor of
// someone else's event resumes the stream without delivering it. root's
// toolgate:admin is not the audit scope: the run is unknown to him.
func TestEventReadsArePrincipalScoped(t *testing.T) {
	s := startServe(t, false)
	call := func(who, run string) {
		t.Helper()
		if r := s.do(t, who, "POST", "/v1/calls", map[string]any{"toolId": "mcp:up.echo", "runId": run, "args": map[string]string{"text": who}}); r.status != 200 {
			t.Fatalf("%s's call: %d %s", who, r.status, r.body)
		}
	}
	call("alice", "shared-run")
	call("carol", "shared-run")
	cs := s.mcpSession(t, "carol")
	defer cs.Close()
	if res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "carol"},
		Meta: mcp.Meta{"toolgate/runId": "shared-run"}}); err != nil || res.IsError {
		t.Fatalf("carol's MCP call: %v %+v", err, res)
	}
	call("erin", "shared-run")

	owner := func(e event) string {
		if p, ok := e.Payload["principal"].(string); ok {
			return p
		}
		if e.Type == "agent.toolReturned" {
			return "" // checked through its agent.toolCalled (causationId)
		}
		return "?"
	}
	own := map[string][]event{}
	for _, who := range []string{"alice", "carol", "erin"} {
		evs := runEvents(t, s, who, "shared-run")
		own[who] = evs
		calls := map[string]bool{}
		for _, e := range evs {
			switch p := owner(e); p {
			case who:
				calls[e.EventID] = true
			case "":
				if !calls[e.CausationID] {
					t.Errorf("%s reads a toolReturned of another call: %+v", who, e)
				}
			default:
				t.Errorf("%s reads an event of %s: %+v", who, p, e)
			}
		}
	}
	if len(own["alice"]) != 2 || len(own["erin"]) != 2 || len(own["carol"]) != 4 {
		t.Fatalf("own events: alice %d, carol %d, erin %d; want 2, 4, 2", len(own["alice"]), len(own["carol"]), len(own["erin"]))
	}
	all := runEvents(t, s, "audra", "shared-run")
	if len(all) != 8 {
		t.Fatalf("the audit scope reads %d events of the run, want 8", len(all))
	}
	if sess := runEvents(t, s, "carol", cs.ID()); len(sess) != 1 || sess[0].Type != "tool.session.opened" {
		t.Errorf("carol's session run: %+v", sess)
	}
	if r := s.do(t, "alice", "GET", "/v1/runs/"+cs.ID()+"/events", nil); r.status != 404 {
		t.Errorf("alice reads carol's session run: %d %s", r.status, r.body)
	}
	rootRead := s.do(t, "root", "GET", "/v1/runs/shared-run/events", nil)
	unknown := s.do(t, "root", "GET", "/v1/runs/never-written/events", nil)
	if rootRead.status != 404 || strings.ReplaceAll(string(rootRead.body), "shared-run", "X") != strings.ReplaceAll(string(unknown.body), "never-written", "X") {
		t.Errorf("root (toolgate:admin) reads a run with none of his calls: %d %s", rootRead.status, rootRead.body)
	}

	// The stream: alice gets her two events of the run, never another's.
	mine := readStream(t, s, "alice", "/v1/events/stream?from=start&runId=shared-run", "", func(g []streamed) bool { return len(g) >= 2 })
	everyone := readStream(t, s, "audra", "/v1/events/stream?from=start&runId=shared-run", "", func(g []streamed) bool { return len(g) >= 8 })
	// Resuming from a cursor of carol's event (the audit reader's third)
	// delivers alice only her own later events: erin's and carol's after
	// it are skipped, alice's next call arrives.
	call("carol", "shared-run")
	call("alice", "shared-run")
	later := readStream(t, s, "alice", "/v1/events/stream?runId=shared-run", everyone[2].id, func(g []streamed) bool {
		return len(g) > 0 && g[len(g)-1].typ == "agent.toolReturned"
	})
	for _, g := range [][]streamed{mine, later} {
		for _, e := range g {
			if p, ok := e.payload["principal"].(string); ok && p != "alice" {
				t.Errorf("alice's stream delivered %s of %s", e.typ, p)
			}
		}
	}
	if len(mine) != 2 || len(later) != 2 || later[0].id == mine[1].id {
		t.Errorf("alice's stream: %d events from the start, %d after the resume; want 2 and 2 (her new call)", len(mine), len(later))
	}
}

package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolgate/toolgate/internal/cli"
)

// mutationPolicy: writes of more than 10 need an approval; the enforce
// hook "payee" (a webhook on 127.0.0.1) rewrites every write's arguments.
const mutationPolicy = `policy:
  default: deny
  rules:
    - {id: writers, effect: allow, tools: ["mcp:up.write"]}
    - {id: big-payments, effect: require_approval, tools: ["mcp:up.write"], when: 'has(args.n) && args.n > 10', reason: "payments over 10 need a human"}
approvals: {ttl: 1h, wait: 1500ms, approvers_scope: "toolgate:approve"}
credentials:
  hook-secret: {env: H5_PAYEE_SECRET}
hooks:
  - {name: payee, mode: enforce, mutating: true, url: %q, secret: "{{credential:hook-secret}}", timeout: 5s}
`

// approvalView is one approval of GET /v1/approvals.
type approvalView struct {
	ID          string `json:"id"`
	ToolID      string `json:"toolId"`
	ArgsHash    string `json:"argsHash"`
	ArgsSummary string `json:"argsSummary"`
	Status      string `json:"status"`
}

// approvals lists the inbox as dave (status: pending, all, ...).
func (s *server) approvals(t *testing.T, status string) map[string]approvalView {
	t.Helper()
	var body struct{ Approvals []approvalView }
	s.do(t, "dave", "GET", "/v1/approvals?status="+status, nil).json(t, &body)
	out := map[string]approvalView{}
	for _, a := range body.Approvals {
		out[a.ID] = a
	}
	return out
}

// Issue 12 point 12 and issue 13 point 17, end to end: a person approves
// {text: "pay A", n: 13}; the mutating enforce hook then rewrites it into
// {text: "pay B", n: 10000}. The approval does not cover the new
// arguments: the decision runs again, the mutated call asks for its own
// approval (whose summary shows what will run) and, with none in time, is
// refused approval_required and recorded, the upstream never reached.
// Once both are approved, the retry runs the mutated arguments under the
// approval of exactly those arguments. Approvers see the redacted
// argument summary in GET /v1/approvals and `toolgate approvals list`.
func TestMutatedCallNeedsItsOwnApproval(t *testing.T) {
	t.Setenv("H5_PAYEE_SECRET", "whsec-payee-0123456789")
	var mutated atomic.Int64
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var req struct{ Phase, ToolID string }
		json.Unmarshal(body, &req)
		if req.Phase == "before" && req.ToolID == "mcp:up.write" {
			mutated.Add(1)
			io.WriteString(w, `{"args": {"text": "pay B", "n": 10000}}`)
			return
		}
		io.WriteString(w, `{}`)
	}))
	defer hook.Close()
	s := startServeWith(t, false, fmt.Sprintf(mutationPolicy, hook.URL))
	cs := s.mcpSession(t, "erin")
	defer cs.Close()
	ctx := context.Background()
	pay := func(run string) chan *mcp.CallToolResult {
		done := make(chan *mcp.CallToolResult, 1)
		go func() {
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "write", Meta: mcp.Meta{"toolgate/runId": run},
				Arguments: map[string]any{"text": "pay A", "n": 13, "password": "hunter2-not-for-approvers"}})
			if err != nil {
				t.Errorf("write: %v", err)
			}
			done <- res
		}()
		return done
	}
	seen := map[string]bool{}

	// 1. The approver sees what the first call asks for, and approves it.
	done := pay("pay-1")
	id1 := s.pendingApproval(t, seen)
	if a := s.approvals(t, "pending")[id1]; a.ArgsSummary != `{"n":13,"password":"[redacted]","text":"pay A"}` {
		t.Fatalf("the first approval shows %q", a.ArgsSummary)
	}
	if r := s.do(t, "dave", "POST", "/v1/approvals/"+id1+"/approve", nil); r.status != 200 {
		t.Fatalf("approve: %d %s", r.status, r.body)
	}
	// 2. The hook rewrites the arguments: the call now waits for an
	// approval of the new ones, shown as they will run.
	id2 := s.pendingApproval(t, seen)
	if a := s.approvals(t, "pending")[id2]; a.ArgsSummary != `{"n":10000,"text":"pay B"}` {
		t.Fatalf("the mutated call's approval shows %q", a.ArgsSummary)
	}
	var out bytes.Buffer
	if code := cli.Main(ctx, []string{"approvals", "list", "--config", s.cfgFile, "--tenant", "a"}, strings.NewReader(""), &out, io.Discard); code != cli.ExitOK ||
		!strings.Contains(out.String(), id2) || !strings.Contains(out.String(), `{"n":10000,"text":"pay B"}`) || strings.Contains(out.String(), "hunter2") {
		t.Fatalf("approvals list (%d):\n%s", code, out.String())
	}
	e := toolError(t, <-done)
	if e == nil || e["code"] != "approval_required" || e["details"].(map[string]any)["approvalId"] != id2 {
		t.Fatalf("the mutated call ran under the first approval: %+v", e)
	}
	var returned []event
	for _, ev := range runEvents(t, s, "erin", "pay-1") {
		if ev.Type == "agent.toolReturned" {
			returned = append(returned, ev)
		}
	}
	if len(returned) != 1 || returned[0].Payload["status"] != "forbidden" || returned[0].Payload["durationMs"] != nil {
		t.Fatalf("pay-1 is not recorded as refused before it ran: %+v", returned)
	}
	if got := s.approvals(t, "all"); got[id1].Status != "consumed" || got[id2].Status != "pending" {
		t.Fatalf("approvals after the refusal: %+v", got)
	}

	// 3. Both approved, the retry runs the mutated arguments under the
	// approval of exactly those (the original's is asked for again: the
	// first was spent on the refused call).
	if r := s.do(t, "dave", "POST", "/v1/approvals/"+id2+"/approve", nil); r.status != 200 {
		t.Fatalf("approve: %d %s", r.status, r.body)
	}
	done = pay("pay-2")
	id3 := s.pendingApproval(t, seen)
	if r := s.do(t, "dave", "POST", "/v1/approvals/"+id3+"/approve", nil); r.status != 200 {
		t.Fatalf("approve: %d %s", r.status, r.body)
	}
	res := <-done
	if res == nil || res.IsError {
		t.Fatalf("the retry: %+v", toolError(t, res))
	}
	raw, _ := json.Marshal(res.StructuredContent)
	if string(raw) != `{"text":"pay B"}` {
		t.Fatalf("the upstream ran %s, want the mutated arguments", raw)
	}
	got := s.approvals(t, "all")
	for _, id := range []string{id1, id2, id3} {
		if got[id].Status != "consumed" {
			t.Errorf("approval %s is %s, want consumed", id, got[id].Status)
		}
	}
	if got[id2].ArgsHash == got[id1].ArgsHash || got[id3].ArgsHash != got[id1].ArgsHash || mutated.Load() != 2 {
		t.Errorf("approvals %+v, %d mutations", got, mutated.Load())
	}
}

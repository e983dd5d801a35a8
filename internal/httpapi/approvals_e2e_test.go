package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// approvalsPolicy is the tail of the approvals tests' configuration.
const approvalsPolicy = `policy:
  default: deny
  rules:
    - {id: writers, effect: allow, tools: ["mcp:up.write"]}
    - {id: big-writes, effect: require_approval, tools: ["mcp:up.write"], when: 'has(args.text) && size(args.text) > 10', reason: "large writes need a human"}
    - {id: echo, effect: allow, tools: ["mcp:up.echo"]}
    - {id: ask-user, effect: require_approval, approver: user, tools: ["mcp:up.echo"], when: 'has(args.text) && args.text == "ask me"', reason: "confirm with the user"}
approvals: {ttl: 1h, wait: 1500ms, approvers_scope: "toolgate:approve"}
`

// toolError is a tools/call result's _meta["toolgate/error"], or nil.
func toolError(t *testing.T, res *mcp.CallToolResult) map[string]any {
	t.Helper()
	if !res.IsError {
		return nil
	}
	e, _ := res.Meta["toolgate/error"].(map[string]any)
	if e == nil {
		raw, _ := json.Marshal(res)
		t.Fatalf("isError result without _meta[\"toolgate/error\"]: %s", raw)
	}
	if res.StructuredContent != nil {
		t.Fatalf("gateway-made isError result with structuredContent %v", res.StructuredContent)
	}
	return e
}

// pendingApproval waits (bounded) until the inbox shows a pending approval
// other than those in seen, and returns its id.
func (s *server) pendingApproval(t *testing.T, seen map[string]bool) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		r := s.do(t, "dave", "GET", "/v1/approvals", nil)
		var body struct {
			Approvals []struct {
				ID     string `json:"id"`
				ToolID string `json:"toolId"`
			} `json:"approvals"`
		}
		r.json(t, &body)
		for _, a := range body.Approvals {
			if !seen[a.ID] {
				seen[a.ID] = true
				return a.ID
			}
		}
	}
	t.Fatal("no pending approval appeared")
	return ""
}

// Issue 6, acceptance 1: approvals end to end, an MCP client calling a real
// upstream through `toolgate serve` and an approver using the HTTP inbox.
func TestApprovalsEndToEnd(t *testing.T) {
	s := startServeWith(t, false, approvalsPolicy)
	cs := s.mcpSession(t, "erin")
	defer cs.Close()
	ctx := context.Background()
	call := func(text string) *mcp.CallToolResult {
		t.Helper()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "write", Arguments: map[string]any{"text": text}})
		if err != nil {
			t.Fatalf("tools/call write %q: %v", text, err)
		}
		return res
	}
	seen := map[string]bool{}
	approve := func(id string, as string) response {
		return s.do(t, as, "POST", "/v1/approvals/"+id+"/approve", map[string]string{"reason": "ok"})
	}

	// 1. A call waiting for approval resumes when approved while it waits.
	done := make(chan *mcp.CallToolResult, 1)
	go func() { done <- call("a rather large write") }()
	id1 := s.pendingApproval(t, seen)
	if r := approve(id1, "erin"); r.status != 403 {
		t.Fatalf("the requester (no approver scope) approved: %d %s", r.status, r.body)
	}
	if r := approve(id1, "dave"); r.status != 200 || !strings.Contains(string(r.body), `"status":"approved"`) {
		t.Fatalf("approve: %d %s", r.status, r.body)
	}
	if res := <-done; res.IsError {
		t.Fatalf("the approved call failed: %+v", toolError(t, res))
	}

	// 2. After the wait: approval_required; approved, a retry succeeds once;
	// changed arguments are not covered; the next retry needs a new one.
	res := call("second large write")
	e := toolError(t, res)
	if e == nil || e["code"] != "approval_required" {
		t.Fatalf("after the wait: %+v", res)
	}
	id2, _ := e["details"].(map[string]any)["approvalId"].(string)
	seen[id2] = true
	if id2 == "" || approve(id2, "dave").status != 200 {
		t.Fatalf("approving %q failed", id2)
	}
	if e := toolError(t, call("changed large write")); e == nil || e["code"] != "approval_required" {
		t.Fatalf("changed arguments rode on the approval: %+v", e)
	}
	if res := call("second large write"); res.IsError {
		t.Fatalf("retry after approval: %+v", toolError(t, res))
	}
	if e := toolError(t, call("second large write")); e == nil || e["code"] != "approval_required" || e["details"].(map[string]any)["approvalId"] == id2 {
		t.Fatalf("a third call reused the approval: %+v", e)
	}
	if r := approve(id2, "dave"); r.status != 409 {
		t.Fatalf("approving a consumed approval: %d %s", r.status, r.body)
	}

	// 3. A rule removed by a reload while the call waits refuses it at
	// dispatch, approved or not.
	for _, p := range s.pendingList(t) {
		seen[p] = true
	}
	go func() { done <- call("fourth large write") }()
	id4 := s.pendingApproval(t, seen)
	noWrites := strings.Replace(approvalsPolicy,
		`{id: big-writes, effect: require_approval,`, `{id: no-big-writes, effect: deny,`, 1)
	if err := os.WriteFile(s.cfgFile, []byte(s.cfgHead+noWrites), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		r := s.do(t, "erin", "POST", "/v1/policy/explain", map[string]any{"toolId": "mcp:up.write", "args": map[string]string{"text": "fourth large write"}})
		var ex struct {
			Decision string `json:"decision"`
		}
		r.json(t, &ex)
		if ex.Decision == "deny" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the reload did not take effect: %s", r.body)
		}
	}
	approve(id4, "dave")
	if e := toolError(t, <-done); e == nil || e["code"] != "forbidden" {
		t.Fatalf("a call whose rule was removed ran: %+v", e)
	}
}

// pendingList is the ids of the inbox's pending approvals.
func (s *server) pendingList(t *testing.T) []string {
	t.Helper()
	var body struct {
		Approvals []struct {
			ID string `json:"id"`
		} `json:"approvals"`
	}
	s.do(t, "dave", "GET", "/v1/approvals", nil).json(t, &body)
	var out []string
	for _, a := range body.Approvals {
		out = append(out, a.ID)
	}
	return out
}

// SIGHUP reloads auth too: a key removed from the file stops working.
func TestReloadAuth(t *testing.T) {
	s := startServe(t, false)
	if r := s.do(t, "bob", "GET", "/v1/tools", nil); r.status != 200 {
		t.Fatalf("bob before the reload: %d", r.status)
	}
	var lines []string
	for _, l := range strings.Split(s.cfgHead+defaultPolicy, "\n") {
		if !strings.Contains(l, "{id: bob,") {
			lines = append(lines, l)
		}
	}
	if err := os.WriteFile(s.cfgFile, []byte(strings.Join(lines, "\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for s.do(t, "bob", "GET", "/v1/tools", nil).status != 401 {
		if time.Now().After(deadline) {
			t.Fatalf("bob's removed key still works after the reload; stderr:\n%s", s.stderr.String())
		}
	}
	if r := s.do(t, "alice", "GET", "/v1/tools", nil); r.status != 200 {
		t.Fatalf("alice after the reload: %d %s", r.status, r.body)
	}
}

// The rate limit is taken before an approval is requested (DESIGN.md:
// decide → rate limit → approval): a principal past its limit is refused
// rate_limited and cannot queue approvals for people to wade through.
func TestRateLimitBeforeApprovalRequest(t *testing.T) {
	pol := strings.Replace(approvalsPolicy, "approvals:", `  ratelimits:
    - {tools: ["mcp:up.write"], per: principal_tool, rate: 1/h, burst: 1}
approvals:`, 1)
	s := startServeWith(t, false, pol)
	var codes []string
	for i := range 3 {
		r := s.do(t, "erin", "POST", "/v1/calls", map[string]any{"toolId": "mcp:up.write", "args": map[string]string{"text": fmt.Sprintf("a large write %d", i)}})
		var out struct {
			Error string `json:"error"`
		}
		r.json(t, &out)
		codes = append(codes, out.Error)
	}
	if codes[0] != "approval_required" || codes[1] != "rate_limited" || codes[2] != "rate_limited" {
		t.Errorf("three big writes past a burst of 1: %q; want approval_required, then rate_limited", codes)
	}
	r := s.do(t, "dave", "GET", "/v1/approvals", nil)
	var body struct {
		Approvals []struct {
			ID string `json:"id"`
		} `json:"approvals"`
	}
	r.json(t, &body)
	if len(body.Approvals) != 1 {
		t.Errorf("pending approvals: %d, want 1 (the refused calls asked for none): %s", len(body.Approvals), r.body)
	}
}

package mcpgw

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/internal/auth"
	"github.com/toolgate/toolgate/store"
)

// oneServerConfig fronts only the recording upstream (names unprefixed):
// greet needs the user's in-band approval when name is "ask me", secret is
// ops-only.
func oneServerConfig(remote string) string {
	return fmt.Sprintf(`auth:
  api_keys:
    - {id: alice, key_sha256: %q, tenant: %s, scopes: [ops]}
    - {id: bob, key_sha256: %q, tenant: %s}
servers:
  - {name: remote, url: %s}
policy:
  default: deny
  rules:
    - {id: everyone, effect: allow, tools: ["mcp:remote.greet"]}
    - {id: ask-user, effect: require_approval, approver: user, tools: ["mcp:remote.greet"], when: 'has(args.name) && args.name == "ask me"', reason: "confirm with the user"}
    - {id: ops, effect: allow, scopes: [ops], tools: ["mcp:remote.secret"]}
`, auth.HashKey(keyAlice), tenant, auth.HashKey(keyBob), tenant, yamlQuote(remote))
}

// Issue 6, acceptance 3: a Go SDK client that declares elicitation is asked
// in-band; accepting runs the call, declining refuses it with
// approval_denied, and the answer is recorded as the approval's resolution.
func TestElicitationApproval(t *testing.T) {
	rec := startRecordingUpstream(t)
	e := startGatewayWith(t, oneServerConfig(rec.url), true)
	answer := true
	var asked []string
	cs := e.connectWith(t, keyAlice, &mcp.ClientOptions{
		ElicitationHandler: func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			asked = append(asked, req.Params.Message)
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"approve": answer}}, nil
		},
	})
	res := callTool(t, cs, "greet", map[string]any{"name": "ask me"})
	mustOK(t, "greet", res)
	answer = false
	res = callTool(t, cs, "greet", map[string]any{"name": "ask me"})
	mustRefused(t, "greet", res, "approval_denied")
	if len(asked) != 2 || !strings.Contains(asked[0], "mcp:remote.greet") || !strings.Contains(asked[0], "confirm with the user") {
		t.Fatalf("the user was asked %q", asked)
	}
	if n := rec.count("greet"); n != 1 {
		t.Fatalf("upstream greet calls: %d, want 1 (the approved one)", n)
	}
	as, err := e.approvals.List(t.Context(), tenant, "")
	if err != nil || len(as) != 2 {
		t.Fatalf("approvals: %v %v", as, err)
	}
	for _, a := range as {
		if a.ResolvedBy != "user:alice" || (a.Status != store.ApprovalConsumed && a.Status != store.ApprovalDenied) {
			t.Fatalf("approval not recorded as the user's answer: %+v", a)
		}
	}
}

// tool.session.opened precedes the first call's events (RFC 0078 §D), and
// malformed arguments of an undisclosed tool answer like an unknown tool.
func TestSessionBracketAndNoExistenceLeak(t *testing.T) {
	rec := startRecordingUpstream(t)
	e := startGatewayWith(t, oneServerConfig(rec.url), false)
	cs := e.connect(t, keyBob)
	res := callTool(t, cs, "greet", map[string]any{"name": "x"})
	mustOK(t, "greet", res)
	runID := metaString(t, res, MetaRunID)
	evs, err := e.st.EventsByRun(t.Context(), tenant, runID, -1, 0)
	if err != nil || len(evs) < 3 {
		t.Fatalf("run events: %d, %v", len(evs), err)
	}
	if evs[0].Type != audit.TypeSessionOpened || evs[1].Type != audit.TypeToolCalled {
		var types []string
		for _, ev := range evs {
			types = append(types, ev.Type)
		}
		t.Fatalf("event order %v; want tool.session.opened first", types)
	}

	_, errSecret := tryCall(t, cs, "secret", "not an object")
	_, errNope := tryCall(t, cs, "nope", "not an object")
	if errSecret == nil || errNope == nil || strings.ReplaceAll(errSecret.Error(), "secret", "X") != strings.ReplaceAll(errNope.Error(), "nope", "X") {
		t.Fatalf("bad arguments: undisclosed tool %v, unknown tool %v; want the same answer", errSecret, errNope)
	}
	alice := e.connect(t, keyAlice)
	if _, err := tryCall(t, alice, "secret", "not an object"); err == nil || strings.Contains(err.Error(), "unknown tool") {
		t.Fatalf("bad arguments of a visible tool: %v; want an argument error", err)
	}
}

// An upstream error message that echoes a resolved credential reaches the
// MCP client scrubbed ([REDACTED:<id>]), as it does over POST /v1/calls.
func TestUpstreamErrorIsRedacted(t *testing.T) {
	const token = "tok-0123456789abcdef-secret"
	t.Setenv("TG_TEST_UPSTREAM_TOKEN", token)
	s := mcp.NewServer(&mcp.Implementation{Name: "leaky", Version: "1"}, nil)
	s.AddTool(&mcp.Tool{Name: "leak", InputSchema: map[string]any{"type": "object"}},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "auth failed with " + req.Extra.Header.Get("X-Token")}}}, nil
		})
	srv := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil))
	t.Cleanup(srv.Close)
	e := startGateway(t, fmt.Sprintf(`auth:
  api_keys:
    - {id: alice, key_sha256: %q, tenant: %s}
credentials:
  upstream-token: {env: TG_TEST_UPSTREAM_TOKEN}
servers:
  - {name: leaky, url: %s, headers: {X-Token: "{{credential:upstream-token}}"}}
policy:
  rules: [{id: all, effect: allow, tools: ["*"]}]
`, auth.HashKey(keyAlice), tenant, yamlQuote(srv.URL)))
	res := callTool(t, e.connect(t, keyAlice), "leak", map[string]any{})
	text := resultText(res)
	if !res.IsError || strings.Contains(text, token) || !strings.Contains(text, "[REDACTED:upstream-token]") {
		t.Fatalf("upstream error reached the client as %q", text)
	}
}

// A malformed toolgate/* _meta value is an invalid-params error naming the
// key, not an unknown tool.
func TestBadMetaIsInvalidParams(t *testing.T) {
	rec := startRecordingUpstream(t)
	e := startGatewayWith(t, oneServerConfig(rec.url), false)
	cs := e.connect(t, keyBob)
	for _, v := range []any{strings.Repeat("r", 300), 5, "", "a\nb", "a\x00b"} {
		_, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "greet", Arguments: map[string]any{"name": "x"}, Meta: mcp.Meta{MetaRunID: v}})
		if err == nil || !strings.Contains(err.Error(), MetaRunID) || strings.Contains(err.Error(), "unknown tool") {
			t.Fatalf("_meta runId %v: %v", v, err)
		}
	}
	if n := rec.count("greet"); n != 0 {
		t.Fatalf("upstream reached %d times", n)
	}
}

package httpapi_test

import (
	"testing"
)

// perKindsPolicy stacks one rule of each new per kind (issue 14.6).
const perKindsPolicy = `policy:
  default: deny
  rules:
    - {id: shared, effect: allow, tools: ["mcp:up.echo", "mcp:up.limited"]}
    - {id: tenant-a-notes, effect: allow, tools: ["mcp:up.a_notes"], when: 'principal.tenant == "a"'}
  ratelimits:
    - {tools: ["mcp:up.echo"], per: tenant_tool, rate: 1/h, burst: 2}
    - {tools: ["mcp:up.limited"], per: tool, rate: 1/h, burst: 2}
    - {tools: ["mcp:up.*"], per: principal, rate: 1/h, burst: 4}
`

// TestRateLimitPerKinds drives a real serve over HTTP: a per: tenant_tool
// budget is shared by two principals of one tenant and not by another
// tenant; a per: tool ceiling is shared by everyone; a per: principal
// budget spans tools; a call refused by one rule takes nothing from the
// others (all or none); and each refusal names the rule that refused.
func TestRateLimitPerKinds(t *testing.T) {
	checkPerKinds(t, startServeWith(t, false, perKindsPolicy))
}

func checkPerKinds(t *testing.T, s *server) {
	t.Helper()
	call := func(who, tool string) (int, map[string]any) {
		t.Helper()
		r := s.do(t, who, "POST", "/v1/calls", map[string]any{"toolId": tool})
		var env struct {
			Error   string
			Details map[string]any
		}
		if r.status != 200 {
			r.json(t, &env)
			if r.status == 429 && (env.Error != "rate_limited" || r.header.Get("Retry-After") == "") {
				t.Fatalf("%s %s: 429 without rate_limited or Retry-After: %v %s", who, tool, r.header, r.body)
			}
		}
		return r.status, env.Details
	}
	want := func(who, tool string, status int, rule, per string) {
		t.Helper()
		got, d := call(who, tool)
		if got != status {
			t.Fatalf("%s %s: status %d, want %d (details %v)", who, tool, got, status, d)
		}
		if rule != "" && (d["rule"] != rule || d["per"] != per) {
			t.Fatalf("%s %s: details %v, want rule %s per %s", who, tool, d, rule, per)
		}
	}
	// tenant_tool: alice and carol (tenant a) share 2 echo calls; bob (b) has his own.
	want("alice", "mcp:up.echo", 200, "", "")
	want("carol", "mcp:up.echo", 200, "", "")
	want("alice", "mcp:up.echo", 429, "ratelimits[0]", "tenant_tool")
	want("bob", "mcp:up.echo", 200, "", "")
	// tool: 2 calls of limited across every tenant.
	want("alice", "mcp:up.limited", 200, "", "")
	want("bob", "mcp:up.limited", 200, "", "")
	want("carol", "mcp:up.limited", 429, "ratelimits[1]", "tool")
	// principal: alice has used 2 of her 4 (the refused echo took nothing).
	want("alice", "mcp:up.a_notes", 200, "", "")
	want("alice", "mcp:up.a_notes", 200, "", "")
	want("alice", "mcp:up.a_notes", 429, "ratelimits[2]", "principal")
	// carol's principal budget is her own: 2 used (echo, and none for the refused limited).
	want("carol", "mcp:up.echo", 429, "ratelimits[0]", "tenant_tool")
}

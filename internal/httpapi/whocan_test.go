package httpapi_test

import (
	"net/url"
	"testing"
)

// GET /v1/admin/tools/{toolId}/principals: admins only, their tenant's
// principals only, each answer what POST /v1/policy/explain gives.
func TestWhoCanAdmin(t *testing.T) {
	s := startServe(t, false)
	type access struct {
		Principal, Tenant, Effect, RuleID, Pos, Layer string
		Shown                                         bool
	}
	var w struct {
		ToolID     string
		ArgsKnown  bool
		Principals []access
	}
	r := s.do(t, "root", "GET", "/v1/admin/tools/mcp:up.echo/principals", nil)
	r.json(t, &w)
	if r.status != 200 || w.ToolID != "mcp:up.echo" || w.ArgsKnown {
		t.Fatalf("who-can: %d %s", r.status, r.body)
	}
	var ids []string
	for _, a := range w.Principals {
		ids = append(ids, a.Principal)
		if a.Tenant != "a" {
			t.Errorf("principal %s of tenant %q listed to an admin of tenant a", a.Principal, a.Tenant)
		}
		// The deny rule reads args: unknown args make every decision conditional.
		if a.Effect != "conditional" || !a.Shown {
			t.Errorf("%s: %+v, want conditional and shown", a.Principal, a)
		}
	}
	if len(ids) != 6 {
		t.Errorf("principals %v, want the 6 of tenant a", ids)
	}
	for _, args := range []string{`{"text":"forbidden"}`, `{"text":"hello"}`} {
		r := s.do(t, "root", "GET", "/v1/admin/tools/mcp:up.echo/principals?args="+url.QueryEscape(args), nil)
		r.json(t, &w)
		if r.status != 200 || !w.ArgsKnown {
			t.Fatalf("who-can args: %d %s", r.status, r.body)
		}
		for _, a := range w.Principals {
			var x struct {
				Decision, Rule string
				Disclosed      bool
			}
			s.do(t, "root", "POST", "/v1/policy/explain", map[string]any{"toolId": "mcp:up.echo", "principal": map[string]any{"id": a.Principal, "scopes": scopesOf(a.Principal)},
				"args": rawJSON(args)}).json(t, &x)
			if a.Effect != x.Decision || a.RuleID != x.Rule || a.Shown != x.Disclosed {
				t.Errorf("%s %s: who-can %+v, explain %+v", a.Principal, args, a, x)
			}
		}
	}
	if r := s.do(t, "alice", "GET", "/v1/admin/tools/mcp:up.echo/principals", nil); r.status != 403 {
		t.Errorf("non-admin: %d %s", r.status, r.body)
	}
	if r := s.do(t, "root", "GET", "/v1/admin/tools/mcp:up.nope/principals", nil); r.status != 404 {
		t.Errorf("unknown tool: %d %s", r.status, r.body)
	}
	if r := s.do(t, "root", "GET", "/v1/admin/tools/mcp:up.echo/principals?args=%5B1%5D", nil); r.status != 400 {
		t.Errorf("bad args: %d %s", r.status, r.body)
	}
	if r := s.do(t, "", "GET", "/v1/admin/tools/mcp:up.echo/principals", nil); r.status != 401 {
		t.Errorf("no credentials: %d %s", r.status, r.body)
	}
}

func scopesOf(id string) []string {
	for _, p := range principals {
		if p.id == id {
			return p.scopes
		}
	}
	return nil
}

type rawJSON string

func (r rawJSON) MarshalJSON() ([]byte, error) { return []byte(r), nil }

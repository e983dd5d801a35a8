package identity_test

import (
	"encoding/json"
	"testing"

	"github.com/toolgate/toolgate/identity"
	"github.com/toolgate/toolgate/policy"
)

func TestHasScope(t *testing.T) {
	p := identity.Principal{ID: "alice", Scopes: []string{"fs:read", "toolgate:approve"}}
	for scope, want := range map[string]bool{"fs:read": true, "toolgate:approve": true, "fs:write": false, "": false, "fs": false} {
		if got := p.HasScope(scope); got != want {
			t.Errorf("HasScope(%q) = %v, want %v", scope, got, want)
		}
	}
}

func TestCloneIsIndependent(t *testing.T) {
	p := identity.Principal{ID: "alice", Tenant: "acme", Scopes: []string{"a"}, Attributes: map[string]string{"team": "x"}}
	c := p.Clone()
	c.Scopes[0] = "changed"
	c.Attributes["team"] = "changed"
	if p.Scopes[0] != "a" || p.Attributes["team"] != "x" {
		t.Fatalf("mutating the clone changed the original: %+v", p)
	}
	if z := (identity.Principal{ID: "bob"}).Clone(); z.Scopes != nil || z.Attributes != nil {
		t.Fatalf("nil slices and maps must stay nil: %+v", z)
	}
}

// TestPolicyAliasIsTheSameType: code written against policy.Principal
// keeps compiling and its values are identity principals (same JSON).
func TestPolicyAliasIsTheSameType(t *testing.T) {
	var p policy.Principal = identity.Principal{ID: "alice", Tenant: "acme", Scopes: []string{"fs:read"}}
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(b), `{"id":"alice","tenant":"acme","scopes":["fs:read"]}`; got != want {
		t.Fatalf("JSON = %s, want %s", got, want)
	}
}

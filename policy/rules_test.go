package policy_test

import (
	"testing"

	"github.com/toolgate/toolgate/policy"
)

func TestRulesAndDefault(t *testing.T) {
	prg, err := policy.Load("p.yaml", []byte(`default: allow
rules:
  - {id: a, effect: allow, tools: ["mcp:x.*"], scopes: [s2, s1], when: 'principal.tenant == "t"', reason: "no"}
  - {id: b, effect: require_approval, approver: user, tools: ["mcp:y.z"]}
`), policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rs := prg.Rules()
	if len(rs) != 2 || rs[0].ID != "a" || rs[0].Effect != policy.EffectAllow || rs[0].When != `principal.tenant == "t"` ||
		rs[0].Reason != "no" || len(rs[0].Scopes) != 2 || rs[0].Pos.File != "p.yaml" || rs[0].Pos.Line != 3 ||
		rs[1].ID != "b" || rs[1].Approver != policy.ApproverUser || rs[1].Pos.Line != 4 || rs[1].Tools[0] != "mcp:y.z" {
		t.Fatalf("Rules() = %+v", rs)
	}
	rs[0].Tools[0] = "changed"
	if prg.Rules()[0].Tools[0] != "mcp:x.*" {
		t.Error("changing Rules()'s answer changed the program")
	}
	if prg.Default() != policy.EffectAllow {
		t.Errorf("Default() = %v", prg.Default())
	}
	var none *policy.Program
	if none.Rules() != nil || none.Default() != policy.EffectDeny {
		t.Error("a nil Program has rules or does not deny")
	}
}

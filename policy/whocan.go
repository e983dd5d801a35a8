package policy

import (
	"context"
	"slices"

	"github.com/toolgate/toolgate/errcode"
)

// Who-can effects: Access.Effect is an Effect or EffectConditional.
const (
	// EffectConditional: with the arguments unknown, the decision depends
	// on them (a rule's condition reads args); the tool is shown and some
	// arguments may be allowed. Access.Conditions names those rules.
	EffectConditional Effect = "conditional"
)

// Access is what one principal may do with one tool (`toolgate policy
// who-can`, GET /v1/admin/tools/{toolId}/principals): the decision
// Explain gives, summarised. A plain value.
type Access struct {
	Principal string `json:"principal"`
	Tenant    string `json:"tenant,omitempty"`
	// Effect is allow, require_approval, deny or conditional (arguments
	// unknown and the decision depends on them).
	Effect Effect `json:"effect"`
	// Shown is Disclose: whether the tool is in the principal's tools/list
	// (true for "listed but not callable" denials that depend on args).
	Shown bool `json:"shown"`
	// RuleID, Pos (file:line:col), Layer and Reason name what decided; for
	// a conditional access they are empty (see Conditions).
	RuleID        string   `json:"ruleId,omitempty"`
	Pos           string   `json:"pos,omitempty"`
	Layer         string   `json:"layer,omitempty"`
	Reason        string   `json:"reason,omitempty"`
	MissingScopes []string `json:"missingScopes,omitempty"`
	// Conditions are the rules whose condition depends on the unknown
	// arguments (Explain's trace, condition "unknown").
	Conditions []RuleTrace `json:"conditions,omitempty"`
}

// WhoCan returns, for each principal, what Explain decides for tool:
// with argsKnown, exactly Explain's decision for args (and Disclose as
// Shown); without, the decision with the arguments unknown, where a
// decision that depends on them is EffectConditional when the tool is
// shown, and deny (Shown false, with the allow rule whose scopes are
// missing, or the default) when no arguments could be allowed. It is
// Explain and Disclose, the functions `serve` decides with, run once per
// principal: no second engine. Safe for concurrent use; a nil Program
// denies everyone (Layer no-policy).
func (p *Program) WhoCan(ctx context.Context, tool Tool, principals []Principal, args map[string]any, argsKnown bool) []Access {
	out := make([]Access, 0, len(principals))
	for _, pr := range principals {
		in := Input{Principal: pr, Tool: tool, Args: args, ArgsKnown: argsKnown, Call: Call{Transport: "native"}}
		x := p.Explain(ctx, &in)
		d := x.Decision
		a := Access{Principal: pr.ID, Tenant: pr.Tenant, Effect: d.Effect, Shown: x.Disclosed, RuleID: d.RuleID,
			Layer: d.Layer, Reason: d.Reason, MissingScopes: d.MissingScopes}
		for _, rt := range x.Rules {
			if rt.Decided {
				a.Pos = rt.Pos
			}
		}
		if !argsKnown && argsUnknownErr(d.Err) {
			for _, rt := range x.Rules {
				if rt.Condition == ConditionUnknown {
					a.Conditions = append(a.Conditions, rt)
				}
			}
			a.RuleID, a.Pos, a.Layer, a.Reason, a.MissingScopes = "", "", "", "", nil
			if x.Disclosed {
				a.Effect = EffectConditional
			} else {
				// Denied whatever the arguments: name why.
				a.Effect = EffectDeny
				for _, rt := range x.Rules {
					if rt.Effect == EffectAllow && !rt.ScopesOK && rt.Condition != ConditionFalse {
						a.RuleID, a.Pos, a.Layer, a.MissingScopes = rt.RuleID, rt.Pos, LayerScopes, rt.MissingScopes
						a.Reason = "denied whatever the arguments: missing scopes"
						break
					}
				}
				if a.Layer == "" {
					a.Layer, a.Reason = LayerDefault, "denied whatever the arguments: no rule can grant"
					if !holdsAll(pr.Scopes, tool.Scopes) {
						a.Layer = LayerScopes
						for _, s := range tool.Scopes {
							if !slices.Contains(pr.Scopes, s) {
								a.MissingScopes = append(a.MissingScopes, s)
							}
						}
					}
				}
			}
		}
		out = append(out, a)
	}
	return out
}

func argsUnknownErr(err error) bool {
	e := errcode.As(err)
	return e != nil && e.Details["cause"] == "args_unknown"
}

// Grant is one way a principal that cannot be enumerated (a JWT
// principal) is granted a tool: holding every scope of Scopes (the
// descriptor's auth.scopes ∪ the allow rule's) and satisfying When (a CEL
// condition over principal, args, call; "" for none), unless a Restriction
// applies. A plain value.
type Grant struct {
	RuleID string   `json:"ruleId,omitempty"` // "" for the default allow posture
	Pos    string   `json:"pos,omitempty"`
	Scopes []string `json:"scopes"`
	When   string   `json:"when,omitempty"`
}

// Restriction is a deny or require_approval rule that applies to a tool:
// where When holds (always, when ""), it denies or asks for approval
// whatever grants. A plain value.
type Restriction struct {
	RuleID string `json:"ruleId"`
	Effect Effect `json:"effect"`
	Pos    string `json:"pos,omitempty"`
	When   string `json:"when,omitempty"`
}

// Grants expresses the policy for tool over a principal's claims: the
// allow rules that match tool.ID (in evaluation order) with the scopes each
// needs, the default posture when it allows, and the deny and
// require_approval rules that restrict them. Read from the same compiled
// rule index Decide uses. Safe for concurrent use; nil Program: none.
func (p *Program) Grants(tool Tool) (grants []Grant, restrictions []Restriction) {
	if p == nil {
		return nil, nil
	}
	ti := p.lookup(tool.ID)
	for _, r := range ti.allow {
		grants = append(grants, Grant{RuleID: r.id, Pos: r.pos.String(), Scopes: nonNilStrings(union(tool.Scopes, r.scopes)), When: r.when})
	}
	if p.def == EffectAllow {
		grants = append(grants, Grant{Scopes: nonNilStrings(union(tool.Scopes, nil))})
	}
	for _, r := range ti.all {
		if r.effect == EffectDeny || r.effect == EffectRequireApproval {
			restrictions = append(restrictions, Restriction{RuleID: r.id, Effect: r.effect, Pos: r.pos.String(), When: r.when})
		}
	}
	return grants, restrictions
}

func nonNilStrings(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

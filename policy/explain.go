package policy

import (
	"context"
	"slices"
)

// Condition outcomes reported by Explain.
const (
	// ConditionTrue: the condition holds (or the rule has none).
	ConditionTrue = "true"
	// ConditionFalse: the condition does not hold.
	ConditionFalse = "false"
	// ConditionUnknown: the condition depends on args, which are unknown.
	ConditionUnknown = "unknown"
	// ConditionError: evaluating the condition failed.
	ConditionError = "error"
)

// Explanation is the per-rule trace of one decision, for
// `POST /v1/policy/explain` and `toolgate policy test` (in the spirit of
// OPA's explain). It is JSON-marshalable, a plain value, and owns all its
// slices.
type Explanation struct {
	// ToolID is the tool decided on.
	ToolID string `json:"toolId"`
	// ArgsKnown tells whether conditions saw the arguments.
	ArgsKnown bool `json:"argsKnown"`
	// Rules traces every rule whose tools match ToolID, in document order.
	Rules []RuleTrace `json:"rules"`
	// Decision is exactly what Decide returns for the same input.
	Decision Decision `json:"decision"`
	// Error is Decision.Err's message, if any.
	Error string `json:"error,omitempty"`
	// Disclosed is what Disclose returns for the same principal and tool.
	Disclosed bool `json:"disclosed"`
}

// RuleTrace is one rule's part in a decision; a plain value.
type RuleTrace struct {
	// RuleID and Effect are the rule's.
	RuleID string `json:"ruleId"`
	Effect Effect `json:"effect"`
	// Pos locates the rule in its file ("file:line:col"; "" when unknown).
	Pos string `json:"pos,omitempty"`
	// When is the rule's condition ("" for none).
	When string `json:"when,omitempty"`
	// Condition is ConditionTrue, ConditionFalse, ConditionUnknown or
	// ConditionError. Every matching rule is evaluated, even those Decide
	// skipped by short-circuit.
	Condition string `json:"condition"`
	// Error is the evaluation error when Condition is ConditionError.
	Error string `json:"error,omitempty"`
	// ScopesOK reports whether the principal holds the descriptor's and the
	// rule's scopes (what the rule needs to grant; informative for deny).
	ScopesOK bool `json:"scopesOk"`
	// MissingScopes are the required scopes the principal lacks, sorted.
	MissingScopes []string `json:"missingScopes,omitempty"`
	// Decided marks the rule named by Decision.RuleID.
	Decided bool `json:"decided"`
}

// Explain evaluates in like Decide and returns the decision with a trace of
// every rule matching in.Tool.ID: its condition outcome (true, false,
// unknown, error) and whether the principal holds its scopes. Conditions
// see args unless in.ArgsKnown is false. Never panics; safe for concurrent
// use; a nil Program or Input yields the deny Decide gives, with no rules.
func (p *Program) Explain(ctx context.Context, in *Input) (x Explanation) {
	d := p.Decide(ctx, in)
	x = Explanation{Decision: d, Rules: []RuleTrace{}}
	if d.Err != nil {
		x.Error = d.Err.Error()
	}
	if p == nil || in == nil {
		return x
	}
	x.ToolID, x.ArgsKnown = in.Tool.ID, in.ArgsKnown
	x.Disclosed = p.Disclose(ctx, in)
	if ctx == nil {
		ctx = context.Background()
	}
	defer func() {
		if r := recover(); r != nil {
			x.Rules = []RuleTrace{}
		}
	}()
	ev := p.newEval(ctx, in, !in.ArgsKnown)
	defer ev.release()
	for _, r := range ev.idx.all {
		t, err := ev.eval(r)
		req := union(in.Tool.Scopes, r.scopes)
		var missing []string
		for _, s := range req {
			if !slices.Contains(in.Principal.Scopes, s) {
				missing = append(missing, s)
			}
		}
		rt := RuleTrace{
			RuleID:        r.id,
			Effect:        r.effect,
			Pos:           r.pos.String(),
			When:          r.when,
			Condition:     t.String(),
			ScopesOK:      len(missing) == 0,
			MissingScopes: missing,
			Decided:       r.id == d.RuleID,
		}
		if err != nil {
			rt.Error = err.Error()
		}
		x.Rules = append(x.Rules, rt)
	}
	return x
}

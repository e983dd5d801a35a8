package policy

// RuleSummary describes one loaded rule as written (for listings such as
// the web console's Policy page): its id, effect, tool patterns, required
// scopes, condition text ("" for none), reason, approver (ApproverUser or
// "") and position in its file. A plain value; nothing in it is evaluated.
type RuleSummary struct {
	ID       string   `json:"id"`
	Effect   Effect   `json:"effect"`
	Tools    []string `json:"tools"`
	Scopes   []string `json:"scopes,omitempty"`
	When     string   `json:"when,omitempty"`
	Reason   string   `json:"reason,omitempty"`
	Approver string   `json:"approver,omitempty"`
	Pos      Pos      `json:"pos"`
}

// Rules returns the program's rules in their evaluation order (the order of
// the spec), as copies: changing them does not change p. A nil Program
// has none. Safe for concurrent use.
func (p *Program) Rules() []RuleSummary {
	if p == nil {
		return nil
	}
	out := make([]RuleSummary, 0, len(p.rules))
	for _, r := range p.rules {
		out = append(out, RuleSummary{ID: r.id, Effect: r.effect, Tools: append([]string(nil), r.tools...),
			Scopes: append([]string(nil), r.scopes...), When: r.when, Reason: r.reason, Approver: r.approver, Pos: r.pos})
	}
	return out
}

// Default returns the program's default effect (the posture when no rule
// matches); a nil Program denies. Safe for concurrent use.
func (p *Program) Default() Effect {
	if p == nil {
		return EffectDeny
	}
	return p.def
}

package catalog

import (
	"fmt"
	"slices"
	"strings"

	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/internal/glob"
)

// Classification is one entry of the `tools:` configuration list (DESIGN.md
// Configuration): descriptor facts applied to every tool whose canonical
// toolId matches the glob Match ('*' any run of characters, '?' one
// character, see internal/glob). A zero-valued field (empty string, nil
// Scopes) leaves the descriptor's field unchanged; a non-nil Scopes, even an
// empty one, replaces the descriptor's auth.scopes. A Classification is a
// plain value; Classify never modifies or retains it.
type Classification struct {
	Match        string
	SafetyTier   SafetyTier
	Scopes       []string
	ReplayPolicy ReplayPolicy
	Approval     Approval
	Egress       Egress
	CostHint     Hint
	LatencyHint  Hint
	Title        string
	Description  string
	// ValidateArgs, when non-nil, sets whether calls' arguments are
	// validated against the tool's inputSchema (ToolDescriptor.
	// SkipArgsValidation is its negation); nil leaves it unchanged.
	ValidateArgs *bool
	// Record, when non-nil, sets whether every call of the tool is recorded
	// (ToolDescriptor.Record); nil leaves it unchanged.
	Record *bool
}

// Validate checks one `tools:` entry on its own: Match non-empty and at most
// MaxNameLen bytes, every set enum field in its OpenWOP v1 enum (RFC 0078
// §C), and Scopes non-empty, valid UTF-8, whitespace-free and unique. It reports every
// problem at once as an *errcode.Error with code invalid_config and Details
// {"match": c.Match, "issues": []string}, or returns nil. Whether a tier
// fits the matched tools' source (exec ⇒ host-extension) is only known per
// tool and is reported by NewSnapshot. Pure; safe for concurrent use.
func (c *Classification) Validate() error {
	var issues []string
	add := func(format string, args ...any) { issues = append(issues, fmt.Sprintf(format, args...)) }
	switch {
	case c.Match == "":
		add("match: required")
	case len(c.Match) > MaxNameLen:
		add("match: longer than %d bytes", MaxNameLen)
	}
	if c.SafetyTier != "" && !c.SafetyTier.Valid() {
		add("safety_tier: %q is not one of pure, read, write, exec", c.SafetyTier)
	}
	if c.ReplayPolicy != "" && !c.ReplayPolicy.Valid() {
		add("replay_policy: %q is not one of deterministic, idempotent, non-deterministic", c.ReplayPolicy)
	}
	if c.Approval != "" && !c.Approval.Valid() {
		add("approval: %q is not one of never, conditional, always", c.Approval)
	}
	if c.Egress != "" && !c.Egress.Valid() {
		add("egress: %q is not one of none, safe-fetch, host-mediated, host-owned", c.Egress)
	}
	if c.CostHint != "" && !c.CostHint.Valid() {
		add("cost_hint: %q is not one of low, medium, high", c.CostHint)
	}
	if c.LatencyHint != "" && !c.LatencyHint.Valid() {
		add("latency_hint: %q is not one of low, medium, high", c.LatencyHint)
	}
	issues = append(issues, scopeIssues("scopes", c.Scopes)...)
	if len(issues) == 0 {
		return nil
	}
	return &errcode.Error{
		Code:    errcode.InvalidConfig,
		Message: fmt.Sprintf("invalid tools entry %q: %s", c.Match, strings.Join(issues, "; ")),
		Details: map[string]any{"match": c.Match, "issues": issues},
	}
}

// Classify applies the `tools:` entries rules to d in order: every entry
// whose Match glob matches d.ToolID sets the descriptor fields it carries,
// so a later matching entry overrides a field an earlier one set, and a
// non-nil Scopes replaces auth.scopes (copied; never merged). Fields no
// matching entry sets keep their value.
//
// Unclassified MCP tools (RFC 0204, CONTRACT.md §2.7, DESIGN.md
// Configuration): when d.Source is mcp and no matching entry sets a safety
// tier, d.SafetyTier becomes write, whatever it held before. An MCP tool's
// tier is thus only ever taken from configuration, never guessed from the
// upstream server's own annotations (readOnlyHint and the like).
//
// Classify does not validate: an entry can, for example, give an MCP tool
// tier exec, which ToolDescriptor.Validate and NewSnapshot then reject.
// It never retains or modifies rules, and it replaces d.Auth with a fresh
// value instead of writing through a shared pointer. A nil d is a no-op.
// Not safe for concurrent use on the same d; otherwise pure.
func Classify(d *ToolDescriptor, rules []Classification) {
	if d == nil {
		return
	}
	tierSet := false
	for i := range rules {
		r := &rules[i]
		if !glob.Match(r.Match, d.ToolID) {
			continue
		}
		if r.SafetyTier != "" {
			d.SafetyTier = r.SafetyTier
			tierSet = true
		}
		if r.Scopes != nil {
			setScopes(d, r.Scopes)
		}
		if r.ReplayPolicy != "" {
			d.ReplayPolicy = r.ReplayPolicy
		}
		if r.Approval != "" {
			d.Approval = r.Approval
		}
		if r.Egress != "" {
			d.Egress = r.Egress
		}
		if r.CostHint != "" {
			d.CostHint = r.CostHint
		}
		if r.LatencyHint != "" {
			d.LatencyHint = r.LatencyHint
		}
		if r.Title != "" {
			d.Title = r.Title
		}
		if r.Description != "" {
			d.Description = r.Description
		}
		if r.ValidateArgs != nil {
			d.SkipArgsValidation = !*r.ValidateArgs
		}
		if r.Record != nil {
			d.Record = *r.Record
		}
	}
	if d.Source == SourceMCP && !tierSet {
		d.SafetyTier = TierWrite
	}
}

// setScopes replaces d's auth.scopes with a copy of scopes, dropping an auth
// object that ends up empty.
func setScopes(d *ToolDescriptor, scopes []string) {
	var a Auth
	if d.Auth != nil {
		a = *d.Auth
	}
	a.Scopes = nil
	if len(scopes) > 0 {
		a.Scopes = slices.Clone(scopes)
	}
	if a.Scopes == nil && !a.CredentialRef {
		d.Auth = nil
		return
	}
	d.Auth = &a
}

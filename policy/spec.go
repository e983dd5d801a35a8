package policy

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/toolgate/toolgate/errcode"
)

// Effect is what a rule (or the default posture) decides: one of
// EffectAllow, EffectDeny or EffectRequireApproval. The strings are the
// wire form used in decisions, events and receipts.
type Effect string

// The closed set of effects (DESIGN.md vocabulary "decision").
const (
	// EffectAllow lets the call proceed.
	EffectAllow Effect = "allow"
	// EffectDeny refuses the call (and hides the tool at list time when it
	// holds whatever the arguments).
	EffectDeny Effect = "deny"
	// EffectRequireApproval pauses the call until a human approves it.
	EffectRequireApproval Effect = "require_approval"
)

// ApproverUser is the `approver: user` of a require_approval rule.
const ApproverUser = "user"

// Modes of a policy or a rule (`mode:`): enforce (the default) or observe,
// a dry run that evaluates and reports but never enforces (issue 6).
const (
	ModeEnforce = "enforce"
	ModeObserve = "observe"
)

// Valid reports whether e is one of the three effects.
func (e Effect) Valid() bool {
	return e == EffectAllow || e == EffectDeny || e == EffectRequireApproval
}

// Pos is a location in a policy source: File as given to Parse or
// ParseNode, Line and Col 1-based (Col counts characters, as
// go.yaml.in/yaml/v3 does). The zero Pos means "no location" (a Spec built
// in Go). A plain value.
type Pos struct {
	File string `json:"file,omitempty"`
	Line int    `json:"line,omitempty"`
	Col  int    `json:"col,omitempty"`
}

// String formats p as "file:line:col". An empty File is omitted
// ("line:col"); a zero Line yields File alone (or "" for the zero Pos).
func (p Pos) String() string {
	if p.Line <= 0 {
		return p.File
	}
	lc := strconv.Itoa(p.Line) + ":" + strconv.Itoa(p.Col)
	if p.File == "" {
		return lc
	}
	return p.File + ":" + lc
}

// IsValid reports whether p carries a line (Line ≥ 1).
func (p Pos) IsValid() bool { return p.Line >= 1 }

func (p Pos) less(q Pos) int {
	if c := strings.Compare(p.File, q.File); c != 0 {
		return c
	}
	if p.Line != q.Line {
		return p.Line - q.Line
	}
	return p.Col - q.Col
}

// Issue is one problem found while parsing or compiling a policy, with the
// location of the offending YAML node or CEL token (cel-go common.Error,
// Caddy's located warnings). A plain value.
type Issue struct {
	Pos     Pos    `json:"pos"`
	Message string `json:"message"`
}

// String formats the issue as "file:line:col: message".
func (i Issue) String() string {
	if s := i.Pos.String(); s != "" {
		return s + ": " + i.Message
	}
	return i.Message
}

// Issues is every problem found in a policy document (STYLE rule 26: all
// problems, located, not just the first). As an error it renders one line
// per issue, "file:line:col: message", sorted by position; errors.Is(err,
// &errcode.Error{Code: errcode.InvalidConfig}) is true for any non-empty
// Issues, and errors.As finds the *errcode.Error through Unwrap.
//
// An Issues value is a plain slice: it is safe to read concurrently once
// built and is not modified by this package after it is returned.
type Issues []Issue

// Error implements error: the issues sorted by position, one per line.
func (is Issues) Error() string {
	sorted := is.Sorted()
	lines := make([]string, len(sorted))
	for i, it := range sorted {
		lines[i] = it.String()
	}
	return strings.Join(lines, "\n")
}

// Sorted returns a copy of is sorted by position (file, line, column), then
// by message; the receiver is not modified.
func (is Issues) Sorted() Issues {
	out := slices.Clone(is)
	slices.SortStableFunc(out, func(a, b Issue) int {
		if c := a.Pos.less(b.Pos); c != 0 {
			return c
		}
		return strings.Compare(a.Message, b.Message)
	})
	return out
}

// Unwrap returns the *errcode.Error with code errcode.InvalidConfig that
// this set of issues amounts to; its Details carry "issues" (the count).
func (is Issues) Unwrap() error {
	return errcode.New(errcode.InvalidConfig,
		fmt.Sprintf("policy has %d issue(s)", len(is))).
		WithDetails(map[string]any{"issues": len(is)})
}

// Is reports whether target is an *errcode.Error with code
// errcode.InvalidConfig.
func (is Issues) Is(target error) bool {
	var e *errcode.Error
	return errors.As(target, &e) && e.Code == errcode.InvalidConfig
}

// err returns is as an error, or nil when there are no issues.
func (is Issues) err() error {
	if len(is) == 0 {
		return nil
	}
	return is.Sorted()
}

// Spec is a parsed, not yet compiled policy document (the `policy:` block of
// the configuration, DESIGN.md "Configuration"). Positions are filled in by
// Parse and ParseNode and are zero for a Spec built in Go. A Spec is a plain
// value; Compile does not retain or modify it.
type Spec struct {
	// Default is the posture when no rule matches: EffectDeny (also when
	// empty) or EffectAllow.
	Default Effect
	// Rules in document order; order matters only for tie-breaking within
	// one effect (the first matching rule is reported).
	Rules []RuleSpec
	// RateLimits in document order; the first entry whose tools match a
	// toolId applies to it.
	RateLimits []RateLimitSpec
	// Mode is ModeEnforce (also when empty) or ModeObserve: a dry run of
	// the whole policy, evaluated and reported (Decision.WouldDeny) but
	// never enforced: every call is allowed.
	Mode string
	// Pos is the location of the policy mapping.
	Pos Pos

	defaultPos Pos  // location of the default value (parser only)
	defaultBad bool // the default value failed to parse (already reported)
}

// RuleSpec is one entry of `rules:` (DESIGN.md "Configuration"). A plain
// value; Compile copies what it keeps.
type RuleSpec struct {
	// ID names the rule in decisions, receipts and explanations; required,
	// unique, 1–128 characters from [A-Za-z0-9_.:-] starting with a letter or
	// digit.
	ID string
	// Effect is what the rule decides when it matches; required.
	Effect Effect
	// Tools are toolId globs (internal/glob: '*' matches any run, including
	// '.' and ':'); at least one, none empty.
	Tools []string
	// Scopes are principal scopes required, in addition to the descriptor's
	// auth.scopes, for an allow rule to grant; an issue on a deny or
	// require_approval rule (neither grants).
	Scopes []string
	// When is an optional CEL condition (bool); empty means always.
	When string
	// Reason is the human reason reported in the decision; generated when
	// empty.
	Reason string
	// Approver says who approves a require_approval rule's calls: "" (an
	// approver principal, through the API or the CLI) or ApproverUser (the
	// calling user, asked in-band through MCP elicitation when the client
	// supports it; otherwise an approver principal).
	Approver string
	// Mode is ModeEnforce (also when empty) or ModeObserve: the rule is
	// evaluated and its would-be effect reported (Decision.WouldDeny,
	// WouldRuleID) but it does not change the decision.
	Mode string
	// Pos is the location of the rule mapping; WhenPos that of the `when`
	// scalar (the opening quote for a quoted scalar, the indicator for a
	// block scalar).
	Pos, WhenPos Pos
	// whenCols maps each rune of each line of When to its 1-based file
	// column; the first line of When is on file line whenLine. nil when
	// unknown (set by the parser only).
	whenCols [][]int
	whenLine int
	// Locations of individual values (parser only); zero means use Pos.
	idPos, effectPos, toolsPos, scopesPos Pos
	bad                                   fieldMask // fields already reported by the parser
}

// RateLimitSpec is one entry of `ratelimits:`: a token bucket per
// (principal, toolId) for the tools it matches (OpenWOP RFC 0064 §D). A
// plain value.
type RateLimitSpec struct {
	// Tools are toolId globs; at least one.
	Tools []string
	// Per is the bucket key; only "principal_tool" (also when empty).
	Per string
	// Rate is "N/s", "N/m" or "N/h" (ratelimit.ParseRate).
	Rate string
	// Burst is the bucket capacity in tokens, ≥ 1.
	Burst int
	// Pos is the location of the entry.
	Pos Pos

	// Locations of individual values (parser only); zero means use Pos.
	toolsPos, perPos, ratePos, burstPos Pos
	bad                                 fieldMask // fields already reported by the parser
}

// fieldMask marks fields of a RuleSpec or RateLimitSpec that failed to
// parse: the parser reported them, so Compile stays silent about them.
type fieldMask uint16

const (
	fieldID fieldMask = 1 << iota
	fieldEffect
	fieldTools
	fieldScopes
	fieldWhen
	fieldPer
	fieldRate
	fieldBurst
)

// whenStyle is how the `when` scalar was written in YAML.
type whenStyle uint8

const (
	whenUnknown      whenStyle = iota // built in Go, block or multi-line: report WhenPos
	whenPlain                         // plain single-line scalar
	whenSingleQuoted                  // '…' single-line
	whenDoubleQuoted                  // "…" single-line
)

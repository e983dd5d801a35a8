package policy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common"
	"cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/cost"
	"cel.dev/cel-go/common/types"

	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/internal/glob"
	"github.com/toolgate/toolgate/ratelimit"
)

// DefaultCostLimit is the CEL runtime cost limit per condition evaluation
// when Options.CostLimit is 0 (cel-go cost units: roughly one per
// operation, plus the size of strings and lists that functions traverse).
const DefaultCostLimit uint64 = 10000

// Values of a `ratelimits` entry's per: what its token buckets are keyed on.
const (
	// PerPrincipalTool (the default): one bucket per (tenant, principal,
	// toolId) (OpenWOP RFC 0064 §D).
	PerPrincipalTool = "principal_tool"
	// PerTenantTool: one bucket per (tenant, toolId), shared by every
	// principal of the tenant.
	PerTenantTool = "tenant_tool"
	// PerTool: one bucket per toolId, shared by every caller (a ceiling
	// that protects the upstream).
	PerTool = "tool"
	// PerPrincipal: one bucket per (tenant, principal), shared by every
	// tool the entry matches.
	PerPrincipal = "principal"
)

// perKinds lists the per values in the order a call's buckets are taken.
var perKinds = []string{PerPrincipalTool, PerTenantTool, PerTool, PerPrincipal}

// maxIndexedTools bounds the per-toolId rule index cache; decisions for
// further toolIds are computed without caching.
const maxIndexedTools = 1 << 16

// interruptEvery is how many comprehension iterations run between checks of
// the context (cel.InterruptCheckFrequency).
const interruptEvery = 32

var ruleIDRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$`)

// Options tunes Compile. The zero value is valid.
type Options struct {
	// Version names the compiled policy in decisions and receipts. When
	// empty it is "sha256:" + the first 12 hex digits of the SHA-256 of the
	// canonical JSON of the spec (positions excluded), so the same rules
	// always get the same version.
	Version string
	// CostLimit is the cel-go runtime cost limit of one condition
	// evaluation; 0 means DefaultCostLimit. Exceeding it is an evaluation
	// error, so the decision is deny (fail closed). It is enforced on
	// conditions with a comprehension (all, exists, exists_one, map, filter)
	// whose static worst-case cost exceeds it: only those can cost more
	// than linear in the arguments, and tracking cost on every condition
	// would double the decision time.
	CostLimit uint64
	// KnownTools, when non-empty, are the toolIds of the catalog: a rule
	// whose tools globs match none of them is an issue (a likely typo), and
	// the rule index is built for them up front.
	KnownTools []string
}

// Program is a compiled policy: immutable and safe for concurrent use by any
// number of goroutines (OPA "prepare once, evaluate many"; cel-go Program).
// A nil *Program denies every call (Layer "no-policy"). Build one with
// Compile; to change the policy, compile a new Program and swap it.
type Program struct {
	version string
	def     Effect
	rules   []*rule
	limits  []*rateLimit
	shared  int // condition texts used by more than one rule

	warnings Issues // located warnings (Warnings), sorted

	// Dry run (issue 6): would is the program with every rule enforced,
	// set when the spec has observe-mode rules or is itself in observe
	// mode (observeAll: nothing is enforced).
	would      *Program
	observeAll bool

	// index caches, per toolId (string), the rules and rate limit that
	// apply to it (*toolIndex); indexed counts its entries (at most
	// maxIndexedTools). A miss adds one entry: a catalog of 10,000 tools
	// fills it in linear time (issue 15.5; a copy-on-write map copied per
	// miss was quadratic).
	index   sync.Map
	indexed atomic.Int64
}

type rule struct {
	id       string
	approver string // ApproverUser or ""
	effect   Effect
	tools    []string
	scopes   []string // sorted, deduplicated
	when     string
	reason   string
	pos      Pos
	full     cel.Program // nil: unconditional
	partial  cel.Program // the same condition with args unknown
	useCtx   bool        // has a comprehension: evaluate with the context
	usesArgs bool        // reads args (so callers must decode them)
	listVar  bool        // reads args or call: unknown at list time, needs partial evaluation
	memo     int         // index among the shared conditions, or -1
}

type rateLimit struct {
	tools []string
	per   string // one of perKinds
	index int    // position among the spec's ratelimits entries
	rate  float64
	burst int
}

// toolIndex is what applies to one toolId.
type toolIndex struct {
	deny, approval, allow []*rule
	all                   []*rule      // declaration order, for Explain
	limits                []*rateLimit // the first matching entry of each per kind, in document order
	usesArgs              bool         // some rule's condition reads args
}

// Compile checks spec and compiles it into a Program. It reports every
// problem at once as Issues (errcode.InvalidConfig), each located at the
// offending node: a missing, malformed or duplicate rule id; a bad effect or
// default; empty tools or an empty glob; a glob matching none of
// Options.KnownTools; an empty scope; a CEL syntax or type error (mapped to
// the file column of the `when` scalar when it sits on one line); a
// condition that is not bool; a condition that can never be decided (it
// fails, or is false, whatever the input); a bad rate (ratelimit.ParseRate:
// also one outside [ratelimit.MinRate, ratelimit.MaxRate] tokens/s after
// conversion), a burst outside [1, ratelimit.MaxBurst] or an unknown
// `per`. The Issues are sorted by position; any other error is an
// *errcode.Error with code Internal. CEL conditions are type-checked
// against the variables principal, tool, args, call and now (see the
// package doc) and compiled to evaluable programs once, here (cel-go
// Env.Compile and Env.Program). Compile is safe for concurrent use; it does
// not retain spec or opts.
func Compile(spec Spec, opts Options) (*Program, error) {
	observe := spec.Mode == ModeObserve
	for _, r := range spec.Rules {
		observe = observe || r.Mode == ModeObserve
	}
	if !observe {
		return compileOne(spec, opts)
	}
	if opts.Version == "" {
		opts.Version = canonicalVersion(spec, orDefault(spec.Default))
	}
	full := spec
	full.Mode = ""
	full.Rules = make([]RuleSpec, len(spec.Rules))
	for i, r := range spec.Rules {
		r.Mode = ""
		full.Rules[i] = r
	}
	would, err := compileOne(full, opts)
	if err != nil {
		return nil, err
	}
	enforced := full
	enforced.Rules = nil
	for _, r := range spec.Rules {
		if r.Mode != ModeObserve {
			r.Mode = ""
			enforced.Rules = append(enforced.Rules, r)
		}
	}
	p, err := compileOne(enforced, opts)
	if err != nil {
		return nil, err
	}
	p.would, p.observeAll = would, spec.Mode == ModeObserve
	p.warnings = would.warnings // every rule's, observe-mode ones included
	return p, nil
}

func orDefault(e Effect) Effect {
	if e == "" {
		return EffectDeny
	}
	return e
}

// compileOne compiles spec, ignoring its modes.
func compileOne(spec Spec, opts Options) (*Program, error) {
	env, err := baseEnv()
	if err != nil { // a bug: the environment is static
		return nil, errcode.Wrap(errcode.Internal, err, "building the CEL environment")
	}
	c := &compiler{env: env, opts: opts, costLimit: opts.CostLimit}
	if c.costLimit == 0 {
		c.costLimit = DefaultCostLimit
	}
	p := &Program{def: spec.Default}
	switch {
	case spec.defaultBad:
	case spec.Default == "":
		p.def = EffectDeny
	case spec.Default == EffectDeny, spec.Default == EffectAllow:
	default:
		c.errorf(orPos(spec.defaultPos, spec.Pos), "default must be %q or %q, got %q", EffectDeny, EffectAllow, spec.Default)
	}
	seen := make(map[string]Pos, len(spec.Rules))
	for i := range spec.Rules {
		if r := c.rule(&spec.Rules[i], i, seen); r != nil {
			p.rules = append(p.rules, r)
		}
	}
	for i := range spec.RateLimits {
		if rl := c.rateLimit(&spec.RateLimits[i], i); rl != nil {
			p.limits = append(p.limits, rl)
		}
	}
	if len(c.issues) == 0 && hasParseIssues(&spec) {
		// Compile was called on a spec whose parse issues were ignored.
		c.errorf(spec.Pos, msgParseIssues)
	}
	if len(c.issues) > 0 {
		return nil, c.issues.err()
	}
	// Rules with the same condition text share its programs and, within one
	// decision, its outcome (rule.memo indexes the shared conditions).
	byText := make(map[string][]*rule)
	for _, r := range p.rules {
		r.memo = -1
		if r.full != nil {
			byText[r.when] = append(byText[r.when], r)
		}
	}
	for _, r := range p.rules {
		same := byText[r.when]
		if r.full == nil || len(same) < 2 || same[0] != r {
			continue
		}
		for _, o := range same {
			o.full, o.partial, o.memo = r.full, r.partial, p.shared
		}
		p.shared++
	}
	p.warnings = c.warnings.Sorted()
	p.version = opts.Version
	if p.version == "" {
		p.version = canonicalVersion(spec, p.def)
	}
	for _, id := range opts.KnownTools {
		p.lookup(id)
	}
	return p, nil
}

// Load parses a standalone policy document (as Parse) and compiles it (as
// Compile), reporting the issues of both steps together, sorted by
// position, as one Issues error (errcode.InvalidConfig). A problem already
// reported by the parser is not reported again by the compiler. Safe for
// concurrent use.
func Load(file string, data []byte, opts Options) (*Program, error) {
	spec, err := Parse(file, data)
	var issues Issues
	if err != nil && !errors.As(err, &issues) {
		return nil, err
	}
	prg, err := Compile(spec, opts)
	if err != nil {
		var more Issues
		if !errors.As(err, &more) {
			return nil, err
		}
		for _, is := range more {
			if is.Message != msgParseIssues {
				issues = append(issues, is)
			}
		}
	}
	if len(issues) > 0 {
		return nil, issues.err()
	}
	return prg, nil
}

const msgParseIssues = "the policy has issues reported by the parser"

func hasParseIssues(spec *Spec) bool {
	if spec.defaultBad {
		return true
	}
	for i := range spec.Rules {
		if spec.Rules[i].bad != 0 {
			return true
		}
	}
	for i := range spec.RateLimits {
		if spec.RateLimits[i].bad != 0 {
			return true
		}
	}
	return false
}

type compiler struct {
	env       *cel.Env
	opts      Options
	costLimit uint64
	issues    Issues
	warnings  Issues
}

func (c *compiler) errorf(pos Pos, format string, args ...any) {
	c.issues = append(c.issues, Issue{Pos: pos, Message: fmt.Sprintf(format, args...)})
}

func (c *compiler) warnf(pos Pos, format string, args ...any) {
	c.warnings = append(c.warnings, Issue{Pos: pos, Message: fmt.Sprintf(format, args...)})
}

// Warnings returns what Compile found suspicious but valid, located like
// Issues and sorted by position: today a rule that applies startsWith to an
// argument whose name looks like a path (path, file, dir, filename, …),
// which ".." escapes (issue 13.8; use path.isUnder). `toolgate validate`
// prints them and `serve` logs them. nil for a nil Program or none. The
// returned slice must not be modified. Safe for concurrent use.
func (p *Program) Warnings() Issues {
	if p == nil {
		return nil
	}
	return p.warnings
}

func orPos(p, fallback Pos) Pos {
	if p.IsValid() {
		return p
	}
	return fallback
}

func (c *compiler) rule(rs *RuleSpec, i int, seen map[string]Pos) *rule {
	name := fmt.Sprintf("rule %q", rs.ID)
	ok := rs.bad == 0
	switch first, dup := seen[rs.ID]; {
	case rs.bad&fieldID != 0:
		name = fmt.Sprintf("rule #%d", i+1)
	case rs.ID == "":
		name = fmt.Sprintf("rule #%d", i+1)
		c.errorf(rs.Pos, "%s: id is required", name)
		ok = false
	case !ruleIDRE.MatchString(rs.ID):
		c.errorf(orPos(rs.idPos, rs.Pos), "rule id %q: want 1-128 characters from A-Z a-z 0-9 _ . : - starting with a letter or digit", clip(rs.ID))
		ok = false
	case dup:
		c.errorf(orPos(rs.idPos, rs.Pos), "duplicate rule id %q (first at %s)", rs.ID, first.String())
		ok = false
	default:
		seen[rs.ID] = orPos(rs.idPos, rs.Pos)
	}
	switch {
	case rs.bad&fieldEffect != 0:
	case rs.Effect == "":
		c.errorf(rs.Pos, "%s: effect is required (%s, %s or %s)", name, EffectAllow, EffectDeny, EffectRequireApproval)
		ok = false
	case !rs.Effect.Valid():
		c.errorf(orPos(rs.effectPos, rs.Pos), "%s: effect must be %s, %s or %s, got %q", name, EffectAllow, EffectDeny, EffectRequireApproval, clip(string(rs.Effect)))
		ok = false
	}
	if rs.bad&fieldTools == 0 {
		if !c.globs(name, rs.Tools, orPos(rs.toolsPos, rs.Pos)) {
			ok = false
		} else if len(c.opts.KnownTools) > 0 && !matchesAny(rs.Tools, c.opts.KnownTools) {
			c.errorf(orPos(rs.toolsPos, rs.Pos), "%s: tools %s match none of the %d known tools", name, clip(strings.Join(rs.Tools, ", ")), len(c.opts.KnownTools))
			ok = false
		}
	}
	for _, s := range rs.Scopes {
		if strings.TrimSpace(s) == "" {
			c.errorf(orPos(rs.scopesPos, rs.Pos), "%s: scopes must not contain an empty scope", name)
			ok = false
			break
		}
	}
	switch {
	case len(rs.Scopes) == 0:
	case rs.Effect == EffectDeny:
		// Scopes restrict whom a rule grants to; on a deny rule they would
		// silently do nothing.
		c.errorf(orPos(rs.scopesPos, rs.Pos), "%s: scopes apply to allow rules only; a deny rule denies whatever the scopes", name)
		ok = false
	case rs.Effect == EffectRequireApproval:
		// Only allow rules grant (issue 13.7): a require_approval rule
		// restricts what an allow rule grants, so scopes on it would either
		// do nothing or exempt principals lacking them from approval.
		c.errorf(orPos(rs.scopesPos, rs.Pos), "%s: scopes apply to allow rules only; a require_approval rule only restricts what an allow rule grants, so put the scopes on that allow rule", name)
		ok = false
	}
	if rs.Approver != "" && rs.Effect != EffectRequireApproval {
		c.errorf(rs.Pos, "%s: approver applies to require_approval rules only", name)
		ok = false
	}
	r := &rule{
		id:       rs.ID,
		approver: rs.Approver,
		effect:   rs.Effect,
		tools:    slices.Clone(rs.Tools),
		scopes:   sortedSet(rs.Scopes),
		when:     rs.When,
		reason:   rs.Reason,
		pos:      rs.Pos,
	}
	if r.reason == "" {
		r.reason = generatedReason(rs.ID, rs.Effect)
	}
	if rs.When != "" && rs.bad&fieldWhen == 0 && !c.condition(name, rs, r) {
		ok = false
	}
	if !ok {
		return nil
	}
	return r
}

func (c *compiler) globs(name string, tools []string, pos Pos) bool {
	if len(tools) == 0 {
		c.errorf(pos, "%s: tools must list at least one toolId glob", name)
		return false
	}
	ok := true
	for _, t := range tools {
		if strings.TrimSpace(t) == "" {
			c.errorf(pos, "%s: tools must not contain an empty glob", name)
			ok = false
		} else if err := glob.ValidToolPattern(t); err != nil {
			// Matching is on the canonical toolId only (DESIGN.md
			// decision 3): another spelling would silently never match.
			c.errorf(pos, "%s: %v", name, err)
			ok = false
		}
	}
	return ok
}

func matchesAny(globs, ids []string) bool {
	for _, g := range globs {
		for _, id := range ids {
			if glob.Match(g, id) {
				return true
			}
		}
	}
	return false
}

func generatedReason(id string, e Effect) string {
	switch e {
	case EffectAllow:
		return fmt.Sprintf("allowed by rule %q", id)
	case EffectDeny:
		return fmt.Sprintf("denied by rule %q", id)
	default:
		return fmt.Sprintf("rule %q requires approval", id)
	}
}

// condition compiles rs.When into r.full and r.partial, reporting syntax,
// type and never-decidable issues.
func (c *compiler) condition(name string, rs *RuleSpec, r *rule) bool {
	if n := len([]rune(rs.When)); n > maxWhenLen {
		c.errorf(rs.WhenPos, "%s: when is %d characters long; the limit is %d", name, n, maxWhenLen)
		return false
	}
	checked, iss := c.env.Compile(rs.When)
	if iss != nil && iss.Err() != nil {
		for _, e := range iss.Errors() {
			c.celIssue(name, rs, e)
		}
		return false
	}
	switch t := checked.OutputType(); {
	case t.IsExactType(types.BoolType):
	case t.IsExactType(types.DynType):
		// A dyn condition (args.flag) would fail at run time for any
		// value that is not a bool: say what is meant (issue 13.9).
		c.errorf(rs.WhenPos, "%s: when must be a bool expression, got dyn; compare the value, e.g. args.flag == true", name)
		return false
	default:
		c.errorf(rs.WhenPos, "%s: when must be a bool expression, got %s", name, t.String())
		return false
	}
	warnings, pathIssues := pathChecks(checked)
	pathIssues = append(pathIssues, netChecks(checked)...)
	for _, f := range pathIssues {
		pos, suffix := exprPos(rs, f.line, f.col)
		c.errorf(pos, "%s: when: %s%s", name, f.msg, suffix)
	}
	if len(pathIssues) > 0 {
		return false
	}
	for _, f := range warnings {
		pos, suffix := exprPos(rs, f.line, f.col)
		c.warnf(pos, "%s: %s%s", name, f.msg, suffix)
	}
	opts := []cel.ProgramOption{cel.EvalOptions(cel.OptOptimize)}
	r.useCtx, r.usesArgs, r.listVar = inspect(checked)
	// Only a comprehension can make a condition's cost grow faster than its
	// input; without one, evaluation is linear in the (transport-bounded)
	// arguments and cost tracking, which wraps every node, would dominate the
	// decision time. So the runtime cost limit is enforced for conditions
	// with comprehensions whose static worst case exceeds it.
	if r.useCtx {
		if est, err := c.env.EstimateCost(checked, noEstimates{}); err != nil || est.Max > c.costLimit {
			opts = append(opts, cel.CostLimit(c.costLimit))
		}
		opts = append(opts, cel.InterruptCheckFrequency(interruptEvery))
	}
	full, err := c.env.Program(checked, opts...)
	if err != nil {
		c.errorf(rs.WhenPos, "%s: when: %v", name, err)
		return false
	}
	partial, err := c.env.Program(checked, append(opts, cel.EvalOptions(cel.OptPartialEval))...)
	if err != nil {
		c.errorf(rs.WhenPos, "%s: when: %v", name, err)
		return false
	}
	r.full, r.partial = full, partial

	// A condition whose value is known without any input is either a
	// mistake (always false: the rule never applies) or cannot ever be
	// decided (it fails for every input): both are configuration errors
	// (DESIGN.md decision 4).
	vars, err := cel.PartialVars(map[string]any{}, allUnknown...)
	if err != nil {
		c.errorf(rs.WhenPos, "%s: when: %v", name, err)
		return false
	}
	out, _, err := partial.ContextEval(context.Background(), vars)
	switch {
	case err != nil:
		c.errorf(rs.WhenPos, "%s: when can never be decided: it fails for every input: %s", name, evalMessage(err))
		return false
	case out == types.False:
		c.errorf(rs.WhenPos, "%s: when is always false, so the rule never applies", name)
		return false
	case out == types.True, types.IsUnknown(out):
	default:
		c.errorf(rs.WhenPos, "%s: when can never be decided: it evaluates to %s, not a bool", name, out.Type().TypeName())
		return false
	}
	return true
}

// celIssue locates one CEL error: on the file column of the offending token
// when the `when` scalar sits on one line, else at the scalar with the
// expression's own line:column in the message.
func (c *compiler) celIssue(name string, rs *RuleSpec, e *common.Error) {
	pos, suffix := exprPos(rs, e.Location.Line(), e.Location.Column())
	c.errorf(pos, "%s: when: %s%s", name, e.Message, suffix)
}

// exprPos maps a location in rs.When (1-based line, 0-based column) to the
// file: the column of the token when the `when` scalar sits on one line,
// else the scalar with the expression's own line:column as a message
// suffix.
func exprPos(rs *RuleSpec, line, col int) (Pos, string) {
	pos := rs.WhenPos
	var cols []int
	if line >= 1 && line <= len(rs.whenCols) {
		cols = rs.whenCols[line-1]
	}
	switch {
	case col >= 0 && col < len(cols):
		pos.Line, pos.Col = rs.whenLine+line-1, cols[col]
	case col >= 0 && len(cols) > 0 && col == len(cols):
		// Just past the end of the line (for example "unexpected EOF").
		pos.Line, pos.Col = rs.whenLine+line-1, cols[col-1]+1
	case line >= 1 && col >= 0:
		return pos, fmt.Sprintf(" (at line %d, column %d of the expression)", line, col+1)
	}
	return pos, ""
}

func (c *compiler) rateLimit(rs *RateLimitSpec, index int) *rateLimit {
	ok := rs.bad == 0
	if rs.bad&fieldTools == 0 && !c.globs("ratelimit", rs.Tools, orPos(rs.toolsPos, rs.Pos)) {
		ok = false
	}
	per := rs.Per
	if per == "" {
		per = PerPrincipalTool
	}
	if rs.bad&fieldPer == 0 && !slices.Contains(perKinds, per) {
		c.errorf(orPos(rs.perPos, rs.Pos), "ratelimit: per must be one of %s, got %q", strings.Join(perKinds, ", "), clip(rs.Per))
		ok = false
	}
	rate, err := ratelimit.ParseRate(rs.Rate)
	switch {
	case rs.bad&fieldRate != 0:
	case rs.Rate == "":
		c.errorf(rs.Pos, "ratelimit: rate is required (N/s, N/m or N/h)")
		ok = false
	case err != nil:
		c.errorf(orPos(rs.ratePos, rs.Pos), "ratelimit: %v", err)
		ok = false
	}
	switch {
	case rs.bad&fieldBurst != 0:
	case rs.Burst < 1 && !rs.burstPos.IsValid() && rs.Burst == 0:
		c.errorf(rs.Pos, "ratelimit: burst is required (at least 1)")
		ok = false
	case rs.Burst < 1:
		c.errorf(orPos(rs.burstPos, rs.Pos), "ratelimit: burst must be at least 1, got %d", rs.Burst)
		ok = false
	case rs.Burst > ratelimit.MaxBurst:
		c.errorf(orPos(rs.burstPos, rs.Pos), "ratelimit: burst must be at most %d, got %d", ratelimit.MaxBurst, rs.Burst)
		ok = false
	}
	if !ok {
		return nil
	}
	return &rateLimit{tools: slices.Clone(rs.Tools), per: per, index: index, rate: rate, burst: rs.Burst}
}

// noEstimates lets cel-go assume the worst for every input size.
type noEstimates struct{}

func (noEstimates) EstimateSize(cost.AstNode) *cost.SizeEstimate { return nil }
func (noEstimates) EstimateCallCost(string, string, *cost.AstNode, []cost.AstNode) *cost.CallEstimate {
	return nil
}

// inspect reports whether the checked condition has a comprehension,
// whether it may read `args`, and whether it may read a variable that is
// unknown at list time (`args` or `call`; any identifier of that name,
// conservatively including a comprehension variable).
func inspect(a *cel.Ast) (comprehension, args, listVar bool) {
	ast.PostOrderVisit(a.NativeRep().Expr(), ast.NewExprVisitor(func(e ast.Expr) {
		switch e.Kind() {
		case ast.ComprehensionKind:
			comprehension = true
		case ast.IdentKind:
			switch e.AsIdent() {
			case "args":
				args, listVar = true, true
			case "call":
				listVar = true
			}
		}
	}))
	return comprehension, args, listVar
}

// canonicalVersion hashes the meaning of the spec: positions and the
// formatting of the YAML do not change it.
func canonicalVersion(spec Spec, def Effect) string {
	type canonRule struct {
		ID     string   `json:"id"`
		Effect Effect   `json:"effect"`
		Tools  []string `json:"tools"`
		Scopes []string `json:"scopes"`
		When   string   `json:"when"`
		Reason string   `json:"reason"`
		Mode   string   `json:"mode,omitempty"`
		Appr   string   `json:"approver,omitempty"`
	}
	type canonLimit struct {
		Tools []string `json:"tools"`
		Per   string   `json:"per"`
		Rate  string   `json:"rate"`
		Burst int      `json:"burst"`
	}
	var doc struct {
		Default    Effect       `json:"default"`
		Rules      []canonRule  `json:"rules"`
		RateLimits []canonLimit `json:"ratelimits"`
		Mode       string       `json:"mode,omitempty"`
	}
	doc.Default = def
	if spec.Mode == ModeObserve {
		doc.Mode = ModeObserve
	}
	for _, r := range spec.Rules {
		mode := ""
		if r.Mode == ModeObserve {
			mode = ModeObserve
		}
		doc.Rules = append(doc.Rules, canonRule{r.ID, r.Effect, r.Tools, sortedSet(r.Scopes), r.When, r.Reason, mode, r.Approver})
	}
	for _, l := range spec.RateLimits {
		per := l.Per
		if per == "" {
			per = PerPrincipalTool
		}
		doc.RateLimits = append(doc.RateLimits, canonLimit{l.Tools, per, l.Rate, l.Burst})
	}
	b, err := json.Marshal(doc)
	if err != nil { // cannot happen: plain strings, slices and ints
		panic(err)
	}
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])[:12]
}

func sortedSet(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	out := slices.Clone(s)
	slices.Sort(out)
	return slices.Compact(out)
}

// evalMessage is a CEL evaluation error without cel-go's wrapping noise.
func evalMessage(err error) string {
	var e *types.Err
	if errors.As(err, &e) {
		return e.String()
	}
	return err.Error()
}

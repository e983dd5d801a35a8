package policy

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/interpreter"

	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/identity"
	"github.com/toolgate/toolgate/internal/glob"
)

// Layers: which part of the policy produced a Decision (Decision.Layer).
const (
	// LayerScopes: a required scope (descriptor auth.scopes or the matching
	// rule's scopes) is missing.
	LayerScopes = "scopes"
	// LayerRule: a rule matched and decided.
	LayerRule = "rule"
	// LayerDefault: no rule matched; the default posture decided.
	LayerDefault = "default"
	// LayerObserve: the policy is in observe mode (dry run); every call
	// is allowed and Decision.WouldDeny reports what it would have done.
	LayerObserve = "observe"
	// LayerError: evaluation failed (fail closed); Decision.Err is set.
	LayerError = "error"
	// LayerNoPolicy: no policy is loaded (nil *Program).
	LayerNoPolicy = "no-policy"
)

// Principal is who a call is attributed to: an alias of
// identity.Principal, kept for compatibility with code written against
// policy.Principal (new code names identity.Principal). In conditions it
// is the typed object `principal` with fields id, tenant (string), scopes
// (list(string)) and attributes (map(string, string)).
type Principal = identity.Principal

// Tool is the descriptor of the tool being decided (OpenWOP RFC 0078
// ToolDescriptor, adapted from the catalog by the pipeline; this package
// does not import catalog). In conditions it is the typed object `tool`
// (toolgate.Tool) with the descriptor's fields: id and toolId (the
// canonical toolId), source, title, description, egress, approval,
// replayPolicy, safetyTier, costHint, latencyHint (string; "" when absent),
// scopes (list(string), the descriptor's auth.scopes), auth
// (toolgate.ToolAuth {scopes list(string)}), inputSchema and outputSchema
// (dyn; {} when absent). Source, SafetyTier and Scopes win over Fields; the
// other string fields come from Fields. A field that is not one of these
// (tool.arguments) is a load issue, not a dead rule. Plain data, only read
// by the policy.
type Tool struct {
	// ID is the canonical toolId (DESIGN.md decision 3); globs match it.
	ID string `json:"id"`
	// Source is the OpenWOP source (node-pack, workflow, mcp, …).
	Source string `json:"source,omitempty"`
	// SafetyTier is the descriptor's safetyTier (read, write, …).
	SafetyTier string `json:"safetyTier,omitempty"`
	// Scopes are the descriptor's auth.scopes: always required.
	Scopes []string `json:"scopes,omitempty"`
	// Fields is the whole descriptor as decoded JSON (map[string]any,
	// []any, string, float64, bool, nil).
	Fields map[string]any `json:"fields,omitempty"`
}

// Call identifies one invocation (DESIGN.md vocabulary "call"). In
// conditions it is the typed object `call` with string fields transport,
// callId, runId, agentId and parentCallId. Plain data, only read by the
// policy.
type Call struct {
	Transport    string `json:"transport,omitempty"`
	CallID       string `json:"callId,omitempty"`
	RunID        string `json:"runId,omitempty"`
	AgentID      string `json:"agentId,omitempty"`
	ParentCallID string `json:"parentCallId,omitempty"`
}

// Input is everything a decision may depend on. Decide, Disclose and
// Explain only read it (and the maps and slices it refers to), so one Input
// may be shared by concurrent decisions as long as nobody mutates it.
type Input struct {
	Principal Principal `json:"principal"`
	Tool      Tool      `json:"tool"`
	// Args is the decoded JSON object of the call's arguments (the `args`
	// variable: map(string, dyn)); nil means {} when ArgsKnown.
	Args map[string]any `json:"args,omitempty"`
	// ArgsKnown is false at list time; Decide then fails closed on any rule
	// whose condition depends on args.
	ArgsKnown bool `json:"argsKnown"`
	Call      Call `json:"call"`
	// Now is the `now` variable (google.protobuf.Timestamp, UTC); the zero
	// time means the wall clock at evaluation.
	Now time.Time `json:"now,omitzero"`
}

// Decision is the outcome of Decide (DESIGN.md vocabulary "decision";
// recorded in receipts as decision{effect, ruleId, policyVersion}): what
// happens to the call, which rule and layer decided, and why. It is
// JSON-marshalable (Err is reported by Explanation.Error, not marshaled).
// A Decision owns its slices; it is a plain value.
type Decision struct {
	// Effect is allow, deny or require_approval.
	Effect Effect `json:"effect"`
	// RuleID is the deciding rule; "" for the default posture, a missing
	// descriptor scope under default allow, or no policy.
	RuleID string `json:"ruleId,omitempty"`
	// Reason is the rule's reason or a generated sentence.
	Reason string `json:"reason"`
	// PolicyVersion is Program.Version() ("" with no policy).
	PolicyVersion string `json:"policyVersion,omitempty"`
	// Layer is LayerScopes, LayerRule, LayerDefault, LayerError or
	// LayerNoPolicy.
	Layer string `json:"layer"`
	// RequiredScopes is the descriptor's scopes ∪ the granting allow
	// rule's scopes, sorted, deduplicated.
	RequiredScopes []string `json:"requiredScopes,omitempty"`
	// MissingScopes is the part of RequiredScopes the principal lacks,
	// sorted; set when Layer is LayerScopes.
	MissingScopes []string `json:"missingScopes,omitempty"`
	// Approver is the deciding require_approval rule's approver
	// (ApproverUser or "").
	Approver string `json:"approver,omitempty"`
	// WouldDeny is set in a dry run (observe-mode rules or policy): the
	// decision with every rule enforced would be deny, but this one is
	// not. WouldRuleID is the rule that would have decided.
	WouldDeny   bool   `json:"wouldDeny,omitempty"`
	WouldRuleID string `json:"wouldRuleId,omitempty"`
	// Err is non-nil iff evaluation failed (CEL runtime error, cost limit,
	// context done, args unknown at call time); Effect is then deny and
	// Layer "error". It is an *errcode.Error: Timeout or Cancelled for the
	// context, InvalidArgument for a nil Input, Internal for a recovered
	// panic, Forbidden otherwise (Details: ruleId, cause = evaluation_error,
	// cost_limit or args_unknown); it wraps the cause (errors.Is(d.Err,
	// context.DeadlineExceeded) works).
	Err error `json:"-"`
}

// tri is a condition's outcome.
type tri uint8

const (
	triFalse tri = iota
	triTrue
	triUnknown
	triError
)

func (t tri) String() string {
	return [...]string{"false", "true", "unknown", "error"}[t]
}

var errArgsUnknown = errors.New("the condition depends on args, which are not known")

// Version returns the policy version recorded in every Decision (Options.
// Version or the canonical hash); "" for a nil Program. Safe for
// concurrent use.
func (p *Program) Version() string {
	if p == nil {
		return ""
	}
	return p.version
}

// RateLimit returns the first `ratelimits` entry with per principal_tool
// whose tools match toolID: its rate in tokens per second and its burst in
// tokens, keyed per (principal, toolId). ok is false when no such entry
// matches (or p is nil). RateLimits returns every entry that applies.
// Safe for concurrent use.
func (p *Program) RateLimit(toolID string) (ratePerSec float64, burst int, ok bool) {
	for _, l := range p.RateLimits(toolID) {
		if l.Per == PerPrincipalTool {
			return l.Rate, l.Burst, true
		}
	}
	return 0, 0, false
}

// RateLimitRule is one `ratelimits` entry that applies to a call.
type RateLimitRule struct {
	// Index is the entry's position in the policy's ratelimits (from 0).
	Index int
	// Per is what the entry's buckets are keyed on: PerPrincipalTool,
	// PerTenantTool, PerTool or PerPrincipal.
	Per string
	// Rate is the refill rate in tokens per second.
	Rate float64
	// Burst is the capacity in tokens, in [1, ratelimit.MaxBurst].
	Burst int
}

// Label returns "ratelimits[Index]", the name a refusal gives the rule.
func (r RateLimitRule) Label() string { return fmt.Sprintf("ratelimits[%d]", r.Index) }

// RateLimits returns the `ratelimits` entries that apply to a call of
// toolID: for each per kind, the first entry (in document order) whose
// tools match, so a specific entry listed before a catch-all overrides it
// and entries of different kinds stack. A call must find room in the
// bucket of every returned entry. nil when none applies or p is nil. The
// caller owns the slice. Safe for concurrent use.
func (p *Program) RateLimits(toolID string) []RateLimitRule {
	if p == nil {
		return nil
	}
	var out []RateLimitRule
	for _, l := range p.lookup(toolID).limits {
		out = append(out, RateLimitRule{Index: l.index, Per: l.per, Rate: l.rate, Burst: l.burst})
	}
	return out
}

// Decide answers whether in.Principal may call in.Tool with in.Args
// (DESIGN.md decisions 1 and 2; the semantics are in the package doc). It
// never panics and is safe for concurrent use; a nil Program, a nil Input,
// an evaluation failure or a done ctx all yield deny.
func (p *Program) Decide(ctx context.Context, in *Input) (d Decision) {
	if p == nil {
		return Decision{Effect: EffectDeny, Layer: LayerNoPolicy, Reason: "no policy is loaded (fail closed)"}
	}
	defer func() {
		if r := recover(); r != nil {
			d = p.failed("", errcode.Errorf(errcode.Internal, "policy evaluation panicked: %v", r))
		}
	}()
	if in == nil {
		return p.failed("", errcode.New(errcode.InvalidArgument, "policy: nil input"))
	}
	if ctx == nil {
		ctx = context.Background()
	}
	if err := ctx.Err(); err != nil {
		return p.failed("", ctxError(ctx, err))
	}
	if p.observeAll {
		d = Decision{Effect: EffectAllow, Layer: LayerObserve, PolicyVersion: p.version,
			Reason: "the policy is in observe mode (dry run): it is evaluated but not enforced"}
	} else {
		ev := p.newEval(ctx, in, !in.ArgsKnown)
		d = ev.decide()
		ev.release()
	}
	if p.would != nil && d.Effect != EffectDeny {
		if wd := p.would.Decide(ctx, in); wd.Effect == EffectDeny {
			d.WouldDeny, d.WouldRuleID = true, wd.RuleID
		}
	}
	return d
}

// Disclose reports whether the tool may be shown to the principal at list
// time (DESIGN.md decision 4): true iff Decide could be non-deny for some
// arguments. in.Args is ignored (args is unknown, cel-go partial
// evaluation). A deny rule whose condition holds whatever the arguments
// hides the tool; a deny rule that depends on the arguments does not; a
// granting rule whose scopes the principal holds and whose condition is
// true or depends on the arguments shows it. Evaluation failures at list
// time hide the tool (fail closed). Never panics; safe for concurrent use;
// false for a nil Program or Input.
func (p *Program) Disclose(ctx context.Context, in *Input) (shown bool) {
	if p == nil || in == nil {
		return false
	}
	defer func() {
		if r := recover(); r != nil {
			shown = false
		}
	}()
	if ctx == nil {
		ctx = context.Background()
	}
	if ctx.Err() != nil {
		return false
	}
	ev := p.newEval(ctx, in, true)
	defer ev.release()
	return ev.disclose()
}

// DiscloseArgs is Disclose with the arguments known: it reports whether
// Decide could be non-deny for in.Args whatever the call (`call` stays
// unknown, as at list time). The MCP gateway answers resources/list with it,
// one decision per resource URI (args {uri}), so that a rule conditioned on
// args.uri filters the list exactly as it filters resources/read. in.Args
// nil means {}; in.ArgsKnown is ignored. Evaluation failures hide (fail
// closed). Never panics; safe for concurrent use; false for a nil Program
// or Input.
func (p *Program) DiscloseArgs(ctx context.Context, in *Input) (shown bool) {
	if p == nil || in == nil {
		return false
	}
	defer func() {
		if r := recover(); r != nil {
			shown = false
		}
	}()
	if ctx == nil {
		ctx = context.Background()
	}
	if ctx.Err() != nil {
		return false
	}
	ev := p.newEval(ctx, in, true)
	defer ev.release()
	ev.vars = callPartialActivation{&ev.act}
	return ev.disclose()
}

// evaluation is the state of one Decide, Disclose or Explain; pooled, so
// a decision allocates only what it returns.
type evaluation struct {
	p       *Program
	ctx     context.Context
	in      *Input
	idx     *toolIndex
	act     activation
	vars    interpreter.Activation
	partial bool
	descOK  int8            // 0 unknown, 1 principal holds the descriptor scopes, -1 not
	memo    []tri           // per shared condition (rule.memo): 0 not evaluated, else outcome+1
	memoErr []error         // the error of a shared condition that failed
	done    <-chan struct{} // ctx.Done(); nil when ctx can never be done
	dirty   bool            // memoErr holds an error
	// frame is one cel-go execution frame over vars, shared by the
	// evaluations of conditions without comprehensions (they neither track
	// cost nor push scopes, so the frame carries no state between them).
	frame *interpreter.ExecutionFrame
}

var evaluationPool = sync.Pool{New: func() any {
	ev := new(evaluation)
	ev.act.init()
	return ev
}}

func (p *Program) newEval(ctx context.Context, in *Input, partial bool) *evaluation {
	ev := evaluationPool.Get().(*evaluation)
	ev.p, ev.ctx, ev.in, ev.idx, ev.partial, ev.descOK = p, ctx, in, p.lookup(in.Tool.ID), partial, 0
	ev.done = ctx.Done()
	ev.act.bind(in)
	if partial {
		ev.vars = partialActivation{&ev.act}
	} else {
		ev.vars = &ev.act
	}
	if cap(ev.memo) < p.shared {
		ev.memo, ev.memoErr = make([]tri, p.shared), make([]error, p.shared)
	}
	ev.memo, ev.memoErr = ev.memo[:p.shared], ev.memoErr[:p.shared]
	clear(ev.memo)
	return ev
}

// release returns ev to the pool without references to the caller's data.
func (ev *evaluation) release() {
	if ev.dirty {
		clear(ev.memoErr)
		ev.dirty = false
	}
	if ev.frame != nil {
		ev.frame.Close()
		ev.frame = nil
	}
	ev.p, ev.ctx, ev.in, ev.idx, ev.vars, ev.done = nil, nil, nil, nil, nil, nil
	ev.act.unbind()
	evaluationPool.Put(ev)
}

// eval evaluates r's condition: triTrue for an unconditional rule. Rules
// sharing a condition text share one evaluation.
func (ev *evaluation) eval(r *rule) (tri, error) {
	if r.full == nil {
		return triTrue, nil
	}
	if r.memo < 0 {
		return ev.evalOnce(r)
	}
	if m := ev.memo[r.memo]; m != 0 {
		return m - 1, ev.memoErr[r.memo]
	}
	t, err := ev.evalOnce(r)
	ev.memo[r.memo] = t + 1
	if err != nil {
		ev.memoErr[r.memo], ev.dirty = err, true
	}
	return t, err
}

func (ev *evaluation) evalOnce(r *rule) (tri, error) {
	if ev.done != nil {
		if err := ev.ctx.Err(); err != nil {
			return triError, ctxError(ev.ctx, err)
		}
	}
	prg := r.full
	if ev.partial && r.listVar {
		prg = r.partial
	}
	var out ref.Val
	var err error
	switch {
	case r.useCtx && ev.done != nil:
		out, _, err = prg.ContextEval(ev.ctx, ev.vars)
	case r.useCtx:
		out, _, err = prg.Eval(ev.vars)
	default:
		if ev.frame == nil {
			if ev.frame, err = interpreter.NewExecutionFrame(ev.vars); err != nil {
				return triError, err
			}
		}
		out, _, err = prg.Eval(ev.frame)
	}
	if err != nil {
		if ev.done != nil {
			if ctxErr := ev.ctx.Err(); ctxErr != nil {
				return triError, ctxError(ev.ctx, ctxErr)
			}
		}
		return triError, err
	}
	switch v := out.(type) {
	case types.Bool:
		if v {
			return triTrue, nil
		}
		return triFalse, nil
	case *types.Unknown:
		return triUnknown, nil
	}
	return triError, fmt.Errorf("the condition evaluated to %s, not a bool", out.Type().TypeName())
}

// evalDecide is eval for Decide: an unknown outcome (args not known at call
// time) counts as a failure, since the rule might have decided otherwise.
func (ev *evaluation) evalDecide(r *rule) (tri, error) {
	t, err := ev.eval(r)
	if t == triUnknown {
		return triError, errArgsUnknown
	}
	return t, err
}

// holdsDescriptorScopes reports whether the principal holds every
// descriptor scope.
func (ev *evaluation) holdsDescriptorScopes() bool {
	if ev.descOK == 0 {
		ev.descOK = -1
		if holdsAll(ev.in.Principal.Scopes, ev.in.Tool.Scopes) {
			ev.descOK = 1
		}
	}
	return ev.descOK == 1
}

// canGrant reports whether the principal holds every scope r needs to grant.
func (ev *evaluation) canGrant(r *rule) bool {
	return ev.holdsDescriptorScopes() && holdsAll(ev.in.Principal.Scopes, r.scopes)
}

func (ev *evaluation) decide() Decision {
	// Deny rules first (deny-overrides); a definite match short-circuits.
	var failRule *rule
	var failErr error
	for _, r := range ev.idx.deny {
		switch t, err := ev.evalDecide(r); t {
		case triTrue:
			return ev.p.decision(r, EffectDeny, LayerRule, r.reason, ev.in.Tool.Scopes, nil)
		case triError:
			if failRule == nil {
				failRule, failErr = r, err
			}
		}
	}
	if failRule != nil {
		return ev.p.failed(failRule.id, evalError(ev.ctx, failRule, failErr))
	}
	// Only allow rules (or the default allow) grant (issue 13.7): within
	// the allow tier the first granting rule decides; a failure denies
	// unless another allow rule grants (it could not have changed the
	// outcome then).
	var grant *rule
	var scopeRule *rule
	for _, r := range ev.idx.allow {
		// A rule the principal lacks scopes for is still evaluated: if it
		// matches, the denial names it; if it fails, so does the tier.
		switch t, err := ev.evalDecide(r); t {
		case triTrue:
			if ev.canGrant(r) {
				grant = r
			} else if scopeRule == nil {
				scopeRule = r
			}
		case triError:
			if failRule == nil {
				failRule, failErr = r, err
			}
		}
		if grant != nil {
			break
		}
	}
	if grant == nil {
		switch {
		case failRule != nil:
			return ev.p.failed(failRule.id, evalError(ev.ctx, failRule, failErr))
		case scopeRule != nil:
			return ev.p.scopesDenial(scopeRule.id, ev.in.Principal.Scopes, ev.in.Tool.Scopes, scopeRule.scopes)
		case ev.p.def != EffectAllow:
			return ev.p.decision(nil, EffectDeny, LayerDefault, "no rule matched; the default posture is deny", ev.in.Tool.Scopes, nil)
		case !ev.holdsDescriptorScopes():
			return ev.p.scopesDenial("", ev.in.Principal.Scopes, ev.in.Tool.Scopes, nil)
		}
	}
	// A granted call may still need approval: require_approval rules only
	// restrict what is otherwise allowed. Every one is evaluated: a failing
	// one denies (fail closed) even when another matches, so that adding a
	// rule can never turn that denial into an approval; else the first
	// matching one decides.
	var approve *rule
	for _, r := range ev.idx.approval {
		switch t, err := ev.evalDecide(r); t {
		case triTrue:
			if approve == nil {
				approve = r
			}
		case triError:
			return ev.p.failed(r.id, evalError(ev.ctx, r, err))
		}
	}
	if approve != nil {
		var grantScopes []string
		if grant != nil {
			grantScopes = grant.scopes
		}
		return ev.p.decision(approve, EffectRequireApproval, LayerRule, approve.reason, ev.in.Tool.Scopes, grantScopes)
	}
	if grant != nil {
		return ev.p.decision(grant, EffectAllow, LayerRule, grant.reason, ev.in.Tool.Scopes, grant.scopes)
	}
	return ev.p.decision(nil, EffectAllow, LayerDefault, "no rule matched; the default posture is allow", ev.in.Tool.Scopes, nil)
}

// disclose mirrors decide with args unknown: it answers whether some
// arguments could make decide non-deny. A partial-evaluation failure is a
// failure for every argument value (cel-go lets unknowns absorb errors in
// &&, || and ?:), and an unknown outcome may go either way.
func (ev *evaluation) disclose() bool {
	// Every grant needs the descriptor scopes; without them, or without a
	// rule that could grant, nothing needs evaluating.
	if !ev.holdsDescriptorScopes() {
		return false
	}
	if ev.p.def != EffectAllow && !slices.ContainsFunc(ev.idx.allow, ev.canGrant) {
		return false
	}
	for _, r := range ev.idx.deny {
		if t, _ := ev.eval(r); t == triTrue || t == triError {
			return false
		}
	}
	// Could an allow rule (or the default) grant?
	granted, failed := false, false
	blocked := false // a rule the principal lacks scopes for surely matches
	for _, r := range ev.idx.allow {
		t, _ := ev.eval(r)
		switch {
		case t == triError:
			failed = true
		case !ev.canGrant(r):
			blocked = blocked || t == triTrue
		case t == triTrue || t == triUnknown:
			granted = true
		}
		if granted {
			break
		}
	}
	if !granted && (failed || blocked || ev.p.def != EffectAllow) {
		return false
	}
	// require_approval rules turn a grant into require_approval (not
	// deny), unless one fails for every argument value: decide then denies.
	for _, r := range ev.idx.approval {
		if t, _ := ev.eval(r); t == triError {
			return false
		}
	}
	return true
}

func (p *Program) decision(r *rule, e Effect, layer, reason string, desc, ruleScopes []string) Decision {
	d := Decision{
		Effect:         e,
		Reason:         reason,
		PolicyVersion:  p.version,
		Layer:          layer,
		RequiredScopes: union(desc, ruleScopes),
	}
	if r != nil {
		d.RuleID = r.id
		if e == EffectRequireApproval {
			d.Approver = r.approver
		}
	}
	return d
}

func (p *Program) scopesDenial(ruleID string, held, desc, ruleScopes []string) Decision {
	req := union(desc, ruleScopes)
	var missing []string
	for _, s := range req {
		if !slices.Contains(held, s) {
			missing = append(missing, s)
		}
	}
	return Decision{
		Effect:         EffectDeny,
		RuleID:         ruleID,
		Reason:         "missing scopes: " + strings.Join(missing, ", "),
		PolicyVersion:  p.version,
		Layer:          LayerScopes,
		RequiredScopes: req,
		MissingScopes:  missing,
	}
}

func (p *Program) failed(ruleID string, err *errcode.Error) Decision {
	return Decision{
		Effect:        EffectDeny,
		RuleID:        ruleID,
		Reason:        "policy evaluation failed (fail closed): " + err.Message,
		PolicyVersion: p.Version(),
		Layer:         LayerError,
		Err:           err,
	}
}

// evalError classifies an evaluation failure of rule r.
func evalError(ctx context.Context, r *rule, err error) *errcode.Error {
	if e := errcode.As(err); e != nil {
		return e
	}
	code := errcode.Forbidden
	details := map[string]any{"ruleId": r.id}
	var cancelled interpreter.EvalCancelledError
	if errors.As(err, &cancelled) && cancelled.Cause == interpreter.CostLimitExceeded {
		details["cause"] = "cost_limit"
	} else if errors.Is(err, errArgsUnknown) {
		details["cause"] = "args_unknown"
	} else {
		details["cause"] = "evaluation_error"
	}
	return errcode.Wrap(code, err, fmt.Sprintf("rule %q could not be evaluated", r.id)).WithDetails(details)
}

// ctxError is the Decision error for a done context.
func ctxError(ctx context.Context, err error) *errcode.Error {
	cause := context.Cause(ctx)
	if cause == nil {
		cause = err
	}
	code := errcode.Cancelled
	if errors.Is(err, context.DeadlineExceeded) {
		code = errcode.Timeout
	}
	return errcode.Wrap(code, cause, "policy evaluation stopped")
}

func holdsAll(held, need []string) bool {
	for _, s := range need {
		if !slices.Contains(held, s) {
			return false
		}
	}
	return true
}

// union returns a ∪ b sorted and deduplicated, as a new slice (nil when
// both are empty).
func union(a, b []string) []string {
	if len(a)+len(b) == 0 {
		return nil
	}
	out := make([]string, 0, len(a)+len(b))
	out = append(append(out, a...), b...)
	if !sortedUnique(out) {
		slices.Sort(out)
		out = slices.Compact(out)
	}
	return out
}

func sortedUnique(s []string) bool {
	for i := 1; i < len(s); i++ {
		if s[i-1] >= s[i] {
			return false
		}
	}
	return true
}

// UsesArgs reports whether any rule that applies to toolID has a condition
// that reads args. When it is false, Decide never looks at Input.Args, so a
// caller may skip decoding the arguments. Safe for concurrent use; a nil
// Program uses none.
func (p *Program) UsesArgs(toolID string) bool {
	if p == nil {
		return false
	}
	return p.lookup(toolID).usesArgs || (p.would != nil && p.would.UsesArgs(toolID))
}

// lookup returns the rules and rate limit for toolID, from the cache when
// possible (readers never lock; a miss stores one entry while the cache
// holds fewer than maxIndexedTools).
func (p *Program) lookup(toolID string) *toolIndex {
	if v, ok := p.index.Load(toolID); ok {
		return v.(*toolIndex)
	}
	ti := p.buildIndex(toolID)
	if p.indexed.Add(1) > maxIndexedTools {
		p.indexed.Add(-1)
		return ti
	}
	if v, loaded := p.index.LoadOrStore(toolID, ti); loaded {
		p.indexed.Add(-1)
		return v.(*toolIndex)
	}
	return ti
}

func (p *Program) buildIndex(toolID string) *toolIndex {
	ti := &toolIndex{}
	for _, r := range p.rules {
		if !matchesID(r.tools, toolID) {
			continue
		}
		ti.all = append(ti.all, r)
		ti.usesArgs = ti.usesArgs || r.usesArgs
		switch r.effect {
		case EffectDeny:
			ti.deny = append(ti.deny, r)
		case EffectRequireApproval:
			ti.approval = append(ti.approval, r)
		default:
			ti.allow = append(ti.allow, r)
		}
	}
	for _, l := range p.limits {
		if matchesID(l.tools, toolID) && !slices.ContainsFunc(ti.limits, func(o *rateLimit) bool { return o.per == l.per }) {
			ti.limits = append(ti.limits, l)
		}
	}
	return ti
}

func matchesID(globs []string, id string) bool {
	for _, g := range globs {
		if glob.Match(g, id) {
			return true
		}
	}
	return false
}

// Package pipeline is toolgate's one chokepoint: every tool call, whatever
// door it came through (MCP, HTTP, native Go), runs Pipeline.Call, and every
// "what may this principal see" question runs Pipeline.Disclose. It is the
// only caller of the policy decision function, so disclosure and enforcement
// cannot disagree.
//
// The order of a call (DESIGN.md):
//
//	resolve (canonical toolId) → decide (policy) → validate arguments → rate limit → approval
//	→ before-hooks → re-decide (and, for require_approval, an approval of
//	the new arguments) if a hook changed the arguments → agent.toolCalled
//	(durable) → invoke → after/error hooks → agent.toolReturned + receipt
//	(durable) → result
//
// Everything a call records (error messages and details, an isError
// result, the recorded result under audit content "full", log lines) is
// redacted with the gateway's redactor plus the values the key-name rule
// removed from the call's arguments (audit.Redactor.WithValues), and the
// identifiers a caller chose (runId, agentId, callId, parentCallId) with
// audit.Redactor.RedactID.
//
// MCP resources, prompts and completions run the same sequence on a Target
// (Call.Target: mcp:<server>/resource, mcp:<server>#<prompt>), and
// DiscloseTarget filters their lists with the same decision.
//
// Every refusal (policy, scopes, hook, rate limit, fail-closed error) still
// produces agent.toolCalled, agent.toolReturned{status: forbidden|rate_limited}
// and a receipt; the tool never runs.
package pipeline

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/trace"

	"github.com/toolgate/toolgate/approval"
	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/catalog"
	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/hook"
	"github.com/toolgate/toolgate/internal/egress"
	"github.com/toolgate/toolgate/internal/metrics"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/ratelimit"
	"github.com/toolgate/toolgate/receipt"
	"github.com/toolgate/toolgate/store"
)

// Invoker runs one tool. It returns the tool's result as JSON, or an error.
// An *errcode.Error keeps its code (for example upstream_unavailable); any
// other error is reported as tool_execution_failed. Implementations must be
// safe for concurrent use and must honour ctx cancellation.
type Invoker interface {
	Invoke(ctx context.Context, t *catalog.Tool, args json.RawMessage) (json.RawMessage, error)
}

// NativeInvoker adapts a native Go function to Invoker: fn receives the
// call's arguments (a JSON object) and returns a value that is marshalled
// as the result (a json.RawMessage as is). An error of fn is the tool's
// failure; a value that does not marshal is tool_execution_failed. Safe
// for concurrent use if fn is.
func NativeInvoker(fn func(ctx context.Context, args json.RawMessage) (any, error)) Invoker {
	return InvokerFunc(func(ctx context.Context, _ *catalog.Tool, args json.RawMessage) (json.RawMessage, error) {
		v, err := fn(ctx, args)
		if err != nil {
			return nil, err
		}
		if raw, ok := v.(json.RawMessage); ok {
			return raw, nil
		}
		out, err := json.Marshal(v)
		if err != nil {
			return nil, errcode.Wrap(errcode.ToolExecutionFailed, err, "encoding the tool's result")
		}
		return out, nil
	})
}

// Preparer is implemented by an Invoker that has set-up to do before a call
// that passed every gate is recorded: the MCP gateway opens the caller's
// upstream session there, so that tool.session.opened precedes the call's
// agent.toolCalled (RFC 0078 §D). A Prepare error is logged and otherwise
// ignored: Invoke then fails and the failure is recorded as usual.
type Preparer interface {
	Prepare(ctx context.Context, t *catalog.Tool) error
}

// InvokerFunc adapts a function to Invoker.
type InvokerFunc func(ctx context.Context, t *catalog.Tool, args json.RawMessage) (json.RawMessage, error)

// Invoke calls f.
func (f InvokerFunc) Invoke(ctx context.Context, t *catalog.Tool, args json.RawMessage) (json.RawMessage, error) {
	return f(ctx, t, args)
}

// ReceiptLog appends receipts to a hash chain and stores them; Append links
// the receipt (fills seq, prevHash, hash) and returns once it is stored
// (durably, for a durable log). It must be safe for concurrent use.
type ReceiptLog interface {
	Append(ctx context.Context, r *receipt.Receipt) error
}

// OutcomeLog is an optional interface of a ReceiptLog (store.ReceiptLog
// returns one for a backend implementing store.Outcomes): AppendOutcome
// appends events to an event log and links and stores r, atomically (both
// or neither) and in one durable write, and Covers reports whether that
// event log is log. When Options.Receipts implements it and covers
// Options.Events, the pipeline records a call's agent.toolReturned (and,
// for a refusal, its agent.toolCalled) together with the receipt through
// AppendOutcome, one commit instead of two; otherwise it calls
// Events.Append then Receipts.Append. Implementations must be safe for
// concurrent use.
type OutcomeLog interface {
	ReceiptLog
	AppendOutcome(ctx context.Context, events []*audit.Event, r *receipt.Receipt) error
	Covers(log audit.Log) bool
}

// State is one immutable configuration of the gate: catalog, compiled
// policy and the invoker of each tool. Pipeline swaps it atomically.
type State struct {
	Catalog  *catalog.Snapshot
	Policy   *policy.Program    // nil denies every call (fail closed)
	Invokers map[string]Invoker // by canonical toolId
	// Held are the toolIds pinning holds (pinning.mode enforce: a new or
	// changed definition not yet approved): never disclosed, and a call
	// to one is refused with tool_changed. nil: none.
	Held map[string]bool

	facts   map[string]policy.Tool // per toolId, built once by Prepare
	schemas map[string]argSchema   // compiled inputSchemas by toolId, once per catalog snapshot
}

// prepare precomputes per-tool policy facts and, unless prev (the state it
// replaces) has the same catalog snapshot, compiles the tools' inputSchemas;
// Pipeline.Swap calls it.
func (s *State) prepare(prev *State) {
	s.facts = make(map[string]policy.Tool, s.Catalog.Len())
	for _, t := range s.Catalog.Tools() {
		s.facts[t.Descriptor.ToolID] = PolicyTool(&t.Descriptor)
	}
	if prev != nil && prev.Catalog == s.Catalog && prev.schemas != nil {
		s.schemas = prev.schemas
	} else {
		s.schemas = compileArgSchemas(s.Catalog)
	}
}

// PolicyTool converts a descriptor into the policy's view of a tool: id,
// source, safetyTier, descriptor scopes and every descriptor field (as CEL
// sees them under `tool`).
func PolicyTool(d *catalog.ToolDescriptor) policy.Tool {
	var fields map[string]any
	raw, _ := json.Marshal(d)
	_ = json.Unmarshal(raw, &fields)
	if fields == nil {
		fields = map[string]any{}
	}
	fields["id"] = d.ToolID
	var scopes []string
	if d.Auth != nil {
		scopes = append(scopes, d.Auth.Scopes...)
	}
	return policy.Tool{ID: d.ToolID, Source: string(d.Source), SafetyTier: string(d.SafetyTier), Scopes: scopes, Fields: fields}
}

// Options configures a Pipeline. Limiter, Events and Receipts are required.
type Options struct {
	Limiter  ratelimit.Limiter
	Redactor *audit.Redactor // nil: a redactor with key-name and shape rules only
	Events   audit.Log
	Receipts ReceiptLog
	Hooks    []hook.Registration
	Now      func() time.Time // default time.Now
	Logger   *slog.Logger     // default discards
	// AuditContent is "hash" (default: events carry argsHash only) or "full"
	// (events also carry the redacted inputs).
	AuditContent string
	// ToolTimeout bounds one invocation (default DefaultToolTimeout).
	ToolTimeout time.Duration
	// Approver resolves require_approval decisions (issue 6); nil answers
	// every one with approval_required at once.
	Approver Approver
	// Metrics receives every recorded call's outcome and duration, each
	// policy decision and each upstream MCP call's duration (issue 16);
	// nil (or metrics.Nop) measures nothing, not even the clock.
	Metrics metrics.Recorder
	// Tracer, when set, traces every call (internal/tracing: an
	// execute_tool span with child spans per stage); nil: no tracing work
	// at all.
	Tracer trace.Tracer
	// Recordings stores recorded calls and answers replays (issue 18);
	// nil: no call is recorded, and a call asking to be recorded or to
	// replay is refused (forbidden, details.reason recording_unavailable).
	Recordings store.Recordings
	// RecordScope is the scope a principal needs for Call.Record and
	// Call.ReplayOf (config audit.record_scope); "" lets no one.
	RecordScope string
	// ReadersScope (config audit.readers_scope) lets a principal replay a
	// run with calls another principal of its tenant made, as it lets it
	// read their events; without it a principal replays only runs whose
	// every recorded call is its own (another's run is not found).
	ReadersScope string
}

// Default timeouts: DefaultToolTimeout bounds one invocation when
// Options.ToolTimeout is zero (a servers[].timeout or tools[].timeout of
// the gateway shortens it, never lengthens it); DefaultHookTimeout bounds
// one hook when its Registration's Timeout is zero.
const (
	DefaultToolTimeout = 60 * time.Second
	DefaultHookTimeout = 2 * time.Second
)

// Approver makes a call whose decision is require_approval wait for a
// person: Await returns the id of the approval the call consumed, or the
// refusal to answer (approval_required, approval_denied, approval_expired,
// cancelled, audit_unavailable). approval.Manager implements it. It must
// be safe for concurrent use.
type Approver interface {
	Await(ctx context.Context, b approval.Binding) (approvalID string, refusal *errcode.Error)
}

// Pipeline runs calls through the gate. It is safe for concurrent use.
type Pipeline struct {
	opts      Options
	outcomes  OutcomeLog // nil: events and receipt are appended separately
	state     atomic.Pointer[State]
	wouldDeny atomic.Int64
	m         metrics.Recorder // nil: no metrics
	replays   replays          // the replaying runs' sessions
}

// WouldDenied is the number of calls a policy dry run would have denied
// (observe-mode rules or policy) but let run: the metric
// toolgate_policy_would_deny_total.
func (p *Pipeline) WouldDenied() int64 { return p.wouldDeny.Load() }

// New returns a Pipeline with an empty catalog and no policy (deny all).
func New(opts Options) (*Pipeline, error) {
	if opts.Limiter == nil || opts.Events == nil || opts.Receipts == nil {
		return nil, errors.New("pipeline: Limiter, Events and Receipts are required")
	}
	if opts.Redactor == nil {
		opts.Redactor = audit.NewRedactor()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.ToolTimeout <= 0 {
		opts.ToolTimeout = DefaultToolTimeout
	}
	for i, h := range opts.Hooks {
		if h.Hook == nil || h.Name == "" {
			return nil, fmt.Errorf("pipeline: hook %d needs a Name and a Hook", i)
		}
		if h.Mode != hook.Observe && h.Mode != hook.Enforce {
			return nil, fmt.Errorf("pipeline: hook %q: mode %q is not observe or enforce", h.Name, h.Mode)
		}
		if h.Mutating && h.Mode != hook.Enforce {
			return nil, fmt.Errorf("pipeline: hook %q: only an enforce hook may be mutating", h.Name)
		}
	}
	p := &Pipeline{opts: opts}
	if !metrics.IsNop(opts.Metrics) {
		p.m = opts.Metrics
	}
	if o, ok := opts.Receipts.(OutcomeLog); ok && o.Covers(opts.Events) {
		p.outcomes = o
	}
	empty, err := catalog.NewSnapshot(nil, catalog.Options{})
	if err != nil {
		return nil, err
	}
	p.Swap(&State{Catalog: empty})
	return p, nil
}

// Swap installs s atomically; calls already running finish on the old state.
// The inputSchemas of s's catalog are compiled here, once per catalog
// snapshot (a state with the installed state's snapshot reuses them).
func (p *Pipeline) Swap(s *State) {
	s.prepare(p.state.Load())
	p.state.Store(s)
}

// State returns the installed state (immutable; do not modify).
func (p *Pipeline) State() *State { return p.state.Load() }

// Redactor returns the redactor used for argsHash, events and messages.
func (p *Pipeline) Redactor() *audit.Redactor { return p.opts.Redactor }

// Call is one tool call request.
type Call struct {
	Tool         string          // any accepted spelling of the tool (see catalog.Snapshot.Resolve)
	Args         json.RawMessage // a JSON object; empty means {}
	Principal    policy.Principal
	Transport    catalog.Transport // mcp, http or native
	CallID       string            // generated when empty; 1–128 bytes
	RunID        string            // generated ("run_…") when empty; 1–128 bytes
	AgentID      string            // defaults to core.system
	ParentCallID string
	// Target, when set, is what the call uses instead of a catalog tool:
	// an MCP surface gated like a tool (DESIGN.md Surfaces: a server's
	// resources, one of its prompts). Tool is then ignored; the call is
	// decided, rate limited, hooked, recorded and invoked exactly like a
	// tool call, on Target.Tool's id with Target.Invoker.
	Target *Target
	// Record asks for the call to be recorded: its redacted arguments and
	// result stored in Options.Recordings (MCP _meta toolgate/record,
	// /v1/calls record). It needs Options.RecordScope; without it the call
	// is refused (forbidden, details.reason record_scope) and the refusal
	// recorded. A tool classified record: true is recorded regardless.
	Record bool
	// ReplayOf, when set, makes the call part of a replay of the recorded
	// run ReplayOf (of the principal's tenant; another tenant's is not
	// found): it is matched to the recorded call at the same place in the
	// call graph and decided as usual; a non-deterministic or idempotent
	// tool is answered from the recording (with the recorded durationMs)
	// without being invoked, a deterministic one runs and its result hash
	// is compared. Any mismatch answers status error, code
	// replay_divergence. Needs Options.RecordScope, like Record.
	ReplayOf string
}

// Target is a gated MCP surface other than a tool: the resources of an
// upstream server (catalog.MCPResourceID) or one of its prompts
// (catalog.MCPPromptID), used by resources/read, resources/subscribe,
// prompts/get and completion/complete. Tool carries its id and classified
// descriptor (the policy sees it as `tool`, its auth.scopes are required as
// a tool's are); it is never in the catalog, so GET /v1/tools and POST
// /v1/calls never reach it. Invoker runs the one request (it may also be a
// Preparer). A Target is only read by the pipeline.
type Target struct {
	Tool    *catalog.Tool
	Invoker Invoker
}

// DiscloseTarget reports whether t may be shown to principal, by the same
// decision as Disclose: with args nil, whether some use of t could be
// allowed (args unknown: prompts/list, resources/templates/list); with args
// set, whether a use with exactly these arguments could be (call unknown:
// resources/list, one decision per URI with args {uri}). False with no
// policy. Safe for concurrent use.
func (p *Pipeline) DiscloseTarget(ctx context.Context, principal policy.Principal, t *catalog.Tool, args map[string]any) bool {
	st := p.state.Load()
	if st.Policy == nil || t == nil {
		return false
	}
	in := policy.Input{Principal: principal, Tool: PolicyTool(&t.Descriptor), Now: p.opts.Now()}
	if args == nil {
		return st.Policy.Disclose(ctx, &in)
	}
	in.Args = args
	return st.Policy.DiscloseArgs(ctx, &in)
}

// Result is the outcome of a call. Status is ok, error, forbidden or
// rate_limited; Err is set iff Status is not ok. Hidden is true when the tool
// is not disclosed to the principal (or does not exist): transports must
// answer exactly as for an unknown tool (DESIGN.md decision 5).
type Result struct {
	CallID, RunID, ReceiptID string
	ToolID                   string
	Status                   audit.Status
	Output                   json.RawMessage
	Err                      *errcode.Error
	Ran                      bool
	DurationMs               int64
	Decision                 policy.Decision
	Hidden                   bool
	RequestedArgsHash        string
	ExecutedArgsHash         string
	MutationSource           string
	RetryAfter               time.Duration
	ApprovalID               string // the approval the call consumed or, when refused for one, waits for; "" if none
}

// Disclose returns the tools principal may see: every tool whose name-level
// decision could be non-deny (policy.Program.Disclose), sorted by toolId.
func (p *Pipeline) Disclose(ctx context.Context, principal policy.Principal) []*catalog.Tool {
	st := p.state.Load()
	var out []*catalog.Tool
	now := p.opts.Now()
	for _, t := range st.Catalog.Tools() {
		if st.Held[t.Descriptor.ToolID] {
			continue
		}
		in := policy.Input{Principal: principal, Tool: st.facts[t.Descriptor.ToolID], Now: now}
		if st.Policy != nil && st.Policy.Disclose(ctx, &in) {
			out = append(out, t)
		}
	}
	return out
}

// VisibleFunc is Visible bound to one snapshot of the catalog and policy
// and one instant: vis(toolID) reports whether toolID is disclosed to
// principal, each answer costing one policy Disclose of that tool (a
// paginated list checks only the tools of the page it returns, not the
// whole catalog). vis is safe for concurrent use; it answers false for a
// toolId not in the snapshot's catalog.
func (p *Pipeline) VisibleFunc(ctx context.Context, principal policy.Principal) (vis func(toolID string) bool) {
	st := p.state.Load()
	now := p.opts.Now()
	return func(toolID string) bool {
		facts, ok := st.facts[toolID]
		if !ok || st.Policy == nil || st.Held[toolID] {
			return false
		}
		in := policy.Input{Principal: principal, Tool: facts, Now: now}
		return st.Policy.Disclose(ctx, &in)
	}
}

// Visible reports whether toolID is disclosed to principal.
func (p *Pipeline) Visible(ctx context.Context, principal policy.Principal, toolID string) bool {
	st := p.state.Load()
	facts, ok := st.facts[toolID]
	if !ok || st.Policy == nil || st.Held[toolID] {
		return false
	}
	in := policy.Input{Principal: principal, Tool: facts, Now: p.opts.Now()}
	return st.Policy.Disclose(ctx, &in)
}

// ExplainTarget is Explain for a target that is not in the catalog: a
// resource or prompt of the MCP surfaces (see DiscloseTarget), decided on
// its classified descriptor. Errors: invalid_argument for args that are
// not a JSON object.
func (p *Pipeline) ExplainTarget(ctx context.Context, principal policy.Principal, t *catalog.Tool, args json.RawMessage) (policy.Explanation, error) {
	st := p.state.Load()
	m, err := decodeArgs(args)
	if err != nil {
		return policy.Explanation{}, err
	}
	in := policy.Input{Principal: principal, Tool: PolicyTool(&t.Descriptor), Args: m, ArgsKnown: true, Now: p.opts.Now(), Call: policy.Call{Transport: "mcp"}}
	if st.Policy == nil {
		return policy.Explanation{Decision: noPolicy()}, nil
	}
	return st.Policy.Explain(ctx, &in), nil
}

// Explain returns the policy's explanation of (principal, tool, args).
func (p *Pipeline) Explain(ctx context.Context, principal policy.Principal, toolName string, args json.RawMessage) (policy.Explanation, *catalog.Tool, error) {
	st := p.state.Load()
	t, err := st.Catalog.Resolve(toolName)
	if err != nil {
		return policy.Explanation{}, nil, err
	}
	m, err := decodeArgs(args)
	if err != nil {
		return policy.Explanation{}, nil, err
	}
	in := policy.Input{Principal: principal, Tool: st.facts[t.Descriptor.ToolID], Args: m, ArgsKnown: true, Now: p.opts.Now(), Call: policy.Call{Transport: "native"}}
	if st.Policy == nil {
		return policy.Explanation{Decision: noPolicy()}, t, nil
	}
	return st.Policy.Explain(ctx, &in), t, nil
}

func noPolicy() policy.Decision {
	return policy.Decision{Effect: policy.EffectDeny, Layer: "no-policy", Reason: "no policy is loaded: every call is denied (fail closed)"}
}

// newID returns prefix (at most 8 bytes) followed by 32 lowercase hex
// digits of randomness.
// newID returns prefix + 32 hex digits: 48 bits of Unix milliseconds then
// 80 random bits, so ids (call, run, receipt) are roughly time-ordered for
// the stores' unique indexes (see audit.NewEventID).
func newID(prefix string) string {
	var b [16]byte
	putUint64(b[:8], uint64(time.Now().UnixMilli())<<16|rand.Uint64()&0xffff)
	putUint64(b[8:], rand.Uint64())
	var out [8 + 32]byte
	n := copy(out[:8], prefix)
	hex.Encode(out[n:], b[:])
	return string(out[:n+32])
}

func putUint64(b []byte, v uint64) {
	for i := 0; i < 8; i++ {
		b[i] = byte(v >> (56 - 8*i))
	}
}

// decodeArgs parses the arguments, which must be a JSON object (or empty).
func decodeArgs(args json.RawMessage) (map[string]any, error) {
	if len(args) == 0 {
		return map[string]any{}, nil
	}
	var m map[string]any
	if err := json.Unmarshal(args, &m); err != nil {
		return nil, errcode.Errorf(errcode.InvalidArgument, "arguments must be a JSON object: %v", err)
	}
	if m == nil {
		return nil, errcode.New(errcode.InvalidArgument, "arguments must be a JSON object, not null")
	}
	return m, nil
}

// isObject reports whether valid JSON text is an object.
func isObject(data []byte) bool {
	for _, b := range data {
		switch b {
		case ' ', '\t', '\n', '\r':
			continue
		}
		return b == '{'
	}
	return false
}

// frame is the memory a call needs beyond its stack, in one allocation: the
// Result handed back to the caller and the batch the stages pass to
// Events.Append (cleared after each Append: the Log keeps no reference, and
// the Result must not keep the events alive).
type frame struct {
	res    Result
	events [2]*audit.Event
}

// appendEvents appends the events of f.events[:n] to the audit log.
func (p *Pipeline) appendEvents(ctx context.Context, f *frame, n int) error {
	err := p.opts.Events.Append(ctx, f.events[:n]...)
	f.events = [2]*audit.Event{}
	return err
}

// inputPool recycles policy inputs: Decide and Disclose do not retain theirs.
var inputPool = sync.Pool{New: func() any { return new(policy.Input) }}

// callState carries one call through the stages. It lives on Call's stack:
// the Call is held by value so that it does not escape with the values the
// stages copy out of it.
type callState struct {
	f        *frame
	c        Call
	st       *State
	tool     *catalog.Tool
	res      *Result
	args     json.RawMessage
	argsMap  map[string]any
	started  time.Time
	called   *audit.Event
	hookCall hook.Call
	rec      context.Context // for audit writes: the call's context without cancellation
	approved string          // the approval this call consumed, if any
	target   *Target         // c.Target
	tfacts   policy.Tool     // the policy facts of target
	// approvedArgs are the arguments the approval was bound to.
	approvedArgs json.RawMessage
	// red redacts the call's records: the gateway's redactor plus the
	// values the arguments' redaction removed (audit.Redactor.WithValues).
	red *audit.Redactor
	// record: the call's content is stored after its outcome (Call.Record
	// or a tool classified record: true).
	record bool
	// replay is the recorded counterpart of a replayed call (Call.ReplayOf).
	replay *replayMatch
}

// fromRecording reports whether the call is answered from its recording
// instead of invoking the tool.
func (cs *callState) fromRecording() bool {
	return cs.replay != nil && answersFromRecording(&cs.tool.Descriptor)
}

// sameJSON reports whether a and b are the same JSON text once
// insignificant whitespace is removed (what an approval's argument binding
// compares).
func sameJSON(a, b []byte) bool {
	var ca, cb bytes.Buffer
	if json.Compact(&ca, a) != nil || json.Compact(&cb, b) != nil {
		return false
	}
	return bytes.Equal(ca.Bytes(), cb.Bytes())
}

// facts is the policy's view of the call's tool (or target).
func (cs *callState) facts() policy.Tool {
	if cs.target != nil {
		return cs.tfacts
	}
	return cs.st.facts[cs.res.ToolID]
}

// invoker is the call's tool's (or target's) invoker; nil if none.
func (cs *callState) invoker() Invoker {
	if cs.target != nil {
		return cs.target.Invoker
	}
	return cs.st.Invokers[cs.res.ToolID]
}

// maxIDLen bounds caller-supplied ids (OpenWOP run-event.schema.json: 1–128).
const maxIDLen = 128

// validateIDs checks caller-supplied identifiers before anything is
// recorded, so that a bad id is an invalid_argument answer rather than a
// half-written record.
func validateIDs(c *Call) error {
	check := func(name, v string, min, max int) error {
		if v == "" {
			return nil
		}
		if len(v) < min || len(v) > max || !utf8.ValidString(v) {
			return errcode.Errorf(errcode.InvalidArgument, "%s must be %d–%d bytes of valid UTF-8", name, min, max)
		}
		for _, r := range v {
			if r < 0x20 || r == 0x7f {
				return errcode.Errorf(errcode.InvalidArgument, "%s contains a control character", name)
			}
		}
		return nil
	}
	for _, f := range []struct {
		name, v  string
		min, max int
	}{
		{"callId", c.CallID, 1, maxIDLen}, {"runId", c.RunID, 1, maxIDLen}, {"parentCallId", c.ParentCallID, 1, maxIDLen},
		{"replayOf", c.ReplayOf, 1, maxIDLen},
		{"agentId", c.AgentID, 3, 256}, {"principal", c.Principal.ID, 1, 256}, {"tenant", c.Principal.Tenant, 1, 256},
	} {
		if err := check(f.name, f.v, f.min, f.max); err != nil {
			return err
		}
	}
	if c.ParentCallID != "" && c.ParentCallID == c.CallID {
		return errcode.New(errcode.InvalidArgument, "parentCallId must differ from callId")
	}
	switch c.Transport {
	case "":
		c.Transport = catalog.TransportNative
	case catalog.TransportMCP, catalog.TransportHTTP, catalog.TransportNative:
	default:
		return errcode.Errorf(errcode.InvalidArgument, "transport %q is not mcp, http or native", c.Transport)
	}
	return nil
}

// Call runs c through the gate and returns its result. It never panics
// because of a tool, hook or policy; every outcome is recorded. The returned
// error is non-nil only when the request itself is unusable before a tool is
// identified (unknown or ambiguous tool, malformed arguments,
// unauthenticated principal): those calls are not recorded as tool calls.
//
// With Options.Tracer set, a call whose tool is identified is one
// execute_tool span, a child of the span context ctx carries (the
// transports put an incoming traceparent there).
func (p *Pipeline) Call(ctx context.Context, call Call) (*Result, error) {
	if p.m == nil {
		return p.call(ctx, call)
	}
	start := time.Now()
	res, err := p.call(ctx, call)
	if err == nil && res != nil && res.Status != "" {
		p.m.ToolCall(res.ToolID, string(call.Transport), string(res.Status), time.Since(start))
	}
	return res, err
}

// call is Call without the metrics.
func (p *Pipeline) call(ctx context.Context, call Call) (_ *Result, retErr error) {
	st := p.state.Load()
	if call.Principal.ID == "" {
		return nil, errcode.New(errcode.Unauthenticated, "the call has no principal")
	}
	if err := ctx.Err(); err != nil {
		return nil, errcode.Wrap(errcode.Cancelled, err, "the call was cancelled before it started")
	}
	// Identifiers the caller chose are written to every record: scrub
	// them of credentials first (the limits apply to what is written).
	for _, id := range []*string{&call.CallID, &call.RunID, &call.AgentID, &call.ParentCallID} {
		*id = p.opts.Redactor.RedactID(*id)
	}
	if err := validateIDs(&call); err != nil {
		return nil, err
	}
	// Once the call is under way its record must be written even if the
	// caller goes away: audit writes use a context without cancellation.
	rec := context.WithoutCancel(ctx)
	f := new(frame)
	c := &call
	if c.CallID == "" {
		c.CallID = newID("call_")
	}
	if c.RunID == "" {
		c.RunID = newID("run_")
	}
	if c.AgentID == "" {
		c.AgentID = audit.AgentSystem
	}
	res := &f.res
	res.CallID, res.RunID = c.CallID, c.RunID
	var tool *catalog.Tool
	var err error
	if c.Target != nil {
		tool = c.Target.Tool
		if tool == nil {
			return res, errcode.New(errcode.InvalidArgument, "the call's target has no tool")
		}
	} else if tool, err = st.Catalog.Resolve(c.Tool); err != nil {
		res.Hidden = true
		return res, err
	}
	res.ToolID = tool.Descriptor.ToolID
	args := c.Args
	if len(args) == 0 {
		args = json.RawMessage("{}")
	}
	// The argsHash parse is strict (RFC 8259, I-JSON: no duplicate keys);
	// the arguments must also be an object (MCP tools/call
	// params.arguments). When a rule reads args, the same parse decodes
	// them (unredacted) for the policy.
	// The values the key-name rule removed from the arguments are
	// redacted from everything this call records (a tool may echo them).
	usesArgs := st.Policy.UsesArgs(res.ToolID)
	h, argsMap, removed, err := p.opts.Redactor.ArgsHashRemoved(args, usesArgs)
	if err != nil {
		return res, errcode.Errorf(errcode.InvalidArgument, "arguments must be a JSON object: %s", errcode.As(err).Message)
	}
	if (usesArgs && argsMap == nil) || (!usesArgs && !isObject(args)) {
		return res, errcode.New(errcode.InvalidArgument, "arguments must be a JSON object")
	}
	res.RequestedArgsHash, res.ExecutedArgsHash = h, h
	red := p.opts.Redactor.WithValues(audit.CallSecretID, removed)
	if red != p.opts.Redactor {
		// The caller's identifiers may repeat a value the arguments'
		// redaction removed: scrub them of it too (they are recorded and
		// answered).
		for _, id := range []*string{&c.CallID, &c.RunID, &c.AgentID, &c.ParentCallID} {
			*id = red.RedactID(*id)
		}
		if err := validateIDs(c); err != nil {
			return res, err
		}
		res.CallID, res.RunID = c.CallID, c.RunID
	}
	cs := &callState{f: f, c: call, st: st, tool: tool, res: res, args: args, argsMap: argsMap, started: p.opts.Now(), target: call.Target,
		red: red}
	if cs.target != nil {
		cs.tfacts = PolicyTool(&tool.Descriptor)
	}
	cs.hookCall = hook.Call{
		CallID: c.CallID, RunID: c.RunID, AgentID: c.AgentID, ParentCallID: c.ParentCallID,
		ToolID: res.ToolID, Transport: string(c.Transport), Principal: c.Principal.ID,
		Tenant: c.Principal.Tenant, Args: args, ArgsHash: h,
		RedactArgs: func(b []byte) ([]byte, error) { return cs.red.RedactJSON(b) },
	}

	cs.rec = rec
	if p.opts.Tracer != nil {
		var span trace.Span
		ctx, span = p.startCallSpan(ctx, cs)
		defer func() { endCallSpan(span, res, retErr) }()
		// The audit writes' context carries the span too, so that the
		// log lines written with it carry the call's trace ids.
		cs.rec = trace.ContextWithSpan(cs.rec, span)
	}
	// decide
	res.Decision = p.decide(ctx, cs)
	// A held definition (pinning enforce) is refused (unless denied: then as denied) before
	// its (new) schema is applied or anything else runs.
	if st.Held[res.ToolID] && cs.target == nil && res.Decision.Effect != policy.EffectDeny {
		return p.refuse(rec, cs, audit.StatusForbidden, errcode.Errorf(errcode.ToolChanged,
			"tool %s is held: its definition is new or changed since it was approved (an operator must approve it: toolgate tools approve)", res.ToolID).
			WithDetails(map[string]any{"toolId": res.ToolID, "digest": tool.Digest}))
	}
	// Asking to record or to replay needs audit.record_scope (refused
	// after the decision, so the refusal's record carries it).
	if c.Record || c.ReplayOf != "" {
		if e := p.recordGate(c); e != nil {
			return p.refuse(rec, cs, audit.StatusForbidden, e)
		}
	}
	cs.record = p.opts.Recordings != nil && (c.Record || tool.Descriptor.Record)
	// A replayed call is decided first, then matched to its recorded
	// counterpart: a policy change since the recording is a divergence,
	// never a bypass.
	if c.ReplayOf != "" {
		e := p.matchReplay(ctx, cs)
		if e == nil {
			e = checkReplayDecision(cs)
		}
		if e != nil {
			if e.Code != errcode.ReplayDivergence {
				return p.refuse(rec, cs, audit.StatusForbidden, e)
			}
			return p.refuse(rec, cs, audit.StatusError, e)
		}
	}
	// The arguments must match the tool's inputSchema before anything the
	// decision sets off (an approval request, a rate-limit take) and before
	// dispatch. A denied call is refused as such: its schema is not shown.
	if res.Decision.Effect != policy.EffectDeny {
		if e := p.validateArgs(st, res.ToolID, args); e != nil {
			return p.refuse(rec, cs, audit.StatusError, e)
		}
	}
	if res.Decision.Effect == policy.EffectDeny {
		return p.refuse(rec, cs, audit.StatusForbidden, p.refusal(ctx, cs))
	}
	// rate limit, before an approval is requested (DESIGN.md: decide →
	// rate limit → approval), so a principal past its limit cannot queue
	// approvals for people to wade through. Every applicable ratelimits
	// entry's bucket, all or none.
	if rules := st.Policy.RateLimits(res.ToolID); len(rules) > 0 {
		buckets := make([]ratelimit.Bucket, len(rules))
		for i, r := range rules {
			buckets[i] = ratelimit.Bucket{Key: limitKey(r, c.Principal, res.ToolID),
				Limit: ratelimit.Limit{Rate: r.Rate, Burst: r.Burst}, Rule: r.Label(), Per: r.Per}
		}
		rl, _, err := ratelimit.TakeAll(ctx, p.opts.Limiter, buckets)
		if err != nil {
			// The limiter's error (a Redis address) is for the log; the
			// caller learns that the gate could not decide.
			p.opts.Logger.WarnContext(ctx, "rate limiter unavailable; call refused (fail closed)", "callId", res.CallID, "toolId", res.ToolID,
				"err", cs.red.RedactString(err.Error()))
			if errors.Is(err, ratelimit.ErrUnavailable) {
				return p.refuse(rec, cs, audit.StatusForbidden, errcode.New(errcode.RateLimitUnavailable, "rate limiter unavailable (fail closed): try again later"))
			}
			return p.refuse(rec, cs, audit.StatusForbidden, errcode.New(errcode.Forbidden, "rate limiter unavailable (fail closed)"))
		}
		if !rl.Allowed {
			res.RetryAfter = rl.RetryAfter
			e := errcode.As(rl.Err()).WithDetails(map[string]any{"toolName": res.ToolID})
			return p.refuse(rec, cs, audit.StatusRateLimited, e)
		}
	}
	if e := p.awaitApproval(ctx, cs); e != nil {
		return p.refuse(rec, cs, audit.StatusForbidden, e)
	}
	if e := p.refusal(ctx, cs); e != nil {
		return p.refuse(rec, cs, audit.StatusForbidden, e)
	}
	// before-hooks
	if e := p.beforeHooks(ctx, cs); e != nil {
		return p.refuse(rec, cs, audit.StatusForbidden, e)
	}
	if pr, ok := cs.invoker().(Preparer); ok && !cs.fromRecording() {
		if err := pr.Prepare(ctx, tool); err != nil {
			p.opts.Logger.DebugContext(ctx, "invoker prepare failed", "toolId", res.ToolID, "err", cs.red.RedactString(err.Error()))
		}
	}
	// agent.toolCalled is durable before the tool runs.
	called, err := p.calledEvent(cs)
	if err != nil {
		return p.internal(res, err)
	}
	f.events = [2]*audit.Event{called}
	if err := p.appendEvents(rec, f, 1); err != nil {
		p.opts.Logger.ErrorContext(ctx, "audit append failed; call refused", "callId", c.CallID, "err", cs.red.RedactString(err.Error()))
		return p.unrecorded(cs, err)
	}
	cs.called = called
	return p.invoke(ctx, cs)
}

// awaitApproval makes a call whose decision is require_approval wait for an
// approval bound to its current arguments (cs.args, hash
// cs.res.ExecutedArgsHash), when there is an Approver: on success the call
// has consumed that approval (cs.approved, res.ApprovalID) and its
// decision has run again on the policy in force now (a policy change while
// it waited refuses it). It returns the refusal to record, or nil (also for
// any other decision, left to refusal).
func (p *Pipeline) awaitApproval(ctx context.Context, cs *callState) *errcode.Error {
	res, c := cs.res, &cs.c
	if res.Decision.Effect != policy.EffectRequireApproval || p.opts.Approver == nil {
		return nil
	}
	b := approval.Binding{
		Tenant: c.Principal.Tenant, Principal: c.Principal.ID, ToolID: res.ToolID, ArgsHash: res.ExecutedArgsHash,
		RunID: c.RunID, CallID: c.CallID, RuleID: res.Decision.RuleID, Reason: res.Decision.Reason,
		Approver: res.Decision.Approver, Args: cs.args,
	}
	if red, err := cs.red.RedactJSON(cs.args); err == nil {
		b.ArgsSummary = summarize(red, approval.MaxArgsSummary)
	}
	actx, span := p.childSpan(ctx, SpanApprovalWait, trace.SpanKindInternal)
	id, e := p.opts.Approver.Await(actx, b)
	if span != nil {
		var code errcode.Code
		if e != nil {
			code = e.Code
		}
		endSpan(span, code)
	}
	if e != nil {
		// The refusal's receipt names the approval it waits for.
		if pending, ok := e.Details["approvalId"].(string); ok {
			res.ApprovalID = pending
		}
		return e
	}
	// At dispatch the decision runs again on the policy in force now: a
	// policy change while the call waited refuses it.
	cs.st = p.state.Load()
	if _, ok := cs.st.facts[res.ToolID]; !ok && cs.target == nil {
		return errcode.Errorf(errcode.Forbidden, "%s was removed while the call waited for approval", res.ToolID).
			WithDetails(map[string]any{"scope": "tool", "toolName": res.ToolID, "approvalId": id})
	}
	res.Decision = p.decide(ctx, cs)
	cs.approved, cs.approvedArgs, res.ApprovalID = id, cs.args, id
	return nil
}

// decide runs the policy on the current arguments.
func (p *Pipeline) decide(ctx context.Context, cs *callState) policy.Decision {
	if cs.st.Policy == nil {
		return noPolicy()
	}
	in := inputPool.Get().(*policy.Input)
	*in = policy.Input{
		Principal: cs.c.Principal, Tool: cs.facts(), Args: cs.argsMap, ArgsKnown: true,
		Call: policy.Call{Transport: string(cs.c.Transport), CallID: cs.c.CallID, RunID: cs.c.RunID, AgentID: cs.c.AgentID, ParentCallID: cs.c.ParentCallID},
		Now:  cs.started,
	}
	var start time.Time
	if p.m != nil {
		start = time.Now()
	}
	span := p.decideSpan(ctx)
	d := cs.st.Policy.Decide(ctx, in)
	endDecideSpan(span, d)
	if p.m != nil {
		p.m.PolicyDecision(string(d.Effect), d.RuleID, time.Since(start))
	}
	*in = policy.Input{}
	inputPool.Put(in)
	return d
}

// refusal turns a non-allow decision into the error to answer, or nil.
func (p *Pipeline) refusal(ctx context.Context, cs *callState) *errcode.Error {
	d := cs.res.Decision
	switch d.Effect {
	case policy.EffectAllow:
		return nil
	case policy.EffectRequireApproval:
		if cs.approved != "" {
			return nil
		}
		return errcode.Errorf(errcode.ApprovalRequired, "%s requires approval: %s", cs.res.ToolID, d.Reason).
			WithDetails(map[string]any{"toolName": cs.res.ToolID, "ruleId": d.RuleID})
	}
	cs.res.Hidden = cs.st.Policy == nil || !cs.st.Policy.Disclose(ctx, &policy.Input{Principal: cs.c.Principal, Tool: cs.facts(), Now: cs.started})
	details := map[string]any{"scope": "tool", "toolName": cs.res.ToolID, "requiredScopes": nonNil(d.RequiredScopes)}
	if d.RuleID != "" {
		details["ruleId"] = d.RuleID
	}
	if len(d.MissingScopes) > 0 {
		details["missingScopes"] = d.MissingScopes
	}
	reason := d.Reason
	if reason == "" {
		reason = "denied by policy"
	}
	return errcode.Errorf(errcode.Forbidden, "%s: %s", cs.res.ToolID, reason).WithDetails(details)
}

// summarize shortens JSON for a human prompt: at most n bytes, cut at a
// rune boundary with "…".
func summarize(b []byte, n int) string {
	if len(b) <= n {
		return string(b)
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(b[cut]) {
		cut--
	}
	return string(b[:cut]) + "…"
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// beforeHooks runs the before callbacks; an enforce hook may deny or, if
// mutating, replace the arguments (then the decision runs again).
func (p *Pipeline) beforeHooks(ctx context.Context, cs *callState) *errcode.Error {
	for _, reg := range p.opts.Hooks {
		hc := cs.hookCall
		hc.Args = bytes.Clone(hc.Args) // a hook cannot change the call in place
		hctx, span := p.hookSpan(ctx, reg, "before")
		v, err := runHook(hctx, reg, func(hctx context.Context) (hook.Verdict, error) { return reg.Hook.Before(hctx, &hc) })
		if span != nil {
			endHookSpan(span, err, v.Deny, v.Args != nil)
		}
		if reg.Mode == hook.Observe {
			if err != nil {
				p.opts.Logger.WarnContext(ctx, "observe hook failed", "hook", reg.Name, "err", cs.red.RedactString(err.Error()))
			}
			continue
		}
		if err != nil {
			if e := egress.Error(err); e != nil {
				// The SSRF guard refused the hook's address: the call is
				// refused (fail closed) as egress_denied, naming the rule
				// and the hook but not the hook's host (that is the
				// operator's to see, in the log).
				return errcode.Errorf(errcode.EgressDenied, "hook %s failed (fail closed): egress denied: %s", reg.Name, e.Details["rule"]).
					WithDetails(map[string]any{"scope": "tool", "toolName": cs.res.ToolID, "hook": reg.Name, "rule": e.Details["rule"]})
			}
			return errcode.Errorf(errcode.Forbidden, "hook %s failed (fail closed): %s", reg.Name, cs.red.RedactString(err.Error())).
				WithDetails(map[string]any{"scope": "tool", "toolName": cs.res.ToolID, "hook": reg.Name})
		}
		if v.Deny {
			reason := v.Reason
			if reason == "" {
				reason = "no reason given"
			}
			return errcode.Errorf(errcode.Forbidden, "hook %s denied the call: %s", reg.Name, cs.red.RedactString(reason)).
				WithDetails(map[string]any{"scope": "tool", "toolName": cs.res.ToolID, "hook": reg.Name})
		}
		if v.Args == nil {
			continue
		}
		if !reg.Mutating {
			return errcode.Errorf(errcode.Forbidden, "hook %s changed the arguments but is not declared mutating", reg.Name).
				WithDetails(map[string]any{"scope": "tool", "toolName": cs.res.ToolID, "hook": reg.Name})
		}
		m, err := decodeArgs(v.Args)
		if err != nil {
			return errcode.Errorf(errcode.Forbidden, "hook %s returned invalid arguments: %s", reg.Name, err.Error())
		}
		h, _, removed, err := p.opts.Redactor.ArgsHashRemoved(v.Args, false)
		if err != nil {
			return errcode.Errorf(errcode.Forbidden, "hook %s returned invalid arguments: %s", reg.Name, err.Error())
		}
		// Arguments a hook wrote must match the inputSchema too.
		if e := p.validateArgs(cs.st, cs.res.ToolID, v.Args); e != nil {
			return errcode.Errorf(errcode.Forbidden, "hook %s returned arguments that do not match the tool's inputSchema: %s", reg.Name, e.Message).
				WithDetails(map[string]any{"scope": "tool", "toolName": cs.res.ToolID, "hook": reg.Name})
		}
		cs.red = cs.red.WithValues(audit.CallSecretID, removed)
		cs.args, cs.argsMap = v.Args, m
		cs.hookCall.Args, cs.hookCall.ArgsHash = v.Args, h
		cs.res.ExecutedArgsHash = h
		cs.res.MutationSource = "hook:" + reg.Name
		// The decision runs again on the new arguments. An approval covers
		// exactly the arguments it was given: changed arguments whose
		// decision is require_approval need their own (the call waits for
		// it, or is refused with approval_required and its id).
		if cs.approved != "" && !sameJSON(cs.approvedArgs, v.Args) {
			cs.approved, cs.approvedArgs = "", nil
		}
		cs.res.Decision = p.decide(ctx, cs)
		if cs.approved == "" {
			if e := p.awaitApproval(ctx, cs); e != nil {
				return e
			}
		}
		if e := p.refusal(ctx, cs); e != nil {
			return e
		}
	}
	return nil
}

// runHook runs fn with the hook's timeout, turning a panic or a timeout into
// an error. The hook goroutine is abandoned on timeout (its result ignored).
func runHook[T any](ctx context.Context, reg hook.Registration, fn func(context.Context) (T, error)) (T, error) {
	timeout := reg.Timeout
	if timeout <= 0 {
		timeout = DefaultHookTimeout
	}
	hctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	type out struct {
		v   T
		err error
	}
	done := make(chan out, 1)
	go func() {
		var o out
		defer func() {
			if r := recover(); r != nil {
				o.err = fmt.Errorf("hook %s panicked: %v", reg.Name, r)
			}
			done <- o
		}()
		o.v, o.err = fn(hctx)
	}()
	select {
	case o := <-done:
		return o.v, o.err
	case <-hctx.Done():
		var zero T
		return zero, fmt.Errorf("hook %s: %w", reg.Name, hctx.Err())
	}
}

func (p *Pipeline) calledEvent(cs *callState) (*audit.Event, error) {
	c := &cs.c
	ref := audit.CallRef{AgentID: c.AgentID, ToolName: cs.res.ToolID, CallID: c.CallID, ParentCallID: c.ParentCallID}
	tc := audit.NewToolCalled(ref, cs.res.RequestedArgsHash, c.Principal.ID, audit.Transport(c.Transport))
	if d := cs.res.Decision; d.WouldDeny {
		tc.WouldDeny, tc.WouldRuleID = true, d.WouldRuleID
		p.wouldDeny.Add(1)
	}
	if p.opts.AuditContent == "full" {
		if red, err := cs.red.RedactJSON(cs.args); err == nil {
			tc.Inputs = red
		}
	}
	ev, err := audit.NewCalledEvent(c.RunID, &tc, cs.started)
	if err != nil {
		return nil, err
	}
	ev.Tenant, ev.Principal = c.Principal.Tenant, c.Principal.ID
	return ev, nil
}

// refuse records a gate refusal (toolCalled, toolReturned without
// durationMs, receipt) and returns the result. The tool never runs. status
// is forbidden or rate_limited for a gate refusal, error for arguments the
// tool's inputSchema rejects.
func (p *Pipeline) refuse(ctx context.Context, cs *callState, status audit.Status, e *errcode.Error) (*Result, error) {
	res := cs.res
	res.Status, res.Err = status, e
	called, err := p.calledEvent(cs)
	if err != nil {
		return p.internal(res, err)
	}
	ref := audit.CallRef{AgentID: cs.c.AgentID, ToolName: res.ToolID, CallID: cs.c.CallID, ParentCallID: cs.c.ParentCallID}
	eo := audit.ErrorObject{Code: string(e.Code), Message: e.Message, Details: e.Details}
	var tr audit.ToolReturned
	if status == audit.StatusError {
		tr, err = audit.ReturnedError(ref, eo, 0, false)
	} else {
		tr, err = audit.ReturnedRefused(ref, status, eo)
	}
	if err != nil {
		return p.internal(res, err)
	}
	res.ReceiptID = newID("rcpt_") // named by the event, used by newReceipt
	tr = tr.WithReceipt(res.ReceiptID).WithRule(res.Decision.RuleID)
	ret, err := audit.NewReturnedEvent(cs.c.RunID, &tr, called.EventID, p.opts.Now())
	if err != nil {
		return p.internal(res, err)
	}
	ret.Tenant, ret.Principal = cs.c.Principal.Tenant, cs.c.Principal.ID
	cs.f.events = [2]*audit.Event{called, ret}
	if err := p.recordOutcome(ctx, cs, 2); err != nil {
		return p.unrecorded(cs, err)
	}
	p.record(cs)
	return res, nil
}

// invoke runs the tool, the after/error hooks, and records the outcome.
func (p *Pipeline) invoke(ctx context.Context, cs *callState) (*Result, error) {
	res := cs.res
	inv := cs.invoker()
	if cs.fromRecording() {
		inv = recordedInvoker(cs.replay.rec)
	}
	var out json.RawMessage
	var err error
	start := time.Now()
	if inv == nil {
		err = errcode.Errorf(errcode.UpstreamUnavailable, "no invoker is registered for %s", res.ToolID)
	} else {
		sctx, span := p.invokeSpan(ctx, cs.tool)
		ictx, cancel := context.WithTimeout(sctx, p.opts.ToolTimeout)
		out, err = safeInvoke(ictx, inv, cs.tool, cs.args)
		ierr := ictx.Err() // before cancel: was the deadline or the caller the cause?
		cancel()
		switch {
		case err == nil && ierr != nil && ctx.Err() == nil:
			// A tool that ignores its context and finishes late: its
			// result is not used (native tools must honour ctx).
			out, err = nil, errcode.Errorf(errcode.Timeout, "tool did not finish within %s", p.opts.ToolTimeout)
		case err != nil && ierr != nil && !gatewayCode(errcode.CodeOf(err)):
			if ctx.Err() != nil && errors.Is(ctx.Err(), context.Canceled) {
				err = errcode.Wrap(errcode.Cancelled, err, "call cancelled")
			} else {
				err = errcode.Wrap(errcode.Timeout, err, fmt.Sprintf("tool did not finish within %s", p.opts.ToolTimeout))
			}
		case err == nil && !json.Valid(out):
			out, err = nil, errcode.New(errcode.ToolExecutionFailed, "the tool returned a result that is not valid JSON")
		}
		// Neither an unreachable upstream nor one the egress guard refused
		// received the call: the tool did not run.
		res.Ran = errcode.CodeOf(err) != errcode.UpstreamUnavailable && errcode.CodeOf(err) != errcode.EgressDenied
		if span != nil {
			var code errcode.Code
			if err != nil {
				code = toolError(cs.red, err).Code
			}
			endSpan(span, code)
		}
	}
	dur := time.Since(start)
	if cs.fromRecording() {
		// RFC 0064: the recorded durationMs is reused on replay, never
		// re-measured; the tool ran (in the recording) iff it ran then.
		res.Ran = cs.replay.rec.Ran
		dur = time.Duration(cs.replay.rec.DurationMs) * time.Millisecond
		res.DurationMs = cs.replay.rec.DurationMs
	} else if res.Ran {
		res.DurationMs = dur.Milliseconds()
		if p.m != nil && cs.tool.Descriptor.Source == catalog.SourceMCP {
			p.m.UpstreamCall(mcpServer(res.ToolID), dur)
		}
	}
	if err == nil {
		res.Status, res.Output = audit.StatusOK, out
		if len(p.opts.Hooks) > 0 {
			if e := p.afterHooks(ctx, cs, &hook.Outcome{Status: "ok", Output: out, DurationMs: res.DurationMs}, false); e != nil {
				res.Status, res.Output, res.Err = audit.StatusError, nil, e
			}
		}
	} else {
		e := toolError(cs.red, err)
		res.Status, res.Err = audit.StatusError, e
		// e.g. an MCP isError result's content: redacted like the error
		// message (a result that does not redact is dropped).
		res.Output = nil
		if len(out) > 0 {
			res.Output, _ = cs.red.RedactJSON(out)
		}
		if len(p.opts.Hooks) > 0 {
			p.afterHooks(ctx, cs, &hook.Outcome{Status: "error", ErrorCode: string(e.Code), Error: e, DurationMs: res.DurationMs}, true)
		}
	}
	if cs.replay != nil && !cs.fromRecording() {
		// A deterministic tool ran again: its outcome must be the
		// recorded one.
		if e := checkReplayResult(cs); e != nil {
			res.Status, res.Output, res.Err = audit.StatusError, nil, e
		}
	}
	ref := audit.CallRef{AgentID: cs.c.AgentID, ToolName: res.ToolID, CallID: cs.c.CallID, ParentCallID: cs.c.ParentCallID}
	var tr audit.ToolReturned
	if res.Status == audit.StatusOK {
		var outcome json.RawMessage
		if p.opts.AuditContent == "full" {
			outcome, _ = cs.red.RedactJSON(out)
		}
		tr = audit.ReturnedOK(ref, outcome, dur)
	} else {
		tr, err = audit.ReturnedError(ref, audit.ErrorObject{Code: string(res.Err.Code), Message: res.Err.Message, Details: res.Err.Details}, dur, res.Ran)
		if err != nil {
			return p.internal(res, err)
		}
	}
	res.ReceiptID = newID("rcpt_") // named by the event, used by newReceipt
	tr = tr.WithReceipt(res.ReceiptID).WithRule(res.Decision.RuleID)
	ret, err := audit.NewReturnedEvent(cs.c.RunID, &tr, cs.called.EventID, p.opts.Now())
	if err != nil {
		return p.internal(res, err)
	}
	ret.Tenant, ret.Principal = cs.c.Principal.Tenant, cs.c.Principal.ID
	cs.f.events = [2]*audit.Event{ret}
	if err := p.recordOutcome(cs.rec, cs, 1); err != nil {
		return p.unrecorded(cs, err)
	}
	p.record(cs)
	return res, nil
}

// recordOutcome durably records the call's closing events, cs.f.events[:n],
// and its receipt: in one atomic write through p.outcomes when there is
// one, else the events and then the receipt.
func (p *Pipeline) recordOutcome(ctx context.Context, cs *callState, n int) error {
	if p.m == nil {
		return p.writeOutcome(ctx, cs, n)
	}
	start := time.Now()
	err := p.writeOutcome(ctx, cs, n)
	if err == nil {
		p.m.StoreCommit(time.Since(start))
	}
	return err
}

// writeOutcome is recordOutcome without the metrics.
func (p *Pipeline) writeOutcome(ctx context.Context, cs *callState, n int) error {
	if p.outcomes == nil {
		if err := p.appendEvents(ctx, cs.f, n); err != nil {
			return err
		}
		return p.opts.Receipts.Append(ctx, p.newReceipt(cs))
	}
	err := p.outcomes.AppendOutcome(ctx, cs.f.events[:n], p.newReceipt(cs))
	cs.f.events = [2]*audit.Event{}
	return err
}

// mcpServer returns the upstream server name of an MCP tool or target id
// (mcp:<server>.<tool>, mcp:<server>/resource, mcp:<server>#<prompt>).
func mcpServer(id string) string {
	id = strings.TrimPrefix(id, "mcp:")
	if i := strings.IndexAny(id, "./#"); i >= 0 {
		return id[:i]
	}
	return id
}

// gatewayCode reports whether code is a failure the gateway itself
// classified (kept as is), rather than a tool's own error.
func gatewayCode(code errcode.Code) bool {
	switch code {
	case errcode.UpstreamUnavailable, errcode.UpstreamProtocolError, errcode.UpstreamCrashed, errcode.Timeout, errcode.Cancelled,
		errcode.EgressDenied:
		return true
	}
	return false
}

// toolCodes are the codes a tool's error may carry on a status error
// return; any other code (a gate code such as forbidden, an unknown code)
// becomes tool_execution_failed so that the record stays honest (§F).
var toolCodes = map[errcode.Code]bool{
	errcode.ToolExecutionFailed: true, errcode.UpstreamUnavailable: true, errcode.UpstreamProtocolError: true,
	errcode.UpstreamCrashed: true, errcode.Timeout: true, errcode.ResponseTooLarge: true, errcode.EgressDenied: true,
	errcode.Cancelled: true, errcode.InvalidArgument: true, errcode.NotFound: true, errcode.Conflict: true,
}

// toolError turns whatever a tool returned as an error into a recordable
// *errcode.Error: a known tool code, a non-empty redacted message and
// JSON-safe redacted details. It never panics, even on a typed-nil
// *errcode.Error or an error whose Error method panics.
func toolError(red *audit.Redactor, err error) (e *errcode.Error) {
	defer func() {
		if r := recover(); r != nil {
			e = errcode.Errorf(errcode.ToolExecutionFailed, "the tool returned an unprintable error (%T)", err)
		}
	}()
	src := errcode.As(err)
	code, msg := errcode.ToolExecutionFailed, ""
	var details map[string]any
	if src != nil {
		code, msg, details = src.Code, src.Message, src.Details
	} else {
		msg = err.Error()
	}
	if !toolCodes[code] {
		if code != "" {
			msg = fmt.Sprintf("the tool reported %q: %s", code, msg)
		}
		code = errcode.ToolExecutionFailed
	}
	if msg == "" {
		msg = "the tool failed without a message"
	}
	out := &errcode.Error{Code: code, Message: red.RedactString(msg)}
	if len(details) > 0 {
		if raw, err := json.Marshal(details); err == nil {
			if red, err := red.RedactJSON(raw); err == nil {
				var m map[string]any
				if json.Unmarshal(red, &m) == nil {
					out.Details = m
				}
			}
		}
	}
	return out
}

// afterHooks runs After (ok) or OnError callbacks. An enforce hook's failure
// withholds an ok result (returned as a forbidden error); on the error path
// the result is already an error and hook failures are only logged.
func (p *Pipeline) afterHooks(ctx context.Context, cs *callState, o *hook.Outcome, onError bool) *errcode.Error {
	for _, reg := range p.opts.Hooks {
		hc := cs.hookCall
		hc.Args = bytes.Clone(hc.Args)
		oc := *o
		oc.Output = bytes.Clone(o.Output) // nor the result
		phase := "after"
		if onError {
			phase = "on_error"
		}
		sctx, span := p.hookSpan(ctx, reg, phase)
		_, err := runHook(sctx, reg, func(hctx context.Context) (struct{}, error) {
			if onError {
				return struct{}{}, reg.Hook.OnError(hctx, &hc, &oc)
			}
			return struct{}{}, reg.Hook.After(hctx, &hc, &oc)
		})
		if span != nil {
			endHookSpan(span, err, false, false)
		}
		if err == nil {
			continue
		}
		msg := cs.red.RedactString(err.Error())
		if reg.Mode == hook.Observe || onError {
			p.opts.Logger.WarnContext(ctx, "hook failed after the call", "hook", reg.Name, "mode", reg.Mode, "err", msg)
			continue
		}
		// The agent sees result_withheld; the operator log says why (the
		// hook's own failure, redacted), with the call's trace ids.
		p.opts.Logger.WarnContext(ctx, "enforce hook failed after the call; result withheld", "callId", cs.res.CallID, "toolId", cs.res.ToolID,
			"hook", reg.Name, "err", msg)
		return errcode.Errorf(errcode.ResultWithheld, "hook %s withheld the result (fail closed): %s", reg.Name, msg).
			WithDetails(map[string]any{"scope": "tool", "toolName": cs.res.ToolID, "hook": reg.Name})
	}
	return nil
}

// safeInvoke calls the invoker, turning a panic into tool_execution_failed.
func safeInvoke(ctx context.Context, inv Invoker, t *catalog.Tool, args json.RawMessage) (out json.RawMessage, err error) {
	defer func() {
		if r := recover(); r != nil {
			out, err = nil, errcode.Errorf(errcode.ToolExecutionFailed, "tool panicked: %v", r)
		}
	}()
	return inv.Invoke(ctx, t, args)
}

// receiptBox is a receipt and its duration in one allocation.
type receiptBox struct {
	r          receipt.Receipt
	durationMs int64
}

// newReceipt builds the call's receipt (unlinked) and sets the result's
// ReceiptID.
func (p *Pipeline) newReceipt(cs *callState) *receipt.Receipt {
	res := cs.res
	if res.ReceiptID == "" {
		res.ReceiptID = newID("rcpt_")
	}
	box := new(receiptBox)
	r := &box.r
	*r = receipt.Receipt{
		ReceiptID: res.ReceiptID, CallID: res.CallID, ParentCallID: cs.c.ParentCallID, RunID: res.RunID,
		AgentID: cs.c.AgentID, Principal: cs.c.Principal.ID, Tenant: cs.c.Principal.Tenant, ToolID: res.ToolID,
		Transport:         string(cs.c.Transport),
		Decision:          receipt.Decision{Effect: string(res.Decision.Effect), RuleID: res.Decision.RuleID, PolicyVersion: res.Decision.PolicyVersion},
		RequestedArgsHash: res.RequestedArgsHash, ExecutedArgsHash: res.ExecutedArgsHash, MutationSource: res.MutationSource,
		Status: string(res.Status), StartedAt: cs.started, ApprovalID: res.ApprovalID,
	}
	if cs.tool != nil {
		r.ToolDigest = cs.tool.Digest
	}
	if res.Err != nil {
		r.Error = &receipt.ErrorRef{Code: string(res.Err.Code)}
	}
	if res.Ran {
		box.durationMs = res.DurationMs
		r.DurationMs = &box.durationMs
	}
	if res.Status == audit.StatusOK {
		sum := sha256.Sum256(res.Output)
		var h [2 * sha256.Size]byte
		hex.Encode(h[:], sum[:])
		r.ResultHash = string(h[:])
	}
	return r
}

// unrecorded answers a call whose audit record could not be written:
// status error, code audit_unavailable (DESIGN.md decision 7). The store's
// error (which may name the database's host, user and database) goes to
// the log, not to the caller. A call whose tool already ran says so
// (details.ran "yes"; its result is withheld): the caller must not read
// the refusal as "nothing happened".
func (p *Pipeline) unrecorded(cs *callState, err error) (*Result, error) {
	res := cs.res
	if p.m != nil {
		p.m.StoreUnavailable()
	}
	res.Status, res.Output = audit.StatusError, nil
	res.ReceiptID = "" // its receipt was not stored: name none
	p.opts.Logger.ErrorContext(cs.rec, "audit store write failed; call answered audit_unavailable", "callId", res.CallID, "toolId", res.ToolID,
		"ran", res.Ran, "err", cs.red.RedactString(err.Error()))
	if res.Ran {
		res.Err = errcode.New(errcode.AuditUnavailable, "the tool ran, but the audit store could not record its outcome: the result is withheld").
			WithDetails(map[string]any{"ran": "yes"})
		return res, nil
	}
	res.Err = errcode.New(errcode.AuditUnavailable, "the audit store could not record the call: the tool was not run")
	return res, nil
}

func (p *Pipeline) internal(res *Result, err error) (*Result, error) {
	res.Status, res.Output = audit.StatusError, nil
	res.Err = errcode.Wrap(errcode.Internal, err, "recording the call")
	return res, nil
}

// limitKey returns the bucket key of rule r for a call of toolID by
// principal pr: the fields r.Per keys on, the others left "", and the rule's
// label so that two rules never share a bucket.
func limitKey(r policy.RateLimitRule, pr policy.Principal, toolID string) ratelimit.Key {
	k := ratelimit.Key{Rule: r.Label()}
	switch r.Per {
	case policy.PerPrincipalTool:
		k.Tenant, k.Principal, k.ToolID = pr.Tenant, pr.ID, toolID
	case policy.PerTenantTool:
		k.Tenant, k.ToolID = pr.Tenant, toolID
	case policy.PerTool:
		k.ToolID = toolID
	case policy.PerPrincipal:
		k.Tenant, k.Principal = pr.Tenant, pr.ID
	}
	return k
}

// WhoCan is policy.Program.WhoCan for a catalog tool over the installed
// state: what each of principals may do with toolID, with args (a JSON
// object) when argsKnown, else with the arguments unknown. Errors:
// not_found for a toolId not in the catalog, invalid_argument for args
// that are not a JSON object. With no policy everyone is denied. A tool
// pinning holds (State.Held: its definition is new or changed since it was
// approved, pinning.mode enforce) is answered for the running catalog, as
// Visible, Disclose and Call treat it: every principal effect deny, shown
// false, layer "held", reason naming tool_changed (a call gets
// tool_changed until an operator approves it). Safe for concurrent use.
func (p *Pipeline) WhoCan(ctx context.Context, toolID string, principals []policy.Principal, args json.RawMessage, argsKnown bool) ([]policy.Access, error) {
	st := p.state.Load()
	facts, ok := st.facts[toolID]
	if !ok {
		return nil, notFoundID(toolID)
	}
	var m map[string]any
	if argsKnown {
		var err error
		if m, err = decodeArgs(args); err != nil {
			return nil, err
		}
	}
	if st.Held[toolID] {
		out := make([]policy.Access, 0, len(principals))
		for _, pr := range principals {
			out = append(out, policy.Access{Principal: pr.ID, Tenant: pr.Tenant, Effect: policy.EffectDeny, Shown: false,
				Layer: LayerHeld, Reason: "held: tool_changed: the tool's definition is new or changed since it was approved; hidden and refused until an operator approves it (toolgate tools approve)"})
		}
		return out, nil
	}
	return st.Policy.WhoCan(ctx, facts, principals, m, argsKnown), nil
}

// LayerHeld is the Access.Layer WhoCan gives every principal for a tool
// pinning holds (see WhoCan).
const LayerHeld = "held"

func notFoundID(id string) error {
	return errcode.Errorf(errcode.NotFound, "unknown tool %q", id)
}

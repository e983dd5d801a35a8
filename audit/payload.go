package audit

import (
	"bytes"
	"encoding/json"
	"maps"
	"strconv"
	"time"

	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/internal/canonjson"
)

// Status is the RFC 0064 tool-hooks outcome of a call, the "status" of an
// agent.toolReturned (run-event-payloads.schema.json agentToolReturned).
type Status string

// The four statuses. StatusForbidden and StatusRateLimited are gate
// refusals: the tool was never invoked (RFC 0064 §C, §D).
const (
	// StatusOK: the tool ran and succeeded.
	StatusOK Status = "ok"
	// StatusError: the call failed (tool error, timeout, upstream down,
	// cancelled); the event carries error, never outcome (RFC 0064 §F).
	StatusError Status = "error"
	// StatusForbidden: the gate refused the call (policy, scopes, approval,
	// fail-closed); no durationMs.
	StatusForbidden Status = "forbidden"
	// StatusRateLimited: the (principal, toolId) bucket was empty; no durationMs.
	StatusRateLimited Status = "rate_limited"
)

// Valid reports whether s is one of the four statuses.
func (s Status) Valid() bool {
	switch s {
	case StatusOK, StatusError, StatusForbidden, StatusRateLimited:
		return true
	}
	return false
}

// Transport is how a tool call was carried (RFC 0064 §B, the "transport" of
// agent.toolCalled).
type Transport string

// The three transports.
const (
	// TransportMCP: an MCP tools/call.
	TransportMCP Transport = "mcp"
	// TransportHTTP: an HTTP tool (or POST /v1/calls to one).
	TransportHTTP Transport = "http"
	// TransportNative: a native Go function registered with the library.
	TransportNative Transport = "native"
)

// Valid reports whether t is one of the three transports.
func (t Transport) Valid() bool {
	switch t {
	case TransportMCP, TransportHTTP, TransportNative:
		return true
	}
	return false
}

// ErrorObject is the "error" of an agent.toolReturned
// (run-event-payloads.schema.json _errorObject): JSON {code, message,
// details?, retryable?}. Code is an errcode code (DESIGN.md decision 8);
// Message and Details must already be SR-1 scrubbed of secrets by the
// caller. Details is omitted when empty, Retryable when nil.
type ErrorObject struct {
	// Code is the snake_case errcode code, e.g. "tool_execution_failed".
	Code string `json:"code"`
	// Message is a human-readable, secret-free explanation (non-empty).
	Message string `json:"message"`
	// Details holds structured, secret-free data safe for the caller.
	Details map[string]any `json:"details,omitempty"`
	// Retryable tells whether retrying the same call may succeed; nil is unknown.
	Retryable *bool `json:"retryable,omitempty"`
}

// ErrorObjectFrom returns the ErrorObject of e: its code, message and
// details (the map is shared, not copied). A nil e gives the zero
// ErrorObject, which the returned-event constructors reject.
func ErrorObjectFrom(e *errcode.Error) ErrorObject {
	if e == nil {
		return ErrorObject{}
	}
	return ErrorObject{Code: string(e.Code), Message: e.Message, Details: e.Details}
}

// check applies the rules an error object must follow under status: code
// and message non-empty, code in the errcode closed set, and code consistent
// with status (rate_limited iff the status is rate_limited; a status error
// never carries a gate code forbidden or rate_limited).
func (e *ErrorObject) check(status Status) error {
	switch {
	case e.Code == "":
		return invalid("error.code", "invalid agent.toolReturned: error.code is required")
	case e.Message == "":
		return invalid("error.message", "invalid agent.toolReturned: error.message is required")
	case !errcode.Code(e.Code).Valid():
		return invalid("error.code", "invalid agent.toolReturned: error.code %q is not a toolgate error code", e.Code)
	case status == StatusRateLimited && e.Code != string(errcode.RateLimited):
		return invalid("error.code", "invalid agent.toolReturned: status rate_limited needs error.code rate_limited, got %q", e.Code)
	case status == StatusForbidden && e.Code == string(errcode.RateLimited):
		return invalid("error.code", "invalid agent.toolReturned: status forbidden cannot carry error.code rate_limited")
	case status == StatusError && (e.Code == string(errcode.Forbidden) || e.Code == string(errcode.RateLimited)):
		return invalid("error.code", "invalid agent.toolReturned: error.code %q is a gate refusal; use status %s", e.Code, e.Code)
	}
	return nil
}

// CallRef identifies one call on both of its events (agentId, toolName,
// callId are required on agent.toolCalled and agent.toolReturned; RFC 0002).
// It is a comparable value.
type CallRef struct {
	// AgentID is the calling agent, 3–256 characters; "" means AgentSystem
	// (the constructors substitute it; RFC 0064 §B).
	AgentID string
	// ToolName is the canonical toolId (DESIGN.md decision 3), e.g.
	// "mcp:fs.read_file"; it is the key RFC 0064 §D rate limits on.
	ToolName string
	// CallID pairs the two events; unique per call (a UUID or similar).
	CallID string
	// ParentCallID is the callId of the call this one is nested in, or "";
	// emitted as parentCallId on both events (an additional member on
	// agent.toolReturned, whose schema is open).
	ParentCallID string
}

// normalize substitutes AgentSystem for an empty AgentID.
func (r CallRef) normalize() CallRef {
	if r.AgentID == "" {
		r.AgentID = AgentSystem
	}
	return r
}

// check validates r as found on the wire.
func (r CallRef) check() error {
	if err := checkID("agentId", r.AgentID, minAgentIDLen, maxAgentIDLen); err != nil {
		return err
	}
	if err := checkID("toolName", r.ToolName, 1, 1<<20); err != nil {
		return err
	}
	if err := checkID("callId", r.CallID, 1, 1<<20); err != nil {
		return err
	}
	if r.ParentCallID != "" {
		if err := checkID("parentCallId", r.ParentCallID, 1, 1<<20); err != nil {
			return err
		}
	}
	return nil
}

// ToolCalled is the payload of agent.toolCalled (run-event-payloads.schema.json
// agentToolCalled, with the RFC 0064 §B fields toolgate always sets).
//
// JSON: agentId, toolName, callId, argsHash, principal, transport, and
// toolId / parentCallId / inputs when non-empty.
//
// Content-free rule (RFC 0064 §B, CONTRACT §4): the event identifies the
// arguments by ArgsHash only. Inputs is set only when the deployment's audit
// content is "full", and then holds the arguments after SR-1 redaction (the
// caller redacts); with audit content "hash" (the default) it stays nil.
// Build one with NewToolCalled; NewEvent runs Validate.
type ToolCalled struct {
	// AgentID: see CallRef.AgentID (3–256 characters).
	AgentID string `json:"agentId"`
	// ToolName: the canonical toolId.
	ToolName string `json:"toolName"`
	// CallID pairs the event with its agent.toolReturned.
	CallID string `json:"callId"`
	// ArgsHash is the lowercase hex SHA-256 (64 digits) of the RFC 8785
	// canonical JSON of the redacted arguments (DESIGN.md vocabulary).
	ArgsHash string `json:"argsHash"`
	// Principal is the opaque, non-PII id the call is attributed to, or
	// "core.system" for host-initiated calls.
	Principal string `json:"principal"`
	// Transport is how the call is carried.
	Transport Transport `json:"transport"`
	// ToolID is an optional RFC 0078 catalog id, for a host whose toolName is
	// not the catalog id. toolgate puts the canonical toolId in ToolName and
	// leaves ToolID empty.
	ToolID string `json:"toolId,omitempty"`
	// ParentCallID is the enclosing call's callId, or "" (DESIGN.md: nested
	// calls form a call graph).
	ParentCallID string `json:"parentCallId,omitempty"`
	// Inputs holds the redacted arguments, only with audit content "full".
	Inputs json.RawMessage `json:"inputs,omitempty"`
	// WouldDeny and WouldRuleID record a policy dry run (observe-mode
	// rules or policy, issue 6): the call runs, but with every rule
	// enforced rule WouldRuleID would have denied it. A toolgate extension
	// (the agentToolCalled schema allows additional properties).
	WouldDeny   bool   `json:"wouldDeny,omitempty"`
	WouldRuleID string `json:"wouldRuleId,omitempty"`
}

// NewToolCalled returns the agent.toolCalled payload for ref (an empty
// ref.AgentID becomes AgentSystem) with the content-free RFC 0064 §B fields
// argsHash, principal and transport, and no inputs. It does not validate;
// NewEvent does (ToolCalled.Validate).
func NewToolCalled(ref CallRef, argsHash, principal string, transport Transport) ToolCalled {
	ref = ref.normalize()
	return ToolCalled{
		AgentID:      ref.AgentID,
		ToolName:     ref.ToolName,
		CallID:       ref.CallID,
		ArgsHash:     argsHash,
		Principal:    principal,
		Transport:    transport,
		ParentCallID: ref.ParentCallID,
	}
}

// Ref returns the CallRef of c.
func (c ToolCalled) Ref() CallRef {
	return CallRef{AgentID: c.AgentID, ToolName: c.ToolName, CallID: c.CallID, ParentCallID: c.ParentCallID}
}

// Validate checks c against agentToolCalled and RFC 0064 §B: agentId 3–256
// characters; toolName and callId non-empty; argsHash 64 lowercase hex
// digits; principal non-empty; transport mcp, http or native; inputs, when
// set, valid JSON. All strings must be valid UTF-8. It returns
// *errcode.Error InvalidArgument with details.field, or nil.
func (c ToolCalled) Validate() error {
	if err := c.Ref().check(); err != nil {
		return err
	}
	if !isSHA256Hex(c.ArgsHash) {
		return invalid("argsHash", "invalid agent.toolCalled: argsHash must be 64 lowercase hex digits")
	}
	if err := checkID("principal", c.Principal, 1, 1<<20); err != nil {
		return err
	}
	if !c.Transport.Valid() {
		return invalid("transport", "invalid agent.toolCalled: transport %q is not mcp, http or native", c.Transport)
	}
	if c.ToolID != "" {
		if err := checkID("toolId", c.ToolID, 1, 1<<20); err != nil {
			return err
		}
	}
	if len(c.Inputs) > 0 && !json.Valid(c.Inputs) {
		return invalid("inputs", "invalid agent.toolCalled: inputs is not valid JSON")
	}
	return nil
}

// MarshalJSON encodes c with the members listed on ToolCalled, byte for
// byte as encoding/json would from the struct tags (Inputs compacted), but
// without reflection: it runs on every call. It does not validate c (see
// Validate); it fails with *errcode.Error InvalidArgument if Inputs is set
// and is not valid JSON.
func (c ToolCalled) MarshalJSON() ([]byte, error) {
	return c.appendJSON(make([]byte, 0, 192+len(c.Inputs)))
}

// appendJSON appends the JSON of c (MarshalJSON) to b.
func (c *ToolCalled) appendJSON(b []byte) ([]byte, error) {
	b = append(b, `{"agentId":`...)
	b = appendJSONString(b, c.AgentID)
	b = append(b, `,"toolName":`...)
	b = appendJSONString(b, c.ToolName)
	b = append(b, `,"callId":`...)
	b = appendJSONString(b, c.CallID)
	b = append(b, `,"argsHash":`...)
	b = appendJSONString(b, c.ArgsHash)
	b = append(b, `,"principal":`...)
	b = appendJSONString(b, c.Principal)
	b = append(b, `,"transport":`...)
	b = appendJSONString(b, string(c.Transport))
	if c.ToolID != "" {
		b = append(b, `,"toolId":`...)
		b = appendJSONString(b, c.ToolID)
	}
	if c.ParentCallID != "" {
		b = append(b, `,"parentCallId":`...)
		b = appendJSONString(b, c.ParentCallID)
	}
	if len(c.Inputs) > 0 {
		b = append(b, `,"inputs":`...)
		var err error
		if b, err = appendRawJSON(b, c.Inputs); err != nil {
			return nil, err
		}
	}
	if c.WouldDeny {
		b = append(b, `,"wouldDeny":true`...)
	}
	if c.WouldRuleID != "" {
		b = append(b, `,"wouldRuleId":`...)
		b = appendJSONString(b, c.WouldRuleID)
	}
	return append(b, '}'), nil
}

// isSHA256Hex reports whether s is 64 lowercase hex digits.
func isSHA256Hex(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// ToolReturned is the payload of agent.toolReturned
// (run-event-payloads.schema.json agentToolReturned) and enforces RFC 0064
// §F (tool-failure honesty) by construction: its fields are unexported, and
// only ReturnedOK, ReturnedError, ReturnedRefused and UnmarshalJSON build a
// non-zero one. Every ToolReturned they build satisfies:
//
//   - status ok: the tool ran (durationMs present), no error; outcome
//     optional. An ok without outcome is a success, never a failure.
//   - status error: error present (code and message non-empty, code not
//     forbidden or rate_limited), no outcome; durationMs present iff the
//     tool ran.
//   - status forbidden / rate_limited: the tool never ran: no durationMs, no
//     outcome; error present, with code rate_limited for rate_limited and any
//     other code (forbidden, approval_denied, ...) for forbidden.
//
// Every error.code is one of the errcode closed set (DESIGN.md decision 8).
//
// error and outcome are therefore never both present, and a failure cannot
// be recorded without a failure discriminator.
//
// JSON: agentId, toolName, callId, parentCallId?, status, outcome?, error?,
// durationMs? (integer milliseconds ≥ 0), receiptId?, ruleId? (WithReceipt,
// WithRule). The zero ToolReturned is invalid:
// it fails Validate and MarshalJSON. A ToolReturned is an immutable value,
// safe for concurrent use.
type ToolReturned struct {
	ref        CallRef
	status     Status
	outcome    json.RawMessage
	err        *ErrorObject
	durationMs int64
	ran        bool
	receiptID  string
	ruleID     string
}

// durationMillis converts d to whole milliseconds, rounding down; a negative
// d (a clock anomaly) gives 0.
func durationMillis(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return d.Milliseconds()
}

// ReturnedOK returns a successful agent.toolReturned for ref (an empty
// ref.AgentID becomes AgentSystem): status ok, durationMs = duration in whole
// milliseconds rounded down (300µs reports 0; negative reports 0).
//
// outcome is the result to record, or nil to omit it. Content rule
// (CONTRACT §4, RFC 0064 §B): the pipeline passes nil unless the audit
// content is "full", and then passes the SR-1 redacted result; with audit
// content "hash" the event carries no result at all (the call's receipt
// carries resultHash). outcome is not copied: do not modify it until the
// event is built. ReturnedOK does not validate ref; NewEvent does.
func ReturnedOK(ref CallRef, outcome json.RawMessage, duration time.Duration) ToolReturned {
	if len(outcome) == 0 {
		outcome = nil
	}
	return ToolReturned{
		ref:        ref.normalize(),
		status:     StatusOK,
		outcome:    outcome,
		durationMs: durationMillis(duration),
		ran:        true,
	}
}

// ReturnedError returns a failed agent.toolReturned for ref: status error
// with error e and no outcome (RFC 0064 §F). ran tells whether the tool was
// actually invoked: durationMs (duration in whole milliseconds, rounded
// down) is present iff ran. Use it for tool failures (tool_execution_failed,
// an upstream isError), timeout, cancelled, upstream_unavailable (DESIGN.md
// decision 6); gate refusals use ReturnedRefused.
//
// Errors (*errcode.Error InvalidArgument, details.field set): e.Code or
// e.Message empty; e.Code not in the errcode closed set, or forbidden /
// rate_limited; ref invalid (agentId not 3–256 characters, toolName or callId
// empty).
func ReturnedError(ref CallRef, e ErrorObject, duration time.Duration, ran bool) (ToolReturned, error) {
	r := ToolReturned{ref: ref.normalize(), status: StatusError, err: &e, ran: ran}
	if ran {
		r.durationMs = durationMillis(duration)
	}
	if err := r.Validate(); err != nil {
		return ToolReturned{}, err
	}
	return r, nil
}

// ReturnedRefused returns the agent.toolReturned of a call a gate refused
// before invoking the tool (RFC 0064 §C, §D): status forbidden or
// rate_limited, never durationMs, never outcome, and error e saying why
// (additionalProperties is true on agentToolReturned and error is defined
// for it, so the schema allows it). An empty e.Code defaults to the status
// ("forbidden" or "rate_limited"); e.Message is required.
//
// Errors (*errcode.Error InvalidArgument, details.field set): status is not
// forbidden or rate_limited; e.Message empty; e.Code not in the errcode
// closed set, not rate_limited for rate_limited, or rate_limited for
// forbidden; ref invalid.
func ReturnedRefused(ref CallRef, status Status, e ErrorObject) (ToolReturned, error) {
	if status != StatusForbidden && status != StatusRateLimited {
		return ToolReturned{}, invalid("status", "refused agent.toolReturned: status must be forbidden or rate_limited, got %q", status)
	}
	if e.Code == "" {
		e.Code = string(status)
	}
	r := ToolReturned{ref: ref.normalize(), status: status, err: &e}
	if err := r.Validate(); err != nil {
		return ToolReturned{}, err
	}
	return r, nil
}

// Status returns the status ("" for the zero ToolReturned).
func (r ToolReturned) Status() Status { return r.status }

// Outcome returns a copy of the recorded result, or nil when none (always nil
// unless the status is ok).
func (r ToolReturned) Outcome() json.RawMessage {
	if r.outcome == nil {
		return nil
	}
	return append(json.RawMessage(nil), r.outcome...)
}

// Error returns a copy of the error object (with a shallow copy of its
// Details), or nil when the status is ok.
func (r ToolReturned) Error() *ErrorObject {
	if r.err == nil {
		return nil
	}
	e := *r.err
	e.Details = maps.Clone(e.Details)
	return &e
}

// DurationMs returns the tool's wall-clock duration in whole milliseconds and
// true when the tool ran, or 0 and false when it never started.
func (r ToolReturned) DurationMs() (int64, bool) { return r.durationMs, r.ran }

// Ref returns the call the event answers.
func (r ToolReturned) Ref() CallRef { return r.ref }

// WithReceipt returns r naming id as the call's receipt (the member
// "receiptId", a toolgate extension: the agentToolReturned schema allows
// additional properties), so an audit reader can fetch it from GET
// /v1/receipts/{receiptId}. "" removes it. Validate requires 1–256 bytes of
// valid UTF-8 when set.
func (r ToolReturned) WithReceipt(id string) ToolReturned {
	r.receiptID = id
	return r
}

// ReceiptID returns the receipt the event names ("" when none).
func (r ToolReturned) ReceiptID() string { return r.receiptID }

// WithRule returns r naming id as the policy rule that decided the call
// (the member "ruleId", a toolgate extension like receiptId: the same
// rule id the call's receipt records in decision.ruleId), for allowed
// calls as for refused ones, so an audit reader sees the deciding rule
// without reading the receipt. A rule id is configuration, not call
// content. "" (no rule decided: the policy default, or a refusal before
// the decision) removes it. Validate requires 1–256 bytes of valid UTF-8
// when set.
func (r ToolReturned) WithRule(id string) ToolReturned {
	r.ruleID = id
	return r
}

// RuleID returns the deciding rule the event names ("" when none).
func (r ToolReturned) RuleID() string { return r.ruleID }

// Validate checks r against agentToolReturned and the RFC 0064 §F rules
// listed on ToolReturned. Every ToolReturned built by this package's
// constructors passes except ReturnedOK with an invalid ref; the zero value
// fails. It returns *errcode.Error InvalidArgument with details.field, or nil.
func (r ToolReturned) Validate() error {
	switch {
	case r.status == "":
		return invalid("status", "invalid agent.toolReturned: status is required")
	case !r.status.Valid():
		return invalid("status", "invalid agent.toolReturned: unknown status %q", r.status)
	}
	if err := r.ref.check(); err != nil {
		return err
	}
	if r.receiptID != "" {
		if err := checkID("receiptId", r.receiptID, 1, 256); err != nil {
			return err
		}
	}
	if r.ruleID != "" {
		if err := checkID("ruleId", r.ruleID, 1, 256); err != nil {
			return err
		}
	}
	if r.durationMs < 0 {
		return invalid("durationMs", "invalid agent.toolReturned: durationMs must be >= 0")
	}
	if r.outcome != nil && !json.Valid(r.outcome) {
		return invalid("outcome", "invalid agent.toolReturned: outcome is not valid JSON")
	}
	switch r.status {
	case StatusOK:
		switch {
		case r.err != nil:
			return invalid("error", "invalid agent.toolReturned: status ok must not carry error")
		case !r.ran:
			return invalid("durationMs", "invalid agent.toolReturned: status ok needs durationMs (the tool ran)")
		}
		return nil
	case StatusError:
		switch {
		case r.err == nil:
			return invalid("error", "invalid agent.toolReturned: status error needs error")
		case r.outcome != nil:
			return invalid("outcome", "invalid agent.toolReturned: error and outcome are mutually exclusive")
		}
		return r.err.check(r.status)
	default: // StatusForbidden, StatusRateLimited
		switch {
		case r.ran:
			return invalid("durationMs", "invalid agent.toolReturned: status %s must not carry durationMs (the tool never ran)", r.status)
		case r.outcome != nil:
			return invalid("outcome", "invalid agent.toolReturned: status %s must not carry outcome", r.status)
		case r.err == nil:
			return invalid("error", "invalid agent.toolReturned: status %s needs error", r.status)
		}
		return r.err.check(r.status)
	}
}

// returnedWire is the JSON shape of ToolReturned.
type returnedWire struct {
	AgentID      string          `json:"agentId"`
	ToolName     string          `json:"toolName"`
	CallID       string          `json:"callId"`
	ParentCallID string          `json:"parentCallId,omitempty"`
	Status       Status          `json:"status"`
	Outcome      json.RawMessage `json:"outcome,omitempty"`
	Error        *ErrorObject    `json:"error,omitempty"`
	DurationMs   *int64          `json:"durationMs,omitempty"`
	ReceiptID    string          `json:"receiptId,omitempty"`
	RuleID       string          `json:"ruleId,omitempty"`
}

// MarshalJSON encodes r (see ToolReturned for the shape), byte for byte as
// encoding/json would encode the same members, with an outcome compacted.
// It fails with Validate's *errcode.Error InvalidArgument if r is invalid,
// and with the json package's error if error.details does not marshal.
func (r ToolReturned) MarshalJSON() ([]byte, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	return r.appendJSON(make([]byte, 0, 160+len(r.outcome)))
}

// appendJSON appends the JSON of r (MarshalJSON), which must be valid, to b.
func (r *ToolReturned) appendJSON(b []byte) ([]byte, error) {
	b = append(b, `{"agentId":`...)
	b = appendJSONString(b, r.ref.AgentID)
	b = append(b, `,"toolName":`...)
	b = appendJSONString(b, r.ref.ToolName)
	b = append(b, `,"callId":`...)
	b = appendJSONString(b, r.ref.CallID)
	if r.ref.ParentCallID != "" {
		b = append(b, `,"parentCallId":`...)
		b = appendJSONString(b, r.ref.ParentCallID)
	}
	b = append(b, `,"status":`...)
	b = appendJSONString(b, string(r.status))
	var err error
	if r.outcome != nil {
		b = append(b, `,"outcome":`...)
		if b, err = appendRawJSON(b, r.outcome); err != nil {
			return nil, err
		}
	}
	if r.err != nil {
		b = append(b, `,"error":`...)
		if b, err = r.err.appendJSON(b); err != nil {
			return nil, err
		}
	}
	if r.ran {
		b = append(b, `,"durationMs":`...)
		b = strconv.AppendInt(b, r.durationMs, 10)
	}
	if r.receiptID != "" {
		b = append(b, `,"receiptId":`...)
		b = appendJSONString(b, r.receiptID)
	}
	if r.ruleID != "" {
		b = append(b, `,"ruleId":`...)
		b = appendJSONString(b, r.ruleID)
	}
	return append(b, '}'), nil
}

// appendJSON appends e as encoding/json encodes it.
func (e *ErrorObject) appendJSON(b []byte) ([]byte, error) {
	b = append(b, `{"code":`...)
	b = appendJSONString(b, e.Code)
	b = append(b, `,"message":`...)
	b = appendJSONString(b, e.Message)
	if len(e.Details) > 0 {
		d, err := json.Marshal(e.Details)
		if err != nil {
			return nil, err
		}
		b = append(b, `,"details":`...)
		b = append(b, d...)
	}
	if e.Retryable != nil {
		b = append(b, `,"retryable":`...)
		b = strconv.AppendBool(b, *e.Retryable)
	}
	return append(b, '}'), nil
}

// appendJSONString appends s as a JSON string exactly as encoding/json does
// by default (canonjson.EncodingJSON): the stored payload bytes, which
// receipts hash, must not change.
func appendJSONString(b []byte, s string) []byte {
	return canonjson.AppendString(b, s, canonjson.EncodingJSON)
}

// appendRawJSON appends the JSON text raw compacted, with '<' '>' '&'
// U+2028 U+2029 escaped, as encoding/json encodes a json.RawMessage. It
// fails with *errcode.Error InvalidArgument if raw is not valid JSON.
func appendRawJSON(b, raw []byte) ([]byte, error) {
	if bytes.ContainsAny(raw, "<>&\u2028\u2029") {
		esc, err := json.Marshal(json.RawMessage(raw)) // rare: let encoding/json escape
		if err != nil {
			return nil, errcode.Wrap(errcode.InvalidArgument, err, "encode raw JSON")
		}
		return append(b, esc...), nil
	}
	buf := bytes.NewBuffer(b)
	if err := json.Compact(buf, raw); err != nil {
		return nil, errcode.Wrap(errcode.InvalidArgument, err, "encode raw JSON")
	}
	return buf.Bytes(), nil
}

// UnmarshalJSON decodes an agent.toolReturned payload and re-validates it
// (Validate): a payload that breaks RFC 0064 §F or the schema — status ok
// with error, error status without error, forbidden with durationMs, error
// together with outcome, a missing status, ... — is rejected with
// *errcode.Error InvalidArgument and leaves r unchanged. Unknown members
// (e.g. causationHostId) are ignored. A present "outcome" (even null) counts
// as present.
func (r *ToolReturned) UnmarshalJSON(data []byte) error {
	var w returnedWire
	if err := json.Unmarshal(data, &w); err != nil {
		return errcode.Wrap(errcode.InvalidArgument, err, "decode agent.toolReturned")
	}
	v := ToolReturned{
		ref:       CallRef{AgentID: w.AgentID, ToolName: w.ToolName, CallID: w.CallID, ParentCallID: w.ParentCallID},
		status:    w.Status,
		outcome:   w.Outcome,
		err:       w.Error,
		receiptID: w.ReceiptID,
		ruleID:    w.RuleID,
	}
	if w.DurationMs != nil {
		v.durationMs, v.ran = *w.DurationMs, true
	}
	if err := v.Validate(); err != nil {
		return err
	}
	*r = v
	return nil
}

// SessionOpened is the payload of tool.session.opened (RFC 0078 §D,
// run-event-payloads.schema.json toolSessionOpened): JSON {sessionId,
// toolId}. It is content-free: identifiers only, never arguments, results or
// credentials.
type SessionOpened struct {
	// SessionID is unique per host and used on both bracket events.
	SessionID string `json:"sessionId"`
	// ToolID is the ToolDescriptor.toolId the session is for.
	ToolID string `json:"toolId"`
}

// Validate checks that SessionID and ToolID are non-empty valid UTF-8; it
// returns *errcode.Error InvalidArgument with details.field, or nil.
func (s SessionOpened) Validate() error {
	if err := checkID("sessionId", s.SessionID, 1, 1<<20); err != nil {
		return err
	}
	return checkID("toolId", s.ToolID, 1, 1<<20)
}

// The tool-session outcomes toolgate emits: the intersection of the schema's
// enum (completed, failed, cancelled) and the conformance scenario's
// (completed, failed, aborted, expired) (CONTRACT §1.4, §5.2).
const (
	// SessionCompleted: the session ended normally.
	SessionCompleted = "completed"
	// SessionFailed: the session ended in a failure (of any kind).
	SessionFailed = "failed"
)

// SessionClosed is the payload of tool.session.closed (RFC 0078 §D,
// run-event-payloads.schema.json toolSessionClosed): JSON {sessionId, toolId,
// outcome}, content-free. Outcome is SessionCompleted or SessionFailed only.
// Build one with NewSessionClosed; NewEvent runs Validate.
type SessionClosed struct {
	// SessionID matches the tool.session.opened sessionId.
	SessionID string `json:"sessionId"`
	// ToolID is the ToolDescriptor.toolId the session was for.
	ToolID string `json:"toolId"`
	// Outcome is "completed" or "failed".
	Outcome string `json:"outcome"`
}

// NewSessionClosed returns the tool.session.closed payload. It fails with
// *errcode.Error InvalidArgument when outcome is not "completed" or "failed"
// (the schema's "cancelled" fails the conformance scenario; CONTRACT §1.4) or
// an id is empty.
func NewSessionClosed(sessionID, toolID, outcome string) (SessionClosed, error) {
	s := SessionClosed{SessionID: sessionID, ToolID: toolID, Outcome: outcome}
	if err := s.Validate(); err != nil {
		return SessionClosed{}, err
	}
	return s, nil
}

// Validate checks the ids as SessionOpened.Validate does and that Outcome is
// "completed" or "failed"; it returns *errcode.Error InvalidArgument with
// details.field, or nil.
func (s SessionClosed) Validate() error {
	if err := (SessionOpened{SessionID: s.SessionID, ToolID: s.ToolID}).Validate(); err != nil {
		return err
	}
	if s.Outcome != SessionCompleted && s.Outcome != SessionFailed {
		return invalid("outcome", "invalid tool.session.closed: outcome must be completed or failed, got %q", s.Outcome)
	}
	return nil
}

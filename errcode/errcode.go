// Package errcode defines toolgate's one error type and its closed set of
// snake_case codes (DESIGN.md decision 8).
//
// The same code string appears in Go (errcode.Error.Code), in the OpenWOP HTTP
// error envelope ({error, message, details}, flat), in MCP tools/call results
// (_meta["toolgate/error"].code), in events (agent.toolReturned.error.code)
// and in receipts (error.code). Each transport maps an error to its wire form
// with exactly one function.
//
// errcode is a leaf package: it imports the standard library only.
package errcode

import (
	"errors"
	"fmt"
	"net/http"
)

// Code is one of the closed set of snake_case error codes below.
type Code string

// The closed set of codes. Gate refusals, gateway faults and tool failures
// each have their own code; HTTPStatus gives the HTTP status of each.
const (
	// InvalidArgument: a request or its arguments are malformed.
	InvalidArgument Code = "invalid_argument"
	// InvalidConfig: a configuration or policy document has issues.
	InvalidConfig Code = "invalid_config"
	// Unauthenticated: missing or invalid credentials.
	Unauthenticated Code = "unauthenticated"
	// Forbidden: the gate refused the call (policy, scopes, hook, fail-closed).
	Forbidden Code = "forbidden"
	// NotFound: unknown tool, run, approval or receipt (also an undisclosed tool).
	NotFound Code = "not_found"
	// AmbiguousTool: a bare tool name that more than one server offers.
	AmbiguousTool Code = "ambiguous_tool"
	// RateLimited: the (principal, toolId) token bucket is empty (RFC 0064 §D).
	RateLimited Code = "rate_limited"
	// RateLimitUnavailable: the shared rate limiter (Redis) cannot answer,
	// so the call is refused (ratelimit.on_unavailable: deny, fail closed).
	RateLimitUnavailable Code = "ratelimit_unavailable"
	// ApprovalRequired: the call needs a human approval that has not arrived yet.
	ApprovalRequired Code = "approval_required"
	// ApprovalDenied: an approver denied the call.
	ApprovalDenied Code = "approval_denied"
	// ApprovalExpired: the approval expired before dispatch.
	ApprovalExpired Code = "approval_expired"
	// ToolExecutionFailed: the tool itself failed (an error or panic in the tool).
	ToolExecutionFailed Code = "tool_execution_failed"
	// ResultWithheld: the tool ran, but an enforce hook refused to release
	// its result (the hook failed or objected after the call).
	ResultWithheld Code = "result_withheld"
	// UpstreamUnavailable: the upstream server backing the tool is down.
	UpstreamUnavailable Code = "upstream_unavailable"
	// UpstreamProtocolError: the upstream received the request but its answer
	// is not a valid response to it (a body that is not JSON-RPC, a response
	// with another id, "result": null or a result that is not a
	// CallToolResult). The tool may have run: the record carries durationMs
	// and details.ran = "unknown" (OpenWOP RFC 0064 §F).
	UpstreamProtocolError Code = "upstream_protocol_error"
	// UpstreamCrashed: the upstream received the request, then its process
	// exited or its connection ended before it answered. The tool may have
	// run: the record carries durationMs and details.ran = "unknown".
	UpstreamCrashed Code = "upstream_crashed"
	// GatewayRestarted: the gateway stopped (a crash, kill -9) while the call
	// ran; the next start closes the call with this code (no durationMs,
	// details.ran = "unknown"). Only ever seen in records, never by a caller.
	GatewayRestarted Code = "gateway_restarted"
	// ResponseTooLarge: an HTTP tool's response body was longer than its
	// max_response_bytes; the result holds the cut body and a note.
	ResponseTooLarge Code = "response_too_large"
	// EgressDenied: the gateway's SSRF guard (internal/egress, OpenWOP RFC
	// 0076 safe-fetch) refused an outbound request: a host not allowed, an
	// address in a refused class (loopback, link-local, private, ...), or
	// too many redirects. details: {rule, host}, never more. The request
	// never reached the refused address.
	EgressDenied Code = "egress_denied"
	// Timeout: the call exceeded its deadline.
	Timeout Code = "timeout"
	// Cancelled: the caller cancelled the call.
	Cancelled Code = "cancelled"
	// AuditUnavailable: the audit store cannot record the call, so it is refused.
	AuditUnavailable Code = "audit_unavailable"
	// ToolChanged: the tool's definition is held by pinning (pinning.mode
	// enforce): it is new or changed since an operator approved it, and is
	// neither listed nor callable until approved (`toolgate tools approve`).
	ToolChanged Code = "tool_changed"
	// Conflict: a state conflict (for example an approval already resolved).
	Conflict Code = "conflict"
	// ReplayDivergence: a call of a replay (toolgate/replayOf) differs from
	// the recorded call at its place in the recorded call graph (another
	// tool, other arguments, another order, another decision, another
	// result of a deterministic tool, or no recorded call there); details
	// name the recorded and the new call and what differed.
	ReplayDivergence Code = "replay_divergence"
	// Internal: a bug; never used for expected conditions.
	Internal Code = "internal_error"
)

var statuses = map[Code]int{
	InvalidArgument:       http.StatusBadRequest,
	InvalidConfig:         http.StatusBadRequest,
	Unauthenticated:       http.StatusUnauthorized,
	Forbidden:             http.StatusForbidden,
	NotFound:              http.StatusNotFound,
	AmbiguousTool:         http.StatusBadRequest,
	RateLimited:           http.StatusTooManyRequests,
	RateLimitUnavailable:  http.StatusServiceUnavailable,
	ApprovalRequired:      http.StatusAccepted,
	ApprovalDenied:        http.StatusForbidden,
	ApprovalExpired:       http.StatusForbidden,
	ToolExecutionFailed:   http.StatusOK,
	ResultWithheld:        http.StatusOK,
	UpstreamUnavailable:   http.StatusBadGateway,
	UpstreamProtocolError: http.StatusBadGateway,
	UpstreamCrashed:       http.StatusBadGateway,
	GatewayRestarted:      http.StatusServiceUnavailable,
	ResponseTooLarge:      http.StatusBadGateway,
	EgressDenied:          http.StatusBadGateway,
	Timeout:               http.StatusGatewayTimeout,
	Cancelled:             499,
	AuditUnavailable:      http.StatusServiceUnavailable,
	ToolChanged:           http.StatusForbidden,
	Conflict:              http.StatusConflict,
	ReplayDivergence:      http.StatusOK,
	Internal:              http.StatusInternalServerError,
}

// Codes returns every code of the closed set, in no particular order; use
// it for exhaustiveness tests.
func Codes() []Code {
	out := make([]Code, 0, len(statuses))
	for c := range statuses {
		out = append(out, c)
	}
	return out
}

// Valid reports whether c is in the closed set.
func (c Code) Valid() bool { _, ok := statuses[c]; return ok }

// HTTPStatus is the HTTP status for c; unknown codes map to 500.
func (c Code) HTTPStatus() int {
	if s, ok := statuses[c]; ok {
		return s
	}
	return http.StatusInternalServerError
}

// Error is toolgate's error value: a code from the closed set, a human
// message (already free of secrets) and optional structured details that are
// safe to show to the caller. It may wrap a cause for errors.Is/As.
//
// errors.Is(err, &Error{Code: c}) matches any *Error in the chain with code c.
type Error struct {
	Code    Code           `json:"code"`
	Message string         `json:"message"`
	Details map[string]any `json:"details,omitempty"`
	cause   error
}

// New returns an *Error with code and message.
func New(code Code, message string) *Error { return &Error{Code: code, Message: message} }

// Errorf returns an *Error with code and a formatted message. A %w verb
// records the wrapped error as the cause.
func Errorf(code Code, format string, args ...any) *Error {
	err := fmt.Errorf(format, args...)
	return &Error{Code: code, Message: err.Error(), cause: errors.Unwrap(err)}
}

// Wrap returns an *Error with code whose message is message + ": " + cause.
func Wrap(code Code, cause error, message string) *Error {
	msg := message
	if cause != nil {
		msg = message + ": " + cause.Error()
	}
	return &Error{Code: code, Message: msg, cause: cause}
}

// WithDetails returns a copy of e with details set (merged over existing ones).
func (e *Error) WithDetails(details map[string]any) *Error {
	cp := *e
	cp.Details = make(map[string]any, len(e.Details)+len(details))
	for k, v := range e.Details {
		cp.Details[k] = v
	}
	for k, v := range details {
		cp.Details[k] = v
	}
	return &cp
}

// Error implements error as "code: message".
func (e *Error) Error() string { return string(e.Code) + ": " + e.Message }

// Unwrap returns the cause, if any.
func (e *Error) Unwrap() error { return e.cause }

// Is matches any *Error target with the same code.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

// As returns the first *Error in err's chain, or nil.
func As(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return nil
}

// CodeOf returns the code of the first *Error in err's chain, Internal for a
// non-nil error without one, and "" for nil.
func CodeOf(err error) Code {
	if err == nil {
		return ""
	}
	if e := As(err); e != nil {
		return e.Code
	}
	return Internal
}

package httpapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/catalog"
	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/identity"
	"github.com/toolgate/toolgate/internal/pipeline"
	"github.com/toolgate/toolgate/internal/tracing"
)

// CallRequest is the body of POST /v1/calls. ToolID is required (any
// spelling the catalog resolves, canonically the toolId); Args must be a
// JSON object (absent or null means {}); RunID, AgentID and ParentCallID
// are optional correlation ids (runId and parentCallId 1–128 bytes, agentId
// 3–256; defaults: a fresh run, agent core.system). Unknown members and
// members given twice ({"toolId":"a","toolId":"b"}) are refused. A plain
// value.
type CallRequest struct {
	ToolID       string          `json:"toolId"`
	Args         json.RawMessage `json:"args,omitempty"`
	RunID        string          `json:"runId,omitempty"`
	AgentID      string          `json:"agentId,omitempty"`
	ParentCallID string          `json:"parentCallId,omitempty"`
	// Record asks for the call to be recorded (redacted arguments and
	// result stored for replay); needs audit.record_scope, else 403
	// forbidden (details.reason record_scope), recorded.
	Record bool `json:"record,omitempty"`
	// ReplayOf replays the recorded run of that id (same tenant): see
	// pipeline.Call.ReplayOf. A divergence answers 200 status error, code
	// replay_divergence. Needs audit.record_scope.
	ReplayOf string `json:"replayOf,omitempty"`
}

// CallResponse is the 200 answer of POST /v1/calls: the call ran or was
// attempted. Status is ok (Outcome is the tool's result) or error (Error is
// set, Outcome never: RFC 0064 §F); DurationMs is present iff the tool ran.
// RunID and ToolID (the canonical id) are added to the contract's
// {callId, status, outcome | error, durationMs?, receiptId} so that a
// caller can read the call's events. Outcome is the tool's JSON result: for
// an upstream MCP tool its CallToolResult ({content, structuredContent?,
// …}), for an HTTP tool (http:<name>) the CallToolResult the gateway
// built from the API's answer (internal/httptool), for a native tool the
// value it returned. DurationMs is wall-clock
// milliseconds. Error.code is from the errcode closed set
// (tool_execution_failed, timeout, upstream_unavailable, cancelled, …). A
// plain value.
type CallResponse struct {
	CallID     string             `json:"callId"`
	RunID      string             `json:"runId"`
	ToolID     string             `json:"toolId"`
	Status     audit.Status       `json:"status"`
	Outcome    json.RawMessage    `json:"outcome,omitempty"`
	Error      *audit.ErrorObject `json:"error,omitempty"`
	DurationMs *int64             `json:"durationMs,omitempty"`
	ReceiptID  string             `json:"receiptId,omitempty"`
}

// objectArgs checks that raw is absent, null or a JSON object and returns
// it ({} for absent or null).
func objectArgs(raw json.RawMessage) (json.RawMessage, error) {
	t := bytes.TrimSpace(raw)
	if len(t) == 0 || string(t) == "null" {
		return json.RawMessage("{}"), nil
	}
	if t[0] != '{' {
		return nil, invalid("args", "args must be a JSON object")
	}
	return t, nil
}

// decodeCall parses a POST /v1/calls body. Errors: *errcode.Error
// invalid_argument (details.field when a member is at fault) for anything
// but one JSON object with a non-empty string toolId, object (or null) args
// and string ids, without unknown or duplicate members or trailing data
// (decodeJSON). It never panics.
func decodeCall(body []byte) (CallRequest, error) {
	var req CallRequest
	if err := decodeJSON(body, &req, true); err != nil {
		return CallRequest{}, err
	}
	if req.ToolID == "" {
		return CallRequest{}, invalid("toolId", "toolId is required")
	}
	args, err := objectArgs(req.Args)
	if err != nil {
		return CallRequest{}, err
	}
	req.Args = args
	return req, nil
}

// postCall serves POST /v1/calls: the call runs through the gate with
// transport http, attributed to the caller.
//
//   - 200 CallResponse: status ok, or status error for a failed call (the
//     tool's own failure, timeout, upstream_unavailable, …; RFC 0064 §F),
//     or for a replayed call (replayOf) that diverged from its recording
//     (replay_divergence, details {replayOf, differs, recorded, new});
//   - 403 forbidden (or approval_required) when the gate refused a tool the
//     caller may see: details {scope "tool", toolName, requiredScopes,
//     ruleId?, missingScopes?, callId, runId, receiptId};
//   - 429 rate_limited with Retry-After: details {scope "tool", limit,
//     window, current, retryAfterSeconds, rule ("ratelimits[i]"), per,
//     toolName, callId, runId, receiptId};
//   - 503 ratelimit_unavailable when the shared rate limiter (Redis) could
//     not answer and ratelimit.on_unavailable is deny (fail closed);
//   - 404 not_found, identical for an unknown tool and one the caller may
//     not see (the refusal is still recorded, DESIGN.md decision 5);
//   - 400 invalid_argument for arguments the tool's inputSchema rejects
//     (recorded, details {toolName, path, errors, callId, runId, receiptId}),
//     or invalid_config when that schema does not compile;
//   - 400 invalid_argument (bad body, args, ids), ambiguous_tool (only when
//     two or more visible tools share the spelling), 413 oversize body;
//   - 503 audit_unavailable / 500 internal_error when the call could not be
//     recorded.
func (h *Handler) postCall(w http.ResponseWriter, r *http.Request, p identity.Principal) error {
	body, err := h.readBody(w, r)
	if err != nil {
		return err
	}
	req, err := decodeCall(body)
	if err != nil {
		return err
	}
	// An incoming W3C traceparent is the parent of the call's span.
	res, err := h.pipe.Call(tracing.Extract(r.Context(), r.Header), pipeline.Call{
		Tool: req.ToolID, Args: req.Args, Principal: p, Transport: catalog.TransportHTTP,
		RunID: req.RunID, AgentID: req.AgentID, ParentCallID: req.ParentCallID,
		Record: req.Record, ReplayOf: req.ReplayOf,
	})
	if err != nil {
		return h.callError(r, p, req.ToolID, res, err)
	}
	if res.Hidden {
		return notFoundTool(req.ToolID)
	}
	refs := map[string]any{"callId": res.CallID, "runId": res.RunID}
	if res.ReceiptID != "" {
		refs["receiptId"] = res.ReceiptID
	}
	switch res.Status {
	case audit.StatusForbidden:
		if res.Err.Code == errcode.RateLimitUnavailable { // the gate could not decide: 503, retry later
			return withStatus(http.StatusServiceUnavailable, res.Err.WithDetails(refs))
		}
		return withStatus(http.StatusForbidden, res.Err.WithDetails(refs))
	case audit.StatusRateLimited:
		return withStatus(http.StatusTooManyRequests, res.Err.WithDetails(refs))
	case audit.StatusError:
		if c := res.Err.Code; c == errcode.AuditUnavailable || c == errcode.Internal {
			return res.Err.WithDetails(refs)
		}
		if !res.Ran && (res.Err.Code == errcode.InvalidArgument || res.Err.Code == errcode.InvalidConfig) {
			// Arguments the tool's inputSchema rejects (recorded; the
			// tool did not run): 400 with details.path.
			return withStatus(http.StatusBadRequest, res.Err.WithDetails(refs))
		}
	}
	out := CallResponse{CallID: res.CallID, RunID: res.RunID, ToolID: res.ToolID, Status: res.Status, ReceiptID: res.ReceiptID}
	if res.Ran {
		d := res.DurationMs
		out.DurationMs = &d
	}
	if res.Status == audit.StatusOK {
		out.Outcome = res.Output
		if len(out.Outcome) == 0 {
			out.Outcome = json.RawMessage("null")
		}
	} else {
		e := audit.ErrorObjectFrom(res.Err)
		out.Error = &e
	}
	h.writeJSON(w, r, http.StatusOK, out)
	return nil
}

// callError maps an error pipeline.Call returned before the call was under
// way, without disclosing a tool the caller may not see: not_found and an
// invalid_argument about a hidden tool's arguments both answer as unknown;
// ambiguous_tool lists only visible candidates. A message echoing name
// echoes it clipped (maxEcho).
func (h *Handler) callError(r *http.Request, p identity.Principal, name string, res *pipeline.Result, err error) error {
	e := errcode.As(err)
	if e == nil {
		return fmt.Errorf("running the call: %w", err)
	}
	e = scrubError(e, name) // the catalog's spelling errors echo the name
	switch e.Code {
	case errcode.NotFound:
		return notFoundTool(name)
	case errcode.AmbiguousTool:
		return h.visibleCandidates(r, p, name, e)
	case errcode.InvalidArgument:
		if res != nil && res.ToolID != "" && !h.pipe.Visible(r.Context(), p, res.ToolID) {
			return notFoundTool(name)
		}
		if res != nil && res.ToolID != "" {
			return e.WithDetails(map[string]any{"field": "args"})
		}
	}
	return e
}

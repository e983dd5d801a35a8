package store

import (
	"cmp"
	"context"
	"encoding/json"
	"slices"
	"time"

	"github.com/toolgate/toolgate/errcode"
)

// MaxRecordedRun bounds the calls RecordedRun returns for one run (the
// first MaxRecordedRun in order); a recorded run longer than that cannot be
// replayed past it.
const MaxRecordedRun = 10000

// RecordedCall is the content of one recorded call (issue 18): the call's
// place in its run and call graph, its REDACTED arguments and result, its
// outcome and its recorded duration. It is kept apart from the content-free
// events and receipts, under its own retention (config
// audit.record_retention), readable only by its tenant.
//
// ArgsHash is the call's requested argsHash (the hash of Args, which are the
// redacted arguments as audit.Redactor hashes them). ResultHash is the
// receipt's resultHash (lowercase hex SHA-256 of the result as the tool
// returned it, before redaction); Result is the redacted result, so
// sha256(Result) == ResultHash unless ResultRedacted (the redaction changed
// it). Status is an audit.Status (ok, error, forbidden, rate_limited);
// Error is set iff Status is not ok. Ran and DurationMs are the tool's
// (RFC 0064: durationMs iff the tool ran, reused on replay, never
// re-measured).
type RecordedCall struct {
	Tenant       string          `json:"tenant"`
	RunID        string          `json:"runId"`
	CallID       string          `json:"callId"`
	ParentCallID string          `json:"parentCallId,omitempty"`
	AgentID      string          `json:"agentId,omitempty"`
	Principal    string          `json:"principal"`
	ToolID       string          `json:"toolId"`
	Transport    string          `json:"transport,omitempty"`
	ReplayPolicy string          `json:"replayPolicy,omitempty"`
	Effect       string          `json:"effect"` // the decision's effect: allow, deny, require_approval
	RuleID       string          `json:"ruleId,omitempty"`
	ArgsHash     string          `json:"argsHash"`
	Args         json.RawMessage `json:"args"`
	Status       string          `json:"status"`
	Error        *RecordedError  `json:"error,omitempty"`
	Result       json.RawMessage `json:"result,omitempty"`
	// ResultRedacted is true when the redaction changed the result: Result
	// then does not hash to ResultHash.
	ResultRedacted bool      `json:"resultRedacted,omitempty"`
	ResultHash     string    `json:"resultHash,omitempty"`
	Ran            bool      `json:"ran"`
	DurationMs     int64     `json:"durationMs,omitempty"`
	ReceiptID      string    `json:"receiptId,omitempty"`
	StartedAt      time.Time `json:"startedAt"`
	// Seq is the call's append number within its run (0, 1, …; set by
	// the store). RecordedRun orders by StartedAt, then Seq (SortRecorded):
	// a parent call starts before, and is appended after, its children.
	Seq int64 `json:"seq"`
}

// RecordedError is the recorded error of a call that did not succeed: the
// errcode code and the redacted message and details, as the caller saw them.
type RecordedError struct {
	Code    string         `json:"code"`
	Message string         `json:"message"`
	Details map[string]any `json:"details,omitempty"`
}

// Validate checks that c can be stored: runId, callId, principal,
// toolId, argsHash, status and a zero-free startedAt are set, Args is a JSON
// object and Result, if any, is valid JSON. Errors: InvalidArgument naming
// the field.
func (c *RecordedCall) Validate() error {
	if c == nil {
		return errcode.New(errcode.InvalidArgument, "recorded call is nil")
	}
	for _, f := range []struct{ name, v string }{
		{"runId", c.RunID}, {"callId", c.CallID}, {"principal", c.Principal},
		{"toolId", c.ToolID}, {"argsHash", c.ArgsHash}, {"status", c.Status},
	} {
		if f.v == "" {
			return errcode.Errorf(errcode.InvalidArgument, "recorded call: %s is required", f.name).WithDetails(map[string]any{"field": f.name})
		}
	}
	if c.StartedAt.IsZero() {
		return errcode.New(errcode.InvalidArgument, "recorded call: startedAt is required").WithDetails(map[string]any{"field": "startedAt"})
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(c.Args, &obj) != nil || obj == nil {
		return errcode.New(errcode.InvalidArgument, "recorded call: args must be a JSON object").WithDetails(map[string]any{"field": "args"})
	}
	if len(c.Result) > 0 && !json.Valid(c.Result) {
		return errcode.New(errcode.InvalidArgument, "recorded call: result is not valid JSON").WithDetails(map[string]any{"field": "result"})
	}
	if (c.Status == "ok") == (c.Error != nil) {
		return errcode.New(errcode.InvalidArgument, "recorded call: error is set iff status is not ok").WithDetails(map[string]any{"field": "error"})
	}
	return nil
}

// Recordings keeps recorded calls (issue 18: record and replay). Every read
// is tenant-scoped: another tenant's call or run is not found. All methods
// are safe for concurrent use.
type Recordings interface {
	// AppendRecordedCall stores c (a copy) and sets c.Seq. Errors:
	// InvalidArgument (Validate); Conflict if tenant already has a recorded
	// call c.CallID; Cancelled, Timeout; AuditUnavailable.
	AppendRecordedCall(ctx context.Context, c *RecordedCall) error

	// RecordedCall returns tenant's recorded call callID. Errors: NotFound
	// (unknown, pruned or another tenant's); Cancelled, Timeout;
	// AuditUnavailable. The caller owns the result.
	RecordedCall(ctx context.Context, tenant, callID string) (*RecordedCall, error)

	// RecordedRun returns the recorded calls of tenant's run runID ordered
	// by Seq, at most MaxRecordedRun of them; an unknown run (or another
	// tenant's) yields an empty result and nil. Errors: Cancelled, Timeout;
	// AuditUnavailable. The caller owns the result.
	RecordedRun(ctx context.Context, tenant, runID string) ([]RecordedCall, error)

	// PruneRecordings deletes every recorded call that started before before
	// (config audit.record_retention) and returns how many it deleted.
	// Errors: Cancelled, Timeout; AuditUnavailable.
	PruneRecordings(ctx context.Context, before time.Time) (int64, error)
}

// SortRecorded orders calls as RecordedRun returns them: by StartedAt, then
// Seq. For backend implementers.
func SortRecorded(calls []RecordedCall) {
	slices.SortStableFunc(calls, func(a, b RecordedCall) int {
		if c := a.StartedAt.Compare(b.StartedAt); c != 0 {
			return c
		}
		return cmp.Compare(a.Seq, b.Seq)
	})
}

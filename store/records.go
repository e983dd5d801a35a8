package store

import (
	"time"
	"unicode/utf8"

	"github.com/toolgate/toolgate/errcode"
)

// ApprovalStatus is the state of an approval.
type ApprovalStatus string

// The approval states. Transitions: pending → approved | denied | expired
// (Approval.Resolve), approved → consumed (Approval.Consume). approved waits
// to be consumed by the one call it authorises; denied, expired and
// consumed are final.
const (
	ApprovalPending  ApprovalStatus = "pending"
	ApprovalApproved ApprovalStatus = "approved"
	ApprovalDenied   ApprovalStatus = "denied"
	ApprovalExpired  ApprovalStatus = "expired"
	ApprovalConsumed ApprovalStatus = "consumed"
)

// Valid reports whether s is one of the approval states.
func (s ApprovalStatus) Valid() bool {
	switch s {
	case ApprovalPending, ApprovalApproved, ApprovalDenied, ApprovalExpired, ApprovalConsumed:
		return true
	}
	return false
}

// Approval is a request for a human decision on one call, bound to the
// principal, the tool and the arguments' hash, valid until ExpiresAt.
// Times are stored with nanosecond precision and returned in UTC. An
// Approval is a plain value; stores copy it in and out.
type Approval struct {
	ID        string `json:"id"`               // unique across tenants; 1–256 bytes of UTF-8
	Tenant    string `json:"tenant,omitempty"` // "" for a single-tenant deployment
	Principal string `json:"principal"`        // who asked (the call's principal id); required
	ToolID    string `json:"toolId"`           // the canonical toolId; required
	ArgsHash  string `json:"argsHash"`         // the call's argsHash (64 lowercase hex); required
	// ArgsBinding binds the approval to the exact arguments: an HMAC (hex)
	// of the canonical, unredacted arguments (approval.Manager computes
	// it). argsHash alone is not enough: it is computed over redacted
	// arguments. Optional for the store.
	ArgsBinding string `json:"argsBinding,omitempty"`
	// ArgsSummary is what an approver is shown of the arguments: their
	// SR-1-redacted canonical JSON, cut short (approval.MaxArgsSummary);
	// "" for approvals stored without one. Optional; valid UTF-8, at most
	// 64 KiB.
	ArgsSummary string `json:"argsSummary,omitempty"`
	// RequestReason is why the call needs approval: the require_approval
	// rule's reason (SR-1 redacted; approval.Manager sets it, falling back
	// to naming the rule). Optional; valid UTF-8, at most 64 KiB.
	RequestReason string         `json:"requestReason,omitempty"`
	Status        ApprovalStatus `json:"status"`             // see the ApprovalStatus constants
	CreatedAt     time.Time      `json:"createdAt"`          // required
	ExpiresAt     time.Time      `json:"expiresAt,omitzero"` // zero: never expires; else after CreatedAt
	// ResolvedBy, Reason and ResolvedAt are set by Resolve; all three are
	// empty while pending.
	ResolvedBy string    `json:"resolvedBy,omitempty"` // who decided (an approver id, or the expiry sweeper)
	Reason     string    `json:"reason,omitempty"`     // why (free text, already free of secrets); may be ""
	ResolvedAt time.Time `json:"resolvedAt,omitzero"`  // when
}

// Resolution is a decision on a pending approval.
type Resolution struct {
	Status ApprovalStatus // ApprovalApproved, ApprovalDenied or ApprovalExpired
	By     string         // the approver (or the expiry sweeper); required
	Reason string         // optional free text, already free of secrets
	At     time.Time      // when; required
}

// Validate checks a new approval: ID is 1–256 bytes of valid UTF-8;
// Principal, ToolID and ArgsHash are non-empty valid UTF-8; Status is ""
// or pending; CreatedAt is set; ExpiresAt is zero or after CreatedAt; the
// resolution fields are empty. Errors: *errcode.Error InvalidArgument with
// details.field.
func (a *Approval) Validate() error {
	if a == nil {
		return invalidField("approval", "approval is nil")
	}
	if err := checkString("id", a.ID, true, 256); err != nil {
		return err
	}
	for _, f := range []struct{ name, v string }{{"tenant", a.Tenant}, {"principal", a.Principal}, {"toolId", a.ToolID}, {"argsHash", a.ArgsHash}, {"argsBinding", a.ArgsBinding}, {"argsSummary", a.ArgsSummary}, {"requestReason", a.RequestReason}} {
		if err := checkString(f.name, f.v, f.name != "tenant" && f.name != "argsBinding" && f.name != "argsSummary" && f.name != "requestReason", 1<<16); err != nil {
			return err
		}
	}
	switch {
	case a.Status != "" && a.Status != ApprovalPending:
		return invalidField("status", "a new approval must be pending, not %q", a.Status)
	case a.CreatedAt.IsZero():
		return invalidField("createdAt", "createdAt is required")
	case !a.ExpiresAt.IsZero() && !a.ExpiresAt.After(a.CreatedAt):
		return invalidField("expiresAt", "expiresAt must be after createdAt")
	case a.ResolvedBy != "" || a.Reason != "" || !a.ResolvedAt.IsZero():
		return invalidField("resolvedBy", "a new approval has no resolution")
	}
	return nil
}

// Resolve returns a with res applied: a must be pending; res.Status must be
// approved, denied or expired, with By and At set. Approving or denying at
// or after ExpiresAt is refused (the approval has expired; resolve it as
// expired instead). Errors: *errcode.Error InvalidArgument for a bad res;
// Conflict with details.status (and details.reason "expired") otherwise.
// Backends run it on the stored state and store the result atomically.
func (a Approval) Resolve(res Resolution) (Approval, error) {
	switch res.Status {
	case ApprovalApproved, ApprovalDenied, ApprovalExpired:
	default:
		return a, invalidField("status", "cannot resolve an approval to %q", res.Status)
	}
	if err := checkString("resolvedBy", res.By, true, 1<<16); err != nil {
		return a, err
	}
	if err := checkString("reason", res.Reason, false, 1<<16); err != nil {
		return a, err
	}
	if res.At.IsZero() {
		return a, invalidField("resolvedAt", "the resolution time is required")
	}
	if a.Status != ApprovalPending {
		return a, errcode.Errorf(errcode.Conflict, "approval %q is %s, not pending", a.ID, a.Status).
			WithDetails(map[string]any{"status": string(a.Status)})
	}
	if res.Status != ApprovalExpired && a.expired(res.At) {
		return a, errcode.Errorf(errcode.Conflict, "approval %q expired at %s", a.ID, a.ExpiresAt.UTC().Format(time.RFC3339Nano)).
			WithDetails(map[string]any{"status": string(a.Status), "reason": "expired"})
	}
	a.Status, a.ResolvedBy, a.Reason, a.ResolvedAt = res.Status, res.By, res.Reason, res.At.UTC()
	return a, nil
}

// Consume returns a moved from approved to consumed at time at: the call it
// authorised is now dispatched, and no other call may use it. Errors:
// *errcode.Error InvalidArgument for a zero at; Conflict with details.status
// if a is not approved, or with details.reason "expired" if at is at or
// after ExpiresAt.
func (a Approval) Consume(at time.Time) (Approval, error) {
	if at.IsZero() {
		return a, invalidField("at", "the consumption time is required")
	}
	if a.Status != ApprovalApproved {
		return a, errcode.Errorf(errcode.Conflict, "approval %q is %s, not approved", a.ID, a.Status).
			WithDetails(map[string]any{"status": string(a.Status)})
	}
	if a.expired(at) {
		return a, errcode.Errorf(errcode.Conflict, "approval %q expired at %s", a.ID, a.ExpiresAt.UTC().Format(time.RFC3339Nano)).
			WithDetails(map[string]any{"status": string(a.Status), "reason": "expired"})
	}
	a.Status = ApprovalConsumed
	return a, nil
}

// expired reports whether a has an expiry and at is at or after it.
func (a Approval) expired(at time.Time) bool {
	return !a.ExpiresAt.IsZero() && !at.Before(a.ExpiresAt)
}

// Session is one tool session (RFC 0078 §D): opened, then closed once with
// an outcome. Times are returned in UTC. A Session is a plain value.
type Session struct {
	SessionID string    // unique across tenants; 1–256 bytes of UTF-8
	Tenant    string    // "" for a single-tenant deployment
	RunID     string    // the run the session belongs to; may be ""
	ToolID    string    // the canonical toolId; required
	Server    string    // the upstream server (MCP server name); may be ""
	OpenedAt  time.Time // required
	ClosedAt  time.Time // zero while open
	Outcome   string    // "" while open; audit.SessionCompleted or audit.SessionFailed once closed
}

// Validate checks a new (open) session: SessionID is 1–256 bytes of valid
// UTF-8, ToolID is non-empty, strings are valid UTF-8, OpenedAt is set,
// ClosedAt and Outcome are empty. Errors: *errcode.Error InvalidArgument
// with details.field.
func (s *Session) Validate() error {
	if s == nil {
		return invalidField("session", "session is nil")
	}
	if err := checkString("sessionId", s.SessionID, true, 256); err != nil {
		return err
	}
	for _, f := range []struct{ name, v string }{{"tenant", s.Tenant}, {"runId", s.RunID}, {"toolId", s.ToolID}, {"server", s.Server}} {
		if err := checkString(f.name, f.v, f.name == "toolId", 1<<16); err != nil {
			return err
		}
	}
	switch {
	case s.OpenedAt.IsZero():
		return invalidField("openedAt", "openedAt is required")
	case !s.ClosedAt.IsZero() || s.Outcome != "":
		return invalidField("closedAt", "a new session is open: no closedAt, no outcome")
	}
	return nil
}

// Close returns s closed at time at with outcome. Errors: *errcode.Error
// InvalidArgument for an empty or non-UTF-8 outcome or a zero at; Conflict
// if s is already closed.
func (s Session) Close(outcome string, at time.Time) (Session, error) {
	if err := checkString("outcome", outcome, true, 256); err != nil {
		return s, err
	}
	if at.IsZero() {
		return s, invalidField("closedAt", "the closing time is required")
	}
	if !s.ClosedAt.IsZero() {
		return s, errcode.Errorf(errcode.Conflict, "session %q is already closed", s.SessionID).
			WithDetails(map[string]any{"outcome": s.Outcome})
	}
	s.ClosedAt, s.Outcome = at.UTC(), outcome
	return s, nil
}

// checkString checks that v is valid UTF-8 of at most max bytes, and
// non-empty when required.
func checkString(field, v string, required bool, max int) error {
	switch {
	case required && v == "":
		return invalidField(field, "%s is required", field)
	case len(v) > max:
		return invalidField(field, "%s is longer than %d bytes", field, max)
	case !utf8.ValidString(v):
		return invalidField(field, "%s is not valid UTF-8", field)
	}
	return nil
}

// invalidField returns an InvalidArgument error naming field in details.
func invalidField(field, format string, args ...any) *errcode.Error {
	return errcode.Errorf(errcode.InvalidArgument, format, args...).WithDetails(map[string]any{"field": field})
}

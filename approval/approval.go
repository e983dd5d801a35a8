// Package approval makes require_approval a real outcome of the gate
// (issue 6): a call whose decision is require_approval waits, bounded, for
// a person to approve or deny it. An approval is bound to (tenant,
// principal, toolId, argsHash) and expires; it is stored durably
// (store.Approvals) so that pending approvals survive a restart, and every
// request and resolution is an audit event (toolgate.approval.requested,
// toolgate.approval.resolved).
//
// A waiting call resumes the moment its approval is resolved in this
// process (Manager.Resolve wakes it). An approval resolved by another
// process on the same store (another replica, the `toolgate approvals`
// command) wakes it at once when the store implements Watcher
// (store/postgres, through LISTEN/NOTIFY), and otherwise is seen by
// polling the store every PollInterval.
package approval

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/store"
)

// Event types of approvals (vendor types of the OpenWOP run-event envelope).
const (
	TypeRequested = "toolgate.approval.requested"
	TypeResolved  = "toolgate.approval.resolved"
)

// Defaults of Options (config approvals.ttl, approvals.wait,
// approvals.approvers_scope).
const (
	DefaultTTL            = 15 * time.Minute
	DefaultWait           = 30 * time.Second
	DefaultApproversScope = "toolgate:approve"
	// PollInterval is how often a waiting call re-reads a store that is
	// not a Watcher.
	PollInterval = 250 * time.Millisecond
	// WatchedPollInterval is how often a waiting call re-reads a store
	// that is a Watcher (a safety net: the store's wake-up is what resumes
	// it).
	WatchedPollInterval = 2 * time.Second
)

// Watcher is implemented by stores that learn when an approval is
// resolved by another process sharing them (store/postgres, through
// LISTEN/NOTIFY). WatchApproval returns a channel that receives a value
// whenever approval id may have changed state (buffered, never blocking
// the store; it carries no state, so the manager re-reads the approval)
// and a stop function that unregisters it (idempotent). Implementations
// must be safe for concurrent use.
type Watcher interface {
	WatchApproval(id string) (wake <-chan struct{}, stop func())
}

// MaxArgsSummary bounds Binding.ArgsSummary (bytes): a longer rendering is
// cut at a rune boundary and ends with "…".
const MaxArgsSummary = 400

// Binding identifies what an approval covers: this principal calling this
// tool with these arguments (by argsHash). Changed arguments are a
// different binding and never ride on an old approval.
type Binding struct {
	Tenant, Principal, ToolID, ArgsHash string
	// RunID and CallID identify the call that asked, for the events.
	RunID, CallID string
	// RuleID and Reason are the policy's, shown to the approver.
	RuleID, Reason string
	// Approver is the rule's approver: policy.ApproverUser asks the calling
	// user in-band when the context carries an Elicitor; "" (or no
	// Elicitor) waits for an approver principal.
	Approver string
	// ArgsSummary is a short, redacted rendering of the arguments (at most
	// MaxArgsSummary bytes), stored with the approval and shown to
	// approvers and to the user asked in-band. It is redacted again before
	// it is stored.
	ArgsSummary string
	// Args are the call's exact (unredacted) arguments, a JSON object. The
	// approval is bound to them by an HMAC (Options.BindingKey) of their
	// RFC 8785 canonical form, because ArgsHash covers redacted arguments:
	// two calls differing only in a secret-looking value share an argsHash
	// but never an approval. Never stored.
	Args []byte

	binding string // HMAC of Args, set by Await
}

// Elicitor asks the calling user, in-band (MCP elicitation), whether the
// call may run; approve is the answer, reason an optional note. An error
// (the client cannot answer) falls back to waiting for an approver.
type Elicitor func(ctx context.Context, message string) (approve bool, reason string, err error)

type elicitorKey struct{}

// WithElicitor returns ctx carrying e, for calls whose client can be asked
// in-band (the MCP gateway sets it when the client declared elicitation).
func WithElicitor(ctx context.Context, e Elicitor) context.Context {
	return context.WithValue(ctx, elicitorKey{}, e)
}

func elicitorFrom(ctx context.Context) Elicitor {
	e, _ := ctx.Value(elicitorKey{}).(Elicitor)
	return e
}

// Options configures New.
type Options struct {
	Store  store.Approvals // required
	Events audit.Log       // nil: no events
	// TTL is how long an approval stays usable after it is requested; Wait
	// how long a call waits for a decision before answering
	// approval_required. 0 means the defaults.
	TTL, Wait time.Duration
	// ApproversScope is the scope a principal needs to approve or deny.
	ApproversScope string
	// AllowSelfApproval lets the requester approve their own call.
	AllowSelfApproval bool
	// BindingKey keys the HMAC binding approvals to exact arguments (see
	// Binding.Args). Keep it stable across restarts (serve derives it from
	// the signing key), or pending approvals stop matching their retries.
	// nil: a random per-process key.
	BindingKey []byte
	Now        func() time.Time
	Logger     *slog.Logger
	// Poll is how often a waiting call re-reads the store for a decision
	// made elsewhere; 0 means WatchedPollInterval when Store is a Watcher,
	// PollInterval otherwise.
	Poll time.Duration
	// Redactor scrubs the free text a person gives (an approver's or the
	// user's reason) before it is stored or written to an event, and the
	// argument summary shown to approvers (DESIGN.md decision 9); nil: a
	// redactor with the key-name and shape rules only.
	Redactor *audit.Redactor
}

// Manager creates, resolves and consumes approvals. Safe for concurrent use.
type Manager struct {
	opts Options
	mu   sync.Mutex
	wake map[string][]chan struct{} // approval id → waiters

	approved, denied atomic.Int64        // resolutions since New (Resolve and in-band answers)
	expired          atomic.Int64        // approvals seen expired since New, each once
	expiredSeen      map[string]struct{} // ids counted in expired (under mu; bounded by maxExpiredSeen)
}

// Waiting is the number of calls of this Manager waiting now for a
// pending approval to be resolved (the metric toolgate_approvals_pending;
// approvals pending in the store with no call waiting are not counted).
// Safe for concurrent use.
func (m *Manager) Waiting() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, ws := range m.wake {
		n += len(ws)
	}
	return n
}

// Resolved is the number of approvals approved and denied since New, by an
// approver (Resolve) or in-band by the calling user (the metric
// toolgate_approvals_resolved_total{outcome="approved"|"denied"}). Safe for
// concurrent use.
func (m *Manager) Resolved() (approved, denied int64) { return m.approved.Load(), m.denied.Load() }

// Expired is the number of approvals this Manager saw expire unresolved
// since New: a waiting call reached the approval's expiry, or a retry found
// its pending approval expired and requested a new one. Each approval is
// counted once however many calls saw it (the metric
// toolgate_approvals_resolved_total{outcome="expired"}); one nobody waited
// for or retried is not seen, so not counted. Safe for concurrent use.
func (m *Manager) Expired() int64 { return m.expired.Load() }

// maxExpiredSeen bounds the ids remembered to count each expiry once; past
// it the memory starts afresh (an approval seen expired again after that is
// counted again).
const maxExpiredSeen = 4096

// sawExpired counts approval id as expired, once.
func (m *Manager) sawExpired(id string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.expiredSeen[id]; ok {
		return
	}
	if len(m.expiredSeen) >= maxExpiredSeen {
		clear(m.expiredSeen)
	}
	m.expiredSeen[id] = struct{}{}
	m.expired.Add(1)
}

// New returns a Manager. Errors: InvalidConfig without a Store or with a
// negative duration.
func New(opts Options) (*Manager, error) {
	if opts.Store == nil {
		return nil, errcode.New(errcode.InvalidConfig, "approval: a store is required")
	}
	if opts.TTL < 0 || opts.Wait < 0 || opts.Poll < 0 {
		return nil, errcode.New(errcode.InvalidConfig, "approval: ttl, wait and poll must not be negative")
	}
	if opts.Poll == 0 {
		opts.Poll = PollInterval
		if _, ok := opts.Store.(Watcher); ok {
			opts.Poll = WatchedPollInterval
		}
	}
	if opts.TTL == 0 {
		opts.TTL = DefaultTTL
	}
	if opts.Wait == 0 {
		opts.Wait = DefaultWait
	}
	if opts.ApproversScope == "" {
		opts.ApproversScope = DefaultApproversScope
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Redactor == nil {
		opts.Redactor = audit.NewRedactor()
	}
	if len(opts.BindingKey) == 0 {
		opts.BindingKey = make([]byte, 32)
		rand.Read(opts.BindingKey)
	}
	return &Manager{opts: opts, wake: map[string][]chan struct{}{}, expiredSeen: map[string]struct{}{}}, nil
}

// Wait is the configured wait.
func (m *Manager) Wait() time.Duration { return m.opts.Wait }

// Await returns once the call b may run on an approval: it consumes an
// approved, unexpired approval of b (exactly once, however many calls race
// for it) and returns its id. Otherwise it uses b's pending approval, or
// requests a new one, and waits up to Wait (or until ctx ends) for it to be
// resolved.
//
// Errors (*errcode.Error, details.approvalId set when an approval exists):
// ApprovalRequired when no decision arrived in time (details.retry says
// how to retry); ApprovalDenied; ApprovalExpired when it expired before
// the call could use it; Cancelled when ctx ended; AuditUnavailable when
// the store fails.
func (m *Manager) Await(ctx context.Context, b Binding) (string, *errcode.Error) {
	if e := m.bind(&b); e != nil {
		return "", e
	}
	if id, e := m.consumeApproved(ctx, b); id != "" || e != nil {
		return id, e
	}
	a, e := m.pendingFor(ctx, b)
	if e != nil {
		return "", e
	}
	if ask := elicitorFrom(ctx); ask != nil && b.Approver == policy.ApproverUser {
		if id, e, answered := m.askUser(ctx, b, a, ask); answered {
			return id, e
		}
	}
	ch := make(chan struct{}, 1)
	m.mu.Lock()
	m.wake[a.ID] = append(m.wake[a.ID], ch)
	m.mu.Unlock()
	defer m.unwait(a.ID, ch)
	var resolvedElsewhere <-chan struct{} // nil (never ready) unless the store is a Watcher
	if w, ok := m.opts.Store.(Watcher); ok {
		wake, stop := w.WatchApproval(a.ID)
		defer stop()
		resolvedElsewhere = wake
	}
	deadline := time.NewTimer(m.opts.Wait)
	defer deadline.Stop()
	poll := time.NewTicker(m.opts.Poll)
	defer poll.Stop()
	for {
		cur, err := m.opts.Store.GetApproval(context.WithoutCancel(ctx), b.Tenant, a.ID)
		if err != nil {
			return "", errcode.Wrap(errcode.AuditUnavailable, err, "reading approval "+a.ID)
		}
		switch cur.Status {
		case store.ApprovalApproved:
			return m.consume(ctx, b, cur)
		case store.ApprovalDenied:
			msg := fmt.Sprintf("%s: the approver denied the call", b.ToolID)
			if cur.Reason != "" {
				msg += ": " + cur.Reason
			}
			return "", errcode.New(errcode.ApprovalDenied, msg).WithDetails(map[string]any{"approvalId": cur.ID, "toolName": b.ToolID})
		case store.ApprovalExpired:
			m.sawExpired(cur.ID)
			return "", expired(cur)
		case store.ApprovalConsumed:
			return "", expired(cur)
		}
		if !cur.ExpiresAt.IsZero() && !m.opts.Now().Before(cur.ExpiresAt) {
			m.sawExpired(cur.ID)
			return "", expired(cur)
		}
		select {
		case <-ch:
		case <-resolvedElsewhere:
		case <-poll.C:
		case <-deadline.C:
			return "", m.required(a)
		case <-ctx.Done():
			return "", errcode.Wrap(errcode.Cancelled, ctx.Err(), "waiting for approval "+a.ID).WithDetails(map[string]any{"approvalId": a.ID})
		}
	}
}

// askUser asks the calling user in-band and records the answer like any
// other resolution (by "user:<principal>"). answered is false when the
// client could not answer (then the caller waits for an approver).
func (m *Manager) askUser(ctx context.Context, b Binding, a *store.Approval, ask Elicitor) (string, *errcode.Error, bool) {
	msg := fmt.Sprintf("Allow %s to run?\n\nReason: %s\nArguments: %s\nApproval id: %s", b.ToolID, b.Reason, b.ArgsSummary, a.ID)
	actx, cancel := context.WithTimeout(ctx, m.opts.Wait)
	approve, reason, err := ask(actx, msg)
	cancel()
	reason = m.opts.Redactor.RedactString(reason)
	if err != nil {
		m.opts.Logger.Info("in-band approval unavailable; waiting for an approver", "approvalId", a.ID, "err", err)
		return "", nil, false
	}
	status := store.ApprovalDenied
	if approve {
		status = store.ApprovalApproved
	}
	wctx := context.WithoutCancel(ctx)
	res, err := m.opts.Store.ResolveApproval(wctx, b.Tenant, a.ID, store.Resolution{Status: status, By: "user:" + b.Principal, Reason: reason, At: m.opts.Now()})
	if err != nil {
		return "", errcode.Wrap(errcode.AuditUnavailable, err, "recording the user's answer"), true
	}
	m.event(wctx, b.RunID, b.Tenant, b.Principal, TypeResolved, map[string]any{
		"approvalId": a.ID, "toolId": b.ToolID, "status": string(res.Status), "resolvedBy": "user:" + b.Principal, "reason": reason, "inBand": true,
	})
	if approve {
		m.approved.Add(1)
	} else {
		m.denied.Add(1)
	}
	if !approve {
		return "", errcode.Errorf(errcode.ApprovalDenied, "%s: the user declined the call", b.ToolID).
			WithDetails(map[string]any{"approvalId": a.ID, "toolName": b.ToolID}), true
	}
	id, e := m.consume(ctx, b, res)
	return id, e, true
}

// required is the approval_required answer for a.
func (m *Manager) required(a *store.Approval) *errcode.Error {
	return errcode.Errorf(errcode.ApprovalRequired, "%s needs an approval (id %s); ask an approver, then retry the same call with the same arguments before %s",
		a.ToolID, a.ID, a.ExpiresAt.UTC().Format(time.RFC3339)).
		WithDetails(map[string]any{"approvalId": a.ID, "toolName": a.ToolID, "expiresAt": a.ExpiresAt.UTC().Format(time.RFC3339),
			"retry": "retry the same call (same principal, tool and arguments) once the approval is approved"})
}

func expired(a *store.Approval) *errcode.Error {
	return errcode.Errorf(errcode.ApprovalExpired, "approval %s expired before the call could use it", a.ID).
		WithDetails(map[string]any{"approvalId": a.ID, "toolName": a.ToolID})
}

// consumeApproved consumes an approved approval of b, if there is one.
func (m *Manager) consumeApproved(ctx context.Context, b Binding) (string, *errcode.Error) {
	as, err := m.opts.Store.ListApprovals(context.WithoutCancel(ctx), b.Tenant, store.ApprovalApproved)
	if err != nil {
		return "", errcode.Wrap(errcode.AuditUnavailable, err, "listing approvals")
	}
	now := m.opts.Now()
	for i := range as {
		a := &as[i]
		if !matches(a, b) || (!a.ExpiresAt.IsZero() && !now.Before(a.ExpiresAt)) {
			continue
		}
		if _, err := m.opts.Store.ConsumeApproval(context.WithoutCancel(ctx), b.Tenant, a.ID, now); err == nil {
			return a.ID, nil
		}
		// Another call consumed it first (or it just expired): look on.
	}
	return "", nil
}

// consume consumes a (approved) for b.
func (m *Manager) consume(ctx context.Context, b Binding, a *store.Approval) (string, *errcode.Error) {
	if _, err := m.opts.Store.ConsumeApproval(context.WithoutCancel(ctx), b.Tenant, a.ID, m.opts.Now()); err != nil {
		if errcode.CodeOf(err) == errcode.Conflict {
			return "", expired(a)
		}
		return "", errcode.Wrap(errcode.AuditUnavailable, err, "consuming approval "+a.ID)
	}
	return a.ID, nil
}

// pendingFor returns b's pending, unexpired approval, creating it (and its
// requested event) if there is none.
func (m *Manager) pendingFor(ctx context.Context, b Binding) (*store.Approval, *errcode.Error) {
	wctx := context.WithoutCancel(ctx)
	as, err := m.opts.Store.ListApprovals(wctx, b.Tenant, store.ApprovalPending)
	if err != nil {
		return nil, errcode.Wrap(errcode.AuditUnavailable, err, "listing approvals")
	}
	now := m.opts.Now()
	for i := range as {
		if !matches(&as[i], b) {
			continue
		}
		if as[i].ExpiresAt.IsZero() || now.Before(as[i].ExpiresAt) {
			return &as[i], nil
		}
		m.sawExpired(as[i].ID) // pending past its expiry: a new one is requested
	}
	a := &store.Approval{ID: newID(), Tenant: b.Tenant, Principal: b.Principal, ToolID: b.ToolID, ArgsHash: b.ArgsHash,
		ArgsBinding: b.binding, ArgsSummary: m.opts.Redactor.RedactString(b.ArgsSummary),
		RequestReason: m.opts.Redactor.RedactString(requestReason(b)), CreatedAt: now, ExpiresAt: now.Add(m.opts.TTL)}
	if err := m.opts.Store.CreateApproval(wctx, a); err != nil {
		return nil, errcode.Wrap(errcode.AuditUnavailable, err, "storing the approval")
	}
	m.event(wctx, b.RunID, b.Tenant, b.Principal, TypeRequested, map[string]any{
		"approvalId": a.ID, "toolId": b.ToolID, "principal": b.Principal, "argsHash": b.ArgsHash,
		"callId": b.CallID, "ruleId": b.RuleID, "reason": b.Reason, "expiresAt": a.ExpiresAt.UTC().Format(time.RFC3339Nano),
	})
	return a, nil
}

// bind computes b's argument binding: HMAC-SHA256(BindingKey, toolId 0x00
// compact(args)), hex.
func (m *Manager) bind(b *Binding) *errcode.Error {
	args := b.Args
	if len(args) == 0 {
		args = []byte("{}")
	}
	// The arguments exactly as they will be forwarded, whitespace removed
	// (json.Compact keeps every number literal and key order): a canonical
	// form would map distinct large integers or high-precision numbers to
	// one value and let one approval cover both. A reordered object needs
	// its own approval, which errs on the safe side.
	var exact bytes.Buffer
	if err := json.Compact(&exact, args); err != nil {
		return errcode.Wrap(errcode.InvalidArgument, err, "approval: arguments are not valid JSON")
	}
	mac := hmac.New(sha256.New, m.opts.BindingKey)
	mac.Write([]byte(b.ToolID))
	mac.Write([]byte{0})
	mac.Write(exact.Bytes())
	b.binding = hex.EncodeToString(mac.Sum(nil))
	return nil
}

func matches(a *store.Approval, b Binding) bool {
	return a.Principal == b.Principal && a.ToolID == b.ToolID && a.ArgsHash == b.ArgsHash && a.ArgsBinding == b.binding
}

// Resolve approves (approve true) or denies tenant's pending approval id
// on behalf of approver, and wakes the calls waiting for it. reason is
// stored and written to the resolved event redacted (Options.Redactor). The approver
// needs ApproversScope and, unless AllowSelfApproval, must not be the
// requester. runID, when known, is the run the resolved event goes to (""
// uses "approval:<id>").
//
// Errors: Forbidden (missing scope, self-approval); NotFound (unknown or
// another tenant's); Conflict (not pending, or expired); AuditUnavailable.
func (m *Manager) Resolve(ctx context.Context, approver policy.Principal, id string, approve bool, reason string) (*store.Approval, error) {
	if !slices.Contains(approver.Scopes, m.opts.ApproversScope) {
		return nil, errcode.Errorf(errcode.Forbidden, "approving needs the scope %s", m.opts.ApproversScope).
			WithDetails(map[string]any{"requiredScopes": []string{m.opts.ApproversScope}})
	}
	a, err := m.opts.Store.GetApproval(ctx, approver.Tenant, id)
	if err != nil {
		return nil, err
	}
	reason = m.opts.Redactor.RedactString(reason)
	if a.Principal == approver.ID && !m.opts.AllowSelfApproval {
		return nil, errcode.New(errcode.Forbidden, "a principal may not approve its own call (approvals.allow_self_approval is off)")
	}
	status := store.ApprovalDenied
	if approve {
		status = store.ApprovalApproved
	}
	res, err := m.opts.Store.ResolveApproval(ctx, approver.Tenant, id, store.Resolution{Status: status, By: approver.ID, Reason: reason, At: m.opts.Now()})
	if err != nil {
		return nil, err
	}
	if approve {
		m.approved.Add(1)
	} else {
		m.denied.Add(1)
	}
	m.event(context.WithoutCancel(ctx), "approval:"+id, approver.Tenant, res.Principal, TypeResolved, map[string]any{
		"approvalId": id, "toolId": res.ToolID, "status": string(res.Status), "resolvedBy": approver.ID, "reason": reason,
	})
	m.mu.Lock()
	for _, ch := range m.wake[id] {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
	m.mu.Unlock()
	return res, nil
}

// List returns tenant's approvals with status ("" for all), oldest first.
func (m *Manager) List(ctx context.Context, tenant string, status store.ApprovalStatus) ([]store.Approval, error) {
	return m.opts.Store.ListApprovals(ctx, tenant, status)
}

func (m *Manager) unwait(id string, ch chan struct{}) {
	m.mu.Lock()
	defer m.mu.Unlock()
	ws := slices.DeleteFunc(m.wake[id], func(c chan struct{}) bool { return c == ch })
	if len(ws) == 0 {
		delete(m.wake, id)
	} else {
		m.wake[id] = ws
	}
}

// event appends an approval event (content-free: ids, hashes, reasons) of
// tenant, belonging to principal (the call's requester).
func (m *Manager) event(ctx context.Context, runID, tenant, principal, typ string, payload map[string]any) {
	if m.opts.Events == nil {
		return
	}
	if runID == "" {
		runID = "approval:" + fmt.Sprint(payload["approvalId"])
	}
	ev, err := audit.NewEvent(runID, typ, payload, "", m.opts.Now())
	if err != nil {
		m.opts.Logger.Error("approval event", "type", typ, "err", err)
		return
	}
	ev.Tenant, ev.Principal = tenant, principal
	if err := m.opts.Events.Append(ctx, ev); err != nil {
		m.opts.Logger.Error("approval event", "type", typ, "err", err)
	}
}

// newID returns "apr_" and 16 random bytes in hex.
func newID() string {
	var b [16]byte
	rand.Read(b[:])
	return "apr_" + hex.EncodeToString(b[:])
}

// requestReason is what an approver is told of why b needs approval: the
// rule's reason, else the rule's id.
func requestReason(b Binding) string {
	switch {
	case b.Reason != "":
		return b.Reason
	case b.RuleID != "":
		return "rule " + b.RuleID + " requires approval"
	}
	return ""
}

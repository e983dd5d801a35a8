package store

import (
	"context"
	"crypto/ed25519"
	"io"
	"time"

	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/receipt"
)

// Page sizes of the paginated reads (EventsByRun, EventsByTime,
// ReceiptsByChain, Checkpoints): a limit ≤ 0 means DefaultLimit, and a limit
// above MaxLimit is lowered to MaxLimit (see PageLimit).
const (
	DefaultLimit = 100
	MaxLimit     = 1000
)

// Events is the run-event log: append-only, one gap-free sequence per run,
// readable by run, by time and as a live feed.
//
// A run is identified by (Event.Tenant, Event.RunID), as in audit.Log. All
// methods are safe for concurrent use.
type Events interface {
	// AppendEvents appends events atomically and returns only once they are
	// durable (for a durable store). It follows the audit.Log Append
	// contract, with one deliberate widening, idempotent re-append:
	//
	//   - Every event is validated (nil, Event.Validate including the
	//     payload's JSON well-formedness): InvalidArgument with
	//     details.index, and nothing is appended. An EventID repeated within
	//     the batch is a Conflict.
	//   - Each new event gets Sequence = the next number of its run (0 for a
	//     run's first event, then +1, no gaps), in argument order; the
	//     batch's new events of one run get consecutive numbers.
	//   - Idempotent re-append: an event whose EventID is already stored with
	//     the same content (every field but Sequence equal; Timestamp by
	//     time.Equal, Payload byte for byte) is not stored again, and the
	//     caller's event gets the Sequence it was stored with. A retry after
	//     an ambiguous failure is therefore safe.
	//   - A batch mixing new and already-stored events: the stored ones are
	//     skipped as above (keeping their sequences), the new ones are
	//     appended atomically with consecutive sequences after the run's
	//     current last one; the skipped ones take no number.
	//   - An EventID already stored with different content (another run,
	//     tenant, type, payload, ...) is a Conflict with details.index, and
	//     the whole batch is rejected: nothing of it is appended.
	//   - Sequence is written into the caller's events only on success; on
	//     any error nothing of the batch was appended.
	//   - Appending no events returns nil; a ctx already done fails with
	//     Cancelled or Timeout. A store that cannot write fails with
	//     AuditUnavailable.
	//
	// The store copies what it keeps; the caller may reuse the events after
	// the call returns, but must not modify them during it.
	AppendEvents(ctx context.Context, events ...*audit.Event) error

	// EventsByRun returns the events of run (tenant, runID) with Sequence >
	// afterSeq (-1: from the first), ordered by Sequence, at most limit of
	// them (see PageLimit). An unknown run (or one of another tenant) yields
	// an empty result and nil. Errors: InvalidArgument for afterSeq < -1;
	// Cancelled, Timeout; AuditUnavailable. The caller owns the result.
	EventsByRun(ctx context.Context, tenant, runID string, afterSeq int64, limit int) ([]audit.Event, error)

	// EventsByTime returns tenant's events with from ≤ Timestamp < to (a zero
	// from or to leaves that side open), ordered by Timestamp and, for equal
	// timestamps, by the order they were stored, at most limit of them
	// (PageLimit), starting after cursor ("" or FromStart: from the first).
	//
	// next is the cursor to pass for the following page, or "" when this
	// page is the last (it holds fewer than limit events). Pagination is
	// keyset-based: across the pages of one walk no event appears twice and
	// none that was stored before the walk began is missed, whatever is
	// appended meanwhile; an event appended during the walk appears iff it
	// sorts after the cursor. A cursor is opaque (see Cursor); one from
	// EventsByTime or Follow is accepted by both.
	//
	// Errors: InvalidArgument for a malformed cursor; Cancelled, Timeout;
	// AuditUnavailable. The caller owns the result.
	EventsByTime(ctx context.Context, tenant string, from, to time.Time, cursor string, limit int) (events []audit.Event, next string, err error)

	// Follow streams tenant's events in the order they were stored (commit
	// order; within a run, Sequence order), each with the cursor that
	// resumes right after it. cursor "" starts with the events stored after
	// Follow returns; FromStart replays every stored event first; a cursor
	// from Followed.Cursor or EventsByTime resumes after that event. Stored
	// events are replayed from the store, then the stream switches to live
	// delivery without a gap or a duplicate.
	//
	// Delivery never blocks writers: each follower has a bounded buffer
	// that committing writers fill without waiting. A follower that falls
	// behind by more than its buffer is detached from the live feed and
	// catches up by reading the store from its last delivered event, then
	// re-attaches; it sees every event exactly once, in order, only later.
	//
	// The channel is closed when ctx is done, when the store is closed, or
	// when a catch-up read fails (the consumer can tell the last two from
	// the first by ctx.Err() == nil, and resume with the last cursor it
	// received). Errors (returned at once, no channel): InvalidArgument for a
	// malformed cursor or one ahead of the log; Cancelled, Timeout; AuditUnavailable for a closed
	// store.
	Follow(ctx context.Context, tenant, cursor string) (<-chan Followed, error)
}

// Receipts is the receipt log: one hash chain per signing key (chainId = the
// key id), linked by the store itself so that seq order is commit order.
// All methods are safe for concurrent use.
type Receipts interface {
	// ChainID is the id of the chain AppendReceipt appends to: the key id of
	// the store's signer (receipt.KeyID).
	ChainID() string

	// PublicKey is the store's signer's Ed25519 public key (32 bytes, a
	// copy), the key that verifies its chain (receipt.Verify).
	PublicKey() ed25519.PublicKey

	// AppendReceipt links r as the next receipt of the store's chain
	// (receipt.Chain.AppendWith: it sets r's V, ChainID, Seq, PrevHash and
	// Hash and normalises StartedAt), stores it and returns once it is
	// stored, durably for a durable store, and covered by a stored signed
	// checkpoint (see the backend's documentation for the exact window).
	// Receipts are stored in seq order without gaps.
	//
	// Errors: InvalidArgument for a receipt the chain rejects; Conflict if
	// its ReceiptID is already stored; Cancelled, Timeout (ctx ended before
	// the receipt was linked); AuditUnavailable if it could not be stored.
	// On any error r's chain fields are cleared, nothing is stored and the
	// chain does not advance. The caller must not touch r during the call.
	AppendReceipt(ctx context.Context, r *receipt.Receipt) error

	// ReceiptsByChain returns chain chainID's receipts with Seq ≥ fromSeq in
	// seq order, at most limit of them (PageLimit). Not tenant-scoped (see
	// the package doc). An unknown chain yields an empty result. Errors:
	// Cancelled, Timeout; AuditUnavailable. The caller owns the result.
	ReceiptsByChain(ctx context.Context, chainID string, fromSeq uint64, limit int) ([]*receipt.Receipt, error)

	// ReceiptByID returns tenant's receipt receiptID. Errors: NotFound if
	// there is none, or it belongs to another tenant; Cancelled, Timeout;
	// AuditUnavailable. The caller owns the result.
	ReceiptByID(ctx context.Context, tenant, receiptID string) (*receipt.Receipt, error)

	// Checkpoints returns chain chainID's stored signed checkpoints with
	// Seq ≥ fromSeq in seq order, at most limit of them (PageLimit). Not
	// tenant-scoped. Errors: Cancelled, Timeout; AuditUnavailable. The
	// caller owns the result.
	Checkpoints(ctx context.Context, chainID string, fromSeq uint64, limit int) ([]*receipt.Checkpoint, error)

	// ExportReceipts writes chain chainID from seq fromSeq as receipt JSON
	// Lines (receipt.Writer), each checkpoint right after the receipt it
	// signs, up to the newest checkpoint (see Export for the exact rules);
	// receipt.Verify accepts the result with VerifyOptions{From: fromSeq}.
	// Errors: as Export.
	ExportReceipts(ctx context.Context, w io.Writer, chainID string, fromSeq uint64) error
}

// Approvals keeps pending approvals and their resolution (see Approval for
// the state machine). All methods are tenant-scoped and safe for concurrent
// use; each transition is atomic.
type Approvals interface {
	// CreateApproval stores a new pending approval; a.Status "" is stored as
	// ApprovalPending. Errors: InvalidArgument if a fails Approval.Validate;
	// Conflict if an approval with a.ID exists (in any tenant);
	// AuditUnavailable.
	CreateApproval(ctx context.Context, a *Approval) error

	// GetApproval returns tenant's approval id. Errors: NotFound (unknown or
	// another tenant's); AuditUnavailable.
	GetApproval(ctx context.Context, tenant, id string) (*Approval, error)

	// ListApprovals returns every approval of tenant with the given status
	// ("" for every status), ordered by CreatedAt, then ID. It is not
	// paginated: meant for inboxes of pending approvals. Errors:
	// InvalidArgument for an unknown status; AuditUnavailable.
	ListApprovals(ctx context.Context, tenant string, status ApprovalStatus) ([]Approval, error)

	// ResolveApproval moves tenant's approval id from pending to res.Status
	// (Approval.Resolve) and returns the new state. Errors: NotFound;
	// Conflict if it is not pending (details.status), or res approves or
	// denies it at or after ExpiresAt (details.reason "expired");
	// InvalidArgument for a bad resolution; AuditUnavailable.
	ResolveApproval(ctx context.Context, tenant, id string, res Resolution) (*Approval, error)

	// ConsumeApproval moves tenant's approval id from approved to consumed
	// (Approval.Consume), which succeeds exactly once however many callers
	// race, and returns the new state. Errors: NotFound; Conflict if it is
	// not approved (details.status) or at is at or after ExpiresAt
	// (details.reason "expired"); AuditUnavailable.
	ConsumeApproval(ctx context.Context, tenant, id string, at time.Time) (*Approval, error)
}

// Sessions keeps tool sessions (RFC 0078 §D tool.session.opened/closed).
// All methods are tenant-scoped and safe for concurrent use.
type Sessions interface {
	// OpenSession stores a new open session. Errors: InvalidArgument if s
	// fails Session.Validate or is already closed; Conflict if a session
	// with s.SessionID exists (in any tenant); AuditUnavailable.
	OpenSession(ctx context.Context, s *Session) error

	// CloseSession closes tenant's session id with outcome at time at
	// (Session.Close) and returns the new state. Errors: NotFound; Conflict
	// if it is already closed; InvalidArgument for an empty outcome or a
	// zero at; AuditUnavailable.
	CloseSession(ctx context.Context, tenant, id, outcome string, at time.Time) (*Session, error)

	// GetSession returns tenant's session id. Errors: NotFound (unknown or
	// another tenant's); AuditUnavailable.
	GetSession(ctx context.Context, tenant, id string) (*Session, error)
}

// Store is a complete backend: events, receipts, approvals, sessions and
// recorded calls and tool-definition pins.
// Close stops accepting writes, waits for writes already accepted, closes
// every follower's channel and releases the backend's resources; calls made
// after Close fail with AuditUnavailable. Close is idempotent and safe for
// concurrent use.
type Store interface {
	Events
	Receipts
	Approvals
	Sessions
	Recordings
	Pins
	Close() error
}

// PageLimit normalises a read's limit: DefaultLimit for limit ≤ 0, MaxLimit
// for limit > MaxLimit, limit otherwise. For backend implementers.
func PageLimit(limit int) int {
	switch {
	case limit <= 0:
		return DefaultLimit
	case limit > MaxLimit:
		return MaxLimit
	}
	return limit
}

// PruneResult says what one Prune removed.
type PruneResult struct {
	// Events is the number of run events deleted.
	Events int64 `json:"events"`
	// Receipts is the number of receipts deleted (and Checkpoints the number
	// of signed checkpoints deleted with them).
	Receipts    int64 `json:"receipts"`
	Checkpoints int64 `json:"checkpoints"`
	// Anchor is the signed checkpoint the retained part of the receipt
	// chain now starts from (receipt seq Anchor.Seq + 1 is the first one
	// kept), nil when no receipt has ever been pruned.
	Anchor *receipt.Checkpoint `json:"anchor,omitempty"`
}

// Pruner is implemented by backends that enforce a retention period
// (config audit.retention).
type Pruner interface {
	// Prune deletes what is older than before, without ever breaking
	// receipt verification:
	//
	//   - Events: the longest prefix, in commit order, of events whose
	//     Timestamp is before before. A run whose events are pruned keeps
	//     its sequence: its next event continues after the last pruned one.
	//   - Receipts: every receipt up to and including the newest signed
	//     checkpoint signed before before, except the chain's head receipt
	//     (the chain resumes from it). That checkpoint is kept as the
	//     anchor: exports start with it and receipt.Verify continues from
	//     its signed hash. Older checkpoints go with their receipts.
	//
	// Prune works in bounded chunks between other writes, so the gateway
	// keeps serving while it runs; it is idempotent and may be interrupted
	// (ctx) at any point without leaving the store inconsistent. Approvals
	// and sessions are not pruned. Errors: Cancelled, Timeout;
	// AuditUnavailable.
	Prune(ctx context.Context, before time.Time) (PruneResult, error)
}

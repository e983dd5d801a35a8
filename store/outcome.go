package store

import (
	"context"
	"reflect"

	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/receipt"
)

// Outcomes is implemented by backends that can store a call's closing
// events and its receipt in one atomic write: the pipeline records
// agent.toolReturned and the call's receipt with it, so that a durable
// backend commits once where AppendEvents then AppendReceipt commit twice
// (DESIGN.md decision 7: both are durable before the result is returned).
// store/sqlite and store/memstore implement it. Implementations must be
// safe for concurrent use.
type Outcomes interface {
	// AppendOutcome appends events as Events.AppendEvents would and links
	// and stores r as Receipts.AppendReceipt would, atomically: both are
	// stored, or neither is. It returns once both are stored (durably, for a
	// durable store); the events reach followers in commit order, as
	// appended events do.
	//
	// events may be empty (then it is AppendReceipt). Errors are those of
	// AppendEvents (InvalidArgument with details.index for an invalid
	// event, Conflict for an EventID stored with different content) and of
	// AppendReceipt (InvalidArgument for a receipt the chain rejects,
	// Conflict for a stored ReceiptID); Cancelled, Timeout if ctx ended
	// before anything was stored; AuditUnavailable if the store could not
	// write. On any error nothing is stored, the chain does not advance,
	// r's chain fields are cleared (as AppendReceipt clears them) and the
	// events' Sequence is left as it was. The caller must not touch events
	// or r during the call.
	AppendOutcome(ctx context.Context, events []*audit.Event, r *receipt.Receipt) error
}

// OutcomeAppender is the optional interface of the receipt log ReceiptLog
// returns for a backend that implements Outcomes (internal/pipeline's
// OutcomeLog has exactly this method set): the pipeline uses it, when
// Covers says its event log is the same backend's, to record a call's
// closing events and its receipt in one atomic write. Safe for concurrent
// use if the backend is.
type OutcomeAppender interface {
	ReceiptAppender
	// AppendOutcome is Outcomes.AppendOutcome of the backend.
	AppendOutcome(ctx context.Context, events []*audit.Event, r *receipt.Receipt) error
	// Covers reports whether log appends to the same backend, so that
	// events appended through AppendOutcome land exactly where log.Append
	// would put them: true only for EventLog of the very same store value.
	Covers(log audit.Log) bool
}

// outcomeLog is ReceiptLog's adapter for a backend with Outcomes.
type outcomeLog struct {
	receiptLog
	o Outcomes
}

// AppendOutcome appends events and r through the backend, atomically.
func (l outcomeLog) AppendOutcome(ctx context.Context, events []*audit.Event, r *receipt.Receipt) error {
	return l.o.AppendOutcome(ctx, events, r)
}

// Covers reports whether log is EventLog of the same backend.
func (l outcomeLog) Covers(log audit.Log) bool {
	el, ok := log.(eventLog)
	return ok && sameValue(el.s, l.s)
}

// sameValue reports whether a and b hold the same comparable value (never
// panicking on incomparable dynamic types).
func sameValue(a, b any) bool {
	if a == nil || b == nil {
		return false
	}
	ta := reflect.TypeOf(a)
	if ta != reflect.TypeOf(b) || !ta.Comparable() {
		return false
	}
	return a == b
}

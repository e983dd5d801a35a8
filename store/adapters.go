package store

import (
	"context"

	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/receipt"
)

// EventLog adapts s to audit.Log, the interface the pipeline writes events
// through: Append is s.AppendEvents. It keeps the store's semantics,
// including idempotent re-append (an EventID already stored with the same
// content succeeds and keeps its sequence, where audit.MemoryLog answers
// Conflict); an EventID stored with different content is still a Conflict.
// Safe for concurrent use if s is.
func EventLog(s Events) audit.Log { return eventLog{s} }

type eventLog struct{ s Events }

// Append appends events through the store.
func (l eventLog) Append(ctx context.Context, events ...*audit.Event) error {
	return l.s.AppendEvents(ctx, events...)
}

// ReceiptAppender is the pipeline's receipt log (internal/pipeline's
// ReceiptLog has exactly this method set): Append links r (seq, prevHash,
// hash) and returns once it is stored.
type ReceiptAppender interface {
	Append(ctx context.Context, r *receipt.Receipt) error
}

// ReceiptLog adapts s to the pipeline's receipt log: Append is
// s.AppendReceipt, so it links r through the store's chain and returns once
// r is durably stored. If s also implements Outcomes, the result is an
// OutcomeAppender too, whose AppendOutcome the pipeline uses to record a
// call's closing events with its receipt in one write when its event log
// is EventLog(s). Safe for concurrent use if s is.
func ReceiptLog(s Receipts) ReceiptAppender {
	if o, ok := s.(Outcomes); ok {
		return outcomeLog{receiptLog{s}, o}
	}
	return receiptLog{s}
}

type receiptLog struct{ s Receipts }

// Append links and stores r through the store.
func (l receiptLog) Append(ctx context.Context, r *receipt.Receipt) error {
	return l.s.AppendReceipt(ctx, r)
}

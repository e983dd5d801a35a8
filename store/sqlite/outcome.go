package sqlite

import (
	"context"

	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/receipt"
	"github.com/toolgate/toolgate/store"
)

var _ store.Outcomes = (*Store)(nil)

// AppendOutcome implements store.Outcomes: the writer appends events and
// links r in one request of the group commit, so both are in the same
// transaction, and it returns once that transaction has committed (one
// commit where AppendEvents then AppendReceipt take two). Safe for
// concurrent use.
func (s *Store) AppendOutcome(ctx context.Context, events []*audit.Event, r *receipt.Receipt) error {
	const op = "append outcome"
	if err := store.ContextError(ctx, op); err != nil {
		return err
	}
	if r == nil {
		return errcode.New(errcode.InvalidArgument, "append outcome: nil receipt")
	}
	if len(events) == 0 {
		return s.AppendReceipt(ctx, r)
	}
	if err := store.CheckEvents(events); err != nil {
		return err
	}
	req := requestPool.Get().(*request)
	req.kind, req.ctx, req.events, req.rcpt = kindOutcome, ctx, events, r
	if cap(req.seqs) >= len(events) {
		req.seqs = req.seqs[:len(events)]
	} else {
		req.seqs = make([]int64, len(events))
	}
	err := s.w.submit(op, req)
	s.release(req)
	return err
}

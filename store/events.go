package store

import (
	"bytes"
	"context"
	"errors"

	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/errcode"
)

// CheckEvents runs the validation AppendEvents starts with: no event is nil,
// each passes audit.Event.Validate (payload well-formedness included), and
// no EventID appears twice. Errors: *errcode.Error InvalidArgument (with
// details.index, and details.field from Validate) or Conflict for a repeated
// EventID (details.index of the second occurrence). For backend
// implementers; safe for concurrent use on events nobody modifies.
func CheckEvents(events []*audit.Event) error {
	for i, ev := range events {
		if ev == nil {
			return errcode.Errorf(errcode.InvalidArgument, "append events: event %d is nil", i).
				WithDetails(map[string]any{"field": "event", "index": i})
		}
		if err := ev.Validate(); err != nil {
			e := errcode.As(err)
			if e == nil {
				e = errcode.Wrap(errcode.InvalidArgument, err, "append events")
			}
			return e.WithDetails(map[string]any{"index": i})
		}
	}
	dup := -1
	if len(events) <= 16 {
	outer:
		for i := 1; i < len(events); i++ {
			for j := range i {
				if events[i].EventID == events[j].EventID {
					dup = i
					break outer
				}
			}
		}
	} else {
		seen := make(map[string]struct{}, len(events))
		for i, ev := range events {
			if _, ok := seen[ev.EventID]; ok {
				dup = i
				break
			}
			seen[ev.EventID] = struct{}{}
		}
	}
	if dup >= 0 {
		return errcode.Errorf(errcode.Conflict, "append events: eventId %q is repeated in the batch", events[dup].EventID).
			WithDetails(map[string]any{"field": "eventId", "index": dup})
	}
	return nil
}

// SameEvent reports whether stored and ev are the same event for idempotent
// re-append: every field but Sequence is equal (Timestamp by time.Equal,
// Payload byte for byte). For backend implementers.
func SameEvent(stored, ev *audit.Event) bool {
	return stored.EventID == ev.EventID && stored.Tenant == ev.Tenant && stored.Principal == ev.Principal && stored.RunID == ev.RunID &&
		stored.Type == ev.Type && stored.Timestamp.Equal(ev.Timestamp) && stored.CausationID == ev.CausationID &&
		stored.SchemaVersion == ev.SchemaVersion && bytes.Equal(stored.Payload, ev.Payload)
}

// EventConflict is the error AppendEvents returns when the event at index
// of the batch re-uses a stored EventID with different content. For backend
// implementers, so that every backend words it alike.
func EventConflict(eventID string, index int) *errcode.Error {
	return errcode.Errorf(errcode.Conflict, "append events: eventId %q is already stored with different content", eventID).
		WithDetails(map[string]any{"field": "eventId", "index": index})
}

// ContextError returns nil if ctx is not done, and otherwise an
// *errcode.Error Timeout (deadline exceeded) or Cancelled wrapping ctx's
// error, with op as the message. For backend implementers.
func ContextError(ctx context.Context, op string) error {
	err := ctx.Err()
	if err == nil {
		return nil
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return errcode.Wrap(errcode.Timeout, err, op)
	}
	return errcode.Wrap(errcode.Cancelled, err, op)
}

// Unavailable wraps a storage failure (I/O error, closed store) as an
// *errcode.Error AuditUnavailable with op as the message; an error that
// already is an *errcode.Error is returned as it is, and a context error as
// Cancelled or Timeout. For backend implementers.
func Unavailable(op string, err error) error {
	if err == nil {
		return nil
	}
	if e := errcode.As(err); e != nil {
		return e
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return errcode.Wrap(errcode.Timeout, err, op)
	case errors.Is(err, context.Canceled):
		return errcode.Wrap(errcode.Cancelled, err, op)
	}
	return errcode.Wrap(errcode.AuditUnavailable, err, op)
}

// ErrClosed returns the AuditUnavailable error of an operation on a closed
// store.
func ErrClosed(op string) *errcode.Error {
	return errcode.New(errcode.AuditUnavailable, op+": the store is closed")
}

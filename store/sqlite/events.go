package sqlite

import (
	"context"
	"database/sql"
	"time"

	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/store"
)

// eventCols are the columns scanEvent reads, in order.
const eventCols = `pos, event_id, tenant, run_id, seq, type, ts, causation_id, schema_version, payload, principal`

// scanner is *sql.Row or *sql.Rows.
type scanner interface{ Scan(dest ...any) error }

// scanEvent reads one row of eventCols.
func scanEvent(sc scanner) (audit.Event, int64, error) {
	var (
		ev  audit.Event
		pos int64
		ts  string
	)
	if err := sc.Scan(&pos, &ev.EventID, &ev.Tenant, &ev.RunID, &ev.Sequence, &ev.Type, &ts, &ev.CausationID, &ev.SchemaVersion, &ev.Payload, &ev.Principal); err != nil {
		return audit.Event{}, 0, err
	}
	t, err := parseTime(ts)
	if err != nil {
		return audit.Event{}, 0, err
	}
	ev.Timestamp = t
	return ev, pos, nil
}

// AppendEvents implements store.Events.AppendEvents through the group
// commit writer; it returns once the transaction holding the events has
// committed.
func (s *Store) AppendEvents(ctx context.Context, events ...*audit.Event) error {
	const op = "append events"
	if err := store.ContextError(ctx, op); err != nil {
		return err
	}
	if len(events) == 0 {
		return nil
	}
	if err := store.CheckEvents(events); err != nil {
		return err
	}
	r := requestPool.Get().(*request)
	r.kind, r.ctx, r.events = kindEvents, ctx, events
	if cap(r.seqs) >= len(events) {
		r.seqs = r.seqs[:len(events)]
	} else {
		r.seqs = make([]int64, len(events))
	}
	err := s.w.submit(op, r)
	s.release(r)
	return err
}

// release resets r and returns it to the pool. Whatever submit returned, the
// writer no longer holds r: it finished r, or never took it and never will
// (ctx ended before r was queued, or the writer exited).
func (s *Store) release(r *request) {
	*r = request{done: r.done, seqs: r.seqs[:0]}
	requestPool.Put(r)
}

// EventsByRun implements store.Events.EventsByRun.
func (s *Store) EventsByRun(ctx context.Context, tenant, runID string, afterSeq int64, limit int) ([]audit.Event, error) {
	const op = "events by run"
	if err := s.readable(ctx, op); err != nil {
		return nil, err
	}
	if afterSeq < -1 {
		return nil, errcode.New(errcode.InvalidArgument, "events by run: afterSeq must be >= -1").
			WithDetails(map[string]any{"field": "afterSeq"})
	}
	rows, err := s.rdb.QueryContext(ctx, `SELECT `+eventCols+` FROM events
		WHERE tenant = ? AND run_id = ? AND seq > ? ORDER BY seq LIMIT ?`, tenant, runID, afterSeq, store.PageLimit(limit))
	if err != nil {
		return nil, store.Unavailable(op, err)
	}
	recs, err := collectEvents(rows)
	if err != nil {
		return nil, store.Unavailable(op, err)
	}
	out := make([]audit.Event, len(recs))
	for i := range recs {
		out[i] = recs[i].Event
	}
	return out, nil
}

// collectEvents reads every row of eventCols and closes rows.
func collectEvents(rows *sql.Rows) ([]store.Record, error) {
	defer rows.Close()
	out := []store.Record{}
	for rows.Next() {
		ev, pos, err := scanEvent(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, store.Record{Pos: pos, Event: ev})
	}
	return out, rows.Err()
}

// Bounds of the stored time strings for open ranges: every stored time
// sorts at or after minTime and before maxTime.
const (
	minTime = ""
	maxTime = "~"
)

// inRange reports whether t can be stored (years 0000–9999).
func inRange(t time.Time) bool {
	y := t.UTC().Year()
	return y >= 0 && y <= 9999
}

// EventsByTime implements store.Events.EventsByTime with a keyset query on
// (ts, pos).
func (s *Store) EventsByTime(ctx context.Context, tenant string, from, to time.Time, cursor string, limit int) ([]audit.Event, string, error) {
	const op = "events by time"
	if err := s.readable(ctx, op); err != nil {
		return nil, "", err
	}
	c, err := store.ParseCursor(cursor)
	if err != nil {
		return nil, "", err
	}
	lo, hi := minTime, maxTime
	switch {
	case from.IsZero() || from.UTC().Year() < 0:
	case from.UTC().Year() > 9999:
		return []audit.Event{}, "", nil
	default:
		lo = fmtTime(from)
	}
	switch {
	case to.IsZero() || to.UTC().Year() > 9999:
	case to.UTC().Year() < 0:
		return []audit.Event{}, "", nil
	default:
		hi = fmtTime(to)
	}
	afterTS, afterPos := minTime, int64(0)
	if !c.IsStart() {
		if !inRange(c.Time) {
			return nil, "", errcode.New(errcode.InvalidArgument, "malformed cursor").WithDetails(map[string]any{"field": "cursor"})
		}
		afterTS, afterPos = fmtTime(c.Time), c.Pos
	}
	limit = store.PageLimit(limit)
	rows, err := s.rdb.QueryContext(ctx, `SELECT `+eventCols+` FROM events
		WHERE tenant = ? AND ts >= ? AND ts < ? AND (ts, pos) > (?, ?) ORDER BY ts, pos LIMIT ?`,
		tenant, lo, hi, afterTS, afterPos, limit)
	if err != nil {
		return nil, "", store.Unavailable(op, err)
	}
	recs, err := collectEvents(rows)
	if err != nil {
		return nil, "", store.Unavailable(op, err)
	}
	out := make([]audit.Event, len(recs))
	for i := range recs {
		out[i] = recs[i].Event
	}
	next := ""
	if len(recs) == limit {
		next = recs[len(recs)-1].Cursor()
	}
	return out, next, nil
}

// Follow implements store.Events.Follow (store.Feed over the writer's
// commits; catch-up reads from the read pool). With Options.FollowPoll it
// also delivers other processes' commits to the file, polling.
func (s *Store) Follow(ctx context.Context, tenant, cursor string) (<-chan store.Followed, error) {
	if err := s.readable(ctx, "follow events"); err != nil {
		return nil, err
	}
	return s.feed.Follow(ctx, tenant, cursor)
}

// readAfter is the feed's catch-up read.
func (s *Store) readAfter(ctx context.Context, tenant string, after, upto int64, limit int) ([]store.Record, error) {
	if err := s.w.barrier(ctx, "follow events"); err != nil {
		return nil, err
	}
	rows, err := s.rdb.QueryContext(ctx, `SELECT `+eventCols+` FROM events
		WHERE pos > ? AND pos <= ? AND tenant = ? ORDER BY pos LIMIT ?`, after, upto, tenant, limit)
	if err != nil {
		return nil, store.Unavailable("follow events", err)
	}
	recs, err := collectEvents(rows)
	if err != nil {
		return nil, store.Unavailable("follow events", err)
	}
	return recs, nil
}

// OpenCalls returns every stored agent.toolCalled event (of any tenant)
// whose call has no agent.toolReturned (none with that event as its
// causationId), in commit order: the calls in flight when the gateway last
// stopped without finishing them (kill -9, a crash), or running now. It
// reads the whole event log once (a startup task; serve closes them with
// pipeline.CloseInterrupted before it serves). Errors: Cancelled, Timeout;
// AuditUnavailable. The caller owns the result. Safe for concurrent use.
func (s *Store) OpenCalls(ctx context.Context) ([]audit.Event, error) {
	const op = "open calls"
	if err := s.readable(ctx, op); err != nil {
		return nil, err
	}
	rows, err := s.rdb.QueryContext(ctx, `SELECT `+eventCols+` FROM events
		WHERE type = ? AND event_id IN (
			SELECT event_id FROM events WHERE type = ?
			EXCEPT SELECT causation_id FROM events WHERE type = ?)
		ORDER BY pos`, audit.TypeToolCalled, audit.TypeToolCalled, audit.TypeToolReturned)
	if err != nil {
		return nil, store.Unavailable(op, err)
	}
	recs, err := collectEvents(rows)
	if err != nil {
		return nil, store.Unavailable(op, err)
	}
	out := make([]audit.Event, len(recs))
	for i := range recs {
		out[i] = recs[i].Event
	}
	return out, nil
}

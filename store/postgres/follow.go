package postgres

import (
	"context"
	"math"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/toolgate/toolgate/store"
)

// feedPos is a follower's position in the feed order (feed.seq, then
// events.pos): it has delivered every event before it and none after. pos
// donePos means the whole batch seq is delivered.
type feedPos struct{ seq, pos int64 }

const donePos = math.MaxInt64

// followPage is the catch-up read size, in events.
const followPage = 256

// eventColsE is eventCols qualified by the events alias e.
const eventColsE = `e.pos, e.event_id, e.tenant, e.principal, e.run_id, e.seq, e.type, e.ts, e.causation_id, e.schema_version, e.payload`

// Follow implements store.Events.Follow across replicas: it delivers the
// events of tenant committed by any Store sharing the database schema, in
// commit order (the order of their transactions' feed numbers, then
// position), each once. cursor "" follows from the last committed event
// (everything committed after the call is delivered), store.FromStart
// from the start, and a cursor (of Follow or EventsByTime) from the event
// it names: everything after that event in the feed order is delivered,
// so reconnecting with the last delivered cursor has no gap and no
// duplicate. A cursor naming no stored event (a position never
// committed) resumes after the nearest stored event before it.
//
// A follower is woken by the NOTIFY of each commit (its own Store's
// commits wake it directly), re-reads the feed at least every
// Options.FollowPoll, and reads the store at its own pace: a slow follower
// never holds up writers. A read failure ends the follower (its channel
// is closed, as when ctx ends or the Store closes); resume with the last
// cursor.
//
// Errors: InvalidArgument for a malformed cursor or one ahead of the log
// (store.ErrCursorAhead); AuditUnavailable (closed store, failed read);
// Cancelled, Timeout.
func (s *Store) Follow(ctx context.Context, tenant, cursor string) (<-chan store.Followed, error) {
	const op = "follow events"
	if err := s.readable(ctx, op); err != nil {
		return nil, err
	}
	var after feedPos
	switch cursor {
	case "":
		head, err := s.feedHead(ctx)
		if err != nil {
			return nil, err
		}
		after = feedPos{head, donePos}
	case store.FromStart:
		after = feedPos{0, donePos}
	default:
		c, err := store.ParseCursor(cursor)
		if err != nil {
			return nil, err
		}
		if after, err = s.cursorPos(ctx, c); err != nil {
			return nil, err
		}
	}
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		return nil, store.ErrClosed(op)
	}
	s.followers.Add(1)
	s.mu.RUnlock()
	out := make(chan store.Followed)
	go s.follow(ctx, tenant, after, out)
	return out, nil
}

// feedHead returns the last committed feed number (0 if none). Numbers
// commit in order, so every batch up to it is committed.
func (s *Store) feedHead(ctx context.Context) (int64, error) {
	var head int64
	if err := s.pool.QueryRow(ctx, `SELECT seq FROM feed_head`).Scan(&head); err != nil {
		return 0, store.Unavailable("follow events", err)
	}
	return head, nil
}

// cursorPos returns the feed position right after the event c names (or,
// if no stored event has c.Pos, after the nearest stored one before it).
// Errors: store.ErrCursorAhead if c.Pos is beyond every stored event.
func (s *Store) cursorPos(ctx context.Context, c store.Cursor) (feedPos, error) {
	if c.IsStart() {
		return feedPos{0, donePos}, nil
	}
	var (
		last *int64
		seq  *int64
	)
	err := s.pool.QueryRow(ctx, `SELECT (SELECT max(pos) FROM events),
		(SELECT f.seq FROM events e JOIN feed f ON f.xid = e.xid WHERE e.pos <= $1 ORDER BY e.pos DESC LIMIT 1)`, c.Pos).Scan(&last, &seq)
	if err != nil {
		return feedPos{}, store.Unavailable("follow events", err)
	}
	if last == nil || c.Pos > *last {
		return feedPos{}, store.ErrCursorAhead()
	}
	if seq == nil {
		return feedPos{0, donePos}, nil
	}
	return feedPos{*seq, c.Pos}, nil
}

// readFeed reads tenant's events after `after`, in feed order, in batches
// up to upto, at most limit of them.
func (s *Store) readFeed(ctx context.Context, tenant string, after feedPos, upto int64, limit int) ([]store.Record, []int64, error) {
	rows, err := s.pool.Query(ctx, `SELECT f.seq, `+eventColsE+` FROM feed f JOIN events e ON e.xid = f.xid AND e.tenant = $1
		WHERE f.seq >= $2 AND f.seq <= $3 AND (f.seq > $2 OR e.pos > $4)
		ORDER BY f.seq, e.pos LIMIT $5`, tenant, after.seq, upto, after.pos, limit)
	if err != nil {
		return nil, nil, store.Unavailable("follow events", err)
	}
	defer rows.Close()
	var (
		recs []store.Record
		seqs []int64
	)
	for rows.Next() {
		var fseq int64
		rec, err := scanRecord(prefixed{rows, &fseq})
		if err != nil {
			return nil, nil, store.Unavailable("follow events", err)
		}
		recs, seqs = append(recs, rec), append(seqs, fseq)
	}
	if err := rows.Err(); err != nil {
		return nil, nil, store.Unavailable("follow events", err)
	}
	return recs, seqs, nil
}

// prefixed is a pgx.Row whose first column goes to first and the rest to
// Scan's destinations.
type prefixed struct {
	row   pgx.Row
	first *int64
}

func (p prefixed) Scan(dest ...any) error { return p.row.Scan(append([]any{p.first}, dest...)...) }

// follow is a follower's goroutine: read the feed after `after` up to the
// last committed batch, deliver, then wait for a wake-up (a notification,
// a commit of this Store, FollowPoll) and again, until ctx ends or the
// Store closes.
func (s *Store) follow(ctx context.Context, tenant string, after feedPos, out chan<- store.Followed) {
	defer s.followers.Done()
	defer close(out)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(s.base, cancel)()
	t := time.NewTimer(s.followPoll)
	defer t.Stop()
	for {
		wake := s.newEvents.wait()
		upto, err := s.feedHead(ctx)
		for err == nil && (after.seq < upto || (after.seq == upto && after.pos != donePos)) {
			var (
				recs []store.Record
				seqs []int64
			)
			if recs, seqs, err = s.readFeed(ctx, tenant, after, upto, followPage); err != nil {
				break
			}
			for i := range recs {
				select {
				case out <- store.Followed{Event: recs[i].Event, Cursor: recs[i].Cursor()}:
				case <-ctx.Done():
					return
				}
				after = feedPos{seqs[i], recs[i].Pos}
			}
			if len(recs) < followPage {
				after = feedPos{upto, donePos} // no more of tenant's events up to upto
			}
		}
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("store/postgres: follow: read failed; ending the follower", "tenant", tenant, "err", err)
			}
			return
		}
		t.Reset(s.followPoll)
		select {
		case <-wake:
		case <-t.C:
		case <-ctx.Done():
			return
		}
	}
}

package sqlite

import (
	"context"
	"database/sql"
	"strings"

	"github.com/toolgate/toolgate/store"
)

// Events are inserted with multi-row INSERT statements: the writer stages
// the events of a batch's requests with optimistically assigned sequences
// (as if none was stored yet) and flushes them in statements of up to
// maxInsertRows rows, which costs one statement execution per chunk instead
// of one per event. The statements are INSERT OR IGNORE: they can never
// abort halfway, so SQLite needs no statement journal for them. If a chunk
// inserts fewer rows than it holds (an event id already stored, or appended
// twice in the batch), the rows the flush inserted are deleted again (they
// are exactly those after the last position before it) and its requests are
// applied one by one (applyEvents), which handles idempotent re-append and
// conflicts per request. Either way the results are those of applying the
// requests one after the other.

// maxInsertRows is the largest multi-row INSERT (9 parameters per row).
const maxInsertRows = 64

// eventColumns is the column list of an event row insert.
const eventColumns = `event_id, tenant, run_id, seq, type, ts, causation_id, schema_version, payload, principal`

// stagedRow is one staged event: r.events[idx], to be stored with seq.
type stagedRow struct {
	r   *request
	idx int
	seq int64
}

// stager is the writer's staging state for the open transaction.
type stager struct {
	rows  []stagedRow
	reqs  []*request       // staged requests, in order
	undo  map[runKey]int64 // pending values before the first staged row; -1: absent
	stmts map[int]*sql.Stmt
	args  []any
}

// insertStmt returns the prepared INSERT of n rows.
func (w *writer) insertStmt(n int) (*sql.Stmt, error) {
	if st := w.stage.stmts[n]; st != nil {
		return st, nil
	}
	var b strings.Builder
	b.WriteString("INSERT OR IGNORE INTO events (" + eventColumns + ") VALUES ")
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString("(?,?,?,?,?,?,?,?,?,?)")
	}
	st, err := w.conn.PrepareContext(context.Background(), b.String())
	if err != nil {
		return nil, err
	}
	if w.stage.stmts == nil {
		w.stage.stmts = map[int]*sql.Stmt{}
	}
	w.stage.stmts[n] = st
	return st, nil
}

// stageEvents assigns r's events the next sequences of their runs and
// stages them; it flushes when maxInsertRows rows are staged.
func (w *writer) stageEvents(r *request) {
	st := &w.stage
	if st.undo == nil {
		st.undo = map[runKey]int64{}
	}
	for i, ev := range r.events {
		k := runKey{ev.Tenant, ev.RunID}
		n, err := w.stageSeq(k)
		if err != nil {
			w.fatal = err
			return
		}
		if _, seen := st.undo[k]; !seen {
			old, ok := w.pending[k]
			if !ok {
				old = -1
			}
			st.undo[k] = old
		}
		w.pending[k] = n + 1
		st.rows = append(st.rows, stagedRow{r: r, idx: i, seq: n})
	}
	st.reqs = append(st.reqs, r)
	if len(st.rows) >= maxInsertRows {
		w.flush()
	}
}

// stageSeq is nextSeq for a staged row, without nextSeq's MAX(seq) query
// for a run that is neither cached nor pending and has no run head (no
// prune deleted any of its events; run_heads is checked only when it is
// not empty, which it is until the first prune): such a run is staged at
// sequence 0. If the run has stored events, its event at sequence 0 is one
// of them (sequences start at 0, and only a prune, which records the run in
// run_heads in the same transaction, deletes committed events), so the
// INSERT OR IGNORE ignores the staged row and flush applies the requests
// one by one with nextSeq. Every call without a caller-given run id starts
// a new run, so this saves a query per call.
func (w *writer) stageSeq(k runKey) (int64, error) {
	if n, ok := w.cachedSeq(k); ok {
		return n, nil
	}
	if !w.headless {
		var head bool
		if err := w.st.findHead.QueryRow(k.tenant, k.runID).Scan(&head); err != nil {
			return 0, err
		}
		if head {
			return w.nextSeq(k)
		}
	}
	return 0, nil
}

// flush inserts the staged rows (see the comment at the top of the file).
func (w *writer) flush() {
	st := &w.stage
	if len(st.rows) == 0 {
		return
	}
	defer w.resetStage()
	recs := len(w.recs)
	before := w.lastPos // every row of the flush gets a position after it
	if recs > 0 {
		before = w.recs[recs-1].Pos
	}
	ok := true
	for done := 0; done < len(st.rows) && ok; {
		n := min(len(st.rows)-done, maxInsertRows)
		chunk := st.rows[done : done+n]
		stmt, err := w.insertStmt(n)
		if err != nil {
			w.fatal = err
			return
		}
		st.args = st.args[:0]
		for _, row := range chunk {
			ev := row.r.events[row.idx]
			st.args = append(st.args, ev.EventID, ev.Tenant, ev.RunID, row.seq, ev.Type, fmtTime(ev.Timestamp),
				ev.CausationID, ev.SchemaVersion, []byte(ev.Payload), ev.Principal)
		}
		res, err := stmt.Exec(st.args...)
		clear(st.args)
		if err != nil {
			w.fatal = err
			return
		}
		affected, err := res.RowsAffected()
		if err != nil {
			w.fatal = err
			return
		}
		if affected != int64(n) {
			ok = false
			break
		}
		// The rows of one INSERT get consecutive new rowids, the last one
		// being LastInsertId.
		last, err := res.LastInsertId()
		if err != nil {
			w.fatal = err
			return
		}
		for i, row := range chunk {
			if row.idx == 0 {
				row.r.recFrom = len(w.recs)
			}
			ev := row.r.events[row.idx]
			row.r.seqs[row.idx] = row.seq
			stored := *ev
			stored.Sequence = row.seq
			stored.Timestamp = ev.Timestamp.UTC()
			w.recs = append(w.recs, store.Record{Pos: last - int64(n-1-i), Event: stored})
		}
		done += n
	}
	if ok {
		return
	}
	// Some row was ignored: undo the flush and apply its requests one by
	// one.
	if _, err := w.conn.ExecContext(context.Background(), "DELETE FROM events WHERE pos > ?", before); err != nil {
		w.fatal = err
		return
	}
	clear(w.recs[recs:])
	w.recs = w.recs[:recs]
	for k, v := range st.undo {
		if v < 0 {
			delete(w.pending, k)
		} else {
			w.pending[k] = v
		}
	}
	for _, r := range st.reqs {
		if w.fatal != nil {
			return
		}
		r.recFrom = len(w.recs)
		r.err = w.applyEvents(r)
	}
}

// resetStage empties the staging state.
func (w *writer) resetStage() {
	st := &w.stage
	clear(st.rows)
	st.rows = st.rows[:0]
	clear(st.reqs)
	st.reqs = st.reqs[:0]
	clear(st.undo)
}

// closeStage closes the multi-row statements.
func (w *writer) closeStage() []error {
	var errs []error
	for _, st := range w.stage.stmts {
		errs = append(errs, st.Close())
	}
	w.stage.stmts = nil
	return errs
}

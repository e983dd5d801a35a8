package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/toolgate/toolgate/receipt"
	"github.com/toolgate/toolgate/store"
)

// Chunk sizes of Prune: each chunk is one operation in the writer's
// transaction, so a large backlog never holds the write lock for long.
// Variables so that tests can make them small.
var (
	pruneEventChunk   int64 = 4096 // events per chunk
	pruneReceiptChunk int64 = 8192 // receipts per chunk (at least one checkpoint's worth)
)

// DefaultPruneEvery is how often the retention loop prunes when
// Options.Retention is set and Options.PruneEvery is 0.
const DefaultPruneEvery = time.Hour

// checkpointTimeLayout is receipt checkpoints' signedAt form (fixed width,
// milliseconds), so that the strings compare as times.
const checkpointTimeLayout = "2006-01-02T15:04:05.000Z"

// testPruneHook, when set by a test before Open, receives the outcome of
// every run of the retention loop.
var testPruneHook func(store.PruneResult, error)

// Prune implements store.Pruner: it deletes the events and receipts older
// than before, leaving the signed checkpoint the retained receipts verify
// from (see store.Pruner for the exact rules). Receipts of other chains
// than the store's own (older signing keys) are not pruned. Safe for
// concurrent use with every other method.
func (s *Store) Prune(ctx context.Context, before time.Time) (store.PruneResult, error) {
	var res store.PruneResult
	if err := s.readable(ctx, "prune"); err != nil {
		return res, err
	}
	evCut := fmtTime(before)
	for {
		var n int64
		err := s.runOp(ctx, "prune events", func(w *writer) (err error) {
			n, err = w.pruneEvents(evCut)
			return err
		})
		res.Events += n
		if err != nil {
			return res, err
		}
		if n < pruneEventChunk {
			break
		}
	}
	cpCut := before.UTC().Format(checkpointTimeLayout)
	for {
		var c pruneChunk
		err := s.runOp(ctx, "prune receipts", func(w *writer) (err error) {
			c, err = w.pruneReceipts(cpCut)
			return err
		})
		if err != nil {
			return res, err
		}
		res.Receipts += c.receipts
		res.Checkpoints += c.checkpoints
		if c.anchor != nil {
			res.Anchor = c.anchor
		}
		if c.receipts == 0 {
			break
		}
	}
	if res.Anchor == nil {
		a, err := s.anchor(ctx)
		if err != nil {
			return res, err
		}
		res.Anchor = a
	}
	return res, nil
}

// anchor returns the checkpoint the store's retained chain starts from, nil
// if no receipt was ever pruned.
func (s *Store) anchor(ctx context.Context) (*receipt.Checkpoint, error) {
	const op = "prune"
	var body []byte
	err := s.rdb.QueryRowContext(ctx, `SELECT c.body FROM checkpoints c WHERE c.chain_id = ?1
		AND c.seq < (SELECT COALESCE(MIN(r.seq), 0) FROM receipts r WHERE r.chain_id = ?1) ORDER BY c.seq LIMIT 1`,
		s.signer.KeyID()).Scan(&body)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, store.Unavailable(op, err)
	}
	cp := new(receipt.Checkpoint)
	if err := cp.UnmarshalJSON(body); err != nil {
		return nil, store.Unavailable(op+": stored checkpoint", err)
	}
	return cp, nil
}

// pruneEvents deletes the next chunk of the longest commit-order prefix of
// events stamped before cut (a fmtTime string), first recording the pruned
// runs' last sequences in run_heads. It returns the number deleted, which
// is pruneEventChunk when there may be more.
func (w *writer) pruneEvents(cut string) (int64, error) {
	ctx := context.Background()
	rows, err := w.conn.QueryContext(ctx, `SELECT pos, ts FROM events ORDER BY pos LIMIT ?`, pruneEventChunk)
	if err != nil {
		return 0, err
	}
	var last, n int64
	for rows.Next() {
		var pos int64
		var ts string
		if err := rows.Scan(&pos, &ts); err != nil {
			rows.Close()
			return 0, err
		}
		if ts >= cut {
			break
		}
		last, n = pos, n+1
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return 0, err
	}
	if n == 0 {
		return 0, nil
	}
	w.headless = false // from now on stageSeq looks runs up in run_heads
	if _, err := w.conn.ExecContext(ctx, `INSERT INTO run_heads (tenant, run_id, last_seq)
		SELECT tenant, run_id, MAX(seq) FROM events WHERE pos <= ? GROUP BY tenant, run_id
		ON CONFLICT (tenant, run_id) DO UPDATE SET last_seq = MAX(last_seq, excluded.last_seq)`, last); err != nil {
		return 0, err
	}
	if _, err := w.conn.ExecContext(ctx, `DELETE FROM events WHERE pos <= ?`, last); err != nil {
		return 0, err
	}
	return n, nil
}

// pruneChunk is what one pruneReceipts deleted.
type pruneChunk struct {
	receipts, checkpoints int64
	anchor                *receipt.Checkpoint // the new anchor, nil if unchanged
}

// pruneReceipts moves the anchor of the writer's chain forward by one
// chunk: to the newest checkpoint signed before cut (a
// checkpointTimeLayout string) that lies below the chain's head receipt
// and within pruneReceiptChunk receipts of the first stored one (at least
// the next checkpoint, so that every chunk makes progress), deleting the
// receipts it covers and the checkpoints before it.
func (w *writer) pruneReceipts(cut string) (pruneChunk, error) {
	ctx := context.Background()
	chain := w.signer.KeyID()
	var first, head sql.NullInt64
	if err := w.conn.QueryRowContext(ctx, `SELECT MIN(seq), MAX(seq) FROM receipts WHERE chain_id = ?`, chain).Scan(&first, &head); err != nil {
		return pruneChunk{}, err
	}
	if !head.Valid {
		return pruneChunk{}, nil
	}
	// The signed-before-cut prefix of the checkpoints covering stored
	// receipts below the head (checkpoints are signed in seq order).
	rows, err := w.conn.QueryContext(ctx, `SELECT seq, json_extract(body, '$.checkpoint.signedAt'), body FROM checkpoints
		WHERE chain_id = ? AND seq >= ? AND seq < ? ORDER BY seq`, chain, first.Int64, head.Int64)
	if err != nil {
		return pruneChunk{}, err
	}
	k := int64(-1)
	var kBody []byte
	for rows.Next() {
		var seq int64
		var signedAt sql.NullString
		var body []byte
		if err := rows.Scan(&seq, &signedAt, &body); err != nil {
			rows.Close()
			return pruneChunk{}, err
		}
		if !signedAt.Valid || signedAt.String >= cut || (k >= 0 && seq-first.Int64 >= pruneReceiptChunk) {
			break
		}
		k, kBody = seq, body
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return pruneChunk{}, err
	}
	if k < 0 {
		return pruneChunk{}, nil
	}
	anchor := new(receipt.Checkpoint)
	if err := anchor.UnmarshalJSON(kBody); err != nil {
		return pruneChunk{}, err
	}
	var c pruneChunk
	res, err := w.conn.ExecContext(ctx, `DELETE FROM receipts WHERE chain_id = ? AND seq <= ?`, chain, k)
	if err == nil {
		c.receipts, err = res.RowsAffected()
	}
	if err != nil {
		return pruneChunk{}, err
	}
	res, err = w.conn.ExecContext(ctx, `DELETE FROM checkpoints WHERE chain_id = ? AND seq < ?`, chain, k)
	if err == nil {
		c.checkpoints, err = res.RowsAffected()
	}
	if err != nil {
		return pruneChunk{}, err
	}
	c.anchor = anchor
	return c, nil
}

// retain runs Prune with cutoff now - every retention, at once and then
// every interval, until stop is closed; it logs what each run removed.
func (s *Store) retain(retention, every time.Duration, now func() time.Time, stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		res, err := s.Prune(ctx, now().Add(-retention))
		switch {
		case err != nil && ctx.Err() == nil:
			s.log.Error("store: retention prune failed; retrying at the next interval", "err", err, "events", res.Events, "receipts", res.Receipts)
		case err == nil && (res.Events > 0 || res.Receipts > 0):
			args := []any{"events", res.Events, "receipts", res.Receipts, "checkpoints", res.Checkpoints}
			if res.Anchor != nil {
				args = append(args, "anchor_seq", res.Anchor.Seq)
			}
			s.log.Info("store: retention pruned", args...)
		}
		if h := testPruneHook; h != nil {
			h(res, err)
		}
		select {
		case <-stop:
			return
		case <-t.C:
		}
	}
}

// PrunePlan is what Prune with the same cutoff would remove, as PlanPrune
// computes it without changing anything.
type PrunePlan struct {
	// Before is the cutoff: what is older than it would be removed.
	Before time.Time `json:"before"`
	// Events are the run events that would be deleted (the longest
	// commit-order prefix stamped before Before).
	Events PruneSpan `json:"events"`
	// Receipts are the store's own chain's receipts that would be deleted.
	Receipts PruneSpan `json:"receipts"`
	// Checkpoints is the number of signed checkpoints that would be
	// deleted with those receipts.
	Checkpoints int64 `json:"checkpoints"`
	// Anchor is the signed checkpoint the retained chain would start from
	// (kept; receipt seq Anchor.Seq + 1 would be the first one kept): the
	// new anchor when receipts would be deleted, else the current one,
	// nil when no receipt was or would be pruned.
	Anchor *receipt.Checkpoint `json:"anchor,omitempty"`
}

// PruneSpan is a set of records that PlanPrune finds prunable: how many,
// and the range they cover. Empty when Count is 0.
type PruneSpan struct {
	Count int64 `json:"count"`
	// FromSeq and ToSeq are the first and last receipt seq (receipts
	// only).
	FromSeq *uint64 `json:"fromSeq,omitempty"`
	ToSeq   *uint64 `json:"toSeq,omitempty"`
	// Oldest and Newest are the earliest and latest event timestamp, or
	// receipt startedAt.
	Oldest *time.Time `json:"oldest,omitempty"`
	Newest *time.Time `json:"newest,omitempty"`
}

// PlanPrune reports what Prune(ctx, before) would delete and the anchor it
// would keep, reading one consistent snapshot of the store; it writes
// nothing. Writes committed after the snapshot (a running gateway's) can
// make a later Prune remove a little more, never less than reported older
// than before. Errors: Cancelled, Timeout; AuditUnavailable. Safe for
// concurrent use.
func (s *Store) PlanPrune(ctx context.Context, before time.Time) (PrunePlan, error) {
	const op = "plan prune"
	plan := PrunePlan{Before: before.UTC()}
	if err := s.readable(ctx, op); err != nil {
		return plan, err
	}
	tx, err := s.rdb.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return plan, store.Unavailable(op, err)
	}
	defer tx.Rollback()
	if err := planEvents(ctx, tx, fmtTime(before), &plan.Events); err != nil {
		return plan, store.Unavailable(op+": events", err)
	}
	if err := planReceipts(ctx, tx, s.signer.KeyID(), before.UTC().Format(checkpointTimeLayout), &plan); err != nil {
		return plan, store.Unavailable(op+": receipts", err)
	}
	return plan, nil
}

// planEvents fills sp with the events pruneEvents would delete, chunk
// after chunk: those before the first event (commit order) stamped at or
// after cut.
func planEvents(ctx context.Context, tx *sql.Tx, cut string, sp *PruneSpan) error {
	var oldest, newest sql.NullString
	err := tx.QueryRowContext(ctx, `SELECT COUNT(*), MIN(ts), MAX(ts) FROM events
		WHERE pos < COALESCE((SELECT MIN(pos) FROM events WHERE ts >= ?1), (SELECT MAX(pos) + 1 FROM events))`, cut).
		Scan(&sp.Count, &oldest, &newest)
	if err != nil || sp.Count == 0 {
		return err
	}
	return spanTimes(sp, oldest, newest)
}

// planReceipts fills plan's receipts, checkpoints and anchor with what the
// chunks of pruneReceipts would do in turn: move the anchor to the last
// checkpoint of the signed-before-cut prefix of the checkpoints covering
// stored receipts below the head, deleting the receipts up to it and the
// checkpoints before it.
func planReceipts(ctx context.Context, tx *sql.Tx, chain, cut string, plan *PrunePlan) error {
	var first, head sql.NullInt64
	if err := tx.QueryRowContext(ctx, `SELECT MIN(seq), MAX(seq) FROM receipts WHERE chain_id = ?`, chain).Scan(&first, &head); err != nil {
		return err
	}
	k := int64(-1)
	var kBody []byte
	if head.Valid {
		rows, err := tx.QueryContext(ctx, `SELECT seq, json_extract(body, '$.checkpoint.signedAt'), body FROM checkpoints
			WHERE chain_id = ? AND seq >= ? AND seq < ? ORDER BY seq`, chain, first.Int64, head.Int64)
		if err != nil {
			return err
		}
		for rows.Next() {
			var seq int64
			var signedAt sql.NullString
			var body []byte
			if err := rows.Scan(&seq, &signedAt, &body); err != nil {
				rows.Close()
				return err
			}
			if !signedAt.Valid || signedAt.String >= cut {
				break
			}
			k, kBody = seq, body
		}
		if err := errors.Join(rows.Err(), rows.Close()); err != nil {
			return err
		}
	}
	if k < 0 {
		// Nothing to delete: the anchor stays the current one.
		var body []byte
		err := tx.QueryRowContext(ctx, `SELECT c.body FROM checkpoints c WHERE c.chain_id = ?1
			AND c.seq < (SELECT COALESCE(MIN(r.seq), 0) FROM receipts r WHERE r.chain_id = ?1) ORDER BY c.seq LIMIT 1`, chain).Scan(&body)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		kBody = body
	} else {
		var oldest, newest sql.NullString
		var from, to int64
		if err := tx.QueryRowContext(ctx, `SELECT COUNT(*), MIN(seq), MAX(seq), MIN(json_extract(body, '$.startedAt')), MAX(json_extract(body, '$.startedAt'))
			FROM receipts WHERE chain_id = ? AND seq <= ?`, chain, k).Scan(&plan.Receipts.Count, &from, &to, &oldest, &newest); err != nil {
			return err
		}
		if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM checkpoints WHERE chain_id = ? AND seq < ?`, chain, k).Scan(&plan.Checkpoints); err != nil {
			return err
		}
		f, t := uint64(from), uint64(to)
		plan.Receipts.FromSeq, plan.Receipts.ToSeq = &f, &t
		if err := spanTimes(&plan.Receipts, oldest, newest); err != nil {
			return err
		}
	}
	plan.Anchor = new(receipt.Checkpoint)
	return plan.Anchor.UnmarshalJSON(kBody)
}

// spanTimes sets sp's Oldest and Newest from stored times (fmtTime or
// RFC 3339 strings).
func spanTimes(sp *PruneSpan, oldest, newest sql.NullString) error {
	for _, v := range []struct {
		s   sql.NullString
		dst **time.Time
	}{{oldest, &sp.Oldest}, {newest, &sp.Newest}} {
		if !v.s.Valid || v.s.String == "" {
			continue
		}
		t, err := time.Parse(time.RFC3339Nano, v.s.String)
		if err != nil {
			return fmt.Errorf("stored time %q: %w", v.s.String, err)
		}
		*v.dst = &t
	}
	return nil
}

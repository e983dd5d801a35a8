package sqlite

import (
	"context"
	"database/sql"
	"errors"
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

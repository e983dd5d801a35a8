package postgres

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/receipt"
	"github.com/toolgate/toolgate/store"
)

// eventCols are the columns scanRecord reads, in its order.
const eventCols = `pos, event_id, tenant, principal, run_id, seq, type, ts, causation_id, schema_version, payload`

// scanRecord reads one events row (eventCols).
func scanRecord(row pgx.Row) (store.Record, error) {
	var (
		rec store.Record
		ev  = &rec.Event
		typ string
		ts  string
		sv  int32
	)
	if err := row.Scan(&rec.Pos, &ev.EventID, &ev.Tenant, &ev.Principal, &ev.RunID, &ev.Sequence, &typ, &ts, &ev.CausationID, &sv, &ev.Payload); err != nil {
		return rec, err
	}
	t, err := parseTime(ts)
	if err != nil {
		return rec, errcode.Wrap(errcode.Internal, err, "stored event")
	}
	ev.Type, ev.Timestamp, ev.SchemaVersion = typ, t, int(sv)
	return rec, nil
}

// queryRecords runs q and collects its events rows.
func (s *Store) queryRecords(ctx context.Context, op, q string, args ...any) ([]store.Record, error) {
	rows, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, store.Unavailable(op, err)
	}
	defer rows.Close()
	var out []store.Record
	for rows.Next() {
		rec, err := scanRecord(rows)
		if err != nil {
			return nil, store.Unavailable(op, err)
		}
		out = append(out, rec)
	}
	if err := rows.Err(); err != nil {
		return nil, store.Unavailable(op, err)
	}
	return out, nil
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
	recs, err := s.queryRecords(ctx, op, `SELECT `+eventCols+` FROM events WHERE tenant = $1 AND run_id = $2 AND seq > $3 ORDER BY seq LIMIT $4`,
		tenant, runID, afterSeq, store.PageLimit(limit))
	if err != nil {
		return nil, err
	}
	out := make([]audit.Event, len(recs))
	for i := range recs {
		out[i] = recs[i].Event
	}
	return out, nil
}

// EventsByTime implements store.Events.EventsByTime (keyset pagination on
// (ts, pos)).
func (s *Store) EventsByTime(ctx context.Context, tenant string, from, to time.Time, cursor string, limit int) ([]audit.Event, string, error) {
	const op = "events by time"
	if err := s.readable(ctx, op); err != nil {
		return nil, "", err
	}
	c, err := store.ParseCursor(cursor)
	if err != nil {
		return nil, "", err
	}
	limit = store.PageLimit(limit)
	recs, err := s.queryRecords(ctx, op, `SELECT `+eventCols+` FROM events
		WHERE tenant = $1 AND ($2 = '' OR ts >= $2) AND ($3 = '' OR ts < $3) AND (ts, pos) > ($4, $5)
		ORDER BY ts, pos LIMIT $6`,
		tenant, fmtTime(from), fmtTime(to), fmtTime(c.Time), c.Pos, limit)
	if err != nil {
		return nil, "", err
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

// clampSeq bounds seqs in queries: receipt seqs never exceed 2^53−1.
func clampSeq(seq uint64) int64 {
	if seq > receipt.MaxSafeInteger {
		return receipt.MaxSafeInteger + 1
	}
	return int64(seq)
}

// ReceiptsByChain implements store.Receipts.ReceiptsByChain.
func (s *Store) ReceiptsByChain(ctx context.Context, chainID string, fromSeq uint64, limit int) ([]*receipt.Receipt, error) {
	const op = "receipts by chain"
	if err := s.readable(ctx, op); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `SELECT body FROM receipts WHERE chain_id = $1 AND seq >= $2 ORDER BY seq LIMIT $3`,
		chainID, clampSeq(fromSeq), store.PageLimit(limit))
	if err != nil {
		return nil, store.Unavailable(op, err)
	}
	bodies, err := pgx.CollectRows(rows, pgx.RowTo[[]byte])
	if err != nil {
		return nil, store.Unavailable(op, err)
	}
	out := make([]*receipt.Receipt, 0, len(bodies))
	for _, body := range bodies {
		r := new(receipt.Receipt)
		if err := r.UnmarshalJSON(body); err != nil {
			return nil, errcode.Wrap(errcode.Internal, err, op+": stored receipt")
		}
		out = append(out, r)
	}
	return out, nil
}

// ReceiptByID implements store.Receipts.ReceiptByID.
func (s *Store) ReceiptByID(ctx context.Context, tenant, receiptID string) (*receipt.Receipt, error) {
	const op = "receipt by id"
	if err := s.readable(ctx, op); err != nil {
		return nil, err
	}
	var (
		owner string
		body  []byte
	)
	err := s.pool.QueryRow(ctx, `SELECT tenant, body FROM receipts WHERE receipt_id = $1`, receiptID).Scan(&owner, &body)
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && owner != tenant) {
		return nil, errcode.Errorf(errcode.NotFound, "receipt %q not found", receiptID)
	}
	if err != nil {
		return nil, unavailableOrInvalid(op, err)
	}
	r := new(receipt.Receipt)
	if err := r.UnmarshalJSON(body); err != nil {
		return nil, errcode.Wrap(errcode.Internal, err, op+": stored receipt")
	}
	return r, nil
}

// Checkpoints implements store.Receipts.Checkpoints.
func (s *Store) Checkpoints(ctx context.Context, chainID string, fromSeq uint64, limit int) ([]*receipt.Checkpoint, error) {
	const op = "checkpoints"
	if err := s.readable(ctx, op); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `SELECT body FROM checkpoints WHERE chain_id = $1 AND seq >= $2 ORDER BY seq LIMIT $3`,
		chainID, clampSeq(fromSeq), store.PageLimit(limit))
	if err != nil {
		return nil, store.Unavailable(op, err)
	}
	bodies, err := pgx.CollectRows(rows, pgx.RowTo[[]byte])
	if err != nil {
		return nil, store.Unavailable(op, err)
	}
	out := make([]*receipt.Checkpoint, 0, len(bodies))
	for _, body := range bodies {
		cp := new(receipt.Checkpoint)
		if err := cp.UnmarshalJSON(body); err != nil {
			return nil, errcode.Wrap(errcode.Internal, err, op+": stored checkpoint")
		}
		out = append(out, cp)
	}
	return out, nil
}

// ExportReceipts implements store.Receipts.ExportReceipts (store.Export).
func (s *Store) ExportReceipts(ctx context.Context, w io.Writer, chainID string, fromSeq uint64) error {
	if err := s.readable(ctx, "export receipts"); err != nil {
		return err
	}
	return store.Export(ctx, s, w, chainID, fromSeq)
}

// unavailableOrInvalid maps a statement error: invalid data (SQLSTATE
// class 22, such as a NUL byte in a string) is InvalidArgument, anything
// else AuditUnavailable (or Cancelled, Timeout).
func unavailableOrInvalid(op string, err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && len(pe.Code) == 5 && pe.Code[:2] == "22" {
		return errcode.Wrap(errcode.InvalidArgument, err, op)
	}
	return store.Unavailable(op, err)
}

// Chains implements store.ChainLister: every chain with a key recorded in
// chain_keys (each replica's signer) or with stored receipts or
// checkpoints.
func (s *Store) Chains(ctx context.Context) ([]store.ChainInfo, error) {
	const op = "list chains"
	if err := s.readable(ctx, op); err != nil {
		return nil, err
	}
	// One REPEATABLE READ transaction: one snapshot, so a head and its
	// checkpoint are read at the same commit.
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, store.Unavailable(op, err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	cs := store.ChainSet{}
	rows, err := tx.Query(ctx, `SELECT chain_id, public_key, first_seen FROM chain_keys`)
	if err != nil {
		return nil, store.Unavailable(op, err)
	}
	for rows.Next() {
		var id, key, seen string
		if err := rows.Scan(&id, &key, &seen); err != nil {
			rows.Close()
			return nil, store.Unavailable(op, err)
		}
		t, _ := parseTime(seen)
		if !cs.AddKey(id, key, t) {
			rows.Close()
			return nil, errcode.Errorf(errcode.Internal, "%s: chain %s: the recorded public key is not 32 bytes of base64", op, id)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, store.Unavailable(op, err)
	}
	rows, err = tx.Query(ctx, `SELECT chain_id, COUNT(*), MAX(seq) FROM receipts GROUP BY chain_id`)
	if err != nil {
		return nil, store.Unavailable(op, err)
	}
	for rows.Next() {
		var id string
		var n, head int64
		if err := rows.Scan(&id, &n, &head); err != nil {
			rows.Close()
			return nil, store.Unavailable(op, err)
		}
		cs.AddReceipts(id, n, uint64(head))
	}
	if err := rows.Err(); err != nil {
		return nil, store.Unavailable(op, err)
	}
	rows, err = tx.Query(ctx, `SELECT chain_id, MAX(seq) FROM checkpoints GROUP BY chain_id`)
	if err != nil {
		return nil, store.Unavailable(op, err)
	}
	for rows.Next() {
		var id string
		var seq int64
		if err := rows.Scan(&id, &seq); err != nil {
			rows.Close()
			return nil, store.Unavailable(op, err)
		}
		cs.AddCheckpoint(id, uint64(seq))
	}
	if err := rows.Err(); err != nil {
		return nil, store.Unavailable(op, err)
	}
	return cs.List(), nil
}

package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"io"

	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/receipt"
	"github.com/toolgate/toolgate/store"
)

// AppendReceipt implements store.Receipts.AppendReceipt: the writer links r
// through the chain inside the transaction that stores it, together with a
// checkpoint over the batch's last receipt; it returns once that
// transaction has committed.
func (s *Store) AppendReceipt(ctx context.Context, r *receipt.Receipt) error {
	const op = "append receipt"
	if err := store.ContextError(ctx, op); err != nil {
		return err
	}
	if r == nil {
		return errcode.New(errcode.InvalidArgument, "append receipt: nil receipt")
	}
	req := requestPool.Get().(*request)
	req.kind, req.ctx, req.rcpt = kindReceipt, ctx, r
	err := s.w.submit(op, req)
	s.release(req)
	return err
}

// maxSeq bounds seqs in queries: receipt seqs never exceed 2^53−1.
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
	rows, err := s.rdb.QueryContext(ctx, `SELECT body FROM receipts WHERE chain_id = ? AND seq >= ? ORDER BY seq LIMIT ?`,
		chainID, clampSeq(fromSeq), store.PageLimit(limit))
	if err != nil {
		return nil, store.Unavailable(op, err)
	}
	defer rows.Close()
	out := []*receipt.Receipt{}
	for rows.Next() {
		var body []byte
		if err := rows.Scan(&body); err != nil {
			return nil, store.Unavailable(op, err)
		}
		r := new(receipt.Receipt)
		if err := r.UnmarshalJSON(body); err != nil {
			return nil, errcode.Wrap(errcode.Internal, err, op+": stored receipt")
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, store.Unavailable(op, err)
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
	err := s.rdb.QueryRowContext(ctx, `SELECT tenant, body FROM receipts WHERE receipt_id = ?`, receiptID).Scan(&owner, &body)
	if errors.Is(err, sql.ErrNoRows) || (err == nil && owner != tenant) {
		return nil, errcode.Errorf(errcode.NotFound, "receipt %q not found", receiptID)
	}
	if err != nil {
		return nil, store.Unavailable(op, err)
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
	rows, err := s.rdb.QueryContext(ctx, `SELECT body FROM checkpoints WHERE chain_id = ? AND seq >= ? ORDER BY seq LIMIT ?`,
		chainID, clampSeq(fromSeq), store.PageLimit(limit))
	if err != nil {
		return nil, store.Unavailable(op, err)
	}
	defer rows.Close()
	out := []*receipt.Checkpoint{}
	for rows.Next() {
		var body []byte
		if err := rows.Scan(&body); err != nil {
			return nil, store.Unavailable(op, err)
		}
		cp := new(receipt.Checkpoint)
		if err := cp.UnmarshalJSON(body); err != nil {
			return nil, errcode.Wrap(errcode.Internal, err, op+": stored checkpoint")
		}
		out = append(out, cp)
	}
	if err := rows.Err(); err != nil {
		return nil, store.Unavailable(op, err)
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

// Chains implements store.ChainLister: every chain with a key recorded in
// chain_keys (each signer this store was opened with) or with stored
// receipts or checkpoints, read from one snapshot.
func (s *Store) Chains(ctx context.Context) ([]store.ChainInfo, error) {
	const op = "list chains"
	if err := s.readable(ctx, op); err != nil {
		return nil, err
	}
	// One read transaction: one snapshot, so a head and its checkpoint
	// are read at the same commit.
	tx, err := s.rdb.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, store.Unavailable(op, err)
	}
	defer tx.Rollback()
	cs := store.ChainSet{}
	rows, err := tx.QueryContext(ctx, `SELECT chain_id, public_key, first_seen FROM chain_keys`)
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
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return nil, store.Unavailable(op, err)
	}
	rows, err = tx.QueryContext(ctx, `SELECT chain_id, COUNT(*), MAX(seq) FROM receipts GROUP BY chain_id`)
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
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return nil, store.Unavailable(op, err)
	}
	rows, err = tx.QueryContext(ctx, `SELECT chain_id, MAX(seq) FROM checkpoints GROUP BY chain_id`)
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
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return nil, store.Unavailable(op, err)
	}
	return cs.List(), nil
}

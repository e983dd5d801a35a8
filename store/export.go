package store

import (
	"bufio"
	"context"
	"io"

	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/receipt"
)

// ReceiptReader is the read side of Receipts that Export needs.
type ReceiptReader interface {
	ReceiptsByChain(ctx context.Context, chainID string, fromSeq uint64, limit int) ([]*receipt.Receipt, error)
	Checkpoints(ctx context.Context, chainID string, fromSeq uint64, limit int) ([]*receipt.Checkpoint, error)
}

// Export writes chain chainID from seq fromSeq, as read from src, to w as
// receipt JSON Lines (receipt.Writer): receipts in seq order, each stored
// checkpoint right after the receipt it signs. It stops at the newest
// checkpoint it finds, so that every receipt written is covered by a
// signature: receipts after that checkpoint (appended concurrently, or not
// yet checkpointed) are left for a later export. Receipts are read page by
// page, so memory stays bounded whatever the chain's length.
//
// The stream verifies with receipt.Verify(r, pub, receipt.VerifyOptions{From:
// fromSeq}) (From may be left 0 when fromSeq is 0). An empty chain, or one
// without a checkpoint at or after fromSeq, writes nothing.
//
// When retention has pruned the receipts from fromSeq on (Pruner), the
// stream starts instead with the anchor: the signed checkpoint kept at the
// seq just before the first stored receipt, from which receipt.Verify
// continues (a stream opening with a checkpoint line is anchored by its
// signed hash, whatever From says).
//
// Errors: src's errors; errcode.Internal if src returns receipts out of
// order or with a gap (a corrupt store); errcode.AuditUnavailable wrapping
// a write error of w; Cancelled or Timeout when ctx ends. Output already
// written stays written.
func Export(ctx context.Context, src ReceiptReader, w io.Writer, chainID string, fromSeq uint64) error {
	bw := bufio.NewWriterSize(w, 64<<10)
	rw := receipt.NewWriter(bw)
	var cps []*receipt.Checkpoint // pending checkpoints, in seq order
	cpFrom := fromSeq             // next checkpoint seq to read
	cpDone := false               // no checkpoint beyond those in cps
	// nextCheckpoint makes cps non-empty if a checkpoint with seq ≥ seq
	// exists; it reports whether one does.
	nextCheckpoint := func(seq uint64) (bool, error) {
		for {
			for len(cps) > 0 && cps[0].Seq < seq {
				cps = cps[1:]
			}
			if len(cps) > 0 {
				return true, nil
			}
			if cpDone {
				return false, nil
			}
			page, err := src.Checkpoints(ctx, chainID, cpFrom, MaxLimit)
			if err != nil {
				return false, err
			}
			if len(page) < MaxLimit {
				cpDone = true
			}
			for _, cp := range page {
				if cp.Seq >= cpFrom {
					cps = append(cps, cp)
					cpFrom = cp.Seq + 1
				}
			}
		}
	}
	next := fromSeq
	first, err := src.ReceiptsByChain(ctx, chainID, fromSeq, 1)
	if err != nil {
		return err
	}
	if len(first) == 1 && first[0].Seq > fromSeq {
		// Pruned up to first-1: open with the anchor checkpoint. A prune
		// deletes the checkpoints older than its anchor together with
		// their receipts (Pruner), so one that remains below the anchor
		// means receipts were deleted by something else.
		at := first[0].Seq - 1
		if older, err := src.Checkpoints(ctx, chainID, fromSeq, 1); err != nil {
			return err
		} else if len(older) == 1 && older[0].Seq < at {
			return errcode.Errorf(errcode.Internal, "export receipts: chain %s: receipts %d to %d are missing from the store while checkpoint %d remains (a prune removes both): the store was changed outside toolgate",
				chainID, fromSeq, at, older[0].Seq)
		}
		anchor, err := src.Checkpoints(ctx, chainID, at, 1)
		if err != nil {
			return err
		}
		if len(anchor) != 1 || anchor[0].Seq != at {
			return errcode.Errorf(errcode.Internal, "export receipts: chain %s starts at seq %d without a checkpoint at seq %d", chainID, first[0].Seq, at)
		}
		if err := rw.WriteCheckpoint(anchor[0]); err != nil {
			return err
		}
		next = first[0].Seq
	}
	for {
		if err := ContextError(ctx, "export receipts"); err != nil {
			return err
		}
		ok, err := nextCheckpoint(next)
		if err != nil || !ok {
			if err == nil {
				err = flush(bw)
			}
			return err
		}
		// Read only up to the covering checkpoint's seq.
		end := cps[0].Seq
		limit := MaxLimit
		if end-next+1 < uint64(limit) {
			limit = int(end - next + 1)
		}
		page, err := src.ReceiptsByChain(ctx, chainID, next, limit)
		if err != nil {
			return err
		}
		if len(page) == 0 {
			return errcode.Errorf(errcode.Internal, "export receipts: chain %s has a checkpoint at seq %d but no receipt %d", chainID, end, next)
		}
		for _, r := range page {
			if r.Seq != next {
				return errcode.Errorf(errcode.Internal, "export receipts: chain %s: receipt seq %d is missing from the store (the next stored one is seq %d): the store was changed outside toolgate", chainID, next, r.Seq)
			}
			if err := rw.WriteReceipt(r); err != nil {
				return err
			}
			for len(cps) > 0 && cps[0].Seq == r.Seq {
				if err := rw.WriteCheckpoint(cps[0]); err != nil {
					return err
				}
				cps = cps[1:]
			}
			next++
			if next > end {
				break
			}
		}
	}
}

// flush flushes bw, mapping a write error to AuditUnavailable.
func flush(bw *bufio.Writer) error {
	if err := bw.Flush(); err != nil {
		return errcode.Wrap(errcode.AuditUnavailable, err, "export receipts: write")
	}
	return nil
}

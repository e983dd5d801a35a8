package httpapi

import (
	"bufio"
	"context"
	"net/http"
	"strconv"

	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/identity"
	"github.com/toolgate/toolgate/receipt"
	"github.com/toolgate/toolgate/store"
)

// ReceiptStore is the read side of the receipt log the receipts routes
// serve; every store.Store implements it. Safe for concurrent use.
type ReceiptStore interface {
	// ChainID is the chain this gateway appends to (the default ?chain=).
	ChainID() string
	ReceiptsByChain(ctx context.Context, chainID string, fromSeq uint64, limit int) ([]*receipt.Receipt, error)
	Checkpoints(ctx context.Context, chainID string, fromSeq uint64, limit int) ([]*receipt.Checkpoint, error)
	ReceiptByID(ctx context.Context, tenant, receiptID string) (*receipt.Receipt, error)
}

// Response headers of GET /v1/receipts.
const (
	// HeaderReceiptsFrom is the seq of the page's first receipt (absent
	// on an empty page): verify the page with `toolgate receipts verify
	// FILE --pubkey K --from SEQ` unless it opens with a checkpoint line.
	HeaderReceiptsFrom = "Toolgate-Receipts-From"
	// HeaderReceiptsNext is the ?from= of the next page, present when
	// more receipts may follow at once.
	HeaderReceiptsNext = "Toolgate-Receipts-Next"
	// HeaderReceiptsSkipped is the number of the caller's tenant's
	// receipts in the part of the chain the page scanned (from ?from= up
	// to HeaderReceiptsNext, or to the last checkpoint when it is absent)
	// that the page does not hold because their batch also holds another
	// tenant's receipt (see listReceipts). Always set; "0" when none were
	// withheld. Read them one at a time with GET /v1/receipts/{receiptId}
	// (receipt ids are in the audit events) or export the whole chain with
	// `toolgate receipts export` as the operator.
	HeaderReceiptsSkipped = "Toolgate-Receipts-Skipped"
)

// receiptScanFactor bounds the receipts one GET /v1/receipts reads while
// skipping other tenants' batches: limit × receiptScanFactor.
const receiptScanFactor = 10

// auditReader refuses a caller without the audit scope.
func (h *Handler) auditReader(p identity.Principal) error {
	if hasScope(p, h.opts.AuditScope) {
		return nil
	}
	return errcode.Errorf(errcode.Forbidden, "reading receipts needs the scope %s", h.opts.AuditScope).
		WithDetails(map[string]any{"scope": h.opts.AuditScope})
}

// listReceipts serves GET /v1/receipts[?chain=&from=&limit=]: a page of
// receipt chain `chain` (default: this gateway's chain) from seq `from`
// (default 0), as receipt JSON Lines exactly as `toolgate receipts export`
// writes them (Content-Type application/jsonl), so that `toolgate receipts
// verify` accepts the body as is.
//
// A pruned chain's page from before its first stored receipt starts at
// that receipt, opened by the prune's anchor checkpoint. A chain is cut
// into batches, each ending at a signed checkpoint (every
// batch that links receipts stores one); a page holds whole batches only,
// and only batches every receipt of which is the caller's tenant's: a
// batch with another tenant's receipt is skipped (it ends the page when
// the page already has receipts, because a page must be one unbroken run
// of the chain for the offline verifier). Every receipt of the caller's
// tenant in a skipped batch is counted in HeaderReceiptsSkipped, so a
// client knows exactly how many of its receipts the scanned range held
// that the page does not. The page's first receipt is later than ?from=
// when the range before it held only skipped batches (another tenant's
// alone, counted nowhere, or mixed ones, counted in HeaderReceiptsSkipped)
// or the chain was pruned past from.
// Receipts not yet covered by a
// checkpoint are left for a later page. When the page's first receipt
// follows a checkpoint, that checkpoint opens the page (the verifier is
// then anchored by its signature); otherwise HeaderReceiptsFrom gives the
// seq to pass as --from. At most limit receipts (1–1000, default 1000) are
// returned, more only when the page's first batch is longer;
// HeaderReceiptsNext is set when more may follow.
//
// Needs the audit scope (Options.AuditScope, config audit.readers_scope):
// 403 forbidden without it. Errors: invalid_argument for a malformed from
// or limit; not_found for a chain the store has no receipt or checkpoint
// of (other than this gateway's own chain); audit_unavailable; internal_error for a corrupt chain (a gap).
func (h *Handler) listReceipts(w http.ResponseWriter, r *http.Request, p identity.Principal) error {
	if err := h.auditReader(p); err != nil {
		return err
	}
	q := r.URL.Query()
	chain := q.Get("chain")
	if chain == "" {
		chain = h.opts.ReceiptStore.ChainID()
	}
	var from uint64
	if v := q.Get("from"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil || n > receipt.MaxSafeInteger {
			return invalid("from", "from %q is not a receipt seq (an integer ≥ 0)", clip(v))
		}
		from = n
	}
	limit := store.MaxLimit
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > store.MaxLimit {
			return invalid("limit", "limit %q is not an integer from 1 to %d", clip(v), store.MaxLimit)
		}
		limit = n
	}
	ctx := r.Context()
	rs := h.opts.ReceiptStore
	if chain != rs.ChainID() {
		if err := knownChain(ctx, rs, chain); err != nil {
			return err
		}
	}
	var page []*receipt.Receipt
	var cps []*receipt.Checkpoint // the checkpoint ending each batch of page, in order
	var anchor *receipt.Checkpoint
	start, scanned, skipped := from, 0, 0
	more := false
	// After a prune the chain's stored receipts start later, behind their
	// anchor checkpoint: begin at the first stored one.
	if first, err := rs.ReceiptsByChain(ctx, chain, from, 1); err != nil {
		return err
	} else if len(first) == 1 && first[0].Seq > from {
		start = first[0].Seq
	}
	for {
		next, err := rs.Checkpoints(ctx, chain, start, 1)
		if err != nil {
			return err
		}
		if len(next) == 0 {
			break // the rest is not covered yet
		}
		end := next[0].Seq
		batch, err := readBatch(ctx, rs, chain, start, end)
		if err != nil {
			return err
		}
		scanned += len(batch)
		mine := 0
		for _, rc := range batch {
			if rc.Tenant == p.Tenant {
				mine++
			}
		}
		own := mine == len(batch)
		switch {
		case own && len(page) > 0 && len(page)+len(batch) > limit:
			more = true
		case own:
			if len(page) == 0 && len(batch) > 0 && batch[0].Seq > 0 {
				prev, err := rs.Checkpoints(ctx, chain, batch[0].Seq-1, 1)
				if err != nil {
					return err
				}
				if len(prev) == 1 && prev[0].Seq == batch[0].Seq-1 {
					anchor = prev[0]
				}
			}
			page = append(page, batch...)
			cps = append(cps, next[0])
			start = end + 1
			if len(page) >= limit {
				more = true
			}
		case len(page) > 0:
			more = true // another tenant's batch ends the page
		default:
			skipped += mine
			start = end + 1
			if scanned >= limit*receiptScanFactor {
				more = true
			}
		}
		if more {
			break
		}
	}
	hdr := w.Header()
	hdr.Set("Content-Type", "application/jsonl")
	hdr.Set("Cache-Control", "no-store")
	if len(page) > 0 {
		hdr.Set(HeaderReceiptsFrom, strconv.FormatUint(page[0].Seq, 10))
	}
	if more {
		hdr.Set(HeaderReceiptsNext, strconv.FormatUint(start, 10))
	}
	hdr.Set(HeaderReceiptsSkipped, strconv.Itoa(skipped))
	w.WriteHeader(http.StatusOK)
	bw := bufio.NewWriter(w)
	rw := receipt.NewWriter(bw)
	if anchor != nil {
		if err := rw.WriteCheckpoint(anchor); err != nil {
			return nil // the client went away; the status is sent
		}
	}
	for _, rc := range page {
		if err := rw.WriteReceipt(rc); err != nil {
			return nil
		}
		for len(cps) > 0 && cps[0].Seq == rc.Seq {
			if err := rw.WriteCheckpoint(cps[0]); err != nil {
				return nil
			}
			cps = cps[1:]
		}
	}
	bw.Flush()
	return nil
}

// knownChain answers nil when the store holds a receipt or a checkpoint
// of chain, else errcode.NotFound.
func knownChain(ctx context.Context, rs ReceiptStore, chain string) error {
	rcs, err := rs.ReceiptsByChain(ctx, chain, 0, 1)
	if err != nil {
		return err
	}
	if len(rcs) > 0 {
		return nil
	}
	cps, err := rs.Checkpoints(ctx, chain, 0, 1)
	if err != nil {
		return err
	}
	if len(cps) > 0 {
		return nil
	}
	return errcode.Errorf(errcode.NotFound, "no receipt chain %s", clip(chain)).WithDetails(map[string]any{"chain": clip(chain)})
}

// readBatch reads chain's receipts start..end (inclusive), which must all
// be stored: a missing one is errcode.Internal (a corrupt store).
func readBatch(ctx context.Context, rs ReceiptStore, chain string, start, end uint64) ([]*receipt.Receipt, error) {
	var out []*receipt.Receipt
	for next := start; next <= end; {
		n := store.MaxLimit
		if end-next+1 < uint64(n) {
			n = int(end - next + 1)
		}
		got, err := rs.ReceiptsByChain(ctx, chain, next, n)
		if err != nil {
			return nil, err
		}
		if len(got) == 0 {
			return nil, errcode.Errorf(errcode.Internal, "receipts: chain %s: receipt seq %d is missing from the store", chain, next)
		}
		for _, rc := range got {
			if rc.Seq != next {
				return nil, errcode.Errorf(errcode.Internal, "receipts: chain %s: receipt seq %d is missing from the store", chain, next)
			}
			out = append(out, rc)
			next++
		}
	}
	return out, nil
}

// getReceipt serves GET /v1/receipts/{receiptId}: the caller's tenant's
// receipt as its canonical JSON line (the form `receipts export` writes,
// with hash; Content-Type application/json). An unknown receipt and
// another tenant's answer 404 not_found with the same body. Needs the
// audit scope (403 forbidden without it). Errors: audit_unavailable.
func (h *Handler) getReceipt(w http.ResponseWriter, r *http.Request, p identity.Principal) error {
	if err := h.auditReader(p); err != nil {
		return err
	}
	id := r.PathValue("receiptId")
	rc, err := h.opts.ReceiptStore.ReceiptByID(r.Context(), p.Tenant, id)
	if errcode.CodeOf(err) == errcode.NotFound {
		return errcode.Errorf(errcode.NotFound, "no receipt %s", clip(id)).WithDetails(map[string]any{"receiptId": clip(id)})
	}
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	bw := bufio.NewWriter(w)
	receipt.NewWriter(bw).WriteReceipt(rc)
	bw.Flush()
	return nil
}

package httpapi

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"

	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/identity"
	"github.com/toolgate/toolgate/receipt"
)

// maxVerifySpan bounds the receipts GET /v1/receipts/{receiptId}/verify
// reads between the receipt and the checkpoint that signs it.
const maxVerifySpan = 1000

// Checks of a ReceiptVerification, in the order they are made.
const (
	CheckHash      = "hash"      // the body hashes to the receipt's hash (and it is well formed)
	CheckChainLink = "chainLink" // prevHash is the hash of the stored predecessor
	CheckSignature = "signature" // a signature by a trusted key covers it (its own sig or a later checkpoint)
)

// ReceiptCheck is one check of a ReceiptVerification: its name (CheckHash,
// CheckChainLink, CheckSignature), whether it passed, and what was checked
// or why not. Skipped is set when the check could not be made (no
// predecessor stored: seq 0 or pruned; no signature yet); Ok is then false.
type ReceiptCheck struct {
	Name    string `json:"name"`
	Ok      bool   `json:"ok"`
	Skipped bool   `json:"skipped,omitempty"`
	Detail  string `json:"detail"`
}

// ReceiptVerification is the answer of GET /v1/receipts/{receiptId}/verify:
// Verified is true iff every check passed (none failed, none skipped but
// the chain link of a chain's first stored receipt); Reason is the
// verifier's reason (receipt.Reason*) when one failed. A plain value.
type ReceiptVerification struct {
	ReceiptID string         `json:"receiptId"`
	ChainID   string         `json:"chainId"`
	Seq       uint64         `json:"seq"`
	Verified  bool           `json:"verified"`
	Checks    []ReceiptCheck `json:"checks"`
	Reason    string         `json:"reason,omitempty"`
}

// verifyReceipt serves GET /v1/receipts/{receiptId}/verify: the caller's
// tenant's receipt checked server-side by receipt.Verify, the code of
// `toolgate receipts verify`, over the stream [predecessor], receipt,
// [the receipts up to the next checkpoint, that checkpoint]: its body hash
// and format rules, its prevHash against the stored predecessor, and a
// signature by one of Options.ReceiptKeys covering it. The other receipts
// of that stream (possibly another tenant's) are read only to check the
// chain and are never returned; failures name only this receipt's seq.
// Needs the audit scope (403 forbidden without it); 404 as GET
// /v1/receipts/{receiptId}. Errors: audit_unavailable.
func (h *Handler) verifyReceipt(w http.ResponseWriter, r *http.Request, p identity.Principal) error {
	if err := h.auditReader(p); err != nil {
		return err
	}
	id := r.PathValue("receiptId")
	ctx := r.Context()
	rs := h.opts.ReceiptStore
	rc, err := rs.ReceiptByID(ctx, p.Tenant, id)
	if errcode.CodeOf(err) == errcode.NotFound {
		return errcode.Errorf(errcode.NotFound, "no receipt %s", clip(id)).WithDetails(map[string]any{"receiptId": clip(id)})
	}
	if err != nil {
		return err
	}
	out := ReceiptVerification{ReceiptID: rc.ReceiptID, ChainID: rc.ChainID, Seq: rc.Seq}
	var stream []*receipt.Receipt
	from := rc.Seq
	linked := false
	if rc.Seq > 0 {
		prev, err := rs.ReceiptsByChain(ctx, rc.ChainID, rc.Seq-1, 1)
		if err != nil {
			return err
		}
		if len(prev) == 1 && prev[0].Seq == rc.Seq-1 {
			stream, from, linked = append(stream, prev[0]), rc.Seq-1, true
		}
	}
	var cp *receipt.Checkpoint
	cps, err := rs.Checkpoints(ctx, rc.ChainID, rc.Seq, 1)
	if err != nil {
		return err
	}
	tail := []*receipt.Receipt{rc}
	if len(cps) == 1 && cps[0].Seq-rc.Seq < maxVerifySpan {
		if tail, err = readBatch(ctx, rs, rc.ChainID, rc.Seq, cps[0].Seq); err != nil {
			return err
		}
		cp = cps[0]
	}
	stream = append(stream, tail...)
	var buf bytes.Buffer
	rw := receipt.NewWriter(&buf)
	for _, x := range stream {
		if err := rw.WriteReceipt(x); err != nil {
			return errcode.Wrap(errcode.Internal, err, "encoding receipts to verify")
		}
	}
	if cp != nil {
		if err := rw.WriteCheckpoint(cp); err != nil {
			return errcode.Wrap(errcode.Internal, err, "encoding a checkpoint to verify")
		}
	}
	_, verr := receipt.Verify(&buf, h.opts.ReceiptKeys[0], receipt.VerifyOptions{From: from, Keys: h.opts.ReceiptKeys[1:]})
	var ve *receipt.VerifyError
	if verr != nil && !errors.As(verr, &ve) {
		return errcode.Wrap(errcode.Internal, verr, "verifying the receipt")
	}
	out.Checks = verificationChecks(rc, ve, linked, cp != nil)
	out.Verified = ve == nil
	if ve != nil {
		out.Reason = ve.Reason
	}
	h.writeJSON(w, r, http.StatusOK, out)
	return nil
}

// verificationChecks turns Verify's first failure (nil: none) into the
// three checks of rc. linked tells whether the predecessor was in the
// stream, signed whether a covering checkpoint was.
func verificationChecks(rc *receipt.Receipt, ve *receipt.VerifyError, linked, signed bool) []ReceiptCheck {
	hash := ReceiptCheck{Name: CheckHash, Ok: true, Detail: "the canonical body hashes to " + rc.Hash + " and follows the receipt rules (args hash, failure honesty)"}
	link := ReceiptCheck{Name: CheckChainLink, Ok: true}
	switch {
	case linked:
		link.Detail = fmt.Sprintf("prevHash is the hash of receipt seq %d, stored before it", rc.Seq-1)
	case rc.Seq == 0:
		link.Detail = "first receipt of the chain: prevHash is the zero hash"
	default:
		link.Ok, link.Skipped = false, true
		link.Detail = fmt.Sprintf("receipt seq %d is not stored (pruned): prevHash not checked", rc.Seq-1)
	}
	sig := ReceiptCheck{Name: CheckSignature, Ok: true}
	if signed {
		sig.Detail = "covered by a checkpoint signed by the chain's key " + rc.ChainID
	} else {
		sig.Detail = "the receipt's own signature by the chain's key " + rc.ChainID
	}
	if ve == nil {
		return []ReceiptCheck{hash, link, sig}
	}
	fail := func(c *ReceiptCheck, detail string) { c.Ok, c.Detail = false, detail }
	switch {
	case ve.Reason == receipt.ReasonUncovered:
		sig.Ok, sig.Skipped = false, true
		sig.Detail = "not yet covered by a signed checkpoint (the gateway signs each batch once it is committed); check again shortly"
	case ve.Seq < rc.Seq:
		fail(&link, "the stored predecessor does not verify: "+ve.Reason)
	case ve.Seq > rc.Seq:
		fail(&sig, "the receipts between this one and its checkpoint do not verify: "+ve.Reason)
	case ve.Reason == receipt.ReasonBrokenChain || ve.Reason == receipt.ReasonGap || ve.Reason == receipt.ReasonReorder ||
		ve.Reason == receipt.ReasonFork || ve.Reason == receipt.ReasonDuplicate:
		fail(&link, ve.Reason)
	case ve.Reason == receipt.ReasonBadSignature:
		fail(&sig, ve.Reason+" (or chain "+rc.ChainID+" is not signed by a key this gateway trusts)")
	default:
		fail(&hash, ve.Reason)
	}
	if !hash.Ok {
		link.Ok, link.Skipped, link.Detail = false, true, "not checked: the receipt itself does not verify"
		sig.Ok, sig.Skipped, sig.Detail = false, true, "not checked: the receipt itself does not verify"
	}
	return []ReceiptCheck{hash, link, sig}
}

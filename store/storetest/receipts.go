package storetest

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/receipt"
	"github.com/toolgate/toolgate/store"
)

// export exports chain from fromSeq and verifies it with the store's key,
// returning the report.
func export(t testing.TB, s store.Store, fromSeq uint64) (*receipt.Report, []byte) {
	t.Helper()
	var buf bytes.Buffer
	if err := s.ExportReceipts(context.Background(), &buf, s.ChainID(), fromSeq); err != nil {
		t.Fatalf("ExportReceipts(%d): %v", fromSeq, err)
	}
	rep, err := receipt.Verify(bytes.NewReader(buf.Bytes()), s.PublicKey(), receipt.VerifyOptions{From: fromSeq})
	if err != nil {
		t.Fatalf("Verify(export from %d): %v\n%s", fromSeq, err, buf.Bytes())
	}
	return rep, buf.Bytes()
}

// mustAppendReceipt appends r and fails the test on error.
func mustAppendReceipt(t testing.TB, s store.Receipts, r *receipt.Receipt) {
	t.Helper()
	if err := s.AppendReceipt(context.Background(), r); err != nil {
		t.Fatalf("AppendReceipt(%s): %v", r.ReceiptID, err)
	}
}

// equalReceipt fails unless got and want have the same canonical form.
func equalReceipt(t testing.TB, got, want *receipt.Receipt) {
	t.Helper()
	g, err1 := got.MarshalJSON()
	w, err2 := want.MarshalJSON()
	if err1 != nil || err2 != nil || !bytes.Equal(g, w) {
		t.Fatalf("receipt mismatch (%v, %v):\n got  %s\n want %s", err1, err2, g, w)
	}
}

func testReceipts(t *testing.T, s store.Store) {
	ctx := context.Background()
	if s.ChainID() != receipt.KeyID(s.PublicKey()) {
		t.Fatalf("ChainID %q is not the key id of PublicKey", s.ChainID())
	}
	if rep, out := export(t, s, 0); rep.Receipts != 0 || len(out) != 0 {
		t.Fatalf("export of an empty store: %d receipts, %d bytes", rep.Receipts, len(out))
	}
	var rs []*receipt.Receipt
	for i := range 5 {
		r := newReceipt([]string{"acme", "globex"}[i%2], fmt.Sprint(i))
		r.StartedAt = t0.Add(time.Duration(i) * time.Microsecond) // truncated to the ms by linking
		mustAppendReceipt(t, s, r)
		rs = append(rs, r)
	}
	prev := receipt.ZeroHash
	for i, r := range rs {
		if r.Seq != uint64(i) || r.ChainID != s.ChainID() || r.PrevHash != prev || r.Hash == "" || r.V != receipt.Version {
			t.Fatalf("receipt %d not linked: seq %d chain %q prev %q hash %q", i, r.Seq, r.ChainID, r.PrevHash, r.Hash)
		}
		if h, err := receipt.Hash(r); err != nil || h != r.Hash {
			t.Fatalf("receipt %d: hash %q, recomputed %q (%v)", i, r.Hash, h, err)
		}
		prev = r.Hash
	}
	// By id, tenant-scoped.
	got, err := s.ReceiptByID(ctx, "globex", rs[1].ReceiptID)
	if err != nil {
		t.Fatalf("ReceiptByID: %v", err)
	}
	equalReceipt(t, got, rs[1])
	_, err = s.ReceiptByID(ctx, "acme", rs[1].ReceiptID)
	wantCode(t, err, errcode.NotFound, "ReceiptByID of another tenant's receipt")
	_, err = s.ReceiptByID(ctx, "acme", "rcpt_none")
	wantCode(t, err, errcode.NotFound, "ReceiptByID of an unknown receipt")
	// By chain.
	page, err := s.ReceiptsByChain(ctx, s.ChainID(), 2, 2)
	if err != nil || len(page) != 2 {
		t.Fatalf("ReceiptsByChain(2, 2) = %d receipts, %v", len(page), err)
	}
	equalReceipt(t, page[0], rs[2])
	equalReceipt(t, page[1], rs[3])
	page[0].Principal = "mallory" // the caller owns the result
	if again, _ := s.ReceiptsByChain(ctx, s.ChainID(), 2, 1); again[0].Principal != rs[2].Principal {
		t.Fatal("ReceiptsByChain shares memory with the store")
	}
	if page, err := s.ReceiptsByChain(ctx, s.ChainID(), 5, 10); err != nil || len(page) != 0 {
		t.Fatalf("ReceiptsByChain past the head = %d receipts, %v", len(page), err)
	}
	if page, err := s.ReceiptsByChain(ctx, "ed25519:0000000000000000", 0, 10); err != nil || len(page) != 0 {
		t.Fatalf("ReceiptsByChain of an unknown chain = %d receipts, %v", len(page), err)
	}
	// Checkpoints cover the head.
	cps, err := s.Checkpoints(ctx, s.ChainID(), 0, 0)
	if err != nil || len(cps) == 0 {
		t.Fatalf("Checkpoints = %d, %v; want at least one", len(cps), err)
	}
	last := cps[len(cps)-1]
	if last.Seq != 4 || last.Hash != rs[4].Hash {
		t.Fatalf("newest checkpoint at seq %d (%s), want the head 4 (%s)", last.Seq, last.Hash, rs[4].Hash)
	}
	for i, cp := range cps {
		if err := receipt.VerifyCheckpoint(cp, s.PublicKey()); err != nil {
			t.Fatalf("checkpoint %d: %v", i, err)
		}
		if i > 0 && cp.Seq <= cps[i-1].Seq {
			t.Fatalf("checkpoints out of order: %d after %d", cp.Seq, cps[i-1].Seq)
		}
	}
	if later, err := s.Checkpoints(ctx, s.ChainID(), 5, 0); err != nil || len(later) != 0 {
		t.Fatalf("Checkpoints from past the head = %d, %v", len(later), err)
	}
	rep, _ := export(t, s, 0)
	if rep.Receipts != 5 || len(rep.Heads) != 1 || rep.Heads[0].Seq != 4 || rep.Heads[0].Signed != 4 {
		t.Fatalf("export report = %+v", rep)
	}
	// The chain continues; a second export covers everything again.
	r5 := newReceipt("acme", "5")
	mustAppendReceipt(t, s, r5)
	if r5.Seq != 5 || r5.PrevHash != rs[4].Hash {
		t.Fatalf("receipt 5: seq %d prev %q", r5.Seq, r5.PrevHash)
	}
	if rep, _ := export(t, s, 0); rep.Receipts != 6 {
		t.Fatalf("second export: %d receipts, want 6", rep.Receipts)
	}
}

func testReceiptErrors(t *testing.T, s store.Store) {
	ctx := context.Background()
	first := newReceipt("acme", "a")
	mustAppendReceipt(t, s, first)

	invalid := newReceipt("acme", "b")
	invalid.CallID = ""
	wantCode(t, s.AppendReceipt(ctx, invalid), errcode.InvalidArgument, "receipt without callId")
	wantCode(t, s.AppendReceipt(ctx, nil), errcode.InvalidArgument, "nil receipt")

	dup := newReceipt("globex", "a") // same receiptId
	err := s.AppendReceipt(ctx, dup)
	wantCode(t, err, errcode.Conflict, "duplicate receiptId")
	if dup.Hash != "" || dup.Seq != 0 || dup.ChainID != "" {
		t.Fatalf("a refused receipt keeps chain fields: seq %d chain %q hash %q", dup.Seq, dup.ChainID, dup.Hash)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	late := newReceipt("acme", "c")
	wantCode(t, s.AppendReceipt(cancelled, late), errcode.Cancelled, "cancelled ctx")
	if late.Hash != "" {
		t.Fatal("a cancelled append linked the receipt")
	}
	// None of the refused receipts took a seq.
	next := newReceipt("acme", "d")
	mustAppendReceipt(t, s, next)
	if next.Seq != 1 || next.PrevHash != first.Hash {
		t.Fatalf("after refusals: seq %d prev %q, want 1 after %q", next.Seq, next.PrevHash, first.Hash)
	}
	if _, err := s.ReceiptByID(ctx, "globex", dup.ReceiptID); err == nil {
		t.Fatal("the refused duplicate is readable under its tenant")
	}
	if rep, _ := export(t, s, 0); rep.Receipts != 2 {
		t.Fatalf("export: %d receipts, want 2", rep.Receipts)
	}
}

func testReceiptsConcurrent(t *testing.T, s store.Store) {
	const goroutines, perG = 16, 40
	var wg sync.WaitGroup
	start := make(chan struct{})
	seqs := make([][]uint64, goroutines)
	for g := range goroutines {
		wg.Go(func() {
			<-start
			for i := range perG {
				r := newReceipt("acme", fmt.Sprintf("%d_%d", g, i))
				if err := s.AppendReceipt(context.Background(), r); err != nil {
					t.Errorf("AppendReceipt: %v", err)
					return
				}
				seqs[g] = append(seqs[g], r.Seq)
			}
		})
	}
	close(start)
	wg.Wait()
	if t.Failed() {
		return
	}
	seen := make([]bool, goroutines*perG)
	for g := range seqs {
		for i, seq := range seqs[g] {
			if seq >= uint64(len(seen)) || seen[seq] {
				t.Fatalf("seq %d assigned twice or out of range", seq)
			}
			seen[seq] = true
			if i > 0 && seq <= seqs[g][i-1] {
				t.Fatalf("goroutine %d: seq %d after %d", g, seq, seqs[g][i-1])
			}
		}
	}
	rep, _ := export(t, s, 0)
	if rep.Receipts != goroutines*perG {
		t.Fatalf("export: %d receipts, want %d", rep.Receipts, goroutines*perG)
	}
	r, err := s.ReceiptByID(context.Background(), "acme", "rcpt_3_7")
	if err != nil || r.Seq != seqs[3][7] {
		t.Fatalf("ReceiptByID(rcpt_3_7) = seq %v, %v; its append returned %d", r, err, seqs[3][7])
	}
}

func testExportFromSeq(t *testing.T, s store.Store) {
	// Receipts appended one by one and in bursts, with exports in between,
	// so that the chain has several checkpoints.
	for i := range 12 {
		mustAppendReceipt(t, s, newReceipt("acme", fmt.Sprint(i)))
		if i%4 == 3 {
			export(t, s, 0)
		}
	}
	for _, from := range []uint64{0, 1, 5, 11} {
		rep, _ := export(t, s, from)
		if rep.Receipts != int(12-from) {
			t.Fatalf("export from %d: %d receipts, want %d", from, rep.Receipts, 12-from)
		}
	}
	if rep, out := export(t, s, 12); rep.Receipts != 0 || len(out) != 0 {
		t.Fatalf("export from past the head: %d receipts", rep.Receipts)
	}
	var buf bytes.Buffer
	if err := s.ExportReceipts(context.Background(), &buf, "ed25519:0000000000000000", 0); err != nil || buf.Len() != 0 {
		t.Fatalf("export of an unknown chain: %d bytes, %v", buf.Len(), err)
	}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	wantCode(t, s.ExportReceipts(cancelled, &buf, s.ChainID(), 0), errcode.Cancelled, "export with a cancelled ctx")
}

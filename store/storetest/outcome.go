package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/store"
)

// testOutcomes checks store.Outcomes, which every store must implement (the
// pipeline's one durable write per call outcome): events and receipt are
// stored together or not at all.
func testOutcomes(t *testing.T, s store.Store) {
	o, ok := s.(store.Outcomes)
	if !ok {
		t.Fatalf("%T does not implement store.Outcomes", s)
	}
	ctx := context.Background()
	wantErr := func(err error, code errcode.Code, what string) {
		t.Helper()
		if !errors.Is(err, &errcode.Error{Code: code}) {
			t.Fatalf("%s: got %v, want %s", what, err, code)
		}
	}
	seqs := func(run string) []int64 {
		t.Helper()
		var out []int64
		for _, ev := range allByRun(t, s, "acme", run) {
			out = append(out, ev.Sequence)
		}
		return out
	}

	called := newEvent(t, "acme", "run_o", 0, t0)
	mustAppend(t, s, called)
	ret := newEvent(t, "acme", "run_o", 1, t0)
	r := newReceipt("acme", "o1")
	if err := o.AppendOutcome(ctx, []*audit.Event{ret}, r); err != nil {
		t.Fatalf("AppendOutcome: %v", err)
	}
	if ret.Sequence != 1 || r.Seq != 0 || r.Hash == "" {
		t.Fatalf("after AppendOutcome: event seq %d, receipt seq %d hash %q", ret.Sequence, r.Seq, r.Hash)
	}
	if got, err := s.ReceiptByID(ctx, "acme", r.ReceiptID); err != nil {
		t.Fatalf("ReceiptByID: %v", err)
	} else {
		equalReceipt(t, got, r)
	}

	// A stored receiptId: Conflict, and the event is not stored either.
	dupEv := newEvent(t, "acme", "run_o", 2, t0)
	dup := newReceipt("acme", "o1")
	wantErr(o.AppendOutcome(ctx, []*audit.Event{dupEv}, dup), errcode.Conflict, "AppendOutcome with a stored receiptId")
	if dup.Hash != "" || dup.ChainID != "" || dupEv.Sequence != 0 {
		t.Fatalf("refused outcome: receipt hash %q chain %q, event seq %d", dup.Hash, dup.ChainID, dupEv.Sequence)
	}
	if got := seqs("run_o"); fmt.Sprint(got) != "[0 1]" {
		t.Fatalf("after a refused receipt: run sequences %v, want [0 1]", got)
	}

	// An eventId stored with other content: Conflict, and the receipt is
	// not stored; the chain does not advance.
	clash := newEvent(t, "acme", "run_other", 9, t0)
	clash.EventID = ret.EventID
	r2 := newReceipt("acme", "o2")
	wantErr(o.AppendOutcome(ctx, []*audit.Event{clash}, r2), errcode.Conflict, "AppendOutcome with a conflicting event")
	if _, err := s.ReceiptByID(ctx, "acme", r2.ReceiptID); !errors.Is(err, &errcode.Error{Code: errcode.NotFound}) {
		t.Fatalf("receipt of a refused outcome: %v, want NotFound", err)
	}
	if r2.Hash != "" {
		t.Fatalf("refused outcome: receipt hash %q", r2.Hash)
	}

	// Idempotent re-append of the events with a new receipt; then the run
	// continues without a gap.
	r3 := newReceipt("acme", "o3")
	again := *ret
	again.Sequence = 0
	if err := o.AppendOutcome(ctx, []*audit.Event{&again}, r3); err != nil {
		t.Fatalf("AppendOutcome re-appending: %v", err)
	}
	if again.Sequence != 1 || r3.Seq != 1 {
		t.Fatalf("re-append: event seq %d (want 1), receipt seq %d (want 1)", again.Sequence, r3.Seq)
	}
	mustAppend(t, s, dupEv)
	if got := seqs("run_o"); fmt.Sprint(got) != "[0 1 2]" {
		t.Fatalf("run sequences %v, want [0 1 2]", got)
	}

	// Invalid input.
	wantErr(o.AppendOutcome(ctx, []*audit.Event{nil}, newReceipt("acme", "o4")), errcode.InvalidArgument, "nil event")
	wantErr(o.AppendOutcome(ctx, nil, nil), errcode.InvalidArgument, "nil receipt")
	done, cancel := context.WithCancel(ctx)
	cancel()
	wantErr(o.AppendOutcome(done, []*audit.Event{newEvent(t, "acme", "run_c", 0, t0)}, newReceipt("acme", "o5")), errcode.Cancelled, "cancelled ctx")

	// Concurrent calls: each appends toolCalled, then its outcome.
	const callers, calls = 8, 10
	var wg sync.WaitGroup
	for g := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range calls {
				run := fmt.Sprintf("run_%d_%d", g, i)
				if err := s.AppendEvents(ctx, newEvent(t, "acme", run, 0, t0)); err != nil {
					t.Errorf("AppendEvents: %v", err)
					return
				}
				ev := newEvent(t, "acme", run, 1, t0.Add(time.Millisecond))
				if err := o.AppendOutcome(ctx, []*audit.Event{ev}, newReceipt("acme", fmt.Sprintf("c%d_%d", g, i))); err != nil {
					t.Errorf("AppendOutcome: %v", err)
					return
				}
				if ev.Sequence != 1 {
					t.Errorf("run %s: toolReturned seq %d", run, ev.Sequence)
				}
			}
		}()
	}
	wg.Wait()
	if rep, _ := export(t, s, 0); rep.Receipts != 2+callers*calls {
		t.Fatalf("export: %d receipts, want %d", rep.Receipts, 2+callers*calls)
	}
}

package sqlite

import (
	"context"
	"fmt"
	"testing"

	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/errcode"
)

// TestOutcomeRefusedInBatch: an outcome whose receipt is refused in the
// middle of a batch takes its events back without leaving a gap, and the
// requests around it commit.
func TestOutcomeRefusedInBatch(t *testing.T) {
	s := openAt(t, tempDB(t), Options{})
	ctx := context.Background()
	if err := s.AppendReceipt(ctx, rcpt("taken")); err != nil {
		t.Fatal(err)
	}
	release := blockWriter(t, s)
	type result struct {
		name string
		err  error
	}
	results := make(chan result, 4)
	submit := func(name string, fn func() error) { go func() { results <- result{name, fn()} }() }
	called := event(t, "acme", "run_x", 0, 0)
	submit("called", func() error { return s.AppendEvents(ctx, called) })
	waitQueued(t, s, 1)
	refused := []*audit.Event{event(t, "acme", "run_x", 1, 0), event(t, "acme", "run_y", 1, 0)}
	dup := rcpt("taken")
	submit("refused", func() error { return s.AppendOutcome(ctx, refused, dup) })
	waitQueued(t, s, 2)
	ok := []*audit.Event{event(t, "acme", "run_x", 2, 0)}
	good := rcpt("good")
	submit("ok", func() error { return s.AppendOutcome(ctx, ok, good) })
	waitQueued(t, s, 3)
	release()
	got := map[string]error{}
	for range 3 {
		r := <-results
		got[r.name] = r.err
	}
	if got["called"] != nil || got["ok"] != nil {
		t.Fatalf("results: %v", got)
	}
	wantCode(t, got["refused"], errcode.Conflict, "outcome with a stored receiptId")
	if dup.Hash != "" || refused[0].Sequence != 0 {
		t.Fatalf("refused outcome: hash %q, event seq %d", dup.Hash, refused[0].Sequence)
	}
	if called.Sequence != 0 || ok[0].Sequence != 1 || good.Seq != 1 {
		t.Fatalf("sequences: called %d, ok %d, receipt %d", called.Sequence, ok[0].Sequence, good.Seq)
	}
	for run, want := range map[string]string{"run_x": "[0 1]", "run_y": "[]"} {
		evs, err := s.EventsByRun(ctx, "acme", run, -1, 0)
		if err != nil {
			t.Fatal(err)
		}
		seqs := []int64{}
		for _, ev := range evs {
			seqs = append(seqs, ev.Sequence)
		}
		if fmt.Sprint(seqs) != want {
			t.Fatalf("%s: sequences %v, want %s", run, seqs, want)
		}
	}
	if rep := verifyExport(t, s); rep.Receipts != 2 {
		t.Fatalf("export: %d receipts", rep.Receipts)
	}
	// The next event of run_y starts at 0, positions keep increasing.
	next := event(t, "acme", "run_y", 5, 0)
	if err := s.AppendEvents(ctx, next); err != nil || next.Sequence != 0 {
		t.Fatalf("next event of run_y: %v, seq %d", err, next.Sequence)
	}
}

// TestOutcomeFailedBatch: a storage failure fails an outcome whole: its
// events and receipt are not stored and the receipt's chain fields are
// cleared.
func TestOutcomeFailedBatch(t *testing.T) {
	s := openAt(t, tempDB(t), Options{})
	ctx := context.Background()
	fail := func() error { return fmt.Errorf("injected") }
	s.w.failHook.Store(&fail)
	ev := event(t, "acme", "run_f", 0, 0)
	r := rcpt("f")
	wantCode(t, s.AppendOutcome(ctx, []*audit.Event{ev}, r), errcode.AuditUnavailable, "outcome in a failed batch")
	if r.Hash != "" || ev.Sequence != 0 {
		t.Fatalf("failed outcome: hash %q, seq %d", r.Hash, ev.Sequence)
	}
	s.w.failHook.Store(nil)
	r2 := rcpt("f")
	if err := s.AppendOutcome(ctx, []*audit.Event{ev}, r2); err != nil {
		t.Fatalf("retry: %v", err)
	}
	if r2.Seq != 0 || ev.Sequence != 0 {
		t.Fatalf("retry: receipt seq %d, event seq %d", r2.Seq, ev.Sequence)
	}
}

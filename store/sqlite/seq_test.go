package sqlite

import (
	"context"
	"testing"
	"time"
)

// runSeqs returns the sequences of tenant's run, in order.
func runSeqs(t *testing.T, s *Store, tenant, run string) []int64 {
	t.Helper()
	evs, err := s.EventsByRun(context.Background(), tenant, run, -1, 0)
	if err != nil {
		t.Fatalf("EventsByRun(%s): %v", run, err)
	}
	seqs := make([]int64, len(evs))
	for i, ev := range evs {
		seqs[i] = ev.Sequence
	}
	return seqs
}

// A run this Store has not seen (stored by an earlier process) continues
// after its stored events: the writer stages a new run at sequence 0
// without asking SQLite, and must notice that the run is not new. Journal
// on and off, a single event and a call's outcome (several events).
func TestRunStoredBeforeOpenContinues(t *testing.T) {
	for _, noJournal := range []bool{false, true} {
		ctx := context.Background()
		path := tempDB(t)
		first := openAt(t, path, Options{NoJournal: noJournal})
		for i := range 3 {
			if err := first.AppendEvents(ctx, event(t, "acme", "run-1", i, 0)); err != nil {
				t.Fatal(err)
			}
		}
		first.Close()

		s := openAt(t, path, Options{NoJournal: noJournal})
		ev := event(t, "acme", "run-1", 3, 0)
		other := event(t, "acme", "run-2", 0, 0)
		if err := s.AppendEvents(ctx, ev, other); err != nil {
			t.Fatal(err)
		}
		if ev.Sequence != 3 || other.Sequence != 0 {
			t.Fatalf("noJournal=%v: run-1's next event got seq %d (want 3), a new run's first %d (want 0)", noJournal, ev.Sequence, other.Sequence)
		}
		ret := event(t, "acme", "run-1", 4, 0)
		if err := s.AppendEvents(ctx, ret); err != nil || ret.Sequence != 4 {
			t.Fatalf("noJournal=%v: run-1's following event: seq %d, err %v; want 4", noJournal, ret.Sequence, err)
		}
		if got := runSeqs(t, s, "acme", "run-1"); len(got) != 5 || got[0] != 0 || got[4] != 4 {
			t.Fatalf("noJournal=%v: run-1 holds seqs %v, want 0..4", noJournal, got)
		}
	}
}

// A run whose events another Store pruned (toolgate audit prune beside a
// running serve, whose writer never cached the run) continues after its
// last pruned sequence: sequences are never reused. The writer must look
// at run_heads, which the other Store filled after this one opened.
func TestRunPrunedByAnotherStoreContinues(t *testing.T) {
	ctx := context.Background()
	path := tempDB(t)
	clk := &clock{t: t0}
	first := openAt(t, path, Options{Now: clk.Now})
	for i := range 3 {
		if err := first.AppendEvents(ctx, stampedEvent(t, "acme", "old-run", t0.Add(time.Duration(i)*time.Second))); err != nil {
			t.Fatal(err)
		}
	}
	first.Close()

	serve := openAt(t, path, Options{Now: clk.Now, Exclusive: true})
	// serve writes (and so begins transactions) before the prune too.
	if err := serve.AppendEvents(ctx, stampedEvent(t, "acme", "new-run", t0.Add(time.Hour))); err != nil {
		t.Fatal(err)
	}
	cli := openAt(t, path, Options{Now: clk.Now, Existing: true})
	res, err := cli.Prune(ctx, t0.Add(time.Minute))
	if err != nil || res.Events != 3 {
		t.Fatalf("Prune by the second Store: %+v, %v; want the old run's 3 events", res, err)
	}
	ev := stampedEvent(t, "acme", "old-run", t0.Add(2*time.Hour))
	if err := serve.AppendEvents(ctx, ev); err != nil || ev.Sequence != 3 {
		t.Fatalf("old-run's next event through serve: seq %d, err %v; want 3 (after the pruned 0..2)", ev.Sequence, err)
	}
}

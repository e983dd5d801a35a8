package sqlite

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/toolgate/toolgate/audit"
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
// on and off; a request of two events (the old run's and a new run's),
// then a single event.
func TestRunStoredBeforeOpenContinues(t *testing.T) {
	for _, noJournal := range []bool{false, true} {
		ctx := context.Background()
		path := tempDB(t)
		storeEarlier(t, path, Options{NoJournal: noJournal}, "run-1", seconds(0, 1, 2)...)

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

// storeEarlier appends events of tenant acme's run stamped at each of ts,
// through a Store that is closed again (an earlier process): a Store opened
// afterwards has not cached the run.
func storeEarlier(t *testing.T, path string, opts Options, run string, ts ...time.Time) {
	t.Helper()
	first := openAt(t, path, opts)
	for _, at := range ts {
		if err := first.AppendEvents(context.Background(), stampedEvent(t, "acme", run, at)); err != nil {
			t.Fatal(err)
		}
	}
	first.Close()
}

// seconds returns t0 plus each of secs seconds.
func seconds(secs ...int) []time.Time {
	ts := make([]time.Time, len(secs))
	for i, n := range secs {
		ts[i] = t0.Add(time.Duration(n) * time.Second)
	}
	return ts
}

// A run whose events another Store pruned (toolgate audit prune beside a
// running serve, whose writer never cached the run) continues after its
// last pruned sequence: sequences are never reused. The writer must look
// at run_heads, which the other Store filled after this one opened.
func TestRunPrunedByAnotherStoreContinues(t *testing.T) {
	ctx := context.Background()
	path := tempDB(t)
	clk := &clock{t: t0}
	storeEarlier(t, path, Options{Now: clk.Now}, "old-run", seconds(0, 1, 2)...)

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

// stageThenPrune opens path, stages an event of run (not cached: stored by
// an earlier Store) and a prune of what is older than cut in one writer
// batch, in that order, and returns the store and the staged event.
func stageThenPrune(t *testing.T, path string, noJournal bool, clk *clock, run string, at, cut time.Time) (*Store, *audit.Event) {
	t.Helper()
	ctx := context.Background()
	s := openAt(t, path, Options{Now: clk.Now, NoJournal: noJournal, MaxDelay: time.Minute})
	release := blockWriter(t, s)
	ev := stampedEvent(t, "acme", run, at)
	appended := make(chan error, 1)
	go func() { appended <- s.AppendEvents(ctx, ev) }()
	waitQueued(t, s, 1)
	pruned := make(chan error, 1)
	go func() {
		_, err := s.Prune(ctx, cut)
		pruned <- err
	}()
	waitQueued(t, s, 2)
	release()
	if err := <-appended; err != nil {
		t.Fatalf("noJournal=%v: append: %v", noJournal, err)
	}
	if err := <-pruned; err != nil {
		t.Fatalf("noJournal=%v: prune: %v", noJournal, err)
	}
	return s, ev
}

// An event staged (not yet inserted) when a prune of its run runs in the
// same batch keeps the sequence after the run's stored events: the prune
// inserts the staged rows before it deletes (serve's retention prunes at
// start, when every resumed run is uncached). Found by review of the
// seq-0 staging: the staged row got seq 0 and the run restarted at 0.
func TestEventStagedBeforePruneKeepsItsSequence(t *testing.T) {
	for _, noJournal := range []bool{false, true} {
		ctx := context.Background()
		path := tempDB(t)
		clk := &clock{t: t0}
		storeEarlier(t, path, Options{Now: clk.Now, NoJournal: noJournal}, "old-run", seconds(0, 1, 2)...)

		s, ev := stageThenPrune(t, path, noJournal, clk, "old-run", t0.Add(2*time.Hour), t0.Add(time.Minute))
		next := stampedEvent(t, "acme", "old-run", t0.Add(3*time.Hour))
		err := s.AppendEvents(ctx, next)
		if ev.Sequence != 3 || err != nil || next.Sequence != 4 {
			t.Fatalf("noJournal=%v: old-run's events got seqs %d, %d (err %v); want 3, 4 (0..2 were stored, then pruned); stored %v",
				noJournal, ev.Sequence, next.Sequence, err, runSeqs(t, s, "acme", "old-run"))
		}
	}
}

// The same when the prune deletes only the run's oldest events: no
// sequence is given twice and no append fails.
func TestEventStagedBeforePartialPruneKeepsItsSequence(t *testing.T) {
	ctx := context.Background()
	path := tempDB(t)
	clk := &clock{t: t0}
	storeEarlier(t, path, Options{Now: clk.Now}, "old-run", append(seconds(0, 1, 2), t0.Add(time.Hour), t0.Add(time.Hour))...)

	s, ev := stageThenPrune(t, path, false, clk, "old-run", t0.Add(2*time.Hour), t0.Add(time.Minute))
	got := []int64{ev.Sequence}
	for range 3 {
		next := stampedEvent(t, "acme", "old-run", t0.Add(3*time.Hour))
		if err := s.AppendEvents(ctx, next); err != nil {
			t.Fatalf("append after the prune: %v (seqs so far %v)", err, got)
		}
		got = append(got, next.Sequence)
	}
	if fmt.Sprint(got) != "[5 6 7 8]" {
		t.Fatalf("old-run's events after the partial prune got seqs %v, want [5 6 7 8]; stored %v", got, runSeqs(t, s, "acme", "old-run"))
	}
}

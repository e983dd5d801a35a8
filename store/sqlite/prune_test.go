package sqlite

import (
	"bytes"
	"context"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/receipt"
	"github.com/toolgate/toolgate/store"
)

// clock is a settable test clock, safe for concurrent use.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Set(t time.Time) { c.mu.Lock(); c.t = t; c.mu.Unlock() }

// stampedEvent is an event of run stamped at ts.
func stampedEvent(t testing.TB, tenant, run string, ts time.Time) *audit.Event {
	t.Helper()
	ev := event(t, tenant, run, 0, 0)
	ev.Timestamp = ts
	return ev
}

// exportVerify exports s's chain from seq from and verifies it.
func exportVerify(t testing.TB, s *Store, from uint64) (*receipt.Report, string) {
	t.Helper()
	var buf bytes.Buffer
	if err := s.ExportReceipts(context.Background(), &buf, s.ChainID(), from); err != nil {
		t.Fatalf("ExportReceipts: %v", err)
	}
	out := buf.String()
	rep, err := receipt.Verify(&buf, s.PublicKey(), receipt.VerifyOptions{From: from})
	if err != nil {
		t.Fatalf("Verify after prune: %v\n%s", err, out)
	}
	return rep, out
}

func TestPruneLeavesAVerifiableChain(t *testing.T) {
	ctx := context.Background()
	path := tempDB(t)
	clk := &clock{t: t0}
	s := openAt(t, path, Options{Now: clk.Now})

	// Ten minutes of activity: minute i has one event of run-a or run-b
	// and one receipt, committed alone (so one checkpoint per receipt,
	// signed at minute i).
	for i := range 10 {
		clk.Set(t0.Add(time.Duration(i) * time.Minute))
		run := "run-a"
		if i >= 3 {
			run = "run-b"
		}
		if err := s.AppendEvents(ctx, stampedEvent(t, "acme", run, clk.Now())); err != nil {
			t.Fatal(err)
		}
		if err := s.AppendReceipt(ctx, rcpt(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}

	// Keep what is younger than minute 5.5. PlanPrune previews it exactly
	// and deletes nothing.
	cut := t0.Add(5*time.Minute + 30*time.Second)
	plan, err := s.PlanPrune(ctx, cut)
	if err != nil {
		t.Fatalf("PlanPrune: %v", err)
	}
	if plan.Events.Count != 6 || !plan.Events.Oldest.Equal(t0) || !plan.Events.Newest.Equal(t0.Add(5*time.Minute)) ||
		plan.Receipts.Count != 6 || *plan.Receipts.FromSeq != 0 || *plan.Receipts.ToSeq != 5 || plan.Checkpoints != 5 ||
		plan.Anchor == nil || plan.Anchor.Seq != 5 {
		t.Fatalf("PlanPrune = %+v; want 6 events (minutes 0..5), receipts 0..5, 5 checkpoints, anchor at seq 5", plan)
	}
	if again, _ := s.PlanPrune(ctx, cut); !reflect.DeepEqual(again, plan) {
		t.Fatalf("a second PlanPrune = %+v, want the same %+v (the first changed something)", again, plan)
	}
	res, err := s.Prune(ctx, cut)
	if err != nil {
		t.Fatalf("Prune: %v", err)
	}
	if res.Anchor == nil || res.Anchor.Hash != plan.Anchor.Hash {
		t.Fatalf("Prune's anchor %+v is not PlanPrune's %+v", res.Anchor, plan.Anchor)
	}
	if res.Events != 6 || res.Receipts != 6 || res.Checkpoints != 5 || res.Anchor == nil || res.Anchor.Seq != 5 {
		t.Fatalf("Prune = %+v (anchor %+v), want 6 events, receipts 0..5, checkpoints 0..4, anchor at seq 5", res, res.Anchor)
	}
	// run-a (minutes 0-2) is gone; run-b keeps minutes 6-9 = seqs 3..6.
	if evs, _ := s.EventsByRun(ctx, "acme", "run-a", -1, 0); len(evs) != 0 {
		t.Fatalf("run-a after prune: %d events, want 0", len(evs))
	}
	evs, err := s.EventsByRun(ctx, "acme", "run-b", -1, 0)
	if err != nil || len(evs) != 4 || evs[0].Sequence != 3 {
		t.Fatalf("run-b after prune: %d events (first seq %v), err %v; want 4 from seq 3", len(evs), evs, err)
	}
	rep, out := exportVerify(t, s, 0)
	if rep.Receipts != 4 || !bytes.HasPrefix([]byte(out), []byte(`{"checkpoint":`)) {
		t.Fatalf("export after prune: %d receipts; want 4 opening with the anchor checkpoint:\n%s", rep.Receipts, out)
	}
	if _, err := s.ReceiptByID(ctx, "acme", "rcpt_2"); err == nil {
		t.Fatal("a pruned receipt is still readable")
	}

	// A pruned run continues its sequence; so does the chain, across a
	// reopen.
	ev := stampedEvent(t, "acme", "run-a", t0.Add(time.Hour))
	if err := s.AppendEvents(ctx, ev); err != nil || ev.Sequence != 3 {
		t.Fatalf("run-a's next event: seq %d, err %v; want 3 (after the pruned 0..2)", ev.Sequence, err)
	}
	s.Close()
	s = openAt(t, path, Options{Now: clk.Now})
	if ev := stampedEvent(t, "acme", "run-a", t0.Add(time.Hour)); s.AppendEvents(ctx, ev) != nil || ev.Sequence != 4 {
		t.Fatalf("run-a after reopen: seq %d, want 4", ev.Sequence)
	}
	r := rcpt("10")
	if err := s.AppendReceipt(ctx, r); err != nil || r.Seq != 10 {
		t.Fatalf("receipt after prune and reopen: seq %d, err %v; want 10", r.Seq, err)
	}
	if rep, _ := exportVerify(t, s, 0); rep.Receipts != 5 {
		t.Fatalf("export after reopen: %d receipts, want 5 (6..10)", rep.Receipts)
	}
	// An export from a seq inside the pruned range also starts at the anchor.
	if rep, _ := exportVerify(t, s, 2); rep.Receipts != 5 {
		t.Fatalf("export --from 2: %d receipts, want 5", rep.Receipts)
	}

	// Pruning everything keeps the head receipt the chain resumes from, and
	// is idempotent.
	for range 2 {
		res, err = s.Prune(ctx, t0.Add(24*time.Hour))
		if err != nil {
			t.Fatal(err)
		}
	}
	if res.Anchor == nil || res.Anchor.Seq != 9 {
		t.Fatalf("prune everything: anchor %+v, want seq 9 (receipt 10 is the head)", res.Anchor)
	}
	if rep, _ := exportVerify(t, s, 0); rep.Receipts != 1 {
		t.Fatalf("export after pruning everything: %d receipts, want the head only", rep.Receipts)
	}
}

func TestPruneInChunksWhileWriting(t *testing.T) {
	oldE, oldR := pruneEventChunk, pruneReceiptChunk
	pruneEventChunk, pruneReceiptChunk = 7, 5
	t.Cleanup(func() { pruneEventChunk, pruneReceiptChunk = oldE, oldR })
	ctx := context.Background()
	clk := &clock{t: t0}
	s := openAt(t, tempDB(t), Options{Now: clk.Now})
	// 100 old events and 40 old receipts, in batches of mixed sizes.
	for i := range 20 {
		var evs []*audit.Event
		for j := range 5 {
			evs = append(evs, stampedEvent(t, "acme", fmt.Sprintf("run-%d", j), t0))
		}
		if err := s.AppendEvents(ctx, evs...); err != nil {
			t.Fatal(err)
		}
		for j := range 2 {
			if err := s.AppendReceipt(ctx, rcpt(fmt.Sprintf("old-%d-%d", i, j))); err != nil {
				t.Fatal(err)
			}
		}
	}
	clk.Set(t0.Add(48 * time.Hour))
	// Prune always keeps the chain's head receipt (the chain resumes from
	// it), however old: had no new receipt committed before Prune reached
	// seq 39, the old receipt 39 would stay as the head and the anchor
	// would be 38. One new receipt committed first makes the head new
	// whatever the writers' timing, so all 40 old receipts are prunable.
	if err := s.AppendReceipt(ctx, rcpt("new-first")); err != nil {
		t.Fatal(err)
	}
	// Writers keep appending new events and receipts during the prune.
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 25 {
				if err := s.AppendEvents(ctx, stampedEvent(t, "acme", fmt.Sprintf("run-%d", w), clk.Now())); err != nil {
					t.Error(err)
				}
				if err := s.AppendReceipt(ctx, rcpt(fmt.Sprintf("new-%d-%d", w, i))); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	res, err := s.Prune(ctx, t0.Add(24*time.Hour))
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if res.Events != 100 || res.Receipts != 40 || res.Anchor == nil || res.Anchor.Seq != 39 {
		t.Fatalf("Prune = %+v anchor %+v; want 100 events, 40 receipts, anchor seq 39", res, res.Anchor)
	}
	if rep, _ := exportVerify(t, s, 0); rep.Receipts != 101 {
		t.Fatalf("after prune: %d receipts verified, want the 101 new ones", rep.Receipts)
	}
	for j := range 5 {
		evs, err := s.EventsByRun(ctx, "acme", fmt.Sprintf("run-%d", j), -1, 0)
		if err != nil {
			t.Fatal(err)
		}
		for k, ev := range evs {
			if ev.Sequence != int64(20+k) {
				t.Fatalf("run-%d event %d: seq %d, want %d (sequences continue past the pruned 0..19)", j, k, ev.Sequence, 20+k)
			}
		}
	}
}

func TestRetentionLoopPrunesOnOpen(t *testing.T) {
	ctx := context.Background()
	path := tempDB(t)
	s := openAt(t, path, Options{Now: func() time.Time { return t0 }})
	for i := range 3 {
		if err := s.AppendEvents(ctx, stampedEvent(t, "acme", "run", t0)); err != nil {
			t.Fatal(err)
		}
		if err := s.AppendReceipt(ctx, rcpt(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()

	got := make(chan store.PruneResult, 1)
	testPruneHook = func(r store.PruneResult, err error) {
		if err != nil {
			t.Errorf("retention prune: %v", err)
		}
		select {
		case got <- r:
		default:
		}
	}
	t.Cleanup(func() { testPruneHook = nil })
	later := t0.Add(91 * 24 * time.Hour)
	s = openAt(t, path, Options{Retention: 90 * 24 * time.Hour, Now: func() time.Time { return later }})
	select {
	case r := <-got:
		if r.Events != 3 || r.Receipts != 2 {
			t.Fatalf("retention on open pruned %+v, want 3 events and receipts 0..1 (the head stays)", r)
		}
	case <-time.After(time.Minute):
		t.Fatal("the retention loop did not run on open")
	}
	if rep, _ := exportVerify(t, s, 0); rep.Receipts != 1 {
		t.Fatalf("after retention: %d receipts verified, want 1", rep.Receipts)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

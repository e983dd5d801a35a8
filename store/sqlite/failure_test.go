package sqlite

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/receipt"
	"github.com/toolgate/toolgate/store"
)

// TestCommitFailure: while every COMMIT fails, every caller gets
// audit_unavailable, nothing is stored or published, and the chain and the
// sequences continue from the last commit once commits succeed again.
func TestCommitFailure(t *testing.T) {
	s := openAt(t, tempDB(t), Options{})
	ctx := context.Background()
	for i := range 3 {
		if err := s.AppendEvents(ctx, event(t, "acme", "run_f", i, 0)); err != nil {
			t.Fatal(err)
		}
	}
	var before []*receipt.Receipt
	for i := range 5 {
		r := rcpt(fmt.Sprint("ok", i))
		if err := s.AppendReceipt(ctx, r); err != nil {
			t.Fatal(err)
		}
		before = append(before, r)
	}
	follow, err := s.Follow(ctx, "acme", "")
	if err != nil {
		t.Fatal(err)
	}

	injected := errors.New("injected: disk I/O error")
	fail := func() error { return injected }
	s.w.failHook.Store(&fail)
	var wg sync.WaitGroup
	var failedEvents []*audit.Event
	var failedReceipts []*receipt.Receipt
	for g := range 8 {
		ev := event(t, "acme", "run_f", 100+g, 0)
		ev.Sequence = 55
		r := rcpt(fmt.Sprint("fail", g))
		failedEvents, failedReceipts = append(failedEvents, ev), append(failedReceipts, r)
		wg.Go(func() {
			wantCodeAsync(t, s.AppendEvents(ctx, ev), errcode.AuditUnavailable, "AppendEvents during failure")
			wantCodeAsync(t, s.AppendReceipt(ctx, r), errcode.AuditUnavailable, "AppendReceipt during failure")
		})
	}
	wg.Wait()
	err = s.CreateApproval(ctx, &store.Approval{ID: "appr_f", Principal: "alice", ToolID: "native:x", ArgsHash: sha("a"), CreatedAt: t0})
	wantCode(t, err, errcode.AuditUnavailable, "CreateApproval during failure")
	if !errors.Is(err, injected) {
		t.Errorf("the error does not wrap the cause: %v", err)
	}
	for _, ev := range failedEvents {
		if ev.Sequence != 55 {
			t.Fatalf("a failed append set Sequence %d", ev.Sequence)
		}
	}
	for _, r := range failedReceipts {
		if r.Hash != "" || r.Seq != 0 || r.ChainID != "" {
			t.Fatalf("a failed receipt keeps chain fields: seq %d hash %q", r.Seq, r.Hash)
		}
	}
	// Nothing of the failed batches is stored.
	if evs, _ := s.EventsByRun(ctx, "acme", "run_f", -1, 100); len(evs) != 3 {
		t.Fatalf("run_f has %d events after failures, want 3", len(evs))
	}
	if rs, _ := s.ReceiptsByChain(ctx, s.ChainID(), 0, 100); len(rs) != 5 {
		t.Fatalf("the chain has %d receipts after failures, want 5", len(rs))
	}
	if cps, _ := s.Checkpoints(ctx, s.ChainID(), 5, 100); len(cps) != 0 {
		t.Fatalf("a failed batch stored %d checkpoints", len(cps))
	}
	if _, err := s.GetApproval(ctx, "", "appr_f"); !errors.Is(err, &errcode.Error{Code: errcode.NotFound}) {
		t.Fatalf("GetApproval after a failed create: %v", err)
	}

	// Recovery: sequences and the chain continue without a gap.
	s.w.failHook.Store(nil)
	ev := event(t, "acme", "run_f", 200, 0)
	if err := s.AppendEvents(ctx, ev); err != nil {
		t.Fatal(err)
	}
	if ev.Sequence != 3 {
		t.Fatalf("first event after recovery: Sequence %d, want 3", ev.Sequence)
	}
	r := rcpt("after")
	if err := s.AppendReceipt(ctx, r); err != nil {
		t.Fatal(err)
	}
	if r.Seq != 5 || r.PrevHash != before[4].Hash {
		t.Fatalf("first receipt after recovery: seq %d prev %q, want 5 after %q", r.Seq, r.PrevHash, before[4].Hash)
	}
	if rep := verifyExport(t, s); rep.Receipts != 6 {
		t.Fatalf("export after recovery: %d receipts, want 6", rep.Receipts)
	}
	// The follower saw none of the failed events: the next is ev.
	select {
	case f := <-follow:
		if f.Event.EventID != ev.EventID {
			t.Fatalf("follower got %s (n=%s), want the event appended after recovery", f.Event.EventID, f.Event.Payload)
		}
	case <-time.After(time.Minute):
		t.Fatal("follower got nothing")
	}
}

// wantCodeAsync is wantCode for goroutines (Errorf, not Fatalf).
func wantCodeAsync(t testing.TB, err error, code errcode.Code, what string) {
	if !errors.Is(err, &errcode.Error{Code: code}) {
		t.Errorf("%s: got %v, want code %s", what, err, code)
	}
}

// TestDiskFull: a real SQLite "database or disk is full" in the middle of a
// batch that also linked a receipt fails the whole batch, rolls the chain
// back, and the store recovers when space returns.
func TestDiskFull(t *testing.T) {
	// The two appends below must share one batch, and not the blocking
	// operation's: a batch stops taking requests MaxDelay after it began. A
	// 1 ns MaxDelay ends the blocking batch at its first request; while the
	// writer is blocked, maxDelay becomes a minute, which no loaded machine
	// (the race detector, parallel packages) passes while the receipt is
	// applied. (The writer reads maxDelay after the blocking operation
	// returns, which happens after release.)
	s := openAt(t, tempDB(t), Options{MaxDelay: time.Nanosecond})
	ctx := context.Background()
	first := rcpt("first")
	if err := s.AppendReceipt(ctx, first); err != nil {
		t.Fatal(err)
	}
	setMaxPages := func(n string) {
		t.Helper()
		err := s.runOp(ctx, "test", func(w *writer) error {
			var pages int64
			if err := w.conn.QueryRowContext(ctx, "PRAGMA page_count").Scan(&pages); err != nil {
				return err
			}
			if n == "current" {
				n = fmt.Sprint(pages)
			}
			_, err := w.conn.ExecContext(ctx, "PRAGMA max_page_count = "+n)
			return err
		})
		if err != nil {
			t.Fatalf("set max_page_count: %v", err)
		}
	}
	setMaxPages("current")

	// One batch: a receipt (small, fits), then an event too big for the
	// remaining pages.
	release := blockWriter(t, s)
	s.w.maxDelay = time.Minute
	doomed := rcpt("doomed")
	big := event(t, "acme", "run_big", 0, 256<<10)
	errs := make(chan error, 2)
	go func() { errs <- s.AppendReceipt(ctx, doomed) }()
	waitQueued(t, s, 1)
	go func() { errs <- s.AppendEvents(ctx, big) }()
	waitQueued(t, s, 2)
	release()
	for range 2 {
		err := <-errs
		wantCode(t, err, errcode.AuditUnavailable, "append on a full disk")
		if !strings.Contains(err.Error(), "full") {
			t.Errorf("the error does not name the cause: %v", err)
		}
	}
	if doomed.Hash != "" {
		t.Fatal("the receipt of the failed batch stays linked")
	}
	if rs, _ := s.ReceiptsByChain(ctx, s.ChainID(), 0, 10); len(rs) != 1 {
		t.Fatalf("%d receipts stored, want 1", len(rs))
	}
	if evs, _ := s.EventsByRun(ctx, "acme", "run_big", -1, 10); len(evs) != 0 {
		t.Fatalf("%d events stored, want 0", len(evs))
	}

	setMaxPages("1073741823")
	again := rcpt("again")
	if err := s.AppendReceipt(ctx, again); err != nil {
		t.Fatal(err)
	}
	if again.Seq != 1 || again.PrevHash != first.Hash {
		t.Fatalf("receipt after recovery: seq %d prev %q, want 1 after %q", again.Seq, again.PrevHash, first.Hash)
	}
	if err := s.AppendEvents(ctx, big); err != nil || big.Sequence != 0 {
		t.Fatalf("big event after recovery: seq %d, %v", big.Sequence, err)
	}
	if rep := verifyExport(t, s); rep.Receipts != 2 {
		t.Fatalf("export: %d receipts, want 2", rep.Receipts)
	}
}

// TestBatchIsolation: one request's own error (a conflict) fails that
// request only; the others of its transaction commit.
func TestBatchIsolation(t *testing.T) {
	s := openAt(t, tempDB(t), Options{})
	ctx := context.Background()
	stored := event(t, "acme", "run_b", 0, 0)
	if err := s.AppendEvents(ctx, stored); err != nil {
		t.Fatal(err)
	}
	if err := s.AppendReceipt(ctx, rcpt("dup")); err != nil {
		t.Fatal(err)
	}
	release := blockWriter(t, s)
	changed := *stored
	changed.Payload = []byte(`{"n":"other"}`)
	good1, good2 := event(t, "acme", "run_b", 1, 0), event(t, "acme", "run_b", 2, 0)
	goodR := rcpt("good")
	type result struct {
		name string
		err  error
	}
	results := make(chan result, 5)
	submit := func(name string, fn func() error) {
		go func() { results <- result{name, fn()} }()
	}
	submit("good1", func() error { return s.AppendEvents(ctx, good1) })
	waitQueued(t, s, 1)
	submit("conflict", func() error { return s.AppendEvents(ctx, good2, &changed) }) // multi-event: savepoint
	waitQueued(t, s, 2)
	submit("dupReceipt", func() error { return s.AppendReceipt(ctx, rcpt("dup")) })
	waitQueued(t, s, 3)
	submit("goodReceipt", func() error { return s.AppendReceipt(ctx, goodR) })
	waitQueued(t, s, 4)
	release()
	got := map[string]error{}
	for range 4 {
		r := <-results
		got[r.name] = r.err
	}
	if got["good1"] != nil || got["goodReceipt"] != nil {
		t.Fatalf("good requests failed: %v", got)
	}
	wantCode(t, got["conflict"], errcode.Conflict, "conflicting batch")
	wantCode(t, got["dupReceipt"], errcode.Conflict, "duplicate receipt")
	evs, _ := s.EventsByRun(ctx, "acme", "run_b", -1, 10)
	if len(evs) != 2 || evs[1].EventID != good1.EventID {
		t.Fatalf("run_b = %d events, want stored and good1", len(evs))
	}
	if goodR.Seq != 1 {
		t.Fatalf("the good receipt got seq %d, want 1 (the duplicate took none)", goodR.Seq)
	}
	if err := s.AppendEvents(ctx, good2); err != nil || good2.Sequence != 2 {
		t.Fatalf("good2 after the conflict: seq %d, %v; want 2", good2.Sequence, err)
	}
	verifyExport(t, s)
}

// TestQueuedThenCancelled: a queued request whose ctx ends before the
// writer reaches it is skipped: Cancelled, nothing stored.
func TestQueuedThenCancelled(t *testing.T) {
	s := openAt(t, tempDB(t), Options{})
	release := blockWriter(t, s)
	ctx, cancel := context.WithCancel(context.Background())
	ev := event(t, "acme", "run_c", 0, 0)
	r := rcpt("c")
	errs := make(chan error, 2)
	go func() { errs <- s.AppendEvents(ctx, ev) }()
	waitQueued(t, s, 1)
	go func() { errs <- s.AppendReceipt(ctx, r) }()
	waitQueued(t, s, 2)
	cancel()
	release()
	for range 2 {
		wantCode(t, <-errs, errcode.Cancelled, "queued, then cancelled")
	}
	if evs, _ := s.EventsByRun(context.Background(), "acme", "run_c", -1, 10); len(evs) != 0 {
		t.Fatal("a cancelled event was stored")
	}
	next := rcpt("next")
	if err := s.AppendReceipt(context.Background(), next); err != nil || next.Seq != 0 {
		t.Fatalf("receipt after a skipped one: seq %d, %v", next.Seq, err)
	}
}

// TestBackPressure: with the queue full, a caller blocks until its ctx
// ends, and nothing of it is stored; queued callers still commit.
func TestBackPressure(t *testing.T) {
	s := openAt(t, tempDB(t), Options{QueueSize: 1})
	release := blockWriter(t, s)
	queued := event(t, "acme", "run_q", 0, 0)
	queuedErr := make(chan error, 1)
	go func() { queuedErr <- s.AppendEvents(context.Background(), queued) }()
	waitQueued(t, s, 1) // the queue is full now
	ctx, cancel := context.WithCancel(context.Background())
	blocked := event(t, "acme", "run_q", 1, 0)
	blockedErr := make(chan error, 1)
	go func() { blockedErr <- s.AppendEvents(ctx, blocked) }()
	select {
	case err := <-blockedErr:
		t.Fatalf("a caller returned (%v) while the queue was full", err)
	default:
	}
	cancel()
	wantCode(t, <-blockedErr, errcode.Cancelled, "blocked on a full queue")
	release()
	if err := <-queuedErr; err != nil {
		t.Fatal(err)
	}
	evs, _ := s.EventsByRun(context.Background(), "acme", "run_q", -1, 10)
	if len(evs) != 1 || evs[0].EventID != queued.EventID {
		t.Fatalf("run_q = %d events, want only the queued one", len(evs))
	}
}

// TestMaxBatch: batches hold at most MaxBatch items, and a larger request
// still commits whole.
func TestMaxBatch(t *testing.T) {
	s := openAt(t, tempDB(t), Options{MaxBatch: 2, MaxDelay: time.Hour})
	var mu sync.Mutex
	var sizes []int
	s.w.batchHook = func(n int) { mu.Lock(); sizes = append(sizes, n); mu.Unlock() }
	release := blockWriter(t, s)
	var wg sync.WaitGroup
	for i := range 5 {
		wg.Go(func() {
			if err := s.AppendEvents(context.Background(), event(t, "acme", "run_m", i, 0)); err != nil {
				t.Errorf("AppendEvents: %v", err)
			}
		})
		waitQueued(t, s, i+1)
	}
	big := []*audit.Event{event(t, "acme", "run_big", 0, 0), event(t, "acme", "run_big", 1, 0), event(t, "acme", "run_big", 2, 0)}
	wg.Go(func() {
		if err := s.AppendEvents(context.Background(), big...); err != nil {
			t.Errorf("AppendEvents(3): %v", err)
		}
	})
	waitQueued(t, s, 6)
	release()
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	// The blocking op's batch takes one more event (2 items: op + event);
	// then 2, 2 and the 3-event request alone.
	if fmt.Sprint(sizes) != "[2 2 2 1]" {
		t.Fatalf("batch sizes (requests) = %v, want [2 2 2 1]", sizes)
	}
	if evs, _ := s.EventsByRun(context.Background(), "acme", "run_big", -1, 10); len(evs) != 3 {
		t.Fatalf("the large request stored %d events", len(evs))
	}
}

// TestCloseDrains: Close commits what is queued, then refuses.
func TestCloseDrains(t *testing.T) {
	s := openAt(t, tempDB(t), Options{})
	release := blockWriter(t, s)
	errs := make(chan error, 3)
	for i := range 3 {
		go func() { errs <- s.AppendEvents(context.Background(), event(t, "acme", "run_d", i, 0)) }()
		waitQueued(t, s, i+1)
	}
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	release()
	for range 3 {
		if err := <-errs; err != nil {
			t.Fatalf("a request queued before Close failed: %v", err)
		}
	}
	if err := <-closed; err != nil {
		t.Fatalf("Close: %v", err)
	}
	wantCode(t, s.AppendEvents(context.Background(), event(t, "acme", "run_d", 9, 0)), errcode.AuditUnavailable, "append after Close")
}

// TestMultiRowPositions: events inserted by multi-row statements get the
// positions the writer computes (followers' cursors match the rows), and
// the same new event appended twice in one batch is stored once.
func TestMultiRowPositions(t *testing.T) {
	s := openAt(t, tempDB(t), Options{MaxBatch: 1000})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	follow, err := s.Follow(ctx, "acme", "")
	if err != nil {
		t.Fatal(err)
	}
	release := blockWriter(t, s)
	const n = 150 // more than two chunks of maxInsertRows
	evs := make([]*audit.Event, n)
	errs := make(chan error, n+1)
	for i := range n {
		evs[i] = event(t, "acme", fmt.Sprintf("run_%d", i%7), i, 0)
		go func() { errs <- s.AppendEvents(context.Background(), evs[i]) }()
		waitQueued(t, s, i+1)
	}
	twin := *evs[100] // the same event again, in the same batch
	go func() { errs <- s.AppendEvents(context.Background(), &twin) }()
	waitQueued(t, s, n+1)
	release()
	for range n + 1 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if twin.Sequence != evs[100].Sequence {
		t.Fatalf("the twin got Sequence %d, the original %d", twin.Sequence, evs[100].Sequence)
	}
	rows, err := s.rdb.Query("SELECT pos, event_id FROM events ORDER BY pos")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for i := 0; rows.Next(); i++ {
		var pos int64
		var id string
		if err := rows.Scan(&pos, &id); err != nil {
			t.Fatal(err)
		}
		if i >= n {
			t.Fatalf("more than %d rows stored", n)
		}
		var f store.Followed
		select {
		case f = <-follow:
		case <-time.After(time.Minute):
			t.Fatal("follower stalled")
		}
		c, err := store.ParseCursor(f.Cursor)
		if err != nil || f.Event.EventID != id || c.Pos != pos || id != evs[i].EventID {
			t.Fatalf("row %d: stored (%d, %s), followed (%d, %s), appended %s (%v)", i, pos, id, c.Pos, f.Event.EventID, evs[i].EventID, err)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
}

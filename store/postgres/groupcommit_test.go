package postgres

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/receipt"
)

// TestGroupCommit: appends that arrive while the writer is busy share one
// transaction. The writer's first transaction is held on a run-head row
// lock taken by another session; the requests queued meanwhile commit
// together in the next one.
func TestGroupCommit(t *testing.T) {
	h := holdWriter(t)
	const queued = 50
	var wg sync.WaitGroup
	errs := make(chan error, queued+1)
	wg.Add(1)
	go func() { defer wg.Done(); errs <- h.s.AppendEvents(context.Background(), h.event("run_held")) }()
	h.waitHeld()
	before := h.s.w.commits.Load()
	for i := range queued {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- h.s.AppendEvents(context.Background(), h.event(fmt.Sprintf("run_%d", i)))
		}()
	}
	waitFor(t, func() bool { return len(h.s.w.q) == queued })
	h.release()
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("AppendEvents: %v", err)
		}
	}
	if got := h.s.w.commits.Load() - before; got != 2 {
		t.Fatalf("%d appends took %d transactions, want 2 (the held one, then one for the %d queued)", queued+1, got, queued)
	}
}

// TestBatchWithARefusedRequest: a batch in which the database refuses one
// request (a receiptId already stored) is applied again request by
// request: the others commit, in one more transaction; the refused one
// stores nothing (neither its event nor its receipt); the run has no
// gap and the chain verifies.
func TestBatchWithARefusedRequest(t *testing.T) {
	h := holdWriter(t)
	ctx := context.Background()
	first := h.receipt("rcpt_dup")
	if err := h.s.AppendReceipt(ctx, first); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	var heldErr error
	go func() { defer wg.Done(); heldErr = h.s.AppendEvents(ctx, h.event("run_held")) }()
	h.waitHeld()
	before := h.s.w.commits.Load()
	const n = 6
	errs := make([]error, n)
	evs := make([]*audit.Event, n)
	rcpts := make([]*receipt.Receipt, n)
	for i := range n {
		evs[i] = h.event("run_batch")
		rcpts[i] = h.receipt(fmt.Sprintf("rcpt_%d", i))
		if i == 3 {
			rcpts[i] = h.receipt("rcpt_dup") // already stored
		}
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = h.s.AppendOutcome(ctx, []*audit.Event{evs[i]}, rcpts[i]) }()
	}
	waitFor(t, func() bool { return len(h.s.w.q) == n })
	h.release()
	wg.Wait()
	if heldErr != nil {
		t.Fatalf("held append: %v", heldErr)
	}
	for i, err := range errs {
		switch {
		case i == 3 && errcode.CodeOf(err) != errcode.Conflict:
			t.Fatalf("outcome with a stored receiptId: %v, want Conflict", err)
		case i == 3 && (rcpts[i].Hash != "" || evs[i].Sequence != 0):
			t.Fatalf("refused outcome: receipt hash %q, event sequence %d", rcpts[i].Hash, evs[i].Sequence)
		case i != 3 && err != nil:
			t.Fatalf("outcome %d: %v", i, err)
		}
	}
	if got := h.s.w.commits.Load() - before; got != 2 {
		t.Fatalf("%d transactions, want 2 (the held one, then the queued batch applied request by request)", got)
	}
	stored, err := h.s.EventsByRun(ctx, "acme", "run_batch", -1, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(stored) != n-1 {
		t.Fatalf("%d events stored, want %d", len(stored), n-1)
	}
	for i, ev := range stored {
		if ev.Sequence != int64(i) {
			t.Fatalf("event %d has sequence %d: a gap", i, ev.Sequence)
		}
	}
	var buf bytes.Buffer
	if err := h.s.ExportReceipts(ctx, &buf, h.s.ChainID(), 0); err != nil {
		t.Fatal(err)
	}
	res, err := receipt.Verify(&buf, h.s.PublicKey(), receipt.VerifyOptions{})
	if err != nil {
		t.Fatalf("verify: %v", err)
	}
	if res.Receipts != n {
		t.Fatalf("%d receipts verified, want %d (the first and %d of the batch)", res.Receipts, n, n-1)
	}
}

// TestQueuedRequestCancelled: a request whose ctx ends while it waits in
// the queue is answered with Cancelled and stores nothing, while the
// rest of its batch commits.
func TestQueuedRequestCancelled(t *testing.T) {
	h := holdWriter(t)
	ctx := context.Background()
	var wg sync.WaitGroup
	var heldErr, okErr, cancelledErr error
	wg.Add(1)
	go func() { defer wg.Done(); heldErr = h.s.AppendEvents(ctx, h.event("run_held")) }()
	h.waitHeld()
	cctx, cancel := context.WithCancel(ctx)
	gone := h.event("run_q")
	wg.Add(1)
	go func() { defer wg.Done(); cancelledErr = h.s.AppendEvents(cctx, gone) }()
	waitFor(t, func() bool { return len(h.s.w.q) == 1 })
	kept := h.event("run_q")
	wg.Add(1)
	go func() { defer wg.Done(); okErr = h.s.AppendEvents(ctx, kept) }()
	waitFor(t, func() bool { return len(h.s.w.q) == 2 })
	cancel()
	h.release()
	wg.Wait()
	if heldErr != nil || okErr != nil {
		t.Fatalf("appends: %v, %v", heldErr, okErr)
	}
	if errcode.CodeOf(cancelledErr) != errcode.Cancelled {
		t.Fatalf("append whose ctx ended in the queue: %v, want Cancelled", cancelledErr)
	}
	evs, err := h.s.EventsByRun(ctx, "acme", "run_q", -1, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 1 || evs[0].EventID != kept.EventID || evs[0].Sequence != 0 {
		t.Fatalf("run_q holds %+v, want only the kept event, sequence 0", evs)
	}
}

// held is a Store whose writer can be held: the first append of run_held
// waits for a run-head row lock that another session holds until
// release, and appends queued meanwhile form the next batch.
type held struct {
	t      *testing.T
	s      *Store
	admin  *pgx.Conn
	lock   pgx.Tx
	schema string
}

func holdWriter(t *testing.T) *held {
	dsn := os.Getenv("TOOLGATE_TEST_POSTGRES")
	if dsn == "" {
		dsn = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	}
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("PostgreSQL at %s is required: %v", dsn, err)
	}
	t.Cleanup(func() { admin.Close(context.Background()) })
	schema := fmt.Sprintf("tg_group_%d", time.Now().UnixNano())
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE") })
	u, _ := url.Parse(dsn)
	q := u.Query()
	q.Set("search_path", schema)
	q.Set("application_name", schema)
	u.RawQuery = q.Encode()
	s, err := Open(ctx, u.String(), Options{Signer: receipt.NewSigner(ed25519.NewKeyFromSeed(bytes.Repeat([]byte{9}, 32)))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	lock, err := admin.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lock.Exec(ctx, "INSERT INTO "+schema+".run_heads (tenant, run_id, next_seq) VALUES ('acme', 'run_held', 0)"); err != nil {
		t.Fatal(err)
	}
	return &held{t: t, s: s, admin: admin, lock: lock, schema: schema}
}

// waitHeld returns once the writer waits for the lock.
func (h *held) waitHeld() {
	waitFor(h.t, func() bool {
		var n int
		_ = h.admin.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'`, h.schema).Scan(&n)
		return n > 0
	})
}

// release lets the held writer go on.
func (h *held) release() {
	if err := h.lock.Rollback(context.Background()); err != nil {
		h.t.Fatal(err)
	}
}

func (h *held) event(run string) *audit.Event {
	ev, err := audit.NewEvent(run, audit.TypeToolCalled, json.RawMessage(`{}`), "", time.Now())
	if err != nil {
		h.t.Fatal(err)
	}
	ev.Tenant = "acme"
	return ev
}

func (h *held) receipt(id string) *receipt.Receipt {
	d := int64(1)
	hash := strings.Repeat("0", 64)
	return &receipt.Receipt{ReceiptID: id, CallID: "call_" + id, RunID: "run_batch", AgentID: "a", Principal: "alice", Tenant: "acme",
		ToolID: "mcp:fs.read", Transport: "mcp", Decision: receipt.Decision{Effect: "allow", RuleID: "r", PolicyVersion: "v1"},
		RequestedArgsHash: hash, ExecutedArgsHash: hash, Status: receipt.StatusOK, StartedAt: time.Now(), DurationMs: &d}
}

// waitFor polls cond until it holds, failing after a minute.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !cond(); {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached within a minute")
		}
		time.Sleep(5 * time.Millisecond) // polling a condition, with a deadline
	}
}

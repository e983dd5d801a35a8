package postgres

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/receipt"
)

// TestGroupCommit: appends that arrive while the writer is busy share one
// transaction. The writer's first transaction is held on a run-head row
// lock taken by another session; the requests queued meanwhile commit
// together in the next one.
func TestGroupCommit(t *testing.T) {
	dsn := os.Getenv("TOOLGATE_TEST_POSTGRES")
	if dsn == "" {
		dsn = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	}
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("PostgreSQL at %s is required: %v", dsn, err)
	}
	defer admin.Close(context.Background())
	schema := fmt.Sprintf("tg_group_%d", time.Now().UnixNano())
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatal(err)
	}
	defer admin.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE")
	u, _ := url.Parse(dsn)
	q := u.Query()
	q.Set("search_path", schema)
	q.Set("application_name", schema)
	u.RawQuery = q.Encode()
	s, err := Open(ctx, u.String(), Options{Signer: receipt.NewSigner(ed25519.NewKeyFromSeed(bytes.Repeat([]byte{9}, 32)))})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	lock, err := admin.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lock.Exec(ctx, "INSERT INTO "+schema+".run_heads (tenant, run_id, next_seq) VALUES ('acme', 'run_held', 0)"); err != nil {
		t.Fatal(err)
	}
	newEv := func(run string) *audit.Event {
		ev, err := audit.NewEvent(run, audit.TypeToolCalled, json.RawMessage(`{}`), "", time.Now())
		if err != nil {
			t.Fatal(err)
		}
		ev.Tenant = "acme"
		return ev
	}
	const queued = 50
	var wg sync.WaitGroup
	errs := make(chan error, queued+1)
	wg.Add(1)
	go func() { defer wg.Done(); errs <- s.AppendEvents(ctx, newEv("run_held")) }()
	// The writer is blocked once run_held's upsert waits for the lock.
	waitFor(t, func() bool {
		var n int
		_ = admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'`, schema).Scan(&n)
		return n > 0
	})
	before := s.w.commits.Load()
	for i := range queued {
		wg.Add(1)
		go func() { defer wg.Done(); errs <- s.AppendEvents(ctx, newEv(fmt.Sprintf("run_%d", i))) }()
	}
	waitFor(t, func() bool { return len(s.w.q) == queued })
	if err := lock.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("AppendEvents: %v", err)
		}
	}
	if got := s.w.commits.Load() - before; got != 2 {
		t.Fatalf("%d appends took %d transactions, want 2 (the held one, then one for the %d queued)", queued+1, got, queued)
	}
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

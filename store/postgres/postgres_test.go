package postgres_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
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
	"github.com/toolgate/toolgate/store"
	"github.com/toolgate/toolgate/store/postgres"
	"github.com/toolgate/toolgate/store/storetest"
)

// defaultDSN is the machine's test server (scripts/test.sh starts it).
const defaultDSN = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// testDSN returns TOOLGATE_TEST_POSTGRES or defaultDSN.
func testDSN() string {
	if dsn := os.Getenv("TOOLGATE_TEST_POSTGRES"); dsn != "" {
		return dsn
	}
	return defaultDSN
}

// newSchema creates a fresh schema, dropped when t ends, and returns a DSN
// whose search_path is it. The test fails (never skips) when the server
// cannot be reached.
func newSchema(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, testDSN())
	if err != nil {
		t.Fatalf("PostgreSQL at %s is required (set TOOLGATE_TEST_POSTGRES): %v", testDSN(), err)
	}
	defer conn.Close(context.Background())
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	schema := "tg_test_" + hex.EncodeToString(b)
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatalf("create schema: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, testDSN())
		if err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
			return
		}
		defer c.Close(context.Background())
		if _, err := c.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
	})
	u, err := url.Parse(testDSN())
	if err != nil {
		t.Fatalf("TOOLGATE_TEST_POSTGRES: %v", err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

// signer returns a fixed key, distinct per n.
func signer(n byte) *receipt.Signer {
	return receipt.NewSigner(ed25519.NewKeyFromSeed(bytes.Repeat([]byte{n}, 32)))
}

func open(t *testing.T, dsn string, n byte) *postgres.Store {
	t.Helper()
	s, err := postgres.Open(context.Background(), dsn, postgres.Options{Signer: signer(n)})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		s, err := postgres.Open(context.Background(), newSchema(t), postgres.Options{Signer: signer(3)})
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

// TestConcurrentSequencesTwoReplicas: two Stores (two pools, as two
// replicas) append 1,000 events of one run concurrently; the run's
// sequences are 0…999, each once.
func TestConcurrentSequencesTwoReplicas(t *testing.T) {
	dsn := newSchema(t)
	replicas := []*postgres.Store{open(t, dsn, 1), open(t, dsn, 2)}
	const total, writers = 1000, 8
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := replicas[w%2]
			for i := w; i < total; i += writers {
				ev, err := audit.NewEvent("run_shared", audit.TypeToolCalled, json.RawMessage(fmt.Sprintf(`{"n":%d}`, i)), "", time.Now())
				if err != nil {
					errs <- err
					return
				}
				ev.Tenant = "acme"
				if err := s.AppendEvents(context.Background(), ev); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("AppendEvents: %v", err)
	}
	for r, s := range replicas {
		seen := make([]bool, total)
		after := int64(-1)
		n := 0
		for {
			page, err := s.EventsByRun(context.Background(), "acme", "run_shared", after, store.MaxLimit)
			if err != nil {
				t.Fatalf("EventsByRun: %v", err)
			}
			for _, ev := range page {
				if ev.Sequence < 0 || ev.Sequence >= total || seen[ev.Sequence] {
					t.Fatalf("replica %d: sequence %d out of range or repeated", r, ev.Sequence)
				}
				seen[ev.Sequence] = true
				n++
			}
			if len(page) < store.MaxLimit {
				break
			}
			after = page[len(page)-1].Sequence
		}
		if n != total {
			t.Fatalf("replica %d reads %d events, want %d", r, n, total)
		}
	}
}

// TestMigrationsOnceAcrossReplicas: several Stores opening one empty
// schema at once apply the migrations once.
func TestMigrationsOnceAcrossReplicas(t *testing.T) {
	dsn := newSchema(t)
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for n := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := postgres.Open(context.Background(), dsn, postgres.Options{Signer: signer(byte(10 + n))})
			if err != nil {
				errs <- err
				return
			}
			_ = s.Close()
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("concurrent Open: %v", err)
	}
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var rows, versions int
	if err := conn.QueryRow(context.Background(), `SELECT count(*), count(DISTINCT version) FROM schema_migrations`).Scan(&rows, &versions); err != nil {
		t.Fatal(err)
	}
	if rows == 0 || rows != versions {
		t.Fatalf("schema_migrations has %d rows for %d versions", rows, versions)
	}
}

// TestRecoversAfterLostConnections: when the server drops every
// connection of a Store, writes fail with AuditUnavailable (nothing half
// stored) until the pool reconnects, then succeed by themselves; the
// run's sequences and the receipt chain have no gap and the export
// verifies.
func TestRecoversAfterLostConnections(t *testing.T) {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	app := "tg_recover_" + hex.EncodeToString(b)
	u, err := url.Parse(newSchema(t))
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("application_name", app)
	u.RawQuery = q.Encode()
	s := open(t, u.String(), 4)
	ctx := context.Background()
	appendOne := func(n int) error {
		ev, err := audit.NewEvent("run_r", audit.TypeToolCalled, json.RawMessage(fmt.Sprintf(`{"n":%d}`, n)), "", time.Now())
		if err != nil {
			t.Fatal(err)
		}
		ev.Tenant = "acme"
		if err := s.AppendEvents(ctx, ev); err != nil {
			return err
		}
		d := int64(1)
		id := fmt.Sprintf("%d_%d", n, time.Now().UnixNano())
		return s.AppendReceipt(ctx, &receipt.Receipt{ReceiptID: "rcpt_" + id, CallID: "call_" + id, RunID: "run_r", AgentID: "a",
			Principal: "alice", Tenant: "acme", ToolID: "mcp:fs.read", Transport: "mcp",
			Decision:          receipt.Decision{Effect: "allow", RuleID: "r", PolicyVersion: "v1"},
			RequestedArgsHash: hex.EncodeToString(make([]byte, 32)), ExecutedArgsHash: hex.EncodeToString(make([]byte, 32)),
			Status: receipt.StatusOK, StartedAt: time.Now(), DurationMs: &d})
	}
	if err := appendOne(0); err != nil {
		t.Fatalf("append before: %v", err)
	}
	admin, err := pgx.Connect(ctx, testDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	var killed int
	if err := admin.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1`, app).Scan(&killed); err != nil || killed == 0 {
		t.Fatalf("terminate the store's connections: %d %v", killed, err)
	}
	ok, failed := 0, 0
	for deadline := time.Now().Add(60 * time.Second); ok < 3; {
		err := appendOne(ok + 1)
		switch {
		case err == nil:
			ok++
		case errcode.CodeOf(err) != errcode.AuditUnavailable:
			t.Fatalf("append after the connections dropped: %v, want AuditUnavailable or success", err)
		case time.Now().After(deadline):
			t.Fatalf("the store did not recover: %v", err)
		default:
			failed++
		}
	}
	t.Logf("%d appends failed with AuditUnavailable before the store recovered", failed)
	evs, err := s.EventsByRun(ctx, "acme", "run_r", -1, 100)
	if err != nil {
		t.Fatal(err)
	}
	for i, ev := range evs {
		if ev.Sequence != int64(i) {
			t.Fatalf("event %d has sequence %d: a gap", i, ev.Sequence)
		}
	}
	var buf bytes.Buffer
	if err := s.ExportReceipts(ctx, &buf, s.ChainID(), 0); err != nil {
		t.Fatal(err)
	}
	res, err := receipt.Verify(&buf, s.PublicKey(), receipt.VerifyOptions{})
	if err != nil {
		t.Fatalf("verify the chain after recovery: %v", err)
	}
	if res.Receipts != ok+1 {
		t.Fatalf("verified %d receipts, want %d (one per successful append)", res.Receipts, ok+1)
	}
	if len(evs) < ok+1 {
		t.Fatalf("%d events, want at least %d", len(evs), ok+1)
	}
}

// A DSN whose search_path names no existing schema is refused by Ping
// (validate) and Open (serve) as invalid_config naming the cause, not as a
// migration failure ("no schema has been selected to create in").
func TestMissingSchema(t *testing.T) {
	u, err := url.Parse(testDSN())
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("search_path", "tg_no_such_schema_"+strings.ReplaceAll(t.Name(), "/", "_"))
	u.RawQuery = q.Encode()
	ctx := context.Background()
	if err := postgres.Ping(ctx, u.String()); errcode.CodeOf(err) != errcode.InvalidConfig || !strings.Contains(err.Error(), "search_path names no existing schema") {
		t.Errorf("Ping: %v", err)
	}
	if s, err := postgres.Open(ctx, u.String(), postgres.Options{Signer: signer(1)}); errcode.CodeOf(err) != errcode.InvalidConfig || !strings.Contains(err.Error(), "search_path names no existing schema") {
		if s != nil {
			s.Close()
		}
		t.Errorf("Open: %v", err)
	}
}

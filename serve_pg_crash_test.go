package toolgate_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolgate/toolgate/internal/auth"
	"github.com/toolgate/toolgate/receipt"
)

// pgSchema creates a fresh schema on the test PostgreSQL
// (TOOLGATE_TEST_POSTGRES, by default the machine's 127.0.0.1:5432),
// dropped when t ends, and returns a DSN using it and an admin
// connection to it. It fails (never skips) when the server is missing.
func pgSchema(t *testing.T) (string, *pgx.Conn) {
	t.Helper()
	base := os.Getenv("TOOLGATE_TEST_POSTGRES")
	if base == "" {
		base = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatalf("PostgreSQL at %s is required (set TOOLGATE_TEST_POSTGRES): %v", base, err)
	}
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	schema := "tg_root_" + hex.EncodeToString(b)
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := admin.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			t.Errorf("drop schema: %v", err)
		}
		admin.Close(context.Background())
	})
	if _, err := admin.Exec(ctx, "SET search_path TO "+schema); err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String(), admin
}

// TestKill9PostgresReplicaClosesOnlyItsCalls (issue 14): replicas A and B
// share one PostgreSQL store, each with its own signing key, and each has
// a call in flight upstream. A is killed with SIGKILL. A replica C with
// another key starting meanwhile closes neither open call (B's is still
// running); A restarted with its key closes its own call as
// gateway_restarted, with a receipt on its chain, and leaves B's alone,
// which then finishes normally.
func TestKill9PostgresReplicaClosesOnlyItsCalls(t *testing.T) {
	dsn, db := pgSchema(t)
	var started atomic.Int64
	release := make(chan struct{})
	server := mcp.NewServer(&mcp.Implementation{Name: "slow", Version: "1"}, nil)
	addWaitTool(server, &started, release, "done")
	up := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, nil))
	// Cleanups run last first: the replicas (started below) are killed
	// before the upstream waits for their streams to end.
	t.Cleanup(up.Close)
	released := false
	defer func() {
		if !released {
			close(release)
		}
	}()

	dir := t.TempDir()
	const apiKey = "tg_pg_crash_test_key"
	config := func(name string) string {
		cfg := filepath.Join(dir, name+".yaml")
		if err := os.WriteFile(cfg, fmt.Appendf(nil, `listen: 127.0.0.1:0
store: {driver: postgres, dsn: %q}
signing: {key_file: %q}
auth:
  api_keys:
    - {id: alice, key_sha256: %q, tenant: acme}
servers:
  - {name: slow, url: %q}
policy:
  rules:
    - {id: all, effect: allow, tools: ["*"]}
`, dsn, filepath.Join(dir, name+".key"), auth.HashKey(apiKey), up.URL), 0o600); err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	cfgA, cfgB, cfgC := config("a"), config("b"), config("c")
	call := func(mcpURL, runID string) (int, string, error) {
		base := strings.TrimSuffix(mcpURL, "/mcp")
		req, _ := http.NewRequest(http.MethodPost, base+"/v1/calls",
			strings.NewReader(`{"toolId":"mcp:slow.wait","args":{},"runId":"`+runID+`"}`))
		req.Header.Set("Authorization", "Bearer "+apiKey)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body), nil
	}
	// events returns the types of a run's events (and the error code of
	// an agent.toolReturned), in sequence order.
	events := func(runID string) string {
		t.Helper()
		rows, err := db.Query(context.Background(), `SELECT type, COALESCE(convert_from(payload, 'UTF8')::json->'error'->>'code', '') FROM events WHERE tenant = 'acme' AND run_id = $1 ORDER BY seq`, runID)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var out []string
		for rows.Next() {
			var typ, code string
			if err := rows.Scan(&typ, &code); err != nil {
				t.Fatal(err)
			}
			if code != "" {
				typ += " " + code
			}
			out = append(out, typ)
		}
		return strings.Join(out, ", ")
	}

	cmdA, urlA := startServeChild(t, cfgA)
	_, urlB := startServeChild(t, cfgB)
	go call(urlA, "run_crash_a") // never answered: A is killed
	liveB := make(chan string, 1)
	go func() {
		code, body, err := call(urlB, "run_live_b")
		liveB <- fmt.Sprintf("%d %s %v", code, body, err)
	}()
	deadline := time.Now().Add(60 * time.Second)
	for started.Load() < 2 { // both calls reached the upstream: their agent.toolCalled is durable
		if time.Now().After(deadline) {
			t.Fatalf("%d of 2 calls reached the upstream", started.Load())
		}
		select { // poll the condition
		case <-t.Context().Done():
			t.Fatal("test context ended")
		case <-time.After(10 * time.Millisecond):
		}
	}
	cmdA.Process.Signal(syscall.SIGKILL)
	cmdA.Wait()
	const open = "agent.toolCalled"
	if a, b := events("run_crash_a"), events("run_live_b"); a != open || b != open {
		t.Fatalf("after kill -9 of A: run_crash_a %q, run_live_b %q; want both %q", a, b, open)
	}

	// A replica with another key starts: it closes neither call.
	cmdC, _ := startServeChild(t, cfgC)
	if a, b := events("run_crash_a"), events("run_live_b"); a != open || b != open {
		t.Fatalf("after replica C started: run_crash_a %q, run_live_b %q; want both still %q", a, b, open)
	}
	cmdC.Process.Signal(syscall.SIGTERM)
	cmdC.Wait()

	// A restarts with its key: its own call is closed before it serves.
	startServeChild(t, cfgA)
	if a := events("run_crash_a"); a != open+", agent.toolReturned gateway_restarted" {
		t.Fatalf("after A restarted: run_crash_a %q; want it closed as gateway_restarted", a)
	}
	if b := events("run_live_b"); b != open {
		t.Fatalf("after A restarted: run_live_b %q; want B's running call left open", b)
	}
	key, _, err := receipt.LoadOrCreateKey(filepath.Join(dir, "a.key"))
	if err != nil {
		t.Fatal(err)
	}
	var receipts int
	if err := db.QueryRow(context.Background(), `SELECT count(*) FROM receipts WHERE chain_id = $1 AND position('run_crash_a' in convert_from(body, 'UTF8')) > 0`,
		receipt.NewSigner(key).KeyID()).Scan(&receipts); err != nil {
		t.Fatal(err)
	}
	if receipts != 1 {
		t.Errorf("receipts of run_crash_a on A's chain: %d, want 1", receipts)
	}

	// B's call was running all along: it finishes normally.
	close(release)
	released = true
	select {
	case got := <-liveB:
		if !strings.HasPrefix(got, "200 ") {
			t.Fatalf("B's call: %s", got)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("B's call did not finish")
	}
	if b := events("run_live_b"); b != open+", agent.toolReturned" {
		t.Errorf("run_live_b after it finished: %q", b)
	}
}

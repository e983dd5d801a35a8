package cli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/toolgate/toolgate/internal/auth"
)

// testPostgresDSN is TOOLGATE_TEST_POSTGRES or the machine's test server
// (scripts/test.sh starts it).
func testPostgresDSN() string {
	if dsn := os.Getenv("TOOLGATE_TEST_POSTGRES"); dsn != "" {
		return dsn
	}
	return "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
}

// postgresSchema creates a fresh schema, dropped when t ends, and returns
// a DSN using it. It fails (never skips) when the server is missing.
func postgresSchema(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, testPostgresDSN())
	if err != nil {
		t.Fatalf("PostgreSQL at %s is required (set TOOLGATE_TEST_POSTGRES): %v", testPostgresDSN(), err)
	}
	defer conn.Close(context.Background())
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	schema := "tg_cli_" + hex.EncodeToString(b)
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), testPostgresDSN())
		if err != nil {
			t.Errorf("drop schema: %v", err)
			return
		}
		defer c.Close(context.Background())
		if _, err := c.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			t.Errorf("drop schema: %v", err)
		}
	})
	u, err := url.Parse(testPostgresDSN())
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

// Issue 14 point 1: `store: {driver: postgres}` is accepted by validate
// and served by serve: a call through /v1/calls leaves its two events
// (sequences 0 and 1) and its receipt in PostgreSQL.
func TestServePostgresStore(t *testing.T) {
	dsn := postgresSchema(t)
	up := startWaitUpstream(t)
	close(up.release)
	dir := t.TempDir()
	key, err := auth.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	cfgFile := filepath.Join(dir, "toolgate.yaml")
	cfg := fmt.Sprintf(`listen: 127.0.0.1:0
store: {driver: postgres, dsn: %q}
signing: {key_file: %s}
auth:
  api_keys:
    - {id: tester, key_sha256: "%s", tenant: t1}
servers:
  - {name: up, url: "%s", sessions: shared}
policy:
  default: deny
  rules:
    - {id: all, effect: allow, tools: ["mcp:up.*"]}
`, dsn, filepath.Join(dir, "toolgate.key"), auth.HashKey(key), up.url)
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := run(t, "", "validate", "--config", cfgFile); code != ExitOK || !strings.Contains(out, "OK") {
		t.Fatalf("validate: %d %q %q", code, out, errOut)
	}

	base, _ := startServeInProcess(t, cfgFile)
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/calls", strings.NewReader(`{"toolId":"mcp:up.wait","args":{},"runId":"run_pg_1"}`))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /v1/calls: %d %s", resp.StatusCode, body)
	}
	var res struct {
		RunID     string `json:"runId"`
		ReceiptID string `json:"receiptId"`
	}
	if err := json.Unmarshal(body, &res); err != nil || res.RunID == "" {
		t.Fatalf("POST /v1/calls: %s (%v): no runId", body, err)
	}

	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(context.Background(), `SELECT seq, type FROM events WHERE tenant = 't1' AND run_id = $1 ORDER BY seq`, res.RunID)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for rows.Next() {
		var seq int64
		var typ string
		if err := rows.Scan(&seq, &typ); err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%d %s", seq, typ))
	}
	rows.Close()
	if want := "0 agent.toolCalled,1 agent.toolReturned"; strings.Join(got, ",") != want {
		t.Fatalf("events of %s in PostgreSQL: %v, want %s", res.RunID, got, want)
	}
	var receipts int
	if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM receipts WHERE tenant = 't1'`).Scan(&receipts); err != nil {
		t.Fatal(err)
	}
	if receipts != 1 {
		t.Fatalf("receipts in PostgreSQL: %d, want 1", receipts)
	}
}

// serve fails fast, naming the store without its password, when
// PostgreSQL cannot be reached at start.
func TestServePostgresUnreachable(t *testing.T) {
	dir := t.TempDir()
	cfgFile := writeFile(t, "pg-down.yaml", fmt.Sprintf(`listen: 127.0.0.1:0
store: {driver: postgres, dsn: "postgres://postgres:s3cret@127.0.0.1:1/test?sslmode=disable"}
signing: {key_file: %s}
`, filepath.Join(dir, "toolgate.key")))
	code, _, errOut := run(t, "", "serve", "--config", cfgFile)
	if code != ExitFailure || !strings.Contains(errOut, "opening store postgres://postgres:xxxxx@127.0.0.1:1/test") || strings.Contains(errOut, "s3cret") {
		t.Fatalf("serve with PostgreSQL down: %d %q", code, errOut)
	}
}

// TestValidatePostgresBackend (issue 14 point 9): validate accepts
// store.driver postgres when PostgreSQL answers (without migrating the
// schema), reports store.dsn with its line and the DSN without its
// password when it does not, within the timeout, and --offline skips the
// check.
func TestValidatePostgresBackend(t *testing.T) {
	dsn := postgresSchema(t)
	live := writeFile(t, "pg-live.yaml", string(demoConfig)+fmt.Sprintf("\nstore: {driver: postgres, dsn: %q}\n", dsn))
	if code, out, errOut := run(t, "", "validate", "--config", live); code != ExitOK || !strings.Contains(out, "OK") ||
		!strings.Contains(errOut, "warning: ") || !strings.Contains(errOut, "approvals.binding_secret is not set") {
		t.Fatalf("validate with a live PostgreSQL (and no approvals.binding_secret: a warning): %d %q %q", code, out, errOut)
	}
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var tables int
	if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM information_schema.tables WHERE table_schema = current_schema()`).Scan(&tables); err != nil || tables != 0 {
		t.Fatalf("validate changed the schema: %d tables (%v)", tables, err)
	}
	// A port nothing listens on.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	dead := writeFile(t, "pg-dead.yaml", string(demoConfig)+"\nstore:\n  driver: postgres\n  dsn: \"postgres://postgres:s3cret@"+addr+"/test?sslmode=disable\"\n")
	start := time.Now()
	code, out, errOut := run(t, "", "validate", "--config", dead)
	if code != ExitFailure || out != "" || !strings.Contains(errOut, "pg-dead.yaml:") ||
		!strings.Contains(errOut, "store postgres://postgres:xxxxx@"+addr+"/test") || !strings.Contains(errOut, "PostgreSQL cannot be reached or refused the connection") ||
		strings.Contains(errOut, "did not answer within") || strings.Contains(errOut, "s3cret") {
		t.Fatalf("validate with PostgreSQL down: %d %q %q", code, out, errOut)
	}
	t.Logf("validate with PostgreSQL down failed in %s", time.Since(start).Round(time.Millisecond))
	if code, out, errOut := run(t, "", "validate", "--offline", "--config", dead); code != ExitOK || !strings.Contains(out, "OK") {
		t.Fatalf("validate --offline: %d %q %q", code, out, errOut)
	}
	// A server that accepts connections and never answers: the check
	// gives up after its timeout instead of hanging.
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	hung := writeFile(t, "pg-hung.yaml", string(demoConfig)+"\nstore: {driver: postgres, dsn: \"postgres://postgres@"+silent.Addr().String()+"/test?sslmode=disable\"}\n")
	start = time.Now()
	code, _, errOut = run(t, "", "validate", "--config", hung)
	if code != ExitFailure || !strings.Contains(errOut, "PostgreSQL did not answer within 5s") {
		t.Fatalf("validate with a silent PostgreSQL: %d %q", code, errOut)
	}
	t.Logf("validate with a silent PostgreSQL failed in %s", time.Since(start).Round(time.Millisecond))
}

package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolgate/toolgate/internal/auth"
)

// TestSessionUnknownToReplica (issue 14 point 8): an MCP session lives on
// the replica that created it. Replicas A and B share one PostgreSQL
// store (where A records the session's upstream session); a request
// carrying A's Mcp-Session-Id sent to B answers 404 whatever its method
// (MCP 2025-11-25, Streamable HTTP, session management), and so does one
// of another principal on A, without invoking the upstream. A go-sdk
// client behind a load balancer that moves it from A to B sees the
// session missing, initializes again and is served by B. /v1/calls,
// stateless, is served by either.
func TestSessionUnknownToReplica(t *testing.T) {
	dsn := postgresSchema(t)
	upURL, invoked := countingUpstream(t)
	dir := t.TempDir()
	alice, err := auth.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	bob, err := auth.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	replica := func(name string) string {
		cfg := filepath.Join(dir, name+".yaml")
		if err := os.WriteFile(cfg, fmt.Appendf(nil, `listen: 127.0.0.1:0
store: {driver: postgres, dsn: %q}
signing: {key_file: %s}
auth:
  api_keys:
    - {id: alice, key_sha256: "%s", tenant: t1}
    - {id: bob, key_sha256: "%s", tenant: t1}
servers:
  - {name: up, url: "%s", sessions: per_client}
policy:
  default: deny
  rules:
    - {id: all, effect: allow, tools: ["mcp:up.*"]}
`, dsn, filepath.Join(dir, name+".key"), auth.HashKey(alice), auth.HashKey(bob), upURL), 0o600); err != nil {
			t.Fatal(err)
		}
		base, _ := startServeInProcess(t, cfg)
		return base
	}
	baseA, baseB := replica("a"), replica("b")

	// The load balancer in front of both: the test decides where it
	// sends requests.
	var backend atomic.Pointer[url.URL]
	target := func(base string) {
		u, err := url.Parse(base)
		if err != nil {
			t.Fatal(err)
		}
		backend.Store(u)
	}
	target(baseA)
	lb := httptest.NewServer(&httputil.ReverseProxy{
		Rewrite:       func(r *httputil.ProxyRequest) { r.SetURL(backend.Load()) },
		FlushInterval: -1,
	})
	t.Cleanup(lb.Close) // after the clients close (cleanups run last first)

	connect := func() *mcp.ClientSession {
		t.Helper()
		c := mcp.NewClient(&mcp.Implementation{Name: "sessions-test", Version: "1"}, nil)
		cs, err := c.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: lb.URL + "/mcp",
			HTTPClient: &http.Client{Transport: bearerTransport{key: alice}}, MaxRetries: -1}, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cs.Close() })
		return cs
	}
	count := &mcp.CallToolParams{Name: "up__count", Arguments: map[string]any{}}
	cs := connect()
	if res, err := cs.CallTool(t.Context(), count); err != nil || res.IsError {
		t.Fatalf("tools/call on A: %+v %v", res, err)
	}
	sid := cs.ID()
	if sid == "" {
		t.Fatal("no Mcp-Session-Id")
	}
	// A recorded the session's upstream session in the shared store: B
	// must not take that row for a session it serves.
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var rows int
	if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM sessions WHERE tenant = 't1' AND run_id = $1`, sid).Scan(&rows); err != nil || rows == 0 {
		t.Fatalf("A's session %s has %d rows in the shared store (%v); want its upstream session recorded", sid, rows, err)
	}

	raw := func(base, method, key, sid, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, base+"/mcp", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		if sid != "" {
			req.Header.Set("Mcp-Session-Id", sid)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	const call = `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"up__count","arguments":{}}}`
	before := invoked.Load()
	for _, c := range []struct {
		name, base, method, key, body string
	}{
		{"tools/call on B", baseB, http.MethodPost, alice, call},
		{"a notification on B", baseB, http.MethodPost, alice, `{"jsonrpc":"2.0","method":"notifications/initialized"}`},
		{"GET stream on B", baseB, http.MethodGet, alice, ""},
		{"DELETE on B", baseB, http.MethodDelete, alice, ""},
		{"another principal's tools/call on A", baseA, http.MethodPost, bob, call},
		{"another principal's DELETE on A", baseA, http.MethodDelete, bob, ""},
	} {
		if status, body := raw(c.base, c.method, c.key, sid, c.body); status != http.StatusNotFound {
			t.Errorf("%s with A's session id: %d %q, want 404", c.name, status, body)
		}
	}
	if n := invoked.Load(); n != before {
		t.Fatalf("requests on a session unknown to the replica invoked the upstream %d times", n-before)
	}
	// A still serves its session (bob's DELETE did not end it).
	if res, err := cs.CallTool(t.Context(), count); err != nil || res.IsError {
		t.Fatalf("tools/call on A after the refusals: %+v %v", res, err)
	}

	// The balancer moves the client to B: its session is missing there...
	target(baseB)
	if _, err := cs.CallTool(t.Context(), count); err == nil || !errors.Is(err, mcp.ErrSessionMissing) {
		t.Fatalf("tools/call routed to B on A's session: %v, want mcp.ErrSessionMissing (HTTP 404)", err)
	}
	// ... so it initializes again, and B serves the new session.
	cs2 := connect()
	if cs2.ID() == "" || cs2.ID() == sid {
		t.Fatalf("re-initialized session id %q (old %q)", cs2.ID(), sid)
	}
	if res, err := cs2.CallTool(t.Context(), count); err != nil || res.IsError {
		t.Fatalf("tools/call on B after re-initializing: %+v %v", res, err)
	}
	if status, body := raw(baseA, http.MethodPost, alice, cs2.ID(), call); status != http.StatusNotFound {
		t.Errorf("B's new session on A: %d %q, want 404", status, body)
	}
	// /v1/calls is stateless: either replica serves it.
	for _, base := range []string{baseA, baseB} {
		req, _ := http.NewRequest(http.MethodPost, base+"/v1/calls", strings.NewReader(`{"toolId":"mcp:up.count","args":{}}`))
		req.Header.Set("Authorization", "Bearer "+alice)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("POST /v1/calls on %s: %d %s", base, resp.StatusCode, b)
		}
	}
}

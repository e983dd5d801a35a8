package cli

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolgate/toolgate/internal/auth"
)

// tcpProxy forwards 127.0.0.1 connections to a backend (PostgreSQL,
// Redis) and can be taken down: every open connection is cut (reset) and
// new ones are reset as soon as they are accepted, until it is up again.
type tcpProxy struct {
	ln     net.Listener
	target string
	down   atomic.Bool
	mu     sync.Mutex
	conns  map[net.Conn]struct{}
}

func startTCPProxy(t *testing.T, target string) *tcpProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &tcpProxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	t.Cleanup(func() { ln.Close(); p.setDown(true) })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.serve(c)
		}
	}()
	return p
}

func (p *tcpProxy) addr() string { return p.ln.Addr().String() }

// reset closes c at once with a TCP RST.
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
	c.Close()
}

func (p *tcpProxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.down.Load() {
		return false
	}
	for _, c := range cs {
		p.conns[c] = struct{}{}
	}
	return true
}

func (p *tcpProxy) serve(c net.Conn) {
	if p.down.Load() {
		reset(c)
		return
	}
	b, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		reset(c)
		return
	}
	if !p.track(c, b) {
		reset(c)
		reset(b)
		return
	}
	var once sync.Once
	done := func() { once.Do(func() { reset(c); reset(b) }) }
	go func() { io.Copy(b, c); done() }()
	io.Copy(c, b)
	done()
}

// setDown takes the proxy down (cutting every connection) or up.
func (p *tcpProxy) setDown(down bool) {
	p.mu.Lock()
	p.down.Store(down)
	var cut []net.Conn
	if down {
		for c := range p.conns {
			cut = append(cut, c)
		}
		clear(p.conns)
	}
	p.mu.Unlock()
	for _, c := range cut {
		reset(c)
	}
}

// viaProxy returns rawURL with its host:port replaced by addr.
func viaProxy(t *testing.T, rawURL, addr string) string {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = addr
	return u.String()
}

// startServeInProcess runs `serve --config cfgFile` in this process until
// t ends and returns its base URL (http://host:port) once /readyz
// answers 200, and its log so far.
func startServeInProcess(t *testing.T, cfgFile string) (string, func() string) {
	t.Helper()
	base, logs, _ := serveInProcess(t, cfgFile)
	return base, logs
}

// serveInProcess is startServeInProcess that also returns stop, which ends
// the server and waits for it to exit (idempotent; also run at cleanup).
func serveInProcess(t *testing.T, cfgFile string) (string, func() string, func()) {
	t.Helper()
	base, logs, stop := serveUnready(t, cfgFile)
	waitUntil(t, 60*time.Second, "serve ready", func() bool { code, _ := readyz(base); return code == http.StatusOK })
	return base, logs, stop
}

// startServeUnready is startServeInProcess without waiting for /readyz.
func startServeUnready(t *testing.T, cfgFile string) (string, func() string) {
	t.Helper()
	base, logs, _ := serveUnready(t, cfgFile)
	return base, logs
}

// serveUnready is startServeUnready that also returns stop (see
// serveInProcess).
func serveUnready(t *testing.T, cfgFile string) (string, func() string, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	errb := &lockedBuffer{}
	exited := make(chan int, 1)
	go func() {
		code := Main(ctx, []string{"serve", "--config", cfgFile}, strings.NewReader(""), pw, errb)
		pw.Close()
		exited <- code
	}()
	var stopOnce sync.Once
	stop := func() {
		stopOnce.Do(func() {
			cancel()
			select {
			case <-exited:
			case <-time.After(60 * time.Second):
				t.Errorf("serve did not stop")
			}
		})
	}
	t.Cleanup(stop)
	var mcpURL string
	sc := bufio.NewScanner(pr)
	for sc.Scan() {
		if u, ok := strings.CutPrefix(sc.Text(), "toolgate: MCP gateway at "); ok {
			mcpURL = u
			break
		}
	}
	go io.Copy(io.Discard, pr)
	if mcpURL == "" {
		t.Fatalf("serve printed no URL; stderr: %s", errb.String())
	}
	return strings.TrimSuffix(mcpURL, "/mcp"), errb.String, stop
}

// waitUntil polls cond (every 20 ms) until it holds, failing t after
// within.
func waitUntil(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, within)
		}
		select { // poll the condition
		case <-t.Context().Done():
			t.Fatal("test context ended")
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// readyz returns GET /readyz's status and body (0 if it fails).
func readyz(base string) (int, string) {
	resp, err := http.Get(base + "/readyz")
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// countingUpstream is a Streamable HTTP MCP server with a tool "count"
// that counts its invocations.
func countingUpstream(t *testing.T) (string, *atomic.Int64) {
	t.Helper()
	var n atomic.Int64
	s := mcp.NewServer(&mcp.Implementation{Name: "count", Version: "1"}, nil)
	s.AddTool(&mcp.Tool{Name: "count", InputSchema: map[string]any{"type": "object"}},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			n.Add(1)
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "counted"}}}, nil
		})
	srv := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil))
	t.Cleanup(srv.Close)
	return srv.URL, &n
}

// TestServeBackendOutages (issue 14 point 9): a real serve whose
// PostgreSQL store and Redis rate limiter are reached through proxies the
// test takes down and up. While PostgreSQL is down, calls (HTTP and MCP
// tools/call) are refused with audit_unavailable and the upstream is not
// invoked, and /readyz answers 503 naming the store; while Redis is down
// (on_unavailable: deny) calls are refused with ratelimit_unavailable and
// /readyz names the rate limiter. When each comes back, calls succeed
// again without a restart, and every acknowledged call has both its
// events and its receipt in PostgreSQL.
func TestServeBackendOutages(t *testing.T) {
	dsn := postgresSchema(t)
	pgProxy := startTCPProxy(t, mustHost(t, dsn))
	redisProxy := startTCPProxy(t, mustHost(t, testRedisURL()))
	upURL, invoked := countingUpstream(t)
	dir := t.TempDir()
	key, err := auth.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	cfgFile := filepath.Join(dir, "toolgate.yaml")
	if err := os.WriteFile(cfgFile, fmt.Appendf(nil, `listen: 127.0.0.1:0
store: {driver: postgres, dsn: %q}
signing: {key_file: %s}
ratelimit: {backend: redis, url: %q, key_prefix: "toolgate-test:outage:%s:", on_unavailable: deny}
auth:
  api_keys:
    - {id: tester, key_sha256: "%s", tenant: t1}
servers:
  - {name: up, url: "%s", sessions: shared}
policy:
  default: deny
  rules:
    - {id: all, effect: allow, tools: ["mcp:up.*"]}
  ratelimits:
    - {tools: ["mcp:up.*"], per: principal_tool, rate: 1000/s, burst: 1000}
`, viaProxy(t, dsn, pgProxy.addr()), filepath.Join(dir, "toolgate.key"), viaProxy(t, testRedisURL(), redisProxy.addr()),
		hex.EncodeToString(b), auth.HashKey(key), upURL), 0o600); err != nil {
		t.Fatal(err)
	}
	base, logs := startServeInProcess(t, cfgFile)

	type ack struct{ runID, receiptID string }
	var acked []ack
	seq := 0
	// call makes one POST /v1/calls and returns its status and body;
	// an acknowledged call (200) is remembered.
	call := func() (int, string) {
		seq++
		req, _ := http.NewRequest(http.MethodPost, base+"/v1/calls",
			strings.NewReader(fmt.Sprintf(`{"toolId":"mcp:up.count","args":{},"runId":"run_outage_%d"}`, seq)))
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode == http.StatusOK {
			var res struct {
				RunID     string `json:"runId"`
				ReceiptID string `json:"receiptId"`
			}
			if err := json.Unmarshal(body, &res); err != nil || res.RunID == "" || res.ReceiptID == "" {
				t.Fatalf("acknowledged call without runId or receiptId: %s", body)
			}
			acked = append(acked, ack{res.RunID, res.ReceiptID})
		}
		return resp.StatusCode, string(body)
	}
	if code, body := call(); code != http.StatusOK {
		t.Fatalf("a call with both backends up: %d %s", code, body)
	}
	cl := mcp.NewClient(&mcp.Implementation{Name: "outage-test", Version: "1"}, nil)
	cs, err := cl.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: base + "/mcp",
		HTTPClient: &http.Client{Transport: bearerTransport{key: key}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()

	// refusedWhile takes a proxy down, checks that calls are refused with
	// code (the upstream not invoked) and that /readyz names backend,
	// brings it back and checks that calls succeed again.
	refusedWhile := func(p *tcpProxy, code, backend string) {
		t.Helper()
		p.setDown(true)
		before := invoked.Load()
		// The first call after the cut may be the one that finds the
		// connection gone: poll until the refusal is the outage's.
		var last string
		waitUntil(t, 30*time.Second, "a call refused with "+code, func() bool {
			status, body := call()
			last = fmt.Sprintf("%d %s", status, body)
			if status == http.StatusOK {
				before = invoked.Load() // the cut had not reached this call yet
			}
			return status == http.StatusServiceUnavailable && strings.Contains(body, `"`+code+`"`)
		})
		// The refusal never names the backend's address or user (a
		// driver's connection error does): that is for the log.
		leaks := func(answer string) bool {
			_, port, _ := net.SplitHostPort(p.addr())
			return strings.Contains(answer, ":"+port) || strings.Contains(answer, "user=") || strings.Contains(answer, "dial tcp")
		}
		for range 3 {
			status, body := call()
			if status != http.StatusServiceUnavailable || !strings.Contains(body, `"`+code+`"`) {
				t.Fatalf("%s down: a call answered %d %s, want 503 %s (last: %s)", backend, status, body, code, last)
			}
			if leaks(body) {
				t.Errorf("%s down: the refusal names the backend: %s", backend, body)
			}
		}
		res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "up__count", Arguments: map[string]any{}})
		if err != nil {
			t.Fatalf("%s down: tools/call: %v", backend, err)
		}
		rb, _ := json.Marshal(res)
		if !res.IsError || !strings.Contains(string(rb), code) {
			t.Fatalf("%s down: tools/call answered %s, want an error result with %s", backend, rb, code)
		}
		if leaks(string(rb)) {
			t.Errorf("%s down: the tools/call error result names the backend: %s", backend, rb)
		}
		if n := invoked.Load(); n != before {
			t.Fatalf("%s down: the upstream was invoked %d times by refused calls", backend, n-before)
		}
		waitUntil(t, 10*time.Second, "/readyz 503 naming "+backend, func() bool {
			status, body := readyz(base)
			return status == http.StatusServiceUnavailable && strings.Contains(body, backend+" unavailable")
		})
		start := time.Now()
		p.setDown(false)
		waitUntil(t, 30*time.Second, "a call succeeding after "+backend+" came back", func() bool {
			status, _ := call()
			return status == http.StatusOK
		})
		t.Logf("%s: calls succeed again %s after it came back", backend, time.Since(start).Round(time.Millisecond))
		if res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "up__count", Arguments: map[string]any{}}); err != nil || res.IsError {
			rb, _ := json.Marshal(res)
			t.Fatalf("%s back: tools/call: %s %v", backend, rb, err)
		}
		waitUntil(t, 10*time.Second, "/readyz 200 after "+backend+" came back", func() bool {
			status, _ := readyz(base)
			return status == http.StatusOK
		})
	}
	// An event stream opened before the outages keeps delivering across
	// them: when the store's feed ends (it cannot be read), the stream
	// follows it again after its last event, on the same connection.
	streamed := &streamRecorder{runs: map[string]int{}}
	sreq, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, base+"/v1/events/stream?from=start", nil)
	sreq.Header.Set("Authorization", "Bearer "+key)
	sresp, err := http.DefaultClient.Do(sreq)
	if err != nil || sresp.StatusCode != http.StatusOK {
		t.Fatalf("GET /v1/events/stream: %v %v", sresp, err)
	}
	go streamed.read(sresp.Body)
	refusedWhile(pgProxy, "audit_unavailable", "store (postgres)")
	refusedWhile(redisProxy, "ratelimit_unavailable", "ratelimit (redis)")
	waitUntil(t, 30*time.Second, "the event stream to deliver every acknowledged call's two events", func() bool {
		for _, a := range acked {
			if streamed.count(a.runID) < 2 {
				return false
			}
		}
		return true
	})
	if streamed.isEnded() {
		t.Errorf("the event stream ended during the outages")
	}
	sresp.Body.Close()
	if !strings.Contains(logs(), "readiness: backend unavailable") {
		t.Errorf("no readiness log line; logs:\n%s", logs())
	}

	// Every acknowledged call has its two events and its receipt.
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	for _, a := range acked {
		var types string
		if err := conn.QueryRow(context.Background(), `SELECT string_agg(type, ',' ORDER BY seq) FROM events WHERE tenant = 't1' AND run_id = $1`, a.runID).Scan(&types); err != nil {
			t.Fatal(err)
		}
		var receipts int
		if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM receipts WHERE receipt_id = $1`, a.receiptID).Scan(&receipts); err != nil {
			t.Fatal(err)
		}
		if types != "agent.toolCalled,agent.toolReturned" || receipts != 1 {
			t.Errorf("acknowledged call %s: events %q, %d receipt(s); want both events and the receipt", a.runID, types, receipts)
		}
	}
	t.Logf("%d acknowledged calls checked", len(acked))
}

// streamRecorder counts the events of each run an SSE stream delivers.
type streamRecorder struct {
	mu    sync.Mutex
	runs  map[string]int
	ended bool
}

func (r *streamRecorder) read(body io.Reader) {
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var ev struct {
			RunID string `json:"runId"`
		}
		if json.Unmarshal([]byte(data), &ev) == nil {
			r.mu.Lock()
			r.runs[ev.RunID]++
			r.mu.Unlock()
		}
	}
	r.mu.Lock()
	r.ended = true
	r.mu.Unlock()
}

func (r *streamRecorder) count(run string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.runs[run]
}

func (r *streamRecorder) isEnded() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ended
}

// mustHost returns rawURL's host:port.
func mustHost(t *testing.T, rawURL string) string {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}

package mcpgw

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolgate/toolgate/internal/auth"
)

// costUpstream is a go-sdk Streamable HTTP echo server on 127.0.0.1 that
// records, per HTTP request, what its handler sees (method, JSON-RPC
// method, Accept, response status and content type, body bytes) and, from
// its listener, the TCP connections accepted and the bytes and reads on
// them.
type costUpstream struct {
	url      string
	conns    atomic.Int64 // TCP connections accepted
	rx, tx   atomic.Int64 // bytes read from / written to connections
	reads    atomic.Int64 // Read calls that returned data
	inflight atomic.Int64 // requests other than GET being handled
	mu       sync.Mutex
	reqs     []costRequest
}

// costRequest is one HTTP request the upstream handled.
type costRequest struct {
	Method, RPC, Accept string
	Status              int
	ContentType         string
}

func (r costRequest) String() string {
	return fmt.Sprintf("%s %s (Accept %q) -> %d %s", r.Method, r.RPC, r.Accept, r.Status, r.ContentType)
}

// costSnapshot is the upstream's counters at one moment.
type costSnapshot struct {
	conns, rx, tx, reads int64
	reqs                 int
}

// snapshot waits (up to e2eWait) until no request other than a GET stream
// is being handled, so the last call's request is recorded, and returns
// the counters.
func (u *costUpstream) snapshot(t testing.TB) costSnapshot {
	t.Helper()
	for deadline := time.Now().Add(e2eWait); u.inflight.Load() != 0; {
		if time.Now().After(deadline) {
			t.Fatalf("upstream still handling %d requests", u.inflight.Load())
		}
		time.Sleep(time.Millisecond) // polling a condition, not synchronising on time
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	return costSnapshot{conns: u.conns.Load(), rx: u.rx.Load(), tx: u.tx.Load(), reads: u.reads.Load(), reqs: len(u.reqs)}
}

// since returns the requests completed between a and b.
func (u *costUpstream) since(a, b costSnapshot) []costRequest {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]costRequest(nil), u.reqs[a.reqs:b.reqs]...)
}

// startCostUpstream starts the echo upstream (tool "echo" returns its
// "text" argument as text content).
func startCostUpstream(t *testing.T) *costUpstream {
	t.Helper()
	s := mcp.NewServer(&mcp.Implementation{Name: "echo", Version: "1"}, nil)
	type echoIn struct {
		Text string `json:"text"`
	}
	mcp.AddTool(s, &mcp.Tool{Name: "echo"}, func(_ context.Context, _ *mcp.CallToolRequest, in echoIn) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: in.Text}}}, nil, nil
	})
	u := &costUpstream{}
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			u.inflight.Add(1)
			defer u.inflight.Add(-1)
		}
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		cw := &costWriter{ResponseWriter: w, status: http.StatusOK}
		h.ServeHTTP(cw, r)
		u.mu.Lock()
		u.reqs = append(u.reqs, costRequest{Method: r.Method, RPC: rpcMethod(body), Accept: r.Header.Get("Accept"),
			Status: cw.status, ContentType: cw.Header().Get("Content-Type")})
		u.mu.Unlock()
	}))
	srv.Listener = &costListener{Listener: srv.Listener, accepted: &u.conns, rx: &u.rx, tx: &u.tx, reads: &u.reads}
	srv.Start()
	t.Cleanup(srv.Close)
	u.url = srv.URL
	return u
}

// rpcMethod names the JSON-RPC message of a request body: its method, or
// "response" for a response, "" for no body.
func rpcMethod(body []byte) string {
	if len(bytes.TrimSpace(body)) == 0 {
		return ""
	}
	var msg struct {
		Method string `json:"method"`
	}
	if json.Unmarshal(body, &msg) != nil {
		return "?"
	}
	if msg.Method == "" {
		return "response"
	}
	return msg.Method
}

// costWriter records a response's status.
type costWriter struct {
	http.ResponseWriter
	status int
}

func (w *costWriter) WriteHeader(code int) { w.status = code; w.ResponseWriter.WriteHeader(code) }
func (w *costWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}
func (w *costWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// costListener counts accepted connections and their traffic.
type costListener struct {
	net.Listener
	accepted, rx, tx, reads *atomic.Int64
}

func (l *costListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.accepted.Add(1)
	return &costConn{Conn: c, rx: l.rx, tx: l.tx, reads: l.reads}, nil
}

// costConn counts a connection's bytes, reads and writes (nil counters are
// not kept).
type costConn struct {
	net.Conn
	rx, tx, reads, writes *atomic.Int64
}

func (c *costConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.rx.Add(int64(n))
	if n > 0 && c.reads != nil {
		c.reads.Add(1)
	}
	return n, err
}

func (c *costConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	if c.tx != nil {
		c.tx.Add(int64(n))
	}
	if c.writes != nil {
		c.writes.Add(1)
	}
	return n, err
}

// costClient is an HTTP client to the upstream on a clone of
// upstreamTransport that counts the TCP connections it dials and the
// writes (and bytes) it makes on them.
type costClient struct {
	*http.Client
	dials, writes, bytes atomic.Int64
}

func newCostClient() *costClient {
	c := &costClient{}
	tr := upstreamTransport.Clone()
	var d net.Dialer
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		c.dials.Add(1)
		return &costConn{Conn: conn, rx: new(atomic.Int64), tx: &c.bytes, writes: &c.writes}, nil
	}
	c.Client = &http.Client{Transport: tr}
	return c
}

// costCalls makes n echo calls on each session, the sessions in parallel.
func costCalls(t *testing.T, sessions []*mcp.ClientSession, n int) {
	t.Helper()
	var wg sync.WaitGroup
	for _, cs := range sessions {
		wg.Go(func() {
			for i := range n {
				text := fmt.Sprintf("hello %d", i)
				res, err := tryCall(t, cs, "echo", map[string]any{"text": text})
				if err != nil || res.IsError || resultText(res) != text {
					t.Errorf("call %d: %+v, %v", i, res, err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// costReport describes what calls cost the upstream between a and b.
func costReport(u *costUpstream, a, b costSnapshot, calls int) string {
	kinds := map[string]int{}
	for _, r := range u.since(a, b) {
		kinds[r.String()]++
	}
	keys := make([]string, 0, len(kinds))
	for k := range kinds {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var sb strings.Builder
	per := func(v int64) float64 { return float64(v) / float64(calls) }
	fmt.Fprintf(&sb, "%d calls: %d HTTP requests, %d TCP connections accepted; per call %.0f B received in %.2f reads, %.0f B sent",
		calls, b.reqs-a.reqs, b.conns-a.conns, per(b.rx-a.rx), per(b.reads-a.reads), per(b.tx-a.tx))
	for _, k := range keys {
		fmt.Fprintf(&sb, "\n  %4d × %s", kinds[k], k)
	}
	return sb.String()
}

// TestUpstreamCostPerCall checks what a tools/call through the gateway asks
// of a Streamable HTTP upstream (issue 15 point 2), with 1 and with 16
// sessions calling at once: once the sessions are up, each call costs the
// upstream exactly one HTTP request (POST tools/call, answered 200) on an
// already open TCP connection (bar a rare late stream end), and the gateway
// writes it in one TCP write
// (headers and body together; it used to flush the headers first, so the
// upstream received every call in two segments). What a plain go-sdk
// client costs the same upstream is logged beside it for comparison: the
// same request, headers and response content type (the go-sdk server
// answers text/event-stream unless its JSONResponse option is set, and
// refuses a POST whose Accept lacks either type, so there is no JSON
// response to ask for).
func TestUpstreamCostPerCall(t *testing.T) {
	for _, sessions := range []int{1, 16} {
		t.Run(fmt.Sprintf("sessions=%d", sessions), func(t *testing.T) {
			const n = 20
			up := startCostUpstream(t)

			// (i) Plain go-sdk clients, for the log.
			tr := http.DefaultTransport.(*http.Transport).Clone()
			tr.MaxIdleConns, tr.MaxIdleConnsPerHost = 4*sessions+16, 4*sessions+16
			defer tr.CloseIdleConnections()
			var direct []*mcp.ClientSession
			for range sessions {
				ctx, cancel := context.WithTimeout(t.Context(), e2eWait)
				cs, err := mcp.NewClient(&mcp.Implementation{Name: "plain", Version: "1"}, nil).Connect(ctx,
					&mcp.StreamableClientTransport{Endpoint: up.url, HTTPClient: &http.Client{Transport: tr}}, nil)
				cancel()
				if err != nil {
					t.Fatal(err)
				}
				direct = append(direct, cs)
			}
			costCalls(t, direct, 2) // warm up
			a := up.snapshot(t)
			costCalls(t, direct, n)
			b := up.snapshot(t)
			t.Logf("plain go-sdk clients: %s", costReport(up, a, b, sessions*n))
			for _, cs := range direct {
				cs.Close()
			}

			// (ii) Through toolgate.
			hc := newCostClient()
			e := startGatewayHTTP(t, fmt.Sprintf(`auth:
  api_keys:
    - {id: alice, key_sha256: %q, tenant: %s}
servers:
  - {name: echo, url: %s}
policy:
  rules: [{id: all, effect: allow, tools: ["*"]}]
`, auth.HashKey(keyAlice), tenant, yamlQuote(up.url)), false, hc.Client)
			var gw []*mcp.ClientSession
			for range sessions {
				gw = append(gw, e.connect(t, keyAlice))
			}
			costCalls(t, gw, 2) // warm up: every session's upstream session is up
			a = up.snapshot(t)
			dials0, writes0, bytes0 := hc.dials.Load(), hc.writes.Load(), hc.bytes.Load()
			costCalls(t, gw, n)
			b = up.snapshot(t)
			dials, writes, sent := hc.dials.Load()-dials0, hc.writes.Load()-writes0, hc.bytes.Load()-bytes0
			calls := sessions * n
			t.Logf("through toolgate: %s\n  gateway side: %d TCP connections dialed, %d writes of %d B",
				costReport(up, a, b, calls), dials, writes, sent)

			reqs := up.since(a, b)
			if len(reqs) != calls {
				t.Errorf("%d calls through toolgate cost the upstream %d HTTP requests, want %d:\n%s", calls, len(reqs), calls, costReport(up, a, b, calls))
			}
			for _, r := range reqs {
				if r.Method != http.MethodPost || r.RPC != "tools/call" || r.Status != http.StatusOK {
					t.Errorf("upstream request through toolgate: %s, want POST tools/call -> 200", r)
				}
			}
			// Connections are reused: a call opens none, except when the
			// upstream's last chunk comes later than upDrainTimeout (20 ms;
			// possible on a loaded machine), which discards that connection.
			if d := b.conns - a.conns; d*10 > int64(calls) || dials*10 > int64(calls) {
				t.Errorf("%d calls through toolgate: the upstream accepted %d TCP connections and the gateway dialed %d, want (nearly) none: idle connections reused", calls, d, dials)
			}
			if writes != int64(calls) {
				t.Errorf("%d calls through toolgate took %d TCP writes to the upstream, want %d (one per request: headers and body together)", calls, writes, calls)
			}
		})
	}
}

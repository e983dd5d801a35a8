package mcpgw_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/internal/auth"
	"github.com/toolgate/toolgate/internal/config"
	"github.com/toolgate/toolgate/internal/mcpgw"
	"github.com/toolgate/toolgate/internal/pipeline"
	"github.com/toolgate/toolgate/ratelimit"
	"github.com/toolgate/toolgate/receipt"
	"github.com/toolgate/toolgate/store"
	"github.com/toolgate/toolgate/store/sqlite"
)

// startAllowAllGateway serves toolgate, wired as `toolgate serve` wires it,
// with one Streamable HTTP upstream (server "up" at upstreamURL, sessions
// per client) and a policy that allows every tool. It returns the /mcp URL
// and an API key.
func startAllowAllGateway(t *testing.T, upstreamURL string) (string, string) {
	t.Helper()
	u, key, _ := startAllowAllGatewayWith(t, upstreamURL, "")
	return u, key
}

// otherKey is the API key of a second principal ("other", same tenant) of
// the allow-all gateway.
var otherKey = func() string {
	k, err := auth.NewKey()
	if err != nil {
		panic(err)
	}
	return k
}()

// startAllowAllGatewayWith is startAllowAllGateway with extra top-level
// YAML (e.g. an mcp: section), returning the gateway too.
func startAllowAllGatewayWith(t *testing.T, upstreamURL, extra string) (string, string, *mcpgw.Gateway) {
	t.Helper()
	return startAllowAllGatewaySessions(t, upstreamURL, "", extra)
}

// startAllowAllGatewaySessions is startAllowAllGatewayWith with the
// upstream's sessions mode ("" for the default).
func startAllowAllGatewaySessions(t *testing.T, upstreamURL, sessions, extra string) (string, string, *mcpgw.Gateway) {
	t.Helper()
	if sessions != "" {
		sessions = ", sessions: " + sessions
	}
	key, err := auth.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	yaml := fmt.Sprintf(`
auth:
  api_keys:
    - {id: tester, key_sha256: %q, tenant: test}
    - {id: other, key_sha256: %q, tenant: test}
servers:
  - {name: up, url: %q%s}
policy:
  rules:
    - {id: all, effect: allow, tools: ["*"]}
`, auth.HashKey(key), auth.HashKey(otherKey), upstreamURL, sessions) + extra
	cfg, err := config.Parse("toolgate.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	ctx := context.Background()
	priv, err := receipt.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "toolgate.db"), sqlite.Options{Signer: receipt.NewSigner(priv), Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	redactor := audit.NewRedactor()
	pipe, err := pipeline.New(pipeline.Options{Limiter: ratelimit.NewMemory(ratelimit.MemoryOptions{}), Redactor: redactor,
		Events: store.EventLog(st), Receipts: store.ReceiptLog(st), Logger: logger, AuditContent: cfg.Audit.Content})
	if err != nil {
		t.Fatal(err)
	}
	authn, err := auth.New(ctx, cfg.Auth, auth.Options{})
	if err != nil {
		t.Fatal(err)
	}
	gw, err := mcpgw.New(mcpgw.Options{Config: cfg, Pipeline: pipe, Policy: cfg.Policy, Sessions: st,
		Events: store.EventLog(st), Secret: redactor.AddSecret, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/mcp", gw.Handler(authn, cfg.MCP.MaxBodyBytes))
	srv := httptest.NewServer(mux)
	t.Cleanup(func() {
		srv.Close()
		gw.Close()
	})
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := gw.WaitReady(wctx); err != nil {
		t.Fatalf("the gateway did not connect to its upstream: %v", err)
	}
	return srv.URL + "/mcp", key, gw
}

// relayClient connects a go-sdk client with opts to the gateway at gwURL.
func relayClient(t *testing.T, gwURL, key string, opts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	hc := &http.Client{Transport: bearer{key: key}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "relay-test", Version: "1"}, opts).
		Connect(ctx, &mcp.StreamableClientTransport{Endpoint: gwURL, HTTPClient: hc}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

type bearer struct{ key string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.key)
	return http.DefaultTransport.RoundTrip(r)
}

// An upstream that goes away in the middle of a call answers that call
// with an upstream_crashed result (it had received the request, so the
// tool may have run; issue 13 point 12) (the client's stream is not closed
// the way a live upstream's SEP-1699 stream close is relayed).
func TestRelayUpstreamGoneMidCall(t *testing.T) {
	started := make(chan struct{})
	server := mcp.NewServer(&mcp.Implementation{Name: "up", Version: "1"}, nil)
	server.AddTool(&mcp.Tool{Name: "block", InputSchema: map[string]any{"type": "object"}},
		func(ctx context.Context, _ *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			close(started)
			<-ctx.Done()
			return nil, ctx.Err()
		})
	up := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, nil))
	t.Cleanup(up.Close) // after the gateway's cleanup, which ends its sessions
	gwURL, key := startAllowAllGateway(t, up.URL)
	cs := relayClient(t, gwURL, key, nil)

	type outcome struct {
		res *mcp.CallToolResult
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "block"})
		done <- outcome{res, err}
	}()
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("the upstream tool was not called")
	}
	up.Listener.Close()
	up.CloseClientConnections()
	var o outcome
	select {
	case o = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the call did not end after its upstream went away")
	}
	if o.err != nil {
		t.Fatalf("call: %v; want an upstream_crashed result", o.err)
	}
	if !o.res.IsError || !strings.HasPrefix(firstTextOf(o.res), "upstream_crashed") {
		t.Fatalf("result %+v (%q); want isError upstream_crashed", o.res, firstTextOf(o.res))
	}
}

func firstTextOf(r *mcp.CallToolResult) string {
	for _, c := range r.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			return tc.Text
		}
	}
	return ""
}

// A resource update an upstream sends on one client's upstream session
// reaches that client only, once: two subscribed clients each get one
// notification per update, not one per subscribed client.
func TestRelayResourceUpdatedOncePerClient(t *testing.T) {
	const uri = "test://watched"
	server := mcp.NewServer(&mcp.Implementation{Name: "up", Version: "1"}, &mcp.ServerOptions{
		SubscribeHandler:   func(context.Context, *mcp.SubscribeRequest) error { return nil },
		UnsubscribeHandler: func(context.Context, *mcp.UnsubscribeRequest) error { return nil },
	})
	server.AddTool(&mcp.Tool{Name: "noop", InputSchema: map[string]any{"type": "object"}},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{}, nil
		})
	server.AddResource(&mcp.Resource{Name: "watched", URI: uri},
		func(_ context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: uri, Text: "x"}}}, nil
		})
	up := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, nil))
	t.Cleanup(up.Close) // after the gateway's cleanup, which ends its sessions
	gwURL, key := startAllowAllGateway(t, up.URL)

	var counts [2]atomic.Int32
	got := make(chan int, 16)
	for i := range counts {
		cs := relayClient(t, gwURL, key, &mcp.ClientOptions{
			ResourceUpdatedHandler: func(_ context.Context, req *mcp.ResourceUpdatedNotificationRequest) {
				if req.Params.URI == uri {
					counts[i].Add(1)
					got <- i
				}
			},
		})
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := cs.Subscribe(ctx, &mcp.SubscribeParams{URI: uri})
		cancel()
		if err != nil {
			t.Fatalf("client %d: subscribe: %v", i, err)
		}
	}
	server.ResourceUpdated(context.Background(), &mcp.ResourceUpdatedNotificationParams{URI: uri})
	seen := map[int]bool{}
	for len(seen) < 2 {
		select {
		case i := <-got:
			seen[i] = true
		case <-time.After(30 * time.Second):
			t.Fatalf("resources/updated reached clients %v of 2", seen)
		}
	}
	// A duplicate would be sent right after (by the other client's
	// upstream session); allow it time to arrive.
	select {
	case i := <-got:
		t.Errorf("client %d got a second resources/updated", i)
	case <-time.After(500 * time.Millisecond):
	}
	for i := range counts {
		if n := counts[i].Load(); n != 1 {
			t.Errorf("client %d: %d resources/updated; want 1", i, n)
		}
	}
}

// A per-client upstream session speaks the protocol version its downstream
// client negotiated with the gateway.
func TestUpstreamSpeaksClientProtocol(t *testing.T) {
	server := mcp.NewServer(&mcp.Implementation{Name: "up", Version: "1"}, nil)
	server.AddTool(&mcp.Tool{Name: "version", InputSchema: map[string]any{"type": "object"}},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: req.Session.InitializeParams().ProtocolVersion}}}, nil
		})
	up := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, nil))
	t.Cleanup(up.Close)
	gwURL, key := startAllowAllGateway(t, up.URL)
	for _, version := range []string{"2025-03-26", "2025-06-18", "2025-11-25"} {
		hc := &http.Client{Transport: bearer{key: key}}
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "v", Version: "1"}, nil).Connect(t.Context(),
			&mcp.StreamableClientTransport{Endpoint: gwURL, HTTPClient: hc}, &mcp.ClientSessionOptions{ProtocolVersion: version})
		if err != nil {
			t.Fatal(err)
		}
		if got := cs.InitializeResult().ProtocolVersion; got != version {
			t.Fatalf("the gateway negotiated %s with a %s client", got, version)
		}
		res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "version"})
		if err != nil {
			t.Fatal(err)
		}
		if got := res.Content[0].(*mcp.TextContent).Text; got != version {
			t.Errorf("a %s client's upstream session speaks %s", version, got)
		}
		cs.Close()
	}
}

// With sessions: shared, a notifications/tools/list_changed that the
// upstream sends on a tools/call's response stream refreshes the catalog,
// as the SDK client's handler does on the SDK path (here the upstream
// answers GET with 405, so the call stream is its only channel).
func TestSharedCallStreamListChanged(t *testing.T) {
	var lists atomic.Int32
	relisted := make(chan struct{})
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.WriteHeader(http.StatusMethodNotAllowed)
			return
		}
		var req struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
		}
		json.NewDecoder(r.Body).Decode(&req)
		w.Header().Set("Mcp-Session-Id", "sid-shared")
		reply := func(result string) {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":%s}`, req.ID, result)
		}
		tool := `{"name":"a","inputSchema":{"type":"object"}}`
		switch req.Method {
		case "initialize":
			reply(`{"protocolVersion":"2025-11-25","capabilities":{"tools":{"listChanged":true}},"serverInfo":{"name":"fake","version":"1"}}`)
		case "tools/list":
			if lists.Add(1) == 2 {
				defer close(relisted)
			}
			if lists.Load() > 1 {
				tool += `,{"name":"b","inputSchema":{"type":"object"}}`
			}
			reply(`{"tools":[` + tool + `]}`)
		case "tools/call":
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprintf(w, "data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/tools/list_changed\"}\n\n"+
				"data: {\"jsonrpc\":\"2.0\",\"id\":%s,\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"ok\"}]}}\n\n", req.ID)
		case "":
			w.WriteHeader(http.StatusAccepted) // a notification or a response
		default:
			reply(`{}`)
		}
	}))
	t.Cleanup(hs.Close)
	gwURL, key, _ := startAllowAllGatewaySessions(t, hs.URL, "shared", "")
	cs := relayClient(t, gwURL, key, nil)
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "a"})
	if err != nil || res.IsError {
		t.Fatalf("call: %v %+v", err, res)
	}
	select {
	case <-relisted:
	case <-time.After(10 * time.Second):
		t.Fatalf("no tools/list after the call stream's list_changed (%d lists)", lists.Load())
	}
}

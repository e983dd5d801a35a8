package toolgate_test

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolgate/toolgate"
	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/policy"
)

const mwPolicy = `
default: deny
rules:
  - {id: readers, effect: allow, tools: ["native:notes.get", "mcp:notes.get"], scopes: [notes:read]}
  - {id: writers, effect: allow, tools: ["native:notes.put", "mcp:notes.put"], scopes: [notes:write]}
  - {id: no-private, effect: deny, tools: ["*"], when: 'has(args.id) && args.id.startsWith("private/")'}
`

type noteArgs struct {
	ID string `json:"id"`
}

// newNotesServer is an ordinary go-sdk server with two tools; ran counts
// the calls its handlers actually ran.
func newNotesServer(ran *atomic.Int64) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "notes", Version: "1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "get", Description: "Get a note"}, func(_ context.Context, _ *mcp.CallToolRequest, in noteArgs) (*mcp.CallToolResult, any, error) {
		ran.Add(1)
		if in.ID == "missing" {
			return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "no such note"}}}, nil, nil
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "note " + in.ID}}}, nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "put", Description: "Put a note"}, func(_ context.Context, _ *mcp.CallToolRequest, in noteArgs) (*mcp.CallToolResult, any, error) {
		ran.Add(1)
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "stored " + in.ID}}}, nil, nil
	})
	return s
}

func newMWGateway(t *testing.T) (*toolgate.Gateway, *audit.MemoryLog) {
	t.Helper()
	prog, err := policy.Load("policy.yaml", []byte(mwPolicy), policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	events := audit.NewMemoryLog()
	gw, err := toolgate.New(toolgate.Options{Policy: prog, Events: events})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gw.Close() })
	return gw, events
}

func mwToolNames(r *mcp.ListToolsResult) string {
	var n []string
	for _, t := range r.Tools {
		n = append(n, t.Name)
	}
	return strings.Join(n, ",")
}

func text(r *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range r.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// An unmodified go-sdk server gains the gate through one
// AddReceivingMiddleware call; a real go-sdk client talks to it over the
// in-memory transport, as two principals.
func TestServerMiddlewareGatesUnmodifiedServer(t *testing.T) {
	var ran atomic.Int64
	server := newNotesServer(&ran)
	gw, events := newMWGateway(t)
	// The principal comes from the request's auth info; the in-memory
	// transport carries none, so the test's function reads it from the
	// client's name given at initialize (as a token verifier would set
	// TokenInfo over HTTP).
	server.AddReceivingMiddleware(toolgate.ServerMiddleware(gw, toolgate.ServerOptions{
		Namespace: "notes",
		Principal: func(ctx context.Context, req mcp.Request) (toolgate.Principal, error) {
			ss := req.GetSession().(*mcp.ServerSession)
			switch ss.InitializeParams().ClientInfo.Name {
			case "alice":
				return toolgate.Principal{ID: "alice", Tenant: "acme", Scopes: []string{"notes:read"}}, nil
			case "admin":
				return toolgate.Principal{ID: "admin", Tenant: "acme", Scopes: []string{"notes:read", "notes:write"}}, nil
			}
			return toolgate.Principal{}, errors.New("unknown client")
		},
	}))
	ctx := context.Background()
	connect := func(name string) *mcp.ClientSession {
		ct, st := mcp.NewInMemoryTransports()
		ss, err := server.Connect(ctx, st, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ss.Close() })
		cs, err := mcp.NewClient(&mcp.Implementation{Name: name, Version: "1"}, nil).Connect(ctx, ct, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cs.Close() })
		return cs
	}
	alice, admin, stranger := connect("alice"), connect("admin"), connect("stranger")

	if l, err := alice.ListTools(ctx, nil); err != nil || mwToolNames(l) != "get" {
		t.Fatalf("alice tools/list = %v, %v; want only get", l, err)
	}
	if l, err := admin.ListTools(ctx, nil); err != nil || mwToolNames(l) != "get,put" {
		t.Fatalf("admin tools/list = %v, %v; want get,put", l, err)
	}

	// Allowed: the server's own result, with the gate's ids.
	r, err := alice.CallTool(ctx, &mcp.CallToolParams{Name: "get", Arguments: map[string]any{"id": "shopping"}})
	if err != nil || r.IsError || text(r) != "note shopping" {
		t.Fatalf("alice get = %+v, %v", r, err)
	}
	if r.Meta["toolgate/receiptId"] == nil || r.Meta["toolgate/callId"] == nil {
		t.Fatalf("allowed result lacks the gate's _meta: %v", r.Meta)
	}
	if ran.Load() != 1 {
		t.Fatalf("server ran %d calls, want 1", ran.Load())
	}

	// Denied for its arguments: the gateway's isError result, handler not run.
	r, err = alice.CallTool(ctx, &mcp.CallToolParams{Name: "get", Arguments: map[string]any{"id": "private/diary"}})
	if err != nil || !r.IsError {
		t.Fatalf("private get = %+v, %v; want isError", r, err)
	}
	te, _ := r.Meta["toolgate/error"].(map[string]any)
	if te["code"] != "forbidden" || !strings.HasPrefix(text(r), "forbidden: ") || r.StructuredContent != nil {
		t.Fatalf("refusal = %v %q; want the gateway's forbidden result", r.Meta, text(r))
	}

	// A tool alice may not see answers exactly like an unknown one.
	_, errHidden := alice.CallTool(ctx, &mcp.CallToolParams{Name: "put", Arguments: map[string]any{"id": "x"}})
	_, errUnknown := alice.CallTool(ctx, &mcp.CallToolParams{Name: "nope", Arguments: map[string]any{}})
	var je1, je2 *jsonrpc.Error
	if !errors.As(errHidden, &je1) || !errors.As(errUnknown, &je2) || je1.Code != jsonrpc.CodeInvalidParams ||
		je1.Message != `unknown tool "put"` || je2.Message != `unknown tool "nope"` {
		t.Fatalf("hidden = %v, unknown = %v; want the same -32602 unknown tool errors", errHidden, errUnknown)
	}
	if ran.Load() != 1 {
		t.Fatalf("refused calls reached the server: ran %d", ran.Load())
	}

	// The server's own isError result comes back as the tool's, recorded as an error.
	r, err = alice.CallTool(ctx, &mcp.CallToolParams{Name: "get", Arguments: map[string]any{"id": "missing"}})
	if err != nil || !r.IsError || text(r) != "no such note" || r.Meta["toolgate/error"] != nil {
		t.Fatalf("tool isError = %+v, %v", r, err)
	}
	if r, err := admin.CallTool(ctx, &mcp.CallToolParams{Name: "put", Arguments: map[string]any{"id": "n1"}}); err != nil || text(r) != "stored n1" {
		t.Fatalf("admin put = %+v, %v", r, err)
	}

	// No principal: refused before anything runs.
	if _, err := stranger.ListTools(ctx, nil); err == nil || !strings.Contains(err.Error(), "unauthenticated") {
		t.Fatalf("stranger tools/list err = %v, want unauthenticated", err)
	}

	// Every call is recorded: toolCalled/toolReturned pairs with statuses.
	var got []string
	for _, e := range events.All() {
		if e.Type == audit.TypeToolReturned {
			var pl struct{ Status string }
			json.Unmarshal(e.Payload, &pl)
			got = append(got, e.Principal+":"+pl.Status)
		}
	}
	want := "alice:ok alice:forbidden alice:forbidden alice:error admin:ok"
	if strings.Join(got, " ") != want {
		t.Fatalf("recorded outcomes %q, want %q", strings.Join(got, " "), want)
	}
}

// A go-sdk client gates its own outbound calls: a refused call never
// reaches the server.
func TestClientMiddlewareGatesOutboundCalls(t *testing.T) {
	var ran atomic.Int64
	server := newNotesServer(&ran)
	gw, events := newMWGateway(t)
	client := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil)
	client.AddSendingMiddleware(toolgate.ClientMiddleware(gw, toolgate.ClientOptions{Server: "notes",
		Principal: toolgate.Principal{ID: "agent-7", Tenant: "acme", Scopes: []string{"notes:read"}}}))
	ctx := context.Background()
	ct, st := mcp.NewInMemoryTransports()
	ss, err := server.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()
	cs, err := client.Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()

	// A call before any tools/list: the middleware learns the tools itself.
	r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "get", Arguments: map[string]any{"id": "a"}})
	if err != nil || text(r) != "note a" || r.Meta["toolgate/receiptId"] == nil {
		t.Fatalf("get = %+v, %v", r, err)
	}
	if l, err := cs.ListTools(ctx, nil); err != nil || mwToolNames(l) != "get" {
		t.Fatalf("tools/list = %v, %v; want only get", l, err)
	}
	r, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "get", Arguments: map[string]any{"id": "private/x"}})
	if err != nil || !r.IsError || r.Meta["toolgate/error"].(map[string]any)["code"] != "forbidden" {
		t.Fatalf("private get = %+v, %v; want forbidden isError", r, err)
	}
	_, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "put", Arguments: map[string]any{"id": "a"}})
	var je *jsonrpc.Error
	if !errors.As(err, &je) || je.Message != `unknown tool "put"` {
		t.Fatalf("put err = %v; want unknown tool", err)
	}
	if ran.Load() != 1 {
		t.Fatalf("server ran %d calls, want 1 (refused calls must not be sent)", ran.Load())
	}
	n := 0
	for _, e := range events.All() {
		if e.Type == audit.TypeToolCalled {
			n++
			if e.Principal != "agent-7" {
				t.Fatalf("event principal %q, want agent-7", e.Principal)
			}
		}
	}
	if n != 3 {
		t.Fatalf("%d calls recorded, want 3", n)
	}
}

// The default principal function reads the go-sdk's TokenInfo.
func TestPrincipalFromToken(t *testing.T) {
	req := &mcp.CallToolRequest{Extra: &mcp.RequestExtra{TokenInfo: &auth.TokenInfo{UserID: "u1", Scopes: []string{"a"},
		Extra: map[string]any{"tenant": "acme", "team": "red", "n": 3}}}}
	p, err := toolgate.PrincipalFromToken(context.Background(), req)
	if err != nil || p.ID != "u1" || p.Tenant != "acme" || p.Attributes["team"] != "red" || len(p.Attributes) != 1 || p.Scopes[0] != "a" {
		t.Fatalf("principal = %+v, %v", p, err)
	}
	if _, err := toolgate.PrincipalFromToken(context.Background(), &mcp.CallToolRequest{}); err == nil {
		t.Fatal("no token info: want unauthenticated")
	}
}

// Over Streamable HTTP on 127.0.0.1, behind the go-sdk's own bearer-token
// middleware: the default principal function reads TokenInfo, so each
// token sees and may call what its scopes allow.
func TestServerMiddlewareStreamableHTTPTokenInfo(t *testing.T) {
	var ran atomic.Int64
	server := newNotesServer(&ran)
	gw, _ := newMWGateway(t)
	server.AddReceivingMiddleware(toolgate.ServerMiddleware(gw, toolgate.ServerOptions{Namespace: "notes"}))
	tokens := map[string]*auth.TokenInfo{
		"tok-reader": {UserID: "reader", Scopes: []string{"notes:read"}, Expiration: time.Now().Add(time.Hour), Extra: map[string]any{"tenant": "acme"}},
		"tok-writer": {UserID: "writer", Scopes: []string{"notes:read", "notes:write"}, Expiration: time.Now().Add(time.Hour)},
	}
	verify := func(_ context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
		if ti, ok := tokens[token]; ok {
			return ti, nil
		}
		return nil, auth.ErrInvalidToken
	}
	h := auth.RequireBearerToken(verify, nil)(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, nil))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	ctx := context.Background()
	connect := func(token string) *mcp.ClientSession {
		tr := &mcp.StreamableClientTransport{Endpoint: "http://" + ln.Addr().String(),
			HTTPClient: &http.Client{Transport: bearerRT{key: token}}}
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "c", Version: "1"}, nil).Connect(ctx, tr, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cs.Close() })
		return cs
	}
	reader, writer := connect("tok-reader"), connect("tok-writer")
	if l, err := reader.ListTools(ctx, nil); err != nil || mwToolNames(l) != "get" {
		t.Fatalf("reader tools/list = %v, %v", l, err)
	}
	if l, err := writer.ListTools(ctx, nil); err != nil || mwToolNames(l) != "get,put" {
		t.Fatalf("writer tools/list = %v, %v", l, err)
	}
	if _, err := reader.CallTool(ctx, &mcp.CallToolParams{Name: "put", Arguments: map[string]any{"id": "a"}}); err == nil || !strings.Contains(err.Error(), `unknown tool "put"`) {
		t.Fatalf("reader put err = %v, want unknown tool", err)
	}
	if r, err := writer.CallTool(ctx, &mcp.CallToolParams{Name: "put", Arguments: map[string]any{"id": "a"}}); err != nil || text(r) != "stored a" {
		t.Fatalf("writer put = %+v, %v", r, err)
	}
	if ran.Load() != 1 {
		t.Fatalf("server ran %d calls, want 1", ran.Load())
	}
}

package mcpgw

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// upTestWait is a failsafe bound on waits for events that must happen; the
// tests synchronise on channels and never sleep.
const upTestWait = 20 * time.Second

// upTestServer is a real go-sdk MCP server with the tools the upCaller tests
// exercise, plus hooks the tests observe.
type upTestServer struct {
	started   chan struct{} // "block": the handler is running
	cancelled chan error    // "block": the handler's ctx ended (with ctx.Err())
}

type upEchoIn struct {
	Text string `json:"text"`
}

type upEchoOut struct {
	Echo string `json:"echo"`
}

type upBigIn struct {
	N int `json:"n"`
}

func (ts *upTestServer) server() *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "upstream", Version: "1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "echo"}, func(ctx context.Context, req *mcp.CallToolRequest, in upEchoIn) (*mcp.CallToolResult, upEchoOut, error) {
		return nil, upEchoOut{Echo: in.Text}, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "fail"}, func(ctx context.Context, req *mcp.CallToolRequest, in upEchoIn) (*mcp.CallToolResult, any, error) {
		return nil, nil, fmt.Errorf("tool failed: %s", in.Text)
	})
	raw := json.RawMessage(`{"type":"object"}`)
	s.AddTool(&mcp.Tool{Name: "plain", InputSchema: raw}, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{
			Meta: mcp.Meta{"k": "v"},
			Content: []mcp.Content{
				&mcp.TextContent{Text: "a\n\"b\"", Annotations: &mcp.Annotations{Audience: []mcp.Role{"user"}, Priority: 0.5}},
				&mcp.TextContent{Text: "", Meta: mcp.Meta{"n": 1.0}},
			},
		}, nil
	})
	s.AddTool(&mcp.Tool{Name: "mixed", InputSchema: raw}, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{
			IsError: true,
			Content: []mcp.Content{
				&mcp.ImageContent{Data: []byte{1, 2, 3}, MIMEType: "image/png"},
				&mcp.TextContent{Text: "t"},
				&mcp.ResourceLink{URI: "file:///x", Name: "x"},
			},
			StructuredContent: map[string]any{"a": []any{1.0, "b"}},
		}, nil
	})
	s.AddTool(&mcp.Tool{Name: "notify", InputSchema: raw}, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		ss := req.Session
		if err := ss.Log(ctx, &mcp.LoggingMessageParams{Level: "info", Data: "one"}); err != nil {
			return nil, err
		}
		if err := ss.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: req.Params.GetProgressToken(), Progress: 1, Total: 2, Message: "half"}); err != nil {
			return nil, err
		}
		if err := ss.Log(ctx, &mcp.LoggingMessageParams{Level: "warning", Data: map[string]any{"two": 2.0}}); err != nil {
			return nil, err
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "notified"}}}, nil
	})
	s.AddTool(&mcp.Tool{Name: "roots", InputSchema: raw}, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		if err := req.Session.Ping(ctx, nil); err != nil {
			return nil, fmt.Errorf("ping: %w", err)
		}
		res, err := req.Session.ListRoots(ctx, nil)
		if err != nil {
			return nil, fmt.Errorf("roots: %w", err)
		}
		var names []string
		for _, r := range res.Roots {
			names = append(names, r.URI)
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("roots=%d %s", len(res.Roots), strings.Join(names, ","))}}}, nil
	})
	s.AddTool(&mcp.Tool{Name: "sample", InputSchema: raw}, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		res, err := req.Session.CreateMessage(ctx, &mcp.CreateMessageParams{
			MaxTokens: 10,
			Messages:  []*mcp.SamplingMessage{{Role: "user", Content: &mcp.TextContent{Text: "hi"}}},
		})
		if err != nil {
			return nil, fmt.Errorf("sampling: %w", err)
		}
		text, _ := res.Content.(*mcp.TextContent)
		if text == nil {
			return nil, fmt.Errorf("sampling: content %T", res.Content)
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "sampled:" + text.Text + " model:" + res.Model}}}, nil
	})
	s.AddTool(&mcp.Tool{Name: "block", InputSchema: raw}, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		close(ts.started)
		<-ctx.Done()
		ts.cancelled <- ctx.Err()
		return nil, ctx.Err()
	})
	mcp.AddTool(s, &mcp.Tool{Name: "big"}, func(ctx context.Context, req *mcp.CallToolRequest, in upBigIn) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: strings.Repeat("x", in.N)}}}, nil, nil
	})
	s.AddTool(&mcp.Tool{Name: "closer", InputSchema: raw}, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		if req.Extra == nil || req.Extra.CloseSSEStream == nil {
			return nil, errors.New("no CloseSSEStream")
		}
		if err := req.Session.Log(ctx, &mcp.LoggingMessageParams{Level: "info", Data: "before close"}); err != nil {
			return nil, err
		}
		req.Extra.CloseSSEStream(mcp.CloseSSEStreamArgs{RetryAfter: time.Millisecond})
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "after close"}}}, nil
	})
	return s
}

// upTestEnv is a running upstream, a go-sdk client session on it, and an
// upCaller on the same session.
type upTestEnv struct {
	ts   *upTestServer
	url  string
	hc   *http.Client
	cs   *mcp.ClientSession
	up   *upCaller
	sess upSession

	sdkLogs     atomic.Int32 // notifications/message seen by the go-sdk client
	sdkProgress atomic.Int32 // notifications/progress seen by the go-sdk client

	resumes   atomic.Int32 // GETs with Last-Event-ID (stream resumptions)
	peek      atomic.Bool  // record POSTed notifications/cancelled
	cancelsUp atomic.Int32 // notifications/cancelled POSTs seen by the upstream
}

func newUpTestEnv(tb testing.TB, hopts *mcp.StreamableHTTPOptions, maxBody int64) *upTestEnv {
	tb.Helper()
	env := &upTestEnv{ts: &upTestServer{started: make(chan struct{}), cancelled: make(chan error, 1)}}
	srv := env.ts.server()
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, hopts)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && r.Header.Get("Last-Event-ID") != "" {
			env.resumes.Add(1)
		}
		if r.Method == http.MethodPost && env.peek.Load() {
			body, _ := io.ReadAll(r.Body)
			if strings.Contains(string(body), `"notifications/cancelled"`) {
				env.cancelsUp.Add(1)
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
		}
		h.ServeHTTP(w, r)
	}))
	tb.Cleanup(hs.Close)
	env.url = hs.URL
	env.hc = &http.Client{Transport: &http.Transport{MaxIdleConns: 512, MaxIdleConnsPerHost: 512}}
	tb.Cleanup(env.hc.CloseIdleConnections)

	client := mcp.NewClient(&mcp.Implementation{Name: "gw", Version: "1"}, &mcp.ClientOptions{
		CreateMessageHandler: func(context.Context, *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
			return &mcp.CreateMessageResult{Model: "sdk", Role: "assistant", Content: &mcp.TextContent{Text: "from-sdk"}}, nil
		},
		LoggingMessageHandler:       func(context.Context, *mcp.LoggingMessageRequest) { env.sdkLogs.Add(1) },
		ProgressNotificationHandler: func(context.Context, *mcp.ProgressNotificationClientRequest) { env.sdkProgress.Add(1) },
	})
	client.AddRoots(&mcp.Root{URI: "file:///sdk-root", Name: "sdk"})
	ctx, cancel := context.WithTimeout(context.Background(), upTestWait)
	defer cancel()
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: hs.URL, HTTPClient: env.hc}, nil)
	if err != nil {
		tb.Fatalf("connect: %v", err)
	}
	tb.Cleanup(func() { cs.Close() })
	if err := cs.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: "debug"}); err != nil {
		tb.Fatalf("set level: %v", err)
	}
	env.cs = cs
	env.sess = upSessionOf(cs)
	if env.sess.ID == "" || env.sess.ProtocolVersion == "" {
		tb.Fatalf("session %+v: want id and protocol version", env.sess)
	}
	env.up, err = newUpCaller(env.hc, hs.URL, maxBody)
	if err != nil {
		tb.Fatal(err)
	}
	return env
}

func upCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), upTestWait)
	t.Cleanup(cancel)
	return ctx
}

// sdkCall is the reference: the go-sdk client's CallTool for the same call.
func (env *upTestEnv) sdkCall(t *testing.T, name, args string) (*mcp.CallToolResult, error) {
	t.Helper()
	var a any
	if args != "" {
		a = json.RawMessage(args)
	}
	return env.cs.CallTool(upCtx(t), &mcp.CallToolParams{Name: name, Arguments: a})
}

func upText(t *testing.T, res *mcp.CallToolResult) string {
	t.Helper()
	if res == nil || len(res.Content) == 0 {
		t.Fatalf("result %+v: no content", res)
	}
	tc, ok := res.Content[0].(*mcp.TextContent)
	if !ok {
		t.Fatalf("content %T, want text", res.Content[0])
	}
	return tc.Text
}

func TestUpCallMatchesSDKClient(t *testing.T) {
	for _, mode := range []struct {
		name string
		opts *mcp.StreamableHTTPOptions
	}{{"sse", nil}, {"json", &mcp.StreamableHTTPOptions{JSONResponse: true}}} {
		t.Run(mode.name, func(t *testing.T) {
			env := newUpTestEnv(t, mode.opts, 0)
			for _, c := range []struct{ tool, args string }{
				{"echo", `{"text":"hello <world> & \u00e9"}`},
				{"fail", `{"text":"boom"}`},
				{"plain", ``},
				{"mixed", `{}`},
			} {
				want, err := env.sdkCall(t, c.tool, c.args)
				if err != nil {
					t.Fatalf("%s: sdk: %v", c.tool, err)
				}
				got, raw, err := env.up.callTool(upCtx(t), env.sess, c.tool, json.RawMessage(c.args), nil, upHandlers{})
				if err != nil {
					t.Fatalf("%s: upcall: %v", c.tool, err)
				}
				if !reflect.DeepEqual(got, want) {
					gj, _ := json.Marshal(got)
					wj, _ := json.Marshal(want)
					t.Errorf("%s: result differs\n got %s\nwant %s", c.tool, gj, wj)
				}
				var again mcp.CallToolResult
				if err := json.Unmarshal(raw, &again); err != nil || !reflect.DeepEqual(&again, want) {
					t.Errorf("%s: raw result %s does not decode to the same result (err %v)", c.tool, raw, err)
				}
			}
			// Spot-check the interesting shapes.
			got, _, _ := env.up.callTool(upCtx(t), env.sess, "echo", json.RawMessage(`{"text":"x"}`), nil, upHandlers{})
			if sc, _ := got.StructuredContent.(map[string]any); sc["echo"] != "x" {
				t.Errorf("structuredContent = %#v", got.StructuredContent)
			}
			got, _, _ = env.up.callTool(upCtx(t), env.sess, "fail", json.RawMessage(`{"text":"boom"}`), nil, upHandlers{})
			if !got.IsError || !strings.Contains(upText(t, got), "boom") {
				t.Errorf("fail: %+v", got)
			}
		})
	}
}

func TestUpCallNotificationsInOrder(t *testing.T) {
	env := newUpTestEnv(t, nil, 0)
	type note struct {
		method string
		params map[string]any
	}
	var notes []note
	h := upHandlers{OnNotification: func(ctx context.Context, method string, params json.RawMessage) {
		var p map[string]any
		if err := json.Unmarshal(params, &p); err != nil {
			t.Errorf("%s params %s: %v", method, params, err)
		}
		notes = append(notes, note{method, p})
	}}
	res, _, err := env.up.callTool(upCtx(t), env.sess, "notify", nil, map[string]any{"progressToken": "tok-1"}, h)
	if err != nil {
		t.Fatal(err)
	}
	if upText(t, res) != "notified" {
		t.Fatalf("result %q", upText(t, res))
	}
	if len(notes) != 3 {
		t.Fatalf("notifications %+v, want 3", notes)
	}
	if notes[0].method != "notifications/message" || notes[0].params["data"] != "one" || notes[0].params["level"] != "info" {
		t.Errorf("first %+v", notes[0])
	}
	if notes[1].method != "notifications/progress" || notes[1].params["progressToken"] != "tok-1" || notes[1].params["progress"] != 1.0 || notes[1].params["message"] != "half" {
		t.Errorf("second %+v", notes[1])
	}
	if notes[2].method != "notifications/message" || notes[2].params["level"] != "warning" {
		t.Errorf("third %+v", notes[2])
	}
	// The server routed them to the call's stream, not to the session's
	// standalone stream where the go-sdk client would have seen them.
	if n, p := env.sdkLogs.Load(), env.sdkProgress.Load(); n != 0 || p != 0 {
		t.Errorf("go-sdk client saw %d logs, %d progress; want 0", n, p)
	}
}

func TestUpCallDefaultRequestAnswers(t *testing.T) {
	env := newUpTestEnv(t, nil, 0)
	// Reference: the go-sdk client answers with its own root.
	want, err := env.sdkCall(t, "roots", "")
	if err != nil || upText(t, want) != "roots=1 file:///sdk-root" {
		t.Fatalf("sdk roots: %v %v", want, err)
	}
	// Nil OnRequest: ping → {}, roots/list → no roots, answered by us.
	res, _, err := env.up.callTool(upCtx(t), env.sess, "roots", nil, nil, upHandlers{})
	if err != nil {
		t.Fatal(err)
	}
	if got := upText(t, res); got != "roots=0 " {
		t.Fatalf("roots via upcall = %q, want default empty roots", got)
	}
	// Unknown methods get -32601 by default.
	v, jerr := upDefaultRequest("elicitation/create")
	if v != nil || jerr == nil || jerr.Code != jsonrpc.CodeMethodNotFound {
		t.Fatalf("default for unknown method = %v, %v", v, jerr)
	}
}

func TestUpCallOnRequestAnswersSampling(t *testing.T) {
	env := newUpTestEnv(t, nil, 0)
	var methods []string
	h := upHandlers{OnRequest: func(ctx context.Context, method string, params json.RawMessage) (any, *jsonrpc.Error) {
		methods = append(methods, method)
		if method != "sampling/createMessage" {
			return upDefaultRequest(method)
		}
		var p mcp.CreateMessageParams
		if err := json.Unmarshal(params, &p); err != nil || p.MaxTokens != 10 || len(p.Messages) != 1 {
			t.Errorf("sampling params %s: %v", params, err)
		}
		return &mcp.CreateMessageResult{Model: "gw-model", Role: "assistant", Content: &mcp.TextContent{Text: "from-upcall"}}, nil
	}}
	res, _, err := env.up.callTool(upCtx(t), env.sess, "sample", json.RawMessage(`{}`), nil, h)
	if err != nil {
		t.Fatal(err)
	}
	if got := upText(t, res); got != "sampled:from-upcall model:gw-model" {
		t.Fatalf("sample = %q", got)
	}
	if !reflect.DeepEqual(methods, []string{"sampling/createMessage"}) {
		t.Errorf("requests seen %v", methods)
	}

	// An error answer reaches the tool as a JSON-RPC error.
	h.OnRequest = func(ctx context.Context, method string, params json.RawMessage) (any, *jsonrpc.Error) {
		return nil, &jsonrpc.Error{Code: -32001, Message: "denied by gateway"}
	}
	// (A raw tool handler's error becomes a JSON-RPC error response.)
	_, _, err = env.up.callTool(upCtx(t), env.sess, "sample", nil, nil, h)
	var je *jsonrpc.Error
	if !errors.As(err, &je) || !strings.Contains(je.Message, "denied by gateway") {
		t.Fatalf("sample with error answer: err = %v", err)
	}
}

func TestUpCallJSONResponseMode(t *testing.T) {
	env := newUpTestEnv(t, &mcp.StreamableHTTPOptions{JSONResponse: true}, 0)
	res, raw, err := env.up.callTool(upCtx(t), env.sess, "echo", json.RawMessage(`{"text":"j"}`), nil, upHandlers{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(raw), `"structuredContent":{"echo":"j"}`) || upText(t, res) != `{"echo":"j"}` {
		t.Fatalf("json mode: %s", raw)
	}
	// In JSON mode the server sends call-related requests out of band, on
	// the standalone GET stream, so the go-sdk client answers them.
	var seen atomic.Int32
	h := upHandlers{OnRequest: func(context.Context, string, json.RawMessage) (any, *jsonrpc.Error) {
		seen.Add(1)
		return nil, nil
	}}
	res, _, err = env.up.callTool(upCtx(t), env.sess, "roots", nil, nil, h)
	if err != nil {
		t.Fatal(err)
	}
	if got := upText(t, res); got != "roots=1 file:///sdk-root" || seen.Load() != 0 {
		t.Fatalf("json mode roots = %q (upcall OnRequest calls %d)", got, seen.Load())
	}
}

func TestUpCallUnknownSession(t *testing.T) {
	env := newUpTestEnv(t, nil, 0)
	_, _, err := env.up.callTool(upCtx(t), upSession{ID: "no-such-session", ProtocolVersion: env.sess.ProtocolVersion}, "echo", json.RawMessage(`{"text":"x"}`), nil, upHandlers{})
	var ue *upError
	if !errors.As(err, &ue) || ue.Status != http.StatusNotFound || !ue.SessionGone() {
		t.Fatalf("err = %v (%T), want *upError 404", err, err)
	}
	if !strings.Contains(err.Error(), "404") {
		t.Errorf("error text %q", err)
	}
}

func TestUpCallCancelPropagatesUpstream(t *testing.T) {
	env := newUpTestEnv(t, nil, 0)
	env.peek.Store(true)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-env.ts.started:
			cancel()
		case <-time.After(upTestWait):
		}
	}()
	start := time.Now()
	_, _, err := env.up.callTool(ctx, env.sess, "block", nil, nil, upHandlers{})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("callTool returned %v after cancel", d)
	}
	// notifications/cancelled reached the upstream: the tool's ctx ends.
	select {
	case err := <-env.ts.cancelled:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("tool ctx err = %v", err)
		}
	case <-time.After(upTestWait):
		t.Fatal("upstream tool was never cancelled")
	}
	if n := env.cancelsUp.Load(); n != 1 {
		t.Errorf("upstream got %d notifications/cancelled, want 1", n)
	}
	// The session is still usable.
	if _, _, err := env.up.callTool(upCtx(t), env.sess, "echo", json.RawMessage(`{"text":"after"}`), nil, upHandlers{}); err != nil {
		t.Fatalf("call after cancel: %v", err)
	}
}

func TestUpCallJSONRPCError(t *testing.T) {
	env := newUpTestEnv(t, nil, 0)
	_, sdkErr := env.sdkCall(t, "no-such-tool", `{}`)
	var want *jsonrpc.Error
	if !errors.As(sdkErr, &want) {
		t.Fatalf("sdk err = %v, want *jsonrpc.Error", sdkErr)
	}
	_, _, err := env.up.callTool(upCtx(t), env.sess, "no-such-tool", json.RawMessage(`{}`), nil, upHandlers{})
	var got *jsonrpc.Error
	if !errors.As(err, &got) {
		t.Fatalf("err = %v (%T), want *jsonrpc.Error", err, err)
	}
	if got.Code != want.Code || got.Message != want.Message {
		t.Fatalf("got %d %q, want %d %q", got.Code, got.Message, want.Code, want.Message)
	}
}

func TestUpCallConcurrent(t *testing.T) {
	env := newUpTestEnv(t, nil, 0)
	const workers, calls = 32, 16
	var wg sync.WaitGroup
	errs := make(chan error, workers*calls)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range calls {
				text := fmt.Sprintf("w%d-c%d", w, i)
				res, _, err := env.up.callTool(context.Background(), env.sess, "echo", json.RawMessage(`{"text":"`+text+`"}`), nil, upHandlers{})
				if err != nil {
					errs <- err
					continue
				}
				if sc, _ := res.StructuredContent.(map[string]any); sc["echo"] != text {
					errs <- fmt.Errorf("got %#v, want %q", res.StructuredContent, text)
				}
			}
		}()
	}
	// The go-sdk client shares the session meanwhile.
	for range 8 {
		if _, err := env.sdkCall(t, "echo", `{"text":"sdk"}`); err != nil {
			t.Errorf("sdk call: %v", err)
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestUpCallOversizeBody(t *testing.T) {
	for _, mode := range []struct {
		name string
		opts *mcp.StreamableHTTPOptions
	}{{"sse", nil}, {"json", &mcp.StreamableHTTPOptions{JSONResponse: true}}} {
		t.Run(mode.name, func(t *testing.T) {
			env := newUpTestEnv(t, mode.opts, 64<<10)
			_, _, err := env.up.callTool(upCtx(t), env.sess, "big", json.RawMessage(`{"n":200000}`), nil, upHandlers{})
			if !errors.Is(err, errUpBodyTooLarge) {
				t.Fatalf("err = %v, want errUpBodyTooLarge", err)
			}
			res, _, err := env.up.callTool(upCtx(t), env.sess, "big", json.RawMessage(`{"n":1000}`), nil, upHandlers{})
			if err != nil || len(upText(t, res)) != 1000 {
				t.Fatalf("small call after oversize: %v", err)
			}
		})
	}
}

func TestUpCallBadArgs(t *testing.T) {
	c, err := newUpCaller(nil, "http://127.0.0.1:1/mcp", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range []string{`[1]`, `{"a":1}, "name":"other"`, `{`, `"s"`} {
		if _, _, err := c.callTool(context.Background(), upSession{}, "t", json.RawMessage(args), nil, upHandlers{}); !errors.Is(err, errUpBadArgs) {
			t.Errorf("args %s: err = %v, want errUpBadArgs", args, err)
		}
	}
	if _, err := newUpCaller(nil, "ftp://x", 0); err == nil {
		t.Error("ftp endpoint accepted")
	}
}

// TestUpCallResumesClosedStream: a server that closes the call's SSE stream
// early (SEP-1699, CloseSSEStream with an event store) is resumed with GET +
// Last-Event-ID and the result still arrives.
func TestUpCallResumesClosedStream(t *testing.T) {
	env := newUpTestEnv(t, &mcp.StreamableHTTPOptions{EventStore: mcp.NewMemoryEventStore(nil)}, 0)
	var notes []string
	h := upHandlers{OnNotification: func(_ context.Context, method string, _ json.RawMessage) { notes = append(notes, method) }}
	res, _, err := env.up.callTool(upCtx(t), env.sess, "closer", nil, nil, h)
	if err != nil {
		t.Fatal(err)
	}
	if upText(t, res) != "after close" || len(notes) != 1 {
		t.Fatalf("result %q, notifications %v", upText(t, res), notes)
	}
	if n := env.resumes.Load(); n < 1 {
		t.Fatalf("no stream resumption seen (GETs with Last-Event-ID: %d)", n)
	}
}

// upFakeUpstream serves one handcrafted response to each POST of a
// tools/call, checking the request the upCaller sends.
func upFakeUpstream(t *testing.T, respond func(w http.ResponseWriter, id string)) string {
	t.Helper()
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.Header.Get("Content-Type") != "application/json" ||
			r.Header.Get("Accept") != "application/json, text/event-stream" ||
			r.Header.Get("Mcp-Session-Id") != "sid-1" || r.Header.Get("Mcp-Protocol-Version") != "2025-11-25" {
			t.Errorf("request %s %v", r.Method, r.Header)
		}
		body, _ := io.ReadAll(r.Body)
		var req struct {
			JSONRPC string `json:"jsonrpc"`
			ID      string `json:"id"`
			Method  string `json:"method"`
			Params  struct {
				Name      string          `json:"name"`
				Arguments json.RawMessage `json:"arguments"`
				Meta      map[string]any  `json:"_meta"`
			} `json:"params"`
		}
		if err := json.Unmarshal(body, &req); err != nil {
			t.Errorf("request body %s: %v", body, err)
		}
		if req.Method != "tools/call" {
			w.WriteHeader(http.StatusAccepted) // e.g. notifications/cancelled
			return
		}
		if req.JSONRPC != "2.0" || !strings.HasPrefix(req.ID, upIDPrefix) || req.Params.Name != "we\"ird\n" ||
			string(req.Params.Arguments) != `{"a":[1,2]}` || req.Params.Meta["progressToken"] != 7.0 {
			t.Errorf("request body %s", body)
		}
		respond(w, req.ID)
	}))
	t.Cleanup(hs.Close)
	return hs.URL
}

func TestUpCallSSEParsing(t *testing.T) {
	url := upFakeUpstream(t, func(w http.ResponseWriter, id string) {
		w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
		fmt.Fprint(w, ": a comment\n"+
			"retry: 10\n"+
			"event: message\n"+
			"data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\n"+
			"data:\"params\":{\"level\":\"info\",\"data\":\"multi\\nline\"}}\r\n"+
			"\r\n"+
			"event: other\n"+
			"data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/skipped\"}\n"+
			"\n"+
			"id: 7\n"+
			"data\n"+
			"\n"+
			"data: {\"jsonrpc\":\"2.0\",\"id\":\"other\",\"result\":{}}\n\n"+
			"data: {\"jsonrpc\":\"2.0\",\"id\":\""+id+"\",\"result\":{\"content\":[{\"type\":\"text\",\"text\":\""+strings.Repeat("y", 40000)+"\"}]}}")
	})
	c, err := newUpCaller(nil, url, 0)
	if err != nil {
		t.Fatal(err)
	}
	var notes []string
	h := upHandlers{OnNotification: func(_ context.Context, method string, params json.RawMessage) {
		notes = append(notes, method+" "+string(params))
	}}
	res, _, err := c.callTool(upCtx(t), upSession{ID: "sid-1", ProtocolVersion: "2025-11-25"}, "we\"ird\n", json.RawMessage(` {"a":[1,2]} `), map[string]any{"progressToken": 7}, h)
	if err != nil {
		t.Fatal(err)
	}
	if got := upText(t, res); len(got) != 40000 {
		t.Errorf("text length %d", len(got))
	}
	want := []string{`notifications/message {"level":"info","data":"multi\nline"}`}
	if !reflect.DeepEqual(notes, want) {
		t.Errorf("notifications %q, want %q", notes, want)
	}
}

// TestUpCallRedirectReplaysBody: a 307 makes the http.Client resend the
// pooled request body through GetBody.
func TestUpCallRedirectReplaysBody(t *testing.T) {
	url := upFakeUpstream(t, func(w http.ResponseWriter, id string) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%q,"result":{"content":[{"type":"text","text":"redirected"}]}}`, id)
	})
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		http.Redirect(w, r, url, http.StatusTemporaryRedirect)
	}))
	t.Cleanup(front.Close)
	c, _ := newUpCaller(nil, front.URL, 0)
	for range 3 {
		res, _, err := c.callTool(upCtx(t), upSession{ID: "sid-1", ProtocolVersion: "2025-11-25"}, "we\"ird\n", json.RawMessage(`{"a":[1,2]}`), map[string]any{"progressToken": 7}, upHandlers{})
		if err != nil || upText(t, res) != "redirected" {
			t.Fatalf("redirected call: %v", err)
		}
	}
}

func TestUpCallStreamEndsWithoutResponse(t *testing.T) {
	url := upFakeUpstream(t, func(w http.ResponseWriter, id string) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{}}\n\n")
	})
	c, _ := newUpCaller(nil, url, 0)
	_, _, err := c.callTool(upCtx(t), upSession{ID: "sid-1", ProtocolVersion: "2025-11-25"}, "we\"ird\n", json.RawMessage(`{"a":[1,2]}`), map[string]any{"progressToken": 7}, upHandlers{})
	var ue *upError
	if !errors.As(err, &ue) || !errors.Is(err, errUpStreamEnded) || !strings.Contains(err.Error(), "ended without a response") {
		t.Fatalf("err = %v (%T)", err, err)
	}
	if errors.Is(err, errUpResumeFailed) {
		t.Errorf("a stream that just ended counts as closed on purpose: %v", err)
	}
}

// A stream closed with an SSE retry field but no event id (SEP-1699
// without resumability) is a deliberate close that cannot be resumed.
func TestUpCallStreamClosedForReconnect(t *testing.T) {
	url := upFakeUpstream(t, func(w http.ResponseWriter, id string) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "retry: 10\n\n")
	})
	c, _ := newUpCaller(nil, url, 0)
	_, _, err := c.callTool(upCtx(t), upSession{ID: "sid-1", ProtocolVersion: "2025-11-25"}, "we\"ird\n", json.RawMessage(`{"a":[1,2]}`), map[string]any{"progressToken": 7}, upHandlers{})
	if !errors.Is(err, errUpStreamEnded) || !errors.Is(err, errUpResumeFailed) {
		t.Fatalf("err = %v (%T), want a failed resumption", err, err)
	}
}

func TestUpCallHTTPErrorStatus(t *testing.T) {
	url := upFakeUpstream(t, func(w http.ResponseWriter, id string) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%q,"error":{"code":-32600,"message":"bad"}}`, id)
	})
	c, _ := newUpCaller(nil, url, 0)
	_, _, err := c.callTool(upCtx(t), upSession{ID: "sid-1", ProtocolVersion: "2025-11-25"}, "we\"ird\n", json.RawMessage(`{"a":[1,2]}`), map[string]any{"progressToken": 7}, upHandlers{})
	var ue *upError
	if !errors.As(err, &ue) || ue.Status != http.StatusBadRequest || ue.RPC == nil || ue.RPC.Code != -32600 {
		t.Fatalf("err = %v (%T)", err, err)
	}
}

// upCPU is the process's user+system CPU time.
func upCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// upBenchArgs is an echo of 64 bytes of text.
var upBenchArgs = json.RawMessage(`{"text":"` + strings.Repeat("a", 64) + `"}`)

func upBench(b *testing.B, env *upTestEnv, call func(ctx context.Context, env *upTestEnv) error) {
	ctx := context.Background()
	if err := call(ctx, env); err != nil { // warm up connections and pools
		b.Fatal(err)
	}
	b.ReportAllocs()
	cpu := upCPU()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := call(ctx, env); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(upCPU()-cpu)/float64(b.N), "cpu-ns/call")
}

func upBenchUpCall(ctx context.Context, env *upTestEnv) error {
	res, _, err := env.up.callTool(ctx, env.sess, "echo", upBenchArgs, nil, upHandlers{})
	if err == nil && len(res.Content) != 1 {
		err = fmt.Errorf("result %+v", res)
	}
	return err
}

func upBenchSDK(ctx context.Context, env *upTestEnv) error {
	res, err := env.cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: upBenchArgs})
	if err == nil && len(res.Content) != 1 {
		err = fmt.Errorf("result %+v", res)
	}
	return err
}

// BenchmarkUpCall measures a 64-byte echo through upCaller against a go-sdk
// server (client and server CPU both count: they share the process).
func BenchmarkUpCall(b *testing.B) { upBench(b, newUpTestEnv(b, nil, 0), upBenchUpCall) }

// BenchmarkSDKCallTool is the same echo through the go-sdk client session.
func BenchmarkSDKCallTool(b *testing.B) { upBench(b, newUpTestEnv(b, nil, 0), upBenchSDK) }

// BenchmarkUpCallFakeUpstream isolates the client side: the upstream is a
// minimal handwritten Streamable HTTP server, so the numbers are dominated
// by the calling client.
func BenchmarkUpCallFakeUpstream(b *testing.B) { upBench(b, newUpFakeEnv(b), upBenchUpCall) }

// BenchmarkSDKCallToolFakeUpstream is the go-sdk client against the same
// minimal upstream.
func BenchmarkSDKCallToolFakeUpstream(b *testing.B) { upBench(b, newUpFakeEnv(b), upBenchSDK) }

// newUpFakeEnv connects a go-sdk client and an upCaller to a minimal
// handwritten stateful Streamable HTTP server whose only tool echoes
// {"text":...} like the go-sdk "echo" tool (text + structuredContent), over
// SSE. GET (standalone stream) is 405.
func newUpFakeEnv(tb testing.TB) *upTestEnv {
	tb.Helper()
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodGet:
			w.WriteHeader(http.StatusMethodNotAllowed)
			return
		case http.MethodDelete:
			return
		}
		var req struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params struct {
				Arguments struct {
					Text string `json:"text"`
				} `json:"arguments"`
			} `json:"params"`
		}
		body, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(body, &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		switch {
		case len(req.ID) == 0:
			w.WriteHeader(http.StatusAccepted)
		case req.Method == "initialize":
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Mcp-Session-Id", "fake-session")
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":"2025-11-25","capabilities":{"tools":{}},"serverInfo":{"name":"fake","version":"1"}}}`, req.ID)
		case req.Method == "tools/call":
			out, _ := json.Marshal(map[string]string{"echo": req.Params.Arguments.Text})
			text, _ := json.Marshal(string(out))
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprintf(w, "event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":%s,\"result\":{\"content\":[{\"type\":\"text\",\"text\":%s}],\"structuredContent\":%s}}\n\n", req.ID, text, out)
		default:
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{}}`, req.ID)
		}
	}))
	tb.Cleanup(hs.Close)
	env := &upTestEnv{url: hs.URL, hc: &http.Client{Transport: &http.Transport{MaxIdleConns: 512, MaxIdleConnsPerHost: 512}}}
	tb.Cleanup(env.hc.CloseIdleConnections)
	ctx, cancel := context.WithTimeout(context.Background(), upTestWait)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "gw", Version: "1"}, nil).Connect(ctx,
		&mcp.StreamableClientTransport{Endpoint: hs.URL, HTTPClient: env.hc}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		tb.Fatalf("connect: %v", err)
	}
	tb.Cleanup(func() { cs.Close() })
	env.cs, env.sess = cs, upSessionOf(cs)
	if env.up, err = newUpCaller(env.hc, hs.URL, 0); err != nil {
		tb.Fatal(err)
	}
	return env
}

// TestUpCallResumesBrokenStream: a connection that breaks mid-stream (not a
// clean end) after the server gave an event id is resumed with GET +
// Last-Event-ID, as the SDK client does; without an event id it fails.
func TestUpCallResumesBrokenStream(t *testing.T) {
	for _, c := range []struct {
		withID     bool
		failedGETs int32 // resuming GETs whose connection breaks before an answer
	}{{true, 0}, {true, 2}, {false, 0}} {
		withID := c.withID
		var gets atomic.Int32
		var callID atomic.Value
		hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodGet {
				if gets.Add(1) <= c.failedGETs {
					panic(http.ErrAbortHandler) // the GET fails with a network error
				}
				if r.Header.Get("Last-Event-ID") != "e1" {
					t.Errorf("resume GET with Last-Event-ID %q", r.Header.Get("Last-Event-ID"))
				}
				w.Header().Set("Content-Type", "text/event-stream")
				fmt.Fprintf(w, "id: e2\ndata: {\"jsonrpc\":\"2.0\",\"id\":%q,\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"resumed\"}]}}\n\n", callID.Load())
				return
			}
			var req struct {
				ID string `json:"id"`
			}
			json.NewDecoder(r.Body).Decode(&req)
			callID.Store(req.ID)
			w.Header().Set("Content-Type", "text/event-stream")
			if withID {
				fmt.Fprint(w, "retry: 5\nid: e1\ndata:\n\n")
			} else {
				fmt.Fprint(w, ": no id\n\n")
			}
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler) // the connection breaks: the client reads an unexpected EOF
		}))
		t.Cleanup(hs.Close)
		up, _ := newUpCaller(nil, hs.URL, 0)
		res, _, err := up.callTool(upCtx(t), upSession{ID: "sid-1", ProtocolVersion: "2025-11-25"}, "t", nil, nil, upHandlers{})
		if withID {
			if err != nil || upText(t, res) != "resumed" || gets.Load() != c.failedGETs+1 {
				t.Fatalf("with an event id, %d failing GETs first: %v, %d resume GETs", c.failedGETs, err, gets.Load())
			}
			continue
		}
		if err == nil || !errors.Is(err, errUpStreamBroken) || gets.Load() != 0 {
			t.Fatalf("without an event id: %v, %d resume GETs; want the broken stream's error and no GET", err, gets.Load())
		}
	}
}

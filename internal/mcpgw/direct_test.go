package mcpgw_test

import (
	"context"
	"encoding/json"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolgate/toolgate/internal/mcpgw"
)

// directUpstream is a Streamable HTTP upstream with an echo tool (text and
// structured content), a failing tool, and a tool that blocks until it is
// cancelled (started and stopped signal it).
type directUpstream struct {
	url              string
	started, stopped chan struct{}
}

func startDirectUpstream(t *testing.T) *directUpstream {
	t.Helper()
	u := &directUpstream{started: make(chan struct{}, 1), stopped: make(chan struct{}, 1)}
	server := mcp.NewServer(&mcp.Implementation{Name: "up", Version: "1"}, nil)
	type echoArgs struct {
		Text string `json:"text"`
	}
	mcp.AddTool(server, &mcp.Tool{Name: "echo"}, func(_ context.Context, _ *mcp.CallToolRequest, a echoArgs) (*mcp.CallToolResult, map[string]any, error) {
		return nil, map[string]any{"echoed": a.Text}, nil
	})
	server.AddTool(&mcp.Tool{Name: "fail", InputSchema: map[string]any{"type": "object"}},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "it broke"}}}, nil
		})
	server.AddTool(&mcp.Tool{Name: "block", InputSchema: map[string]any{"type": "object"}},
		func(ctx context.Context, _ *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			u.started <- struct{}{}
			<-ctx.Done()
			u.stopped <- struct{}{}
			return nil, ctx.Err()
		})
	srv := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, nil))
	t.Cleanup(srv.Close)
	u.url = srv.URL
	return u
}

// postRaw posts body to the gateway's /mcp on session cs with key and
// returns the status, the Content-Type and the body.
func postRaw(t *testing.T, ctx context.Context, url, key string, cs *mcp.ClientSession, body string, hdr map[string]string) (int, string, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Mcp-Session-Id", cs.ID())
	req.Header.Set("Mcp-Protocol-Version", cs.InitializeResult().ProtocolVersion)
	for k, v := range hdr {
		if v == "" {
			req.Header.Del(k)
		} else {
			req.Header.Set(k, v)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header.Get("Content-Type"), b
}

// withoutMeta is r without its _meta (the call's own ids).
func withoutMeta(r *mcp.CallToolResult) *mcp.CallToolResult {
	q := *r
	q.Meta = nil
	return &q
}

// A plain tools/call is served directly (no SDK transport hop) and answers
// exactly what the SDK path answers: the same results for a successful, a
// failing and an unknown tool, with the correlation _meta.
func TestDirectCallMatchesSDKPath(t *testing.T) {
	up := startDirectUpstream(t)
	gwURL, key, gw := startAllowAllGatewayWith(t, up.url, "")
	cs := relayClient(t, gwURL, key, nil)
	ctx := t.Context()
	if _, err := cs.ListTools(ctx, nil); err != nil { // establishes the session at the gateway
		t.Fatal(err)
	}

	for _, tc := range []struct {
		tool string
		args any
	}{{"echo", map[string]any{"text": "hi"}}, {"fail", map[string]any{}}} {
		before := mcpgw.DirectCalls(gw)
		direct, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tc.tool, Arguments: tc.args})
		if err != nil {
			t.Fatalf("%s direct: %v", tc.tool, err)
		}
		if got := mcpgw.DirectCalls(gw) - before; got != 1 {
			t.Fatalf("%s: %d direct calls, want 1", tc.tool, got)
		}
		// A progress token needs the SDK's response stream: the SDK path.
		viaSDK, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tc.tool, Arguments: tc.args, Meta: mcp.Meta{"progressToken": "p1"}})
		if err != nil {
			t.Fatalf("%s via SDK: %v", tc.tool, err)
		}
		if got := mcpgw.DirectCalls(gw) - before; got != 1 {
			t.Fatalf("%s with a progress token: served directly", tc.tool)
		}
		if !reflect.DeepEqual(withoutMeta(direct), withoutMeta(viaSDK)) {
			a, _ := json.Marshal(withoutMeta(direct))
			b, _ := json.Marshal(withoutMeta(viaSDK))
			t.Errorf("%s: direct %s, SDK path %s", tc.tool, a, b)
		}
		for _, k := range []string{mcpgw.MetaRunID, mcpgw.MetaCallID, mcpgw.MetaReceiptID} {
			if s, _ := direct.Meta[k].(string); s == "" {
				t.Errorf("%s direct: _meta %s missing: %v", tc.tool, k, direct.Meta)
			}
		}
		if direct.Meta[mcpgw.MetaCallID] == viaSDK.Meta[mcpgw.MetaCallID] {
			t.Errorf("%s: both calls have call id %v", tc.tool, direct.Meta[mcpgw.MetaCallID])
		}
	}
	if got, want := (direct(t, cs, gw, "echo")), true; got != want {
		t.Error("echo was not served directly")
	}

	// An unknown tool: the same JSON-RPC error on both paths.
	_, errDirect := cs.CallTool(ctx, &mcp.CallToolParams{Name: "nope"})
	_, errSDK := cs.CallTool(ctx, &mcp.CallToolParams{Name: "nope", Meta: mcp.Meta{"progressToken": "p2"}})
	if errDirect == nil || errSDK == nil || errDirect.Error() != errSDK.Error() {
		t.Errorf("unknown tool: direct %v, SDK path %v", errDirect, errSDK)
	}
}

// direct reports whether a call of tool on cs was served directly.
func direct(t *testing.T, cs *mcp.ClientSession, gw *mcpgw.Gateway, tool string) bool {
	t.Helper()
	before := mcpgw.DirectCalls(gw)
	if _, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: tool, Arguments: map[string]any{"text": "x"}}); err != nil {
		t.Fatal(err)
	}
	return mcpgw.DirectCalls(gw) > before
}

// Requests the direct path does not fully understand go to the SDK, which
// answers them as before.
func TestDirectCallLeavesTheRestToTheSDK(t *testing.T) {
	up := startDirectUpstream(t)
	gwURL, key, gw := startAllowAllGatewayWith(t, up.url, "")
	cs := relayClient(t, gwURL, key, nil)
	ctx := t.Context()
	if _, err := cs.ListTools(ctx, nil); err != nil {
		t.Fatal(err)
	}
	call := func(params string) string {
		return `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":` + params + `}`
	}
	plain := call(`{"name":"echo","arguments":{"text":"hi"}}`)
	for _, tc := range []struct {
		name   string
		body   string
		hdr    map[string]string
		status int
	}{
		{"progress token", call(`{"name":"echo","arguments":{"text":"hi"},"_meta":{"progressToken":1}}`), nil, 200},
		{"other _meta key", call(`{"name":"echo","arguments":{"text":"hi"},"_meta":{"vendor/x":1}}`), nil, 200},
		{"unknown params member", call(`{"name":"echo","arguments":{"text":"hi"},"task":{}}`), nil, 0},
		{"fractional id", strings.Replace(plain, `"id":5`, `"id":5.5`, 1), nil, 0},
		{"no protocol version header", plain, map[string]string{"Mcp-Protocol-Version": ""}, 200},
		{"unsupported protocol version", plain, map[string]string{"Mcp-Protocol-Version": "1999-01-01"}, 400},
		{"unknown session", plain, map[string]string{"Mcp-Session-Id": "nope"}, 404},
		{"wrong content type", plain, map[string]string{"Content-Type": "text/plain"}, 415},
		{"accept without event-stream", plain, map[string]string{"Accept": "application/json"}, 400},
		{"foreign host", plain, map[string]string{"Host": "evil.example"}, 0},
		{"Last-Event-ID on a POST", plain, map[string]string{"Last-Event-ID": "e1"}, 400},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := mcpgw.DirectCalls(gw)
			hdr := tc.hdr
			req := tc.body
			status, _, body := func() (int, string, []byte) {
				if h, ok := hdr["Host"]; ok {
					return postWithHost(t, ctx, gwURL, key, cs, req, h)
				}
				return postRaw(t, ctx, gwURL, key, cs, req, hdr)
			}()
			if got := mcpgw.DirectCalls(gw) - before; got != 0 {
				t.Errorf("served directly (%d %s)", status, body)
			}
			if tc.status != 0 && status != tc.status {
				t.Errorf("status %d (%s), want %d from the SDK", status, body, tc.status)
			}
		})
	}
	// The plain request itself is served directly, as JSON.
	before := mcpgw.DirectCalls(gw)
	status, ct, body := postRaw(t, ctx, gwURL, key, cs, plain, nil)
	if status != 200 || ct != "application/json" || mcpgw.DirectCalls(gw)-before != 1 {
		t.Fatalf("plain call: %d %s %s, direct %d", status, ct, body, mcpgw.DirectCalls(gw)-before)
	}
	var resp struct {
		JSONRPC string              `json:"jsonrpc"`
		ID      int                 `json:"id"`
		Result  *mcp.CallToolResult `json:"result"`
	}
	if err := json.Unmarshal(body, &resp); err != nil || resp.JSONRPC != "2.0" || resp.ID != 5 || resp.Result == nil ||
		!reflect.DeepEqual(resp.Result.StructuredContent, map[string]any{"echoed": "hi"}) {
		t.Errorf("plain call: %s (%v)", body, err)
	}
}

// postWithHost is postRaw with a Host header of host.
func postWithHost(t *testing.T, ctx context.Context, url, key string, cs *mcp.ClientSession, body, host string) (int, string, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Mcp-Session-Id", cs.ID())
	req.Header.Set("Mcp-Protocol-Version", cs.InitializeResult().ProtocolVersion)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Content-Type"), b
}

// rawAnswer is an HTTP status and body.
type rawAnswer struct {
	status int
	body   []byte
}

// startBlockingCall posts a tools/call of up's blocking tool with JSON-RPC
// id on cs's session, waits until the tool runs, and returns where its
// answer will arrive.
func startBlockingCall(t *testing.T, ctx context.Context, up *directUpstream, gwURL, key string, cs *mcp.ClientSession, id string) <-chan rawAnswer {
	t.Helper()
	done := make(chan rawAnswer, 1)
	go func() {
		status, _, body := postRaw(t, ctx, gwURL, key, cs, `{"jsonrpc":"2.0","id":"`+id+`","method":"tools/call","params":{"name":"block","arguments":{}}}`, nil)
		done <- rawAnswer{status, body}
	}()
	select {
	case <-up.started:
	case <-ctx.Done():
		t.Fatal("the blocking tool did not start")
	}
	return done
}

// notifications/cancelled for a directly served call cancels it, and so
// does the end of its session: the upstream tool's context ends and the
// call answers code cancelled.
func TestDirectCallCancelled(t *testing.T) {
	up := startDirectUpstream(t)
	gwURL, key, gw := startAllowAllGatewayWith(t, up.url, "")
	cs := relayClient(t, gwURL, key, nil)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if _, err := cs.ListTools(ctx, nil); err != nil {
		t.Fatal(err)
	}
	done := startBlockingCall(t, ctx, up, gwURL, key, cs, "c-1")
	if mcpgw.DirectCalls(gw) != 1 {
		t.Fatalf("%d direct calls, want 1", mcpgw.DirectCalls(gw))
	}
	// The requestId names the call's id written differently ("\u002d" is
	// "-"): ids match by value, as in the SDK.
	cancelBody := `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"c\u002d1","reason":"user"}}`
	// Another principal cannot cancel it (the session answers it like an
	// unknown session).
	status, _, body := postRaw(t, ctx, gwURL, otherKey, cs, cancelBody, nil)
	if status != http.StatusNotFound {
		t.Errorf("another principal's notifications/cancelled: %d %s, want 404", status, body)
	}
	if inFlight, cancelled := mcpgw.DirectCallCancelled(gw, cs.ID(), `"c-1"`); !inFlight || cancelled {
		t.Fatalf("after another principal's cancel: in flight %v, cancelled %v", inFlight, cancelled)
	}
	status, _, body = postRaw(t, ctx, gwURL, key, cs, cancelBody, nil)
	if status != http.StatusAccepted {
		t.Errorf("notifications/cancelled: %d %s, want 202", status, body)
	}
	wantCancelled(t, ctx, up, done, "notifications/cancelled")

	// Ending the session cancels its running direct calls, as the SDK
	// cancels its own requests.
	done = startBlockingCall(t, ctx, up, gwURL, key, cs, "d-1")
	if status := deleteSession(t, ctx, gwURL, key, cs); status != http.StatusNoContent {
		t.Fatalf("DELETE: %d", status)
	}
	wantCancelled(t, ctx, up, done, "DELETE of the session")
}

// wantCancelled waits until up's blocking tool was cancelled (by what) and
// checks that the call answered isError with code cancelled.
func wantCancelled(t *testing.T, ctx context.Context, up *directUpstream, done <-chan rawAnswer, what string) {
	t.Helper()
	select {
	case <-up.stopped:
	case <-ctx.Done():
		t.Fatalf("%s: the upstream tool was not cancelled", what)
	}
	a := <-done
	var resp struct {
		Result mcp.CallToolResult `json:"result"`
	}
	if err := json.Unmarshal(a.body, &resp); err != nil || a.status != http.StatusOK || !resp.Result.IsError ||
		!strings.Contains(string(a.body), `"code":"cancelled"`) {
		t.Errorf("%s: the call answered %d %s, want isError with code cancelled", what, a.status, a.body)
	}
}

// deleteSession ends cs's session at the gateway (DELETE /mcp) and returns
// the status.
func deleteSession(t *testing.T, ctx context.Context, gwURL, key string, cs *mcp.ClientSession) int {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodDelete, gwURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Mcp-Session-Id", cs.ID())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// Direct calls bypass the SDK's idle-session timer; the gateway keeps it
// running with a ping when the SDK has not seen the session for a quarter
// of mcp.session_timeout.
func TestDirectCallKeepsSessionAlive(t *testing.T) {
	up := startDirectUpstream(t)
	gwURL, key, gw := startAllowAllGatewayWith(t, up.url, "mcp: {session_timeout: 1h}\n")
	cs := relayClient(t, gwURL, key, nil)
	if _, err := cs.ListTools(t.Context(), nil); err != nil {
		t.Fatal(err)
	}
	if !direct(t, cs, gw, "echo") {
		t.Fatal("not served directly")
	}
	if n, _ := mcpgw.KeepAlives(gw); n != 0 {
		t.Fatalf("%d keep-alive pings for a fresh session", n)
	}
	if !mcpgw.AgeSession(gw, cs.ID(), 20*time.Minute) {
		t.Fatal("session not known")
	}
	if !direct(t, cs, gw, "echo") {
		t.Fatal("not served directly")
	}
	if n, status := mcpgw.KeepAlives(gw); n != 1 || status != http.StatusOK {
		t.Errorf("keep-alive pings %d (last status %d), want 1 answered 200", n, status)
	}
	direct(t, cs, gw, "echo")
	if n, _ := mcpgw.KeepAlives(gw); n != 1 {
		t.Errorf("keep-alive pings %d after a fresh one, want 1", n)
	}
}

// A client that declared sampling or elicitation, or asked for log
// messages, is served by the SDK: what an upstream sends during the call
// (a sampling or elicitation request, log messages) needs the call's
// response stream.
func TestDirectCallNeedsNoStream(t *testing.T) {
	up := startDirectUpstream(t)
	gwURL, key, gw := startAllowAllGatewayWith(t, up.url, "")
	for _, tc := range []struct {
		name  string
		opts  *mcp.ClientOptions
		setup func(*mcp.ClientSession) error
	}{
		{"sampling", &mcp.ClientOptions{CreateMessageHandler: func(context.Context, *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
			return nil, nil
		}}, nil},
		{"elicitation", &mcp.ClientOptions{ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			return nil, nil
		}}, nil},
		{"logging", nil, func(cs *mcp.ClientSession) error {
			return cs.SetLoggingLevel(t.Context(), &mcp.SetLoggingLevelParams{Level: "info"})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := relayClient(t, gwURL, key, tc.opts)
			if _, err := cs.ListTools(t.Context(), nil); err != nil {
				t.Fatal(err)
			}
			if tc.setup != nil {
				if err := tc.setup(cs); err != nil {
					t.Fatal(err)
				}
			}
			if direct(t, cs, gw, "echo") {
				t.Error("served directly")
			}
		})
	}
}

// Concurrent first calls of a new session all wait for its upstream
// session to connect (none answers upstream_unavailable), on both paths.
func TestConcurrentFirstCalls(t *testing.T) {
	up := startDirectUpstream(t)
	gwURL, key, _ := startAllowAllGatewayWith(t, up.url, "")
	for _, meta := range []mcp.Meta{nil, {"progressToken": "p"}} {
		cs := relayClient(t, gwURL, key, nil)
		if _, err := cs.ListTools(t.Context(), nil); err != nil {
			t.Fatal(err)
		}
		const n = 8
		start := make(chan struct{})
		errs := make(chan string, n)
		for range n {
			go func() {
				<-start
				res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "hi"}, Meta: meta})
				switch {
				case err != nil:
					errs <- err.Error()
				case res.IsError:
					b, _ := json.Marshal(res)
					errs <- string(b)
				default:
					errs <- ""
				}
			}()
		}
		close(start)
		for range n {
			if e := <-errs; e != "" {
				t.Errorf("meta %v: a concurrent first call failed: %s", meta, e)
			}
		}
	}
}

// A direct call that runs longer than mcp.session_timeout keeps its
// session alive (the SDK's idle timer, which it bypasses, would close it):
// the call completes and the session still serves requests.
func TestDirectLongCallKeepsSessionAlive(t *testing.T) {
	up := startDirectUpstream(t)
	gwURL, key, gw := startAllowAllGatewayWith(t, up.url, "mcp: {session_timeout: 2s}\n")
	cs := relayClient(t, gwURL, key, nil)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if _, err := cs.ListTools(ctx, nil); err != nil {
		t.Fatal(err)
	}
	done := startBlockingCall(t, ctx, up, gwURL, key, cs, "long")
	// Five keep-alive pings at 500 ms intervals: the call has outlived the
	// 2 s timeout.
	for n, _ := mcpgw.KeepAlives(gw); n < 5; n, _ = mcpgw.KeepAlives(gw) {
		select {
		case <-ctx.Done():
			t.Fatalf("%d keep-alive pings during the call", n)
		case <-time.After(50 * time.Millisecond):
		}
	}
	if _, status := mcpgw.KeepAlives(gw); status != http.StatusOK {
		t.Fatalf("keep-alive answered %d", status)
	}
	// End the call by cancelling it, then the session must still work.
	if status, _, body := postRaw(t, ctx, gwURL, key, cs, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"long"}}`, nil); status != http.StatusAccepted {
		t.Fatalf("cancel: %d %s", status, body)
	}
	<-up.stopped
	if a := <-done; a.status != http.StatusOK {
		t.Fatalf("the long call answered %d %s", a.status, a.body)
	}
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "still here"}}); err != nil {
		t.Errorf("the session did not survive the long call: %v", err)
	}
}

// A session the client terminated (DELETE) answers 404 on the direct path
// at once, as on the SDK path, even while its upstream sessions are still
// closing (here: an upstream whose DELETE is held until the end).
func TestDirectCallOnTerminatedSession(t *testing.T) {
	up := startDirectUpstream(t)
	release := make(chan struct{})
	target, _ := url.Parse(up.url)
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.FlushInterval = -1
	proxy.ErrorLog = log.New(io.Discard, "", 0)
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodDelete {
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(slow.Close)
	gwURL, key, gw := startAllowAllGatewayWith(t, slow.URL, "")
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	t.Cleanup(unblock) // before the gateway's own cleanup closes its sessions
	cs := relayClient(t, gwURL, key, nil)
	if _, err := cs.ListTools(t.Context(), nil); err != nil {
		t.Fatal(err)
	}
	if !direct(t, cs, gw, "echo") {
		t.Fatal("not served directly")
	}
	if status := deleteSession(t, t.Context(), gwURL, key, cs); status != http.StatusNoContent {
		t.Fatalf("DELETE: %d", status)
	}
	before := mcpgw.DirectCalls(gw)
	status, _, body := postRaw(t, t.Context(), gwURL, key, cs, `{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"echo","arguments":{"text":"x"}}}`, nil)
	if status != http.StatusNotFound {
		t.Fatalf("tools/call on a terminated session: %d %s, want 404", status, body)
	}
	if after := mcpgw.DirectCalls(gw); after != before {
		t.Fatalf("the direct path served a terminated session")
	}
	unblock()
}

// Requests the SDK does not count as activity (here a POST the gateway
// refuses as malformed) do not stand in for the keep-alive ping.
func TestKeepAliveIgnoresRefusedRequests(t *testing.T) {
	up := startDirectUpstream(t)
	gwURL, key, gw := startAllowAllGatewayWith(t, up.url, "mcp: {session_timeout: 1h}\n")
	cs := relayClient(t, gwURL, key, nil)
	if _, err := cs.ListTools(t.Context(), nil); err != nil {
		t.Fatal(err)
	}
	if !mcpgw.AgeSession(gw, cs.ID(), 20*time.Minute) {
		t.Fatal("session not known")
	}
	if status, _, body := postRaw(t, t.Context(), gwURL, key, cs, `{"jsonrpc":`, nil); status != http.StatusBadRequest {
		t.Fatalf("malformed POST: %d %s", status, body)
	}
	if !direct(t, cs, gw, "echo") {
		t.Fatal("not served directly")
	}
	if n, status := mcpgw.KeepAlives(gw); n != 1 || status != http.StatusOK {
		t.Errorf("keep-alive pings %d (last status %d), want 1: the refused POST is not activity", n, status)
	}
}

package mcpgw

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolgate/toolgate/audit"
)

// Issue 4, acceptance 1: end-to-end through the gateway, with real
// upstream servers (see e2e_helpers_test.go) and the Go SDK client as the
// agent.

// Two principals with different scopes see exactly the tools the policy
// could allow them, across stdio and Streamable HTTP upstreams.
func TestE2EToolsListPerPrincipal(t *testing.T) {
	t.Parallel()
	env, _ := newE2EEnv(t)
	e := startGateway(t, env.config())

	alice := toolNames(t, e.connect(t, keyAlice))
	want := []string{"everything__echo", "everything__get-sum", "everything__trigger-long-running-operation",
		"fs__read_text_file", "fs__write_file", "remote__fail", "remote__greet", "remote__secret"}
	if !slices.Equal(alice, want) {
		t.Errorf("alice (ops) tools/list = %q\nwant %q", alice, want)
	}
	bob := toolNames(t, e.connect(t, keyBob))
	if want := []string{"everything__echo", "remote__greet"}; !slices.Equal(bob, want) {
		t.Errorf("bob tools/list = %q\nwant %q", bob, want)
	}

	// Each tool is listed as its upstream declares it (schema included).
	ctx := t.Context()
	for tool, err := range e.connect(t, keyBob).Tools(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		if tool.Name == "everything__echo" {
			schema, _ := json.Marshal(tool.InputSchema)
			if !strings.Contains(string(schema), `"message"`) {
				t.Errorf("everything__echo inputSchema = %s, want server-everything's (with message)", schema)
			}
		}
	}
}

// A tool the principal may not see, called anyway, is refused exactly like
// a tool that does not exist (-32602 unknown tool), and no tools/call
// reaches the upstream.
func TestE2EUndisclosedToolNeverReachesUpstream(t *testing.T) {
	t.Parallel()
	env, rec := newE2EEnv(t)
	e := startGateway(t, env.config())
	bob := e.connect(t, keyBob)

	// What the Go SDK server itself answers for a tool it does not have.
	direct, err := mcp.NewClient(&mcp.Implementation{Name: "direct", Version: "1.0.0"}, nil).
		Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: rec.url}, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, refErr := tryCall(t, direct, "remote__nope", map[string]any{})
	direct.Close()
	var ref *jsonrpc.Error
	if !errors.As(refErr, &ref) {
		t.Fatalf("the Go SDK server's unknown-tool answer is not a JSON-RPC error: %v", refErr)
	}
	before := rec.total() // the direct call above

	for _, name := range []string{"remote__secret", "mcp:remote.secret", "remote.secret", "remote__nope"} {
		res, err := tryCall(t, bob, name, map[string]any{})
		var je *jsonrpc.Error
		if !errors.As(err, &je) {
			t.Fatalf("bob calls %s: want a JSON-RPC error, got result %+v, err %v", name, res, err)
		}
		wantMsg := strings.Replace(ref.Message, "remote__nope", name, 1)
		if je.Code != ref.Code || je.Code != jsonrpc.CodeInvalidParams || je.Message != wantMsg {
			t.Errorf("bob calls %s: error %d %q, want %d %q (as the upstream answers for a missing tool)",
				name, je.Code, je.Message, ref.Code, wantMsg)
		}
	}
	if n := rec.total() - before; n != 0 {
		t.Fatalf("the upstream received %d tools/call requests for undisclosed or missing tools, want 0 (%v)", n, rec.calls)
	}

	// Control: the same tool called by a principal who may see it does
	// reach the upstream.
	res := callTool(t, e.connect(t, keyAlice), "remote__secret", map[string]any{})
	mustOK(t, "remote__secret", res)
	if n := rec.count("secret"); n != 1 {
		t.Fatalf("secret was called upstream %d times, want 1 (alice's call)", n)
	}
}

// An argument rule denies write_file outside the allowed directory (the
// file is not written, though server-filesystem itself would allow it) and
// allows it inside.
func TestE2EArgumentRuleConfinesWrites(t *testing.T) {
	t.Parallel()
	env, _ := newE2EEnv(t)
	e := startGateway(t, env.config())
	alice := e.connect(t, keyAlice)

	inside := filepath.Join(env.allowed, "note.txt")
	res := callTool(t, alice, "fs__write_file", map[string]any{"path": inside, "content": "inside"})
	mustOK(t, "write_file inside", res)
	if b, err := os.ReadFile(inside); err != nil || string(b) != "inside" {
		t.Fatalf("after the allowed write: %q, %v", b, err)
	}
	if _, ret := e.callEvents(t, res); ret.Status != string(audit.StatusOK) {
		t.Errorf("allowed write: agent.toolReturned status %q, want ok", ret.Status)
	}

	outside := filepath.Join(env.fsRoot, "other", "note.txt")
	res = callTool(t, alice, "fs__write_file", map[string]any{"path": outside, "content": "outside"})
	mustRefused(t, "write_file outside", res, "forbidden")
	if !strings.Contains(resultText(res), "confined to the allowed directory") {
		t.Errorf("refusal text %q lacks the rule's reason", resultText(res))
	}
	if _, err := os.Stat(outside); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the denied write reached the filesystem server: stat %s: %v", outside, err)
	}
	types, ret := e.callEvents(t, res)
	if !slices.Equal(types, []string{audit.TypeToolCalled, audit.TypeToolReturned}) || ret.Status != string(audit.StatusForbidden) ||
		ret.Error == nil || ret.Error.Code != "forbidden" || ret.DurationMs != nil {
		t.Errorf("denied write: events %v, agent.toolReturned %+v; want status forbidden, error.code forbidden, no durationMs", types, ret)
	}

	// The file the allowed write created reads back through the gateway.
	res = callTool(t, alice, "fs__read_text_file", map[string]any{"path": inside})
	mustOK(t, "read_text_file", res)
	if got := resultText(res); got != "inside" {
		t.Errorf("read_text_file = %q, want %q", got, "inside")
	}
}

// The rate limit (burst 3 per principal and tool) refuses the 4th call
// without reaching the upstream; another principal has its own bucket.
func TestE2ERateLimitRefusesBurstPlusOne(t *testing.T) {
	t.Parallel()
	env, rec := newE2EEnv(t)
	e := startGateway(t, env.config())
	alice := e.connect(t, keyAlice)

	const burst = 3
	for i := range burst {
		res := callTool(t, alice, "remote__greet", map[string]any{"name": "ann"})
		mustOK(t, "remote__greet", res)
		if i == 0 && !strings.Contains(resultText(res), "hello, ann") {
			t.Errorf("greet = %q", resultText(res))
		}
	}
	res := callTool(t, alice, "remote__greet", map[string]any{"name": "ann"})
	mustRefused(t, "the burst+1-th call", res, "rate_limited")
	if n := rec.count("greet"); n != burst {
		t.Fatalf("the upstream received %d greet calls, want %d (the refused one must not reach it)", n, burst)
	}
	types, ret := e.callEvents(t, res)
	if !slices.Equal(types, []string{audit.TypeToolCalled, audit.TypeToolReturned}) || ret.Status != string(audit.StatusRateLimited) ||
		ret.Error == nil || ret.Error.Code != "rate_limited" || ret.DurationMs != nil {
		t.Errorf("rate-limited call: events %v, agent.toolReturned %+v", types, ret)
	}

	mustOK(t, "bob's first greet", callTool(t, e.connect(t, keyBob), "remote__greet", map[string]any{"name": "bob"}))
}

// An upstream tool's isError result reaches the agent as isError with the
// upstream's content, and the events record status error.
func TestE2EUpstreamToolError(t *testing.T) {
	t.Parallel()
	env, rec := newE2EEnv(t)
	e := startGateway(t, env.config())
	alice := e.connect(t, keyAlice)

	res := callTool(t, alice, "remote__fail", map[string]any{})
	if !res.IsError || resultText(res) != failText {
		raw, _ := json.Marshal(res)
		t.Fatalf("remote__fail: want the upstream's isError result (%q), got %s", failText, raw)
	}
	if rec.count("fail") != 1 {
		t.Errorf("fail was called upstream %d times, want 1", rec.count("fail"))
	}
	types, ret := e.callEvents(t, res)
	if !slices.Equal(types, []string{audit.TypeToolCalled, audit.TypeToolReturned}) {
		t.Errorf("events = %v, want agent.toolCalled then agent.toolReturned", types)
	}
	if ret.Status != string(audit.StatusError) || ret.Error == nil || ret.Error.Code != "tool_execution_failed" || ret.DurationMs == nil {
		t.Errorf("agent.toolReturned = %+v, want status error with error.code tool_execution_failed", ret)
	}
	if ret.ToolName != "mcp:remote.fail" {
		t.Errorf("agent.toolReturned toolName = %q, want the canonical toolId mcp:remote.fail", ret.ToolName)
	}

	// The same through a stdio server: server-filesystem reading a file
	// that does not exist.
	missing := filepath.Join(env.allowed, "missing.txt")
	res = callTool(t, alice, "fs__read_text_file", map[string]any{"path": missing})
	if !res.IsError || !strings.Contains(resultText(res), "missing.txt") {
		raw, _ := json.Marshal(res)
		t.Fatalf("fs__read_text_file of a missing file: want server-filesystem's isError result, got %s", raw)
	}
	if _, ret := e.callEvents(t, res); ret.Status != string(audit.StatusError) || ret.Error == nil || ret.Error.Code != "tool_execution_failed" {
		t.Errorf("agent.toolReturned = %+v, want status error with error.code tool_execution_failed", ret)
	}
}

// Killing the session's stdio server mid-call answers the in-flight call
// with upstream_crashed (with durationMs: it had received the request) and
// every call while it is down with upstream_unavailable; the gateway
// restarts it and the session recovers.
func TestE2EStdioCrashAndRecovery(t *testing.T) {
	t.Parallel()
	env, _ := newE2EEnv(t)
	e := startGateway(t, env.config())
	progressed := make(chan struct{})
	var progOnce sync.Once
	alice := e.connectWith(t, keyAlice, &mcp.ClientOptions{
		ProgressNotificationHandler: func(context.Context, *mcp.ProgressNotificationClientRequest) {
			progOnce.Do(func() { close(progressed) })
		},
	})
	echo := func(msg string) *mcp.CallToolResult {
		return callTool(t, alice, "everything__echo", map[string]any{"message": msg})
	}

	res := echo("before")
	mustOK(t, "echo before the crash", res)
	if got := resultText(res); got != "Echo: before" {
		t.Fatalf("echo = %q", got)
	}
	sid := alice.ID()
	pid, ok := e.gw.Process(sid, "everything")
	if !ok {
		t.Fatal("no stdio process for the session's everything upstream")
	}

	// Hold the restart of the killed process until the down state has been
	// observed (the hook acts on this process only: other sessions and
	// tests are unaffected).
	ended, release := make(chan struct{}), make(chan struct{})
	var endOnce, releaseOnce sync.Once
	releaseFn := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(releaseFn) // runs before the gateway closes
	hook := func(server string, p int) {
		if p != pid {
			return
		}
		endOnce.Do(func() { close(ended) })
		<-release
	}
	testHookSessionEnded.Store(&hook)
	t.Cleanup(func() { testHookSessionEnded.CompareAndSwap(&hook, nil) })

	// A long call is in flight (its first progress notification, relayed
	// by the gateway, has arrived) when the server is killed.
	type outcome struct {
		res *mcp.CallToolResult
		err error
	}
	inflight := make(chan outcome, 1)
	go func() {
		ctx, cancel := context.WithTimeout(t.Context(), e2eWait)
		defer cancel()
		r, err := alice.CallTool(ctx, &mcp.CallToolParams{Name: "everything__trigger-long-running-operation",
			Arguments: map[string]any{"duration": 60, "steps": 600}, Meta: mcp.Meta{"progressToken": "crash"}})
		inflight <- outcome{r, err}
	}()
	select {
	case <-progressed:
	case o := <-inflight:
		t.Fatalf("the long call ended before any progress: %+v, %v", o.res, o.err)
	case <-t.Context().Done():
		t.Fatal("no progress notification from the long call")
	}
	proc, err := os.FindProcess(pid)
	if err == nil {
		err = proc.Kill() // SIGKILL
	}
	if err != nil {
		t.Fatalf("killing the stdio server %d: %v", pid, err)
	}
	o := <-inflight
	if o.err != nil {
		t.Fatalf("the in-flight call: %v", o.err)
	}
	// The request had reached the server: the tool may have run, so the
	// call is upstream_crashed with durationMs (issue 13 point 12).
	mustRefused(t, "the call in flight at the kill", o.res, "upstream_crashed")
	if _, ret := e.callEvents(t, o.res); ret.Status != string(audit.StatusError) || ret.Error == nil || ret.Error.Code != "upstream_crashed" || ret.DurationMs == nil {
		t.Errorf("the in-flight call: agent.toolReturned %+v; want status error, upstream_crashed, durationMs", ret)
	}

	select {
	case <-ended:
	case <-t.Context().Done():
		t.Fatal("the gateway did not notice the killed stdio server")
	}
	if _, ok := e.gw.Process(sid, "everything"); ok {
		t.Error("Process reports a process while the upstream is down")
	}
	res = echo("down")
	mustRefused(t, "echo while down", res, "upstream_unavailable")
	types, ret := e.callEvents(t, res)
	if ret.Status != string(audit.StatusError) || ret.Error == nil || ret.Error.Code != "upstream_unavailable" {
		t.Errorf("call while down: events %v, agent.toolReturned %+v; want status error, upstream_unavailable", types, ret)
	}

	releaseFn()
	ctx, cancel := context.WithTimeout(t.Context(), e2eWait)
	defer cancel()
	if err := e.gw.WaitUpstream(ctx, sid, "everything"); err != nil {
		t.Fatalf("the stdio server was not restarted: %v", err)
	}
	res = echo("after")
	mustOK(t, "echo after the restart", res)
	if got := resultText(res); got != "Echo: after" {
		t.Fatalf("echo after the restart = %q", got)
	}
	if p, ok := e.gw.Process(sid, "everything"); !ok || p == pid {
		t.Errorf("after the restart: process %d, %v; want a new process (the killed one was %d)", p, ok, pid)
	}
}

// postMCP posts body to the gateway's endpoint with key (none if "") and
// extra headers; it returns the status, the headers and the body.
func postMCP(t *testing.T, e *e2eGateway, key, body string, hdr map[string]string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, e.url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, b
}

const initializeBody = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`

// A JSON-RPC batch is refused with HTTP 400 and error -32600, and nothing
// in it runs; without credentials it is refused 401 before its body is
// read (issue 12 point 2).
func TestE2EBatchRejected(t *testing.T) {
	t.Parallel()
	env, rec := newE2EEnv(t)
	e := startGateway(t, env.config())

	batch := `[` + initializeBody + `,{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"remote__greet","arguments":{"name":"x"}}}]`
	if status, _, body := postMCP(t, e, "", batch, nil); status != http.StatusUnauthorized {
		t.Errorf("batch without a key: %d %s, want 401", status, body)
	}
	for _, key := range []string{keyAlice} {
		status, _, body := postMCP(t, e, key, batch, nil)
		var msg struct {
			JSONRPC string `json:"jsonrpc"`
			Error   struct {
				Code int `json:"code"`
			} `json:"error"`
		}
		if err := json.Unmarshal(body, &msg); err != nil {
			t.Fatalf("batch (key %q): body %q: %v", key, body, err)
		}
		if status != http.StatusBadRequest || msg.JSONRPC != "2.0" || msg.Error.Code != -32600 {
			t.Errorf("batch (key %q): %d %s, want 400 with JSON-RPC error -32600", key, status, body)
		}
	}
	if n := rec.total(); n != 0 {
		t.Errorf("a batch's tools/call reached the upstream %d times", n)
	}

	// A body that is not JSON, or JSON but not a message object, gets a
	// JSON-RPC error too (-32700 / -32600), not the SDK's text/plain.
	for _, c := range []struct {
		body string
		code int
	}{{`{"jsonrpc":"2.0",`, -32700}, {`garbage`, -32700}, {``, -32700}, {`42`, -32600}, {`"x"`, -32600}, {`null`, -32600},
		{`{}`, -32600}, {`{"jsonrpc":"2.0"}`, -32600}, {`{"jsonrpc":"1.0","id":1,"method":"ping"}`, -32600}} {
		status, h, body := postMCP(t, e, keyAlice, c.body, nil)
		var msg struct {
			Error struct {
				Code int `json:"code"`
			} `json:"error"`
		}
		if status != http.StatusBadRequest || h.Get("Content-Type") != "application/json" || json.Unmarshal(body, &msg) != nil || msg.Error.Code != c.code {
			t.Errorf("body %q: %d %q %s, want 400 with JSON-RPC error %d", c.body, status, h.Get("Content-Type"), body, c.code)
		}
	}

	// A body over mcp.max_body_bytes (default 4 MiB) gets 413.
	big := `{"jsonrpc":"2.0","id":1,"method":"ping","params":{"pad":"` + strings.Repeat("x", 4<<20) + `"}}`
	if status, _, body := postMCP(t, e, keyAlice, big, nil); status != http.StatusRequestEntityTooLarge || !strings.Contains(string(body), "-32600") {
		t.Errorf("oversized body: %d %.200s, want 413 with JSON-RPC error -32600", status, body)
	}
}

// Without a valid key the endpoint answers 401. With API keys only (no
// auth.jwt) the challenge is not a Bearer one and names no
// resource_metadata, so OAuth-capable clients are not sent into an OAuth
// flow there is no authorization server for (issue 12 point 13).
func TestE2EUnauthenticated(t *testing.T) {
	t.Parallel()
	env, _ := newE2EEnv(t)
	e := startGateway(t, env.config())

	for _, key := range []string{"", "not-a-key"} {
		status, hdr, body := postMCP(t, e, key, initializeBody, nil)
		if status != http.StatusUnauthorized {
			t.Errorf("key %q: status %d (%s), want 401", key, status, body)
		}
		if ch := hdr.Get("WWW-Authenticate"); !strings.HasPrefix(ch, `ApiKey realm="toolgate"`) || strings.Contains(ch, "resource_metadata") {
			t.Errorf("key %q: WWW-Authenticate %q, want an ApiKey challenge without resource_metadata", key, ch)
		}
	}
	// The SDK client cannot connect either.
	c := mcp.NewClient(&mcp.Implementation{Name: "e2e-agent", Version: "1.0.0"}, nil)
	hc := &http.Client{Transport: bearerRT{base: e.srv.Client().Transport, key: "not-a-key"}}
	if cs, err := c.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: e.url, HTTPClient: hc}, nil); err == nil {
		cs.Close()
		t.Error("the Go SDK client connected with a wrong key")
	}
}

// A session is bound to the principal that opened it: another principal's
// request on it is answered exactly like one on an unknown session (issue
// 12 point 8: 404, same headers and body), so it does not learn the
// session exists.
func TestE2ESessionBoundToPrincipal(t *testing.T) {
	t.Parallel()
	env, _ := newE2EEnv(t)
	e := startGateway(t, env.config())
	alice := e.connect(t, keyAlice)

	hdr := map[string]string{"Mcp-Session-Id": alice.ID(), "Mcp-Protocol-Version": alice.InitializeResult().ProtocolVersion}
	unknown := map[string]string{"Mcp-Session-Id": "0000000000000000000000000A", "Mcp-Protocol-Version": alice.InitializeResult().ProtocolVersion}
	list := `{"jsonrpc":"2.0","id":7,"method":"tools/list"}`
	wstatus, whdr, wbody := postMCP(t, e, keyBob, list, unknown)
	if wstatus != http.StatusNotFound {
		t.Fatalf("bob on an unknown session: %d %s, want 404", wstatus, wbody)
	}
	same := func(what string, status int, h http.Header, body []byte) {
		t.Helper()
		if status != wstatus || string(body) != string(wbody) || h.Get("Content-Type") != whdr.Get("Content-Type") ||
			h.Get("X-Content-Type-Options") != whdr.Get("X-Content-Type-Options") || h.Get("Content-Length") != whdr.Get("Content-Length") {
			t.Errorf("%s: %d %v %q, want the unknown session's %d %v %q", what, status, h, body, wstatus, whdr, wbody)
		}
	}
	status, h, body := postMCP(t, e, keyBob, list, hdr)
	same("bob on alice's session", status, h, body)
	for _, m := range []string{http.MethodGet, http.MethodDelete} {
		req, _ := http.NewRequestWithContext(t.Context(), m, e.url, nil)
		req.Header.Set("Authorization", "Bearer "+keyBob)
		req.Header.Set("Accept", "text/event-stream")
		req.Header.Set("Mcp-Session-Id", alice.ID())
		resp, err := e.srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		same("bob's "+m+" on alice's session", resp.StatusCode, resp.Header, b)
	}
	if status, _, body := postMCP(t, e, keyAlice, list, hdr); status != http.StatusOK || !strings.Contains(string(body), "remote__secret") {
		t.Errorf("alice on her session: %d %s, want 200 with her tools", status, body)
	}
	// tools/call too, now that the session is established (the direct
	// path, direct.go, leaves another principal's request to the SDK).
	call := `{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"remote__secret","arguments":{}}}`
	status, h, body = postMCP(t, e, keyBob, call, hdr)
	same("bob calling on alice's session", status, h, body)
	// Alice's session is unharmed.
	if _, err := alice.ListTools(t.Context(), nil); err != nil {
		t.Errorf("alice's session after bob's attempts: %v", err)
	}
}

// Issue 13 points 3 and 4: an initialize is not refused for an
// Mcp-Protocol-Version header the gateway does not serve (the version is
// negotiated in its body), and a method the gateway does not serve answers
// JSON-RPC -32601 as JSON: with the request's id for a request, HTTP 400
// with a null id for a notification.
func TestE2EUnknownMethodAndInitializeHeader(t *testing.T) {
	t.Parallel()
	env, _ := newE2EEnv(t)
	e := startGateway(t, env.config())

	status, h, body := postMCP(t, e, keyAlice, initializeBody, map[string]string{"Mcp-Protocol-Version": "1999-01-01"})
	sid := h.Get("Mcp-Session-Id")
	if status != http.StatusOK || sid == "" || !strings.Contains(string(body), `"protocolVersion":"2025-06-18"`) {
		t.Fatalf("initialize with an unsupported Mcp-Protocol-Version header: %d %v %s, want 200, a session and the body's version", status, h, body)
	}
	hdr := map[string]string{"Mcp-Session-Id": sid, "Mcp-Protocol-Version": "2025-06-18"}
	if status, _, body := postMCP(t, e, keyAlice, `{"jsonrpc":"2.0","method":"notifications/initialized"}`, hdr); status != http.StatusAccepted {
		t.Fatalf("initialized: %d %s", status, body)
	}
	// A later request with an unsupported header is still refused (only
	// initialize negotiates).
	if status, _, body := postMCP(t, e, keyAlice, `{"jsonrpc":"2.0","id":3,"method":"ping"}`, map[string]string{"Mcp-Session-Id": sid, "Mcp-Protocol-Version": "1999-01-01"}); status != http.StatusBadRequest {
		t.Errorf("ping with an unsupported header: %d %s, want 400", status, body)
	}

	type rpcErr struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Error   struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	for _, c := range []struct {
		body, id string
		status   int
	}{
		{`{"jsonrpc":"2.0","id":9,"method":"no/such/method","params":{}}`, "9", http.StatusOK},
		{`{"jsonrpc":"2.0","id":"x-1","method":"tools/frobnicate"}`, `"x-1"`, http.StatusOK},
		{`{"jsonrpc":"2.0","method":"notifications/no-such"}`, "null", http.StatusBadRequest},
	} {
		status, h, body := postMCP(t, e, keyAlice, c.body, hdr)
		var m rpcErr
		if err := json.Unmarshal(body, &m); err != nil || status != c.status || h.Get("Content-Type") != "application/json" ||
			m.JSONRPC != "2.0" || string(m.ID) != c.id || m.Error.Code != -32601 || !strings.Contains(m.Error.Message, "method not found") {
			t.Errorf("%s: %d %q %s, want %d application/json with JSON-RPC error -32601 and id %s", c.body, status, h.Get("Content-Type"), body, c.status, c.id)
		}
	}
	// The session still works.
	if status, _, body := postMCP(t, e, keyAlice, `{"jsonrpc":"2.0","id":10,"method":"tools/list"}`, hdr); status != http.StatusOK || !strings.Contains(string(body), "remote__") {
		t.Errorf("tools/list after the refusals: %d %s", status, body)
	}
}

package mcpgw

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolgate/toolgate/internal/auth"
	"github.com/toolgate/toolgate/internal/metrics"
)

// Issue 12 §3-5: the life of upstream stdio processes (environment,
// process groups, caps and idle stops).

// lifecycleConfig is a configuration with alice (scope ops) and bob, a
// policy that lets everyone use every tool, and servers (YAML list items)
// and extra top-level YAML.
func lifecycleConfig(servers, extra string) string {
	return fmt.Sprintf(`auth:
  api_keys:
    - {id: alice, key_sha256: %q, tenant: %s, scopes: [ops]}
    - {id: bob, key_sha256: %q, tenant: %s}
servers:
%s
policy:
  default: deny
  rules:
    - {id: everyone, effect: allow, tools: ["*"]}
%s`, auth.HashKey(keyAlice), tenant, auth.HashKey(keyBob), tenant, servers, extra)
}

// A stdio server sees the minimal environment (PATH, HOME, ...), its own
// env: and what inherit_env names, never the rest of the gateway's
// environment, such as the variable behind another server's credential.
func TestStdioServerEnvironmentIsMinimal(t *testing.T) {
	npm := npmDeps(t)
	rec := startRecordingUpstream(t)
	t.Setenv("TOOLGATE_TEST_REMOTE_TOKEN", "remote-token-value")
	t.Setenv("TOOLGATE_TEST_UNRELATED", "unrelated-value")
	t.Setenv("TOOLGATE_TEST_INHERITED", "inherited-value")
	t.Setenv("LC_TIME", "C")
	e := startGateway(t, lifecycleConfig(fmt.Sprintf(`  - name: everything
    command: [%s, %s, stdio]
    env: {OWN_SETTING: own-value, TOOLGATE_TEST_INHERITED: overridden}
    inherit_env: [TOOLGATE_TEST_INHERITED]
  - name: remote
    url: %s
    headers: {Authorization: "Bearer {{credential:remote-token}}"}`, yamlQuote(npm.node), yamlQuote(npm.everything), yamlQuote(rec.url)),
		"credentials:\n  remote-token: {env: TOOLGATE_TEST_REMOTE_TOKEN}\n"))
	res := callTool(t, e.connect(t, keyAlice), "everything__get-env", map[string]any{})
	mustOK(t, "get-env", res)
	var env map[string]string
	if err := json.Unmarshal([]byte(resultText(res)), &env); err != nil {
		t.Fatalf("get-env answered %q: %v", resultText(res), err)
	}
	for k, want := range map[string]string{"OWN_SETTING": "own-value", "TOOLGATE_TEST_INHERITED": "overridden",
		"PATH": os.Getenv("PATH"), "HOME": os.Getenv("HOME"), "LC_TIME": "C"} {
		if env[k] != want {
			t.Errorf("the server's %s = %q, want %q", k, env[k], want)
		}
	}
	for _, k := range []string{"TOOLGATE_TEST_REMOTE_TOKEN", "TOOLGATE_TEST_UNRELATED"} {
		if v, ok := env[k]; ok {
			t.Errorf("the server sees the gateway's %s (%q)", k, v)
		}
	}
	if strings.Contains(resultText(res), "remote-token-value") {
		t.Error("the server's environment holds another server's credential value")
	}

	// Without an own value, an inherited variable comes from the gateway.
	e2 := startGateway(t, lifecycleConfig(fmt.Sprintf(`  - name: everything
    command: [%s, %s, stdio]
    inherit_env: [TOOLGATE_TEST_INHERITED, TOOLGATE_TEST_NOT_SET]`, yamlQuote(npm.node), yamlQuote(npm.everything)), ""))
	res = callTool(t, e2.connect(t, keyAlice), "get-env", map[string]any{})
	mustOK(t, "get-env", res)
	env = nil
	if err := json.Unmarshal([]byte(resultText(res)), &env); err != nil {
		t.Fatal(err)
	}
	if env["TOOLGATE_TEST_INHERITED"] != "inherited-value" {
		t.Errorf("inherited TOOLGATE_TEST_INHERITED = %q, want the gateway's", env["TOOLGATE_TEST_INHERITED"])
	}
	if _, ok := env["TOOLGATE_TEST_NOT_SET"]; ok {
		t.Error("an inherited variable the gateway does not have is set")
	}
}

// alive reports whether process pid exists and is not a zombie (an exited
// process its parent has not reaped yet).
func alive(pid int) bool {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	_, rest, ok := strings.Cut(string(b), ") ")
	return ok && !strings.HasPrefix(rest, "Z")
}

// waitDead waits until none of pids is alive, or fails the test.
func waitDead(t *testing.T, what string, pids ...int) {
	t.Helper()
	deadline := time.Now().Add(e2eWait)
	for {
		var live []int
		for _, p := range pids {
			if alive(p) {
				live = append(live, p)
			}
		}
		if len(live) == 0 {
			return
		}
		if time.Now().After(deadline) {
			for _, p := range live {
				syscall.Kill(p, syscall.SIGKILL) // leave nothing behind
			}
			t.Fatalf("%s: processes %v are still running", what, live)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// spawnedPIDs are the helper pids the wrapper wrote to file, in order.
func spawnedPIDs(t *testing.T, file string) []int {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []int
	for _, f := range strings.Fields(string(b)) {
		n, err := strconv.Atoi(f)
		if err != nil {
			t.Fatalf("pid file %s: %q", file, b)
		}
		out = append(out, n)
	}
	return out
}

// waitSpawned waits until file lists n helpers.
func waitSpawned(t *testing.T, file string, n int) []int {
	t.Helper()
	deadline := time.Now().Add(e2eWait)
	for {
		if p := spawnedPIDs(t, file); len(p) >= n {
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("the wrapper started %d helpers, want %d", len(spawnedPIDs(t, file)), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// helperWrapper is a stdio server command that starts a helper (sleep 1000,
// holding the server's stdout as helpers do) and then becomes
// server-everything; each helper's pid is appended to pidFile.
func helperWrapper(npm npmPaths, pidFile string) string {
	return fmt.Sprintf(`[/bin/sh, -c, 'sleep 1000 & echo $! >> "$1"; exec "$2" "$3" stdio', sh, %s, %s, %s]`,
		yamlQuote(pidFile), yamlQuote(npm.node), yamlQuote(npm.everything))
}

// A stdio server's helpers end with it: when its session closes, when it
// crashes and is restarted, and when the gateway shuts down (issue 12 §5).
func TestStdioServerHelpersDoNotSurvive(t *testing.T) {
	npm := npmDeps(t)
	pidFile := filepath.Join(t.TempDir(), "helpers")
	e := startGateway(t, lifecycleConfig(fmt.Sprintf("  - {name: everything, command: %s}", helperWrapper(npm, pidFile)), ""))
	shared := waitSpawned(t, pidFile, 1) // the shared session's server

	// Session close.
	alice := e.connect(t, keyAlice)
	mustOK(t, "echo", callTool(t, alice, "echo", map[string]any{"message": "hi"}))
	helpers := waitSpawned(t, pidFile, 2)
	server, ok := e.gw.Process(alice.ID(), "everything")
	if !ok {
		t.Fatal("no process for alice's session")
	}
	if err := alice.Close(); err != nil {
		t.Fatalf("closing alice's session: %v", err)
	}
	waitDead(t, "after the session closed", server, helpers[1])

	// Crash and restart.
	bob := e.connect(t, keyBob)
	mustOK(t, "echo", callTool(t, bob, "echo", map[string]any{"message": "hi"}))
	helpers = waitSpawned(t, pidFile, 3)
	server, ok = e.gw.Process(bob.ID(), "everything")
	if !ok {
		t.Fatal("no process for bob's session")
	}
	if err := syscall.Kill(server, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitDead(t, "after the server crashed", helpers[2])
	ctx, cancel := context.WithTimeout(t.Context(), e2eWait)
	defer cancel()
	deadline := time.Now().Add(e2eWait)
	for {
		if err := e.gw.WaitUpstream(ctx, bob.ID(), "everything"); err != nil {
			t.Fatalf("the server was not restarted: %v", err)
		}
		if p, ok := e.gw.Process(bob.ID(), "everything"); ok && p != server {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the server was not restarted")
		}
		time.Sleep(20 * time.Millisecond)
	}
	mustOK(t, "echo after the restart", callTool(t, bob, "echo", map[string]any{"message": "again"}))
	restarted, _ := e.gw.Process(bob.ID(), "everything")
	helpers = waitSpawned(t, pidFile, 4)

	// Shutdown: every server and helper still running ends.
	e.gw.Close()
	waitDead(t, "after the gateway closed", append([]int{restarted, shared[0]}, helpers...)...)
	if n := len(spawnedPIDs(t, pidFile)); n != 4 {
		t.Errorf("%d helpers were started, want 4 (shared, alice, bob, bob restarted)", n)
	}
}

// waitFor polls cond until it holds, or fails the test after e2eWait.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(e2eWait)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// metricsText is the gateway's /metrics part.
func metricsText(g *Gateway) string {
	s, err := metrics.Text(g.Collector())
	if err != nil {
		panic(err)
	}
	return s
}

// tooManySessions checks a refused initialize: HTTP status, JSON-RPC error
// CodeTooManySessions answering id 7, naming the limit.
func tooManySessions(t *testing.T, e *e2eGateway, key string, status int, limit string) {
	t.Helper()
	body := strings.Replace(initializeBody, `"id":1`, `"id":7`, 1)
	code, hdr, b := postMCP(t, e, key, body, nil)
	var resp struct {
		ID    int `json:"id"`
		Error struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
			Data    struct {
				Limit string `json:"limit"`
				Max   int    `json:"max"`
			} `json:"data"`
		} `json:"error"`
	}
	if err := json.Unmarshal(b, &resp); err != nil || code != status || hdr.Get("Mcp-Session-Id") != "" ||
		resp.ID != 7 || resp.Error.Code != CodeTooManySessions || resp.Error.Data.Limit != limit || !strings.Contains(resp.Error.Message, limit) {
		t.Fatalf("initialize beyond %s: HTTP %d, session %q, %s; want %d with JSON-RPC error %d", limit, code, hdr.Get("Mcp-Session-Id"), b, status, CodeTooManySessions)
	}
}

// mcp.max_sessions_per_principal and mcp.max_sessions refuse an initialize
// beyond them (429 and 503, JSON-RPC error -32001); an ended session and a
// failed initialize give their place back; sessions and upstream processes
// are counted in the readiness and metrics output.
func TestSessionCaps(t *testing.T) {
	npm := npmDeps(t)
	e := startGateway(t, lifecycleConfig(fmt.Sprintf("  - {name: everything, command: [%s, %s, stdio]}", yamlQuote(npm.node), yamlQuote(npm.everything)),
		"mcp: {max_sessions: 3, max_sessions_per_principal: 2}\n"))
	stats := func() Stats { return e.gw.Stats() }
	if st := stats(); st.Sessions != 0 || st.Processes["everything"] != 1 || st.MaxSessions != 3 || st.MaxSessionsPerPrincipal != 2 {
		t.Fatalf("at start: %+v; want no session and the shared session's process", st)
	}
	a1, a2 := e.connect(t, keyAlice), e.connect(t, keyAlice)
	for _, cs := range []*mcp.ClientSession{a1, a2} {
		mustOK(t, "echo", callTool(t, cs, "echo", map[string]any{"message": "hi"}))
	}
	if st := stats(); st.Sessions != 2 || st.Processes["everything"] != 3 {
		t.Fatalf("two sessions that used the server: %+v; want 2 sessions, 3 processes", st)
	}
	tooManySessions(t, e, keyAlice, http.StatusTooManyRequests, "mcp.max_sessions_per_principal")
	c := mcp.NewClient(&mcp.Implementation{Name: "third", Version: "1"}, nil)
	hc := &http.Client{Transport: bearerRT{base: e.srv.Client().Transport, key: keyAlice}}
	if cs, err := c.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: e.url, HTTPClient: hc}, nil); err == nil {
		cs.Close()
		t.Fatal("the Go SDK client opened a third session for alice")
	}

	// A failed initialize takes no place.
	code, _, b := postMCP(t, e, keyBob, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":"bad"}`, nil)
	if code == http.StatusOK && !strings.Contains(string(b), `"error"`) {
		t.Fatalf("a bad initialize succeeded: %d %s", code, b)
	}
	// (Its place is given back once its request has been served, which
	// may end just after the answer arrives.)
	waitUntil(t, "the failed initialize's place", func() bool { return stats().Sessions == 2 })
	bob := e.connect(t, keyBob)
	mustOK(t, "echo", callTool(t, bob, "echo", map[string]any{"message": "hi"}))
	tooManySessions(t, e, keyBob, http.StatusServiceUnavailable, "mcp.max_sessions")

	var ready strings.Builder
	e.gw.WriteReadiness(&ready)
	if got := ready.String(); got != "sessions 3/3\nupstream_processes 4\n" {
		t.Errorf("readiness counts = %q", got)
	}
	m := metricsText(e.gw)
	for _, want := range []string{"toolgate_mcp_sessions 3\n", "toolgate_mcp_sessions_max 3\n", `toolgate_upstream_processes{server="everything"} 4` + "\n",
		`toolgate_mcp_sessions_refused_total{limit="mcp.max_sessions"} 1` + "\n",
		`toolgate_mcp_sessions_refused_total{limit="mcp.max_sessions_per_principal"} 2` + "\n"} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %q:\n%s", want, m)
		}
	}

	// An ended session (DELETE) gives its place and its process back.
	if err := a1.Close(); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the closed session's place and process", func() bool {
		st := stats()
		return st.Sessions == 2 && st.Processes["everything"] == 3
	})
	a3 := e.connect(t, keyAlice)
	mustOK(t, "echo", callTool(t, a3, "echo", map[string]any{"message": "again"}))
}

// A per-client stdio server idle for servers[].idle_timeout is stopped
// (its process group ends) and started again, transparently, on the
// session's next call; a call running longer than the timeout is not cut.
func TestIdleUpstreamStopped(t *testing.T) {
	npm := npmDeps(t)
	pidFile := filepath.Join(t.TempDir(), "helpers")
	e := startGateway(t, lifecycleConfig(fmt.Sprintf("  - {name: everything, command: %s, idle_timeout: 1s}", helperWrapper(npm, pidFile)), ""))
	alice := e.connect(t, keyAlice)
	sid := alice.ID()
	mustOK(t, "echo", callTool(t, alice, "echo", map[string]any{"message": "one"}))
	first, ok := e.gw.Process(sid, "everything")
	if !ok {
		t.Fatal("no process for the session")
	}
	helper := waitSpawned(t, pidFile, 2)[1]
	waitDead(t, "the idle server", first, helper)
	waitUntil(t, "the idle stop to be counted", func() bool {
		st := e.gw.Stats()
		_, running := e.gw.Process(sid, "everything")
		return st.IdleStops == 1 && st.Processes["everything"] == 1 && !running
	})
	if m := metricsText(e.gw); !strings.Contains(m, "toolgate_upstream_idle_stops_total 1\n") {
		t.Errorf("metrics lack the idle stop:\n%s", m)
	}

	// The next calls (concurrent: each waits for the start) start it
	// again; a call longer than the idle timeout runs to its end.
	results := make(chan *mcp.CallToolResult, 3)
	for i := range 3 {
		go func() {
			res, err := tryCall(t, alice, "echo", map[string]any{"message": fmt.Sprint("two-", i)})
			if err != nil {
				res = &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: err.Error()}}}
			}
			results <- res
		}()
	}
	for range 3 {
		res := <-results
		mustOK(t, "echo after the idle stop", res)
		if got := resultText(res); !strings.HasPrefix(got, "Echo: two-") {
			t.Fatalf("echo = %q", got)
		}
	}
	second, ok := e.gw.Process(sid, "everything")
	if !ok || second == first {
		t.Fatalf("after the idle stop: process %d, %v; want a new one", second, ok)
	}
	// Stopping the server during the call would fail it.
	res := callTool(t, alice, "trigger-long-running-operation", map[string]any{"duration": 3, "steps": 3})
	mustOK(t, "a call longer than idle_timeout", res)
	if !strings.Contains(resultText(res), "completed") {
		t.Fatalf("long call = %q", resultText(res))
	}
}

// A per-client stdio server with a resource subscription is not idle (it
// owes its session updates): it outlives a later-used, unsubscribed one,
// and is stopped once unsubscribed.
func TestIdleUpstreamKeptWhileSubscribed(t *testing.T) {
	npm := npmDeps(t)
	e := startGateway(t, lifecycleConfig(fmt.Sprintf("  - {name: everything, command: [%s, %s, stdio], idle_timeout: 400ms}",
		yamlQuote(npm.node), yamlQuote(npm.everything)), ""))
	const uri = "demo://resource/dynamic/text/1"
	sub := e.connect(t, keyAlice)
	mustOK(t, "echo", callTool(t, sub, "echo", map[string]any{"message": "sub"}))
	if err := sub.Subscribe(t.Context(), &mcp.SubscribeParams{URI: uri}); err != nil {
		t.Fatalf("resources/subscribe: %v", err)
	}
	subPID, _ := e.gw.Process(sub.ID(), "everything")
	// Used after the subscription (its start-up alone outlasts a tick of
	// the idle check), so the subscribed one would be stopped first.
	other := e.connect(t, keyBob)
	mustOK(t, "echo", callTool(t, other, "echo", map[string]any{"message": "other"}))
	otherPID, _ := e.gw.Process(other.ID(), "everything")
	waitDead(t, "the unsubscribed idle server", otherPID)
	if _, ok := e.gw.Process(sub.ID(), "everything"); !ok || !alive(subPID) {
		t.Fatal("the subscribed server was stopped as idle")
	}
	if n := e.gw.Stats().IdleStops; n != 1 { // counted before the stop
		t.Errorf("%d idle stops, want 1", n)
	}
	if err := sub.Unsubscribe(t.Context(), &mcp.UnsubscribeParams{URI: uri}); err != nil {
		t.Fatalf("resources/unsubscribe: %v", err)
	}
	waitDead(t, "the server once unsubscribed", subPID)
}

package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// storeBytes is the content of the running server's database files (the
// database, -wal and -shm), for asserting what was written to disk.
func storeBytes(t *testing.T, s *server) []byte {
	t.Helper()
	var all []byte
	for _, suffix := range []string{"", "-wal", "-shm"} {
		b, err := os.ReadFile(s.db + suffix)
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		all = append(all, b...)
	}
	return all
}

// Issue 12 point 6 (a): a value the key-name rule redacted from the
// arguments (apiKey) that the upstream echoes in its isError text, and
// (audit.content: full) in its result, is scrubbed from error.message and
// from the recorded outcome, over MCP and over HTTP; it is nowhere in the
// store's files.
func TestRedactedArgumentNeverRecorded(t *testing.T) {
	const key = "k-live-7Hq2pLz9Wd" // not a secret shape: only the key-name rule knows it
	s := startServeWith(t, false, `policy:
  default: deny
  rules:
    - {id: login, effect: allow, tools: ["mcp:up.login"]}
audit: {content: full}
`)
	cs := s.mcpSession(t, "alice")
	defer cs.Close()
	ctx := context.Background()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "login", Arguments: map[string]any{"apiKey": key, "fail": true},
		Meta: mcp.Meta{"toolgate/runId": "login-mcp"}})
	if err != nil || !res.IsError {
		t.Fatalf("failing login over MCP: %v %+v", err, res)
	}
	raw, _ := json.Marshal(res)
	if strings.Contains(string(raw), key) || !strings.Contains(string(raw), "[REDACTED:argument]") {
		t.Errorf("the isError result carries the key: %s", raw)
	}
	if res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "login", Arguments: map[string]any{"apiKey": key},
		Meta: mcp.Meta{"toolgate/runId": "login-ok"}}); err != nil || res.IsError {
		t.Fatalf("login over MCP: %v %+v", err, res)
	}
	r := s.do(t, "alice", "POST", "/v1/calls", map[string]any{"toolId": "mcp:up.login", "runId": "login-http", "args": map[string]any{"apiKey": key, "fail": true}})
	if r.status != 200 || bytes.Contains(r.body, []byte(key)) || !bytes.Contains(r.body, []byte("[REDACTED:argument]")) {
		t.Errorf("failing login over HTTP: %d %s", r.status, r.body)
	}
	for _, run := range []string{"login-mcp", "login-http", "login-ok"} {
		evs := runEvents(t, s, "alice", run)
		if len(evs) != 2 {
			t.Fatalf("run %s: %d events", run, len(evs))
		}
		raw, _ := json.Marshal(evs)
		if strings.Contains(string(raw), key) {
			t.Errorf("run %s records the key: %s", run, raw)
		}
		ret := evs[1].Payload
		if run == "login-ok" {
			if out, _ := json.Marshal(ret["outcome"]); !strings.Contains(string(out), "logged in with [REDACTED:argument]") {
				t.Errorf("run %s: recorded outcome %s", run, out)
			}
		} else if e, _ := ret["error"].(map[string]any); e == nil || !strings.Contains(e["message"].(string), "key [REDACTED:argument] is not valid") {
			t.Errorf("run %s: recorded error %v", run, ret["error"])
		}
	}
	if bytes.Contains(storeBytes(t, s), []byte(key)) {
		t.Error("the store's files hold the redacted argument value")
	}
	// The caller's identifiers may repeat the value: they are recorded and
	// answered scrubbed of it, over HTTP and MCP.
	r = s.do(t, "alice", "POST", "/v1/calls", map[string]any{"toolId": "mcp:up.login", "args": map[string]any{"apiKey": key},
		"runId": "run-" + key, "agentId": "agent-" + key, "parentCallId": "parent-" + key})
	var ids struct {
		RunID string `json:"runId"`
	}
	r.json(t, &ids)
	// (The successful result goes back as the tool produced it: the caller
	// sent the key.)
	if r.status != 200 || ids.RunID != "run-[REDACTED:argument]" {
		t.Errorf("ids repeating the key over HTTP: %d %s", r.status, r.body)
	}
	if evs := runEvents(t, s, "alice", ids.RunID); len(evs) != 2 || evs[0].Payload["agentId"] != "agent-[REDACTED:argument]" ||
		evs[0].Payload["parentCallId"] != "parent-[REDACTED:argument]" {
		t.Errorf("recorded ids: %+v", evs)
	}
	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "login", Arguments: map[string]any{"apiKey": key},
		Meta: mcp.Meta{"toolgate/runId": "mcp-" + key, "toolgate/agentId": "agent-" + key}})
	if err != nil || res.Meta["toolgate/runId"] != "mcp-[REDACTED:argument]" {
		t.Errorf("ids repeating the key over MCP: %v %+v", err, res)
	}
	if bytes.Contains(storeBytes(t, s), []byte(key)) {
		t.Error("the store's files hold the redacted argument value (from the ids)")
	}
	// Another call's records are not affected: the value is call-scoped.
	if r := s.do(t, "alice", "POST", "/v1/calls", map[string]any{"toolId": "mcp:up.login", "runId": "plain", "args": map[string]any{"apiKey": "k-other-value-1", "fail": true}}); !bytes.Contains(r.body, []byte("[REDACTED:argument]")) {
		t.Errorf("the second call's key is not redacted: %s", r.body)
	}
}

// Issue 12 point 6 (b): runId, agentId and parentCallId a caller chose,
// over HTTP and MCP _meta, and an approver's deny reason are written
// scrubbed of a registered credential value (here a webhook secret); the
// answers carry the ids as recorded, and the value is nowhere in the
// store's files.
func TestCallerStringsRedacted(t *testing.T) {
	const secret = "whsec-h5-Zt81kQmP0v"
	t.Setenv("H5_HOOK_SECRET", secret)
	s := startServeWith(t, false, approvalsPolicy+`credentials:
  hook-secret: {env: H5_HOOK_SECRET}
hooks:
  - {name: siem, mode: observe, url: "http://127.0.0.1:9/hook", secret: "{{credential:hook-secret}}"}
`)
	const red = "[REDACTED:hook-secret]"
	r := s.do(t, "erin", "POST", "/v1/calls", map[string]any{"toolId": "mcp:up.echo", "args": map[string]string{"text": "hi"},
		"runId": "run-" + secret, "agentId": "agent-" + secret, "parentCallId": "parent-" + secret})
	var out struct {
		RunID string `json:"runId"`
	}
	r.json(t, &out)
	if r.status != 200 || out.RunID != "run-"+red || bytes.Contains(r.body, []byte(secret)) {
		t.Fatalf("call with secret ids: %d %s", r.status, r.body)
	}
	evs := runEvents(t, s, "erin", out.RunID)
	if len(evs) != 2 || evs[0].Payload["agentId"] != "agent-"+red || evs[0].Payload["parentCallId"] != "parent-"+red {
		t.Errorf("recorded ids: %+v", evs)
	}
	cs := s.mcpSession(t, "erin")
	defer cs.Close()
	ctx := context.Background()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "hi"},
		Meta: mcp.Meta{"toolgate/runId": "mcp-" + secret, "toolgate/agentId": "agent-" + secret}})
	if err != nil || res.IsError || res.Meta["toolgate/runId"] != "mcp-"+red {
		t.Fatalf("MCP call with secret ids: %v %+v", err, res)
	}
	if evs := runEvents(t, s, "erin", "mcp-"+red); len(evs) != 2 || evs[0].Payload["agentId"] != "agent-"+red {
		t.Errorf("recorded MCP ids: %+v", evs)
	}

	// A denial's reason: stored, shown to the caller and recorded scrubbed.
	done := make(chan *mcp.CallToolResult, 1)
	go func() {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "write", Arguments: map[string]any{"text": "a rather large write"}})
		if err != nil {
			t.Errorf("write: %v", err)
		}
		done <- res
	}()
	id := s.pendingApproval(t, map[string]bool{})
	if r := s.do(t, "dave", "POST", "/v1/approvals/"+id+"/deny", map[string]string{"reason": "do not paste " + secret}); r.status != 200 || bytes.Contains(r.body, []byte(secret)) {
		t.Fatalf("deny: %d %s", r.status, r.body)
	}
	e := toolError(t, <-done)
	if e == nil || e["code"] != "approval_denied" || !strings.Contains(e["message"].(string), "do not paste "+red) {
		t.Errorf("the denied call's error: %+v", e)
	}
	list := s.do(t, "dave", "GET", "/v1/approvals?status=all", nil)
	if bytes.Contains(list.body, []byte(secret)) || !bytes.Contains(list.body, []byte("do not paste "+red)) {
		t.Errorf("the stored reason: %s", list.body)
	}
	if bytes.Contains(storeBytes(t, s), []byte(secret)) {
		t.Error("the store's files hold the registered credential value")
	}
}

// A webhook with content: full is sent the call's arguments redacted the way
// the store records them: a value the key-name rule removed (password) is
// scrubbed where another argument repeats it too, in every phase.
func TestFullWebhookGetsCallScopedRedaction(t *testing.T) {
	const pw = "pw-Zq9nested77x" // not a secret shape: only the key-name rule knows it
	var mu sync.Mutex
	var bodies [][]byte
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies = append(bodies, b)
		mu.Unlock()
		io.WriteString(w, `{}`)
	}))
	defer hook.Close()
	t.Setenv("TG_FULL_HOOK_SECRET", "whsec-full-0123456789")
	s := startServeWith(t, false, `policy:
  default: deny
  rules:
    - {id: echo, effect: allow, tools: ["mcp:up.echo"]}
credentials:
  full-hook: {env: TG_FULL_HOOK_SECRET}
hooks:
  - {name: full, mode: enforce, url: "`+hook.URL+`", content: full, timeout: 5s, secret: "{{credential:full-hook}}"}
`)
	r := s.do(t, "alice", "POST", "/v1/calls", map[string]any{"toolId": "mcp:up.echo", "args": map[string]any{"text": "n1 " + pw, "password": pw}})
	if r.status != 200 {
		t.Fatalf("call: %d %s", r.status, r.body)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(bodies) == 0 {
		t.Fatal("the webhook was not called")
	}
	for _, b := range bodies {
		if bytes.Contains(b, []byte(pw)) || !bytes.Contains(b, []byte("n1 [REDACTED:argument]")) {
			t.Errorf("webhook body: %s", b)
		}
	}
}

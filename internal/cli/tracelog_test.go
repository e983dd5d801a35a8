package cli

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolgate/toolgate/internal/auth"
)

// With tracing on and log format json, the lines a traced call causes
// carry its trace_id and span_id (README): the WARN of an observe webhook
// answering 500 (sent by the hook's worker after the call) and the WARN of
// an enforce webhook answering 500 after the call, which withholds the
// result (that one was not logged at all before). Each span_id is a span
// the gateway exported in the call's trace.
func TestServeLogLinesCarryTraceIDs(t *testing.T) {
	rcv := &otlpReceiver{}
	otlp := httptest.NewServer(rcv)
	t.Cleanup(otlp.Close)
	up := mcp.NewServer(&mcp.Implementation{Name: "up", Version: "1"}, nil)
	mcp.AddTool(up, &mcp.Tool{Name: "lookup", Description: "looks up"}, func(ctx context.Context, req *mcp.CallToolRequest, in struct {
		Q string `json:"q"`
	}) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "found"}}}, nil, nil
	})
	upSrv := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return up }, nil))
	t.Cleanup(upSrv.Close)
	hookSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct{ Phase string }
		json.NewDecoder(r.Body).Decode(&body)
		if r.URL.Path == "/guard" && body.Phase == "before" {
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{}`)
			return
		}
		http.Error(w, "hook down", http.StatusInternalServerError) // the observer always; the guard after the call
	}))
	t.Cleanup(hookSrv.Close)

	t.Setenv("TG_TRACELOG_HOOK_SECRET", "hook-secret-for-tracelog-test")
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
	dir := t.TempDir()
	key, err := auth.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	cfg := writeFile(t, "tracelog.yaml", fmt.Sprintf(`listen: 127.0.0.1:0
log: {format: json, level: info}
store: {driver: sqlite, dsn: %s}
signing: {key_file: %s}
auth:
  api_keys:
    - {id: tester, key_sha256: "%s", tenant: t1}
credentials:
  hs: {env: TG_TRACELOG_HOOK_SECRET}
hooks:
  - {name: watcher, mode: observe, url: "%s/watch", secret: "{{credential:hs}}"}
  - {name: guard, mode: enforce, url: "%s/guard", secret: "{{credential:hs}}"}
servers:
  - {name: up, url: "%s", sessions: shared}
observability:
  tracing: {enabled: true, endpoint: "%s", protocol: http}
policy:
  rules:
    - {id: all, effect: allow, tools: ["mcp:up.*"]}
`, filepath.Join(dir, "toolgate.db"), filepath.Join(dir, "toolgate.key"), auth.HashKey(key), hookSrv.URL, hookSrv.URL, upSrv.URL, otlp.URL+"/v1/traces"))
	base, logs := startServeInProcess(t, cfg)
	base = strings.TrimSuffix(base, "/mcp")

	const traceID, parent = "7bf92f3577b34da6a3ce929d0e0e4736", "20f067aa0ba902b7"
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/calls", strings.NewReader(`{"toolId":"mcp:up.lookup","args":{"q":"x"}}`))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Traceparent", "00-"+traceID+"-"+parent+"-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	answer, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(answer), "result_withheld") {
		t.Fatalf("the guard's 500 after the call: %d %s", resp.StatusCode, answer)
	}

	// line returns the first JSON log line with message msg, or nil.
	line := func(msg string) map[string]any {
		for _, l := range strings.Split(logs(), "\n") {
			var m map[string]any
			if json.Unmarshal([]byte(l), &m) == nil && m["msg"] == msg {
				return m
			}
		}
		return nil
	}
	// The enforce line is written before the call answers; the observe
	// line by the hook's worker, and the spans by the batcher, after it:
	// both are waited for (up to 30 s on a loaded machine).
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(30 * time.Second)
	for _, msg := range []string{"enforce hook failed after the call; result withheld", "observe webhook failed"} {
		var m map[string]any
		for m = line(msg); m == nil; m = line(msg) {
			select {
			case <-tick.C:
			case <-deadline:
				t.Fatalf("no %q line; log:\n%s", msg, logs())
			}
		}
		if m["level"] != "WARN" || m["trace_id"] != traceID || m["hook"] == nil {
			t.Errorf("%q: %v, want level WARN, trace_id %s", msg, m, traceID)
		}
		spanID, _ := m["span_id"].(string)
		for !hasSpan(rcv, traceID, spanID) {
			select {
			case <-tick.C:
			case <-deadline:
				t.Fatalf("%q: span_id %q is no span of trace %s", msg, spanID, traceID)
			}
		}
		if strings.Contains(fmt.Sprint(m), "hook-secret-for-tracelog-test") {
			t.Errorf("%q carries the hook secret: %v", msg, m)
		}
	}
}

// hasSpan reports whether rcv holds span spanID (hex) of trace traceID.
func hasSpan(rcv *otlpReceiver, traceID, spanID string) bool {
	for _, s := range rcv.trace(traceID) {
		if hex.EncodeToString(s.SpanId) == spanID {
			return true
		}
	}
	return false
}

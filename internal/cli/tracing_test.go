package cli

import (
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/toolgate/toolgate/internal/auth"
)

// otlpReceiver is an in-process OTLP/HTTP receiver: it decodes each
// protobuf ExportTraceServiceRequest POSTed to /v1/traces and keeps the
// spans with their resource's service.name.
type otlpReceiver struct {
	mu       sync.Mutex
	spans    []*tracepb.Span
	services []string
	bad      int // requests that did not decode
}

func (o *otlpReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var req coltrace.ExportTraceServiceRequest
	o.mu.Lock()
	defer o.mu.Unlock()
	if r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" || proto.Unmarshal(body, &req) != nil {
		o.bad++
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	for _, rs := range req.ResourceSpans {
		for _, a := range rs.GetResource().GetAttributes() {
			if a.Key == "service.name" {
				o.services = append(o.services, a.Value.GetStringValue())
			}
		}
		for _, ss := range rs.ScopeSpans {
			o.spans = append(o.spans, ss.Spans...)
		}
	}
	w.Header().Set("Content-Type", "application/x-protobuf")
	out, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
	w.Write(out)
}

// trace returns the spans of trace id traceID (hex).
func (o *otlpReceiver) trace(traceID string) []*tracepb.Span {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []*tracepb.Span
	for _, s := range o.spans {
		if hex.EncodeToString(s.TraceId) == traceID {
			out = append(out, s)
		}
	}
	return out
}

func attrs(s *tracepb.Span) map[string]string {
	m := map[string]string{}
	for _, a := range s.Attributes {
		m[a.Key] = anyValue(a.Value)
	}
	return m
}

func anyValue(v *commonpb.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_BoolValue:
		return fmt.Sprint(x.BoolValue)
	case *commonpb.AnyValue_IntValue:
		return fmt.Sprint(x.IntValue)
	case *commonpb.AnyValue_DoubleValue:
		return fmt.Sprint(x.DoubleValue)
	}
	return v.String()
}

// headerLog records the traceparent header of each request a test server
// receives.
type headerLog struct {
	mu  sync.Mutex
	got []string
}

func (h *headerLog) add(r *http.Request) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if tp := r.Header.Get("Traceparent"); tp != "" {
		h.got = append(h.got, tp)
	}
}

func (h *headerLog) with(traceID string) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, tp := range h.got {
		if strings.Contains(tp, "-"+traceID+"-") {
			out = append(out, tp)
		}
	}
	return out
}

// Issue 16 acceptance 2: serve with observability.tracing on exports one
// execute_tool span per call to an OTLP/HTTP receiver, following the GenAI
// conventions, with decide, hook and invoke children; an incoming
// traceparent (POST /v1/calls header, MCP params._meta) is the call
// span's parent; the context reaches the Streamable HTTP upstream and the
// webhook as traceparent headers; no span attribute holds an argument
// value.
func TestServeTracesCalls(t *testing.T) {
	const argValue = "quarterly-Numbers-7f3a" // an argument value: must appear in no span
	const deniedValue = "deny-me-Value-91c2"  // the denied call's, likewise
	rcv := &otlpReceiver{}
	otlp := httptest.NewServer(rcv)
	t.Cleanup(otlp.Close)

	var upHeaders, hookHeaders headerLog
	up := mcp.NewServer(&mcp.Implementation{Name: "up", Version: "1"}, nil)
	mcp.AddTool(up, &mcp.Tool{Name: "lookup", Description: "looks up"}, func(ctx context.Context, req *mcp.CallToolRequest, in struct {
		Q string `json:"q"`
	}) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "found"}}}, nil, nil
	})
	sdk := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return up }, nil)
	upSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		upHeaders.add(r)
		sdk.ServeHTTP(w, r)
	}))
	t.Cleanup(upSrv.Close)
	hookSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hookHeaders.add(r)
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{}`)
	}))
	t.Cleanup(hookSrv.Close)

	t.Setenv("TG_TRACE_HOOK_SECRET", "hook-secret-for-tracing-test")
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "50") // export batches every 50 ms
	t.Setenv("OTEL_SERVICE_NAME", "toolgate-trace-test")
	dir := t.TempDir()
	key, err := auth.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	cfg := writeFile(t, "trace.yaml", fmt.Sprintf(`listen: 127.0.0.1:0
log: {format: json, level: info}
store: {driver: sqlite, dsn: %s}
signing: {key_file: %s}
auth:
  api_keys:
    - {id: tester, key_sha256: "%s", tenant: t1}
credentials:
  hs: {env: TG_TRACE_HOOK_SECRET}
hooks:
  - {name: guard, mode: enforce, url: "%s", secret: "{{credential:hs}}"}
servers:
  - {name: up, url: "%s", sessions: shared}
observability:
  tracing: {enabled: true, endpoint: "%s", protocol: http}
policy:
  default: deny
  rules:
    - {id: no-secret-q, effect: deny, tools: ["mcp:up.*"], when: 'has(args.q) && args.q == "deny-me-Value-91c2"'}
    - {id: all, effect: allow, tools: ["mcp:up.*"]}
`, filepath.Join(dir, "toolgate.db"), filepath.Join(dir, "toolgate.key"), auth.HashKey(key), hookSrv.URL, upSrv.URL, otlp.URL+"/v1/traces"))
	base, logs := startServeInProcess(t, cfg)
	base = strings.TrimSuffix(base, "/mcp")

	// 1. POST /v1/calls with a traceparent header.
	const httpTrace, httpParent = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	post := func(args, traceparent string) int {
		req, _ := http.NewRequest(http.MethodPost, base+"/v1/calls", strings.NewReader(`{"toolId":"mcp:up.lookup","args":`+args+`}`))
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Traceparent", traceparent)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := post(`{"q":"`+argValue+`"}`, "00-"+httpTrace+"-"+httpParent+"-01"); code != http.StatusOK {
		t.Fatalf("POST /v1/calls: %d; log:\n%s", code, logs())
	}
	// 2. A denied call, in its own trace.
	const deniedTrace = "5bf92f3577b34da6a3ce929d0e0e4736"
	if code := post(`{"q":"`+deniedValue+`"}`, "00-"+deniedTrace+"-"+httpParent+"-01"); code != http.StatusForbidden {
		t.Fatalf("denied POST /v1/calls: %d", code)
	}
	// 3. MCP tools/call with traceparent in params._meta.
	const mcpTrace, mcpParent = "6bf92f3577b34da6a3ce929d0e0e4736", "10f067aa0ba902b7"
	cl := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, nil)
	cs, err := cl.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: base + "/mcp",
		HTTPClient: &http.Client{Transport: bearerTransport{key: key}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "lookup", Arguments: map[string]any{"q": argValue},
		Meta: mcp.Meta{"traceparent": "00-" + mcpTrace + "-" + mcpParent + "-01"}})
	if err != nil || res.IsError {
		t.Fatalf("tools/call: %v %+v", err, res)
	}

	// The batcher exports within 50 ms; poll for each trace's call span
	// and its children (up to 30 s on a loaded machine).
	wait := func(traceID string, n int) []*tracepb.Span {
		deadline := time.Now().Add(30 * time.Second)
		for {
			spans := rcv.trace(traceID)
			if len(spans) >= n {
				return spans
			}
			if time.Now().After(deadline) {
				t.Fatalf("trace %s: %d spans within 30 s, want %d; log:\n%s", traceID, len(spans), n, logs())
			}
			time.Sleep(20 * time.Millisecond) // polling the receiver
		}
	}
	byName := func(spans []*tracepb.Span, name string) []*tracepb.Span {
		var out []*tracepb.Span
		for _, s := range spans {
			if s.Name == name {
				out = append(out, s)
			}
		}
		return out
	}
	// checkTree asserts the span tree of an allowed call: execute_tool
	// (parent: the caller's span) → decide, hook guard before and after,
	// invoke; and that the upstream and the webhook got its trace.
	checkTree := func(traceID, parent string) {
		t.Helper()
		spans := wait(traceID, 5)
		roots := byName(spans, "execute_tool mcp:up.lookup")
		if len(roots) != 1 {
			t.Fatalf("trace %s: %d execute_tool spans: %v", traceID, len(roots), names(spans))
		}
		root := roots[0]
		if got := hex.EncodeToString(root.ParentSpanId); got != parent {
			t.Errorf("execute_tool parent %s, want the incoming traceparent's %s", got, parent)
		}
		if root.Kind != tracepb.Span_SPAN_KIND_INTERNAL {
			t.Errorf("execute_tool kind %v, want internal", root.Kind)
		}
		a := attrs(root)
		for k, want := range map[string]string{
			"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "mcp:up.lookup", "toolgate.tool_id": "mcp:up.lookup",
			"toolgate.decision": "allow", "toolgate.rule_id": "all", "toolgate.status": "ok",
		} {
			if a[k] != want {
				t.Errorf("execute_tool %s = %q, want %q", k, a[k], want)
			}
		}
		if !strings.HasPrefix(a["gen_ai.tool.call.id"], "call_") || len(a["toolgate.args_hash"]) != 64 {
			t.Errorf("execute_tool call id %q, args hash %q", a["gen_ai.tool.call.id"], a["toolgate.args_hash"])
		}
		if _, ok := a["error.type"]; ok {
			t.Errorf("an ok call has error.type %q", a["error.type"])
		}
		rootID := hex.EncodeToString(root.SpanId)
		want := map[string]int{"toolgate.decide": 1, "toolgate.hook guard": 2, "toolgate.invoke": 1}
		for name, n := range want {
			got := byName(spans, name)
			if len(got) != n {
				t.Errorf("%d %q spans, want %d: %v", len(got), name, n, names(spans))
			}
			for _, s := range got {
				if hex.EncodeToString(s.ParentSpanId) != rootID {
					t.Errorf("%s is not a child of execute_tool", name)
				}
			}
		}
		var phases []string
		for _, s := range byName(spans, "toolgate.hook guard") {
			phases = append(phases, attrs(s)["toolgate.hook.phase"])
		}
		slices.Sort(phases)
		if !slices.Equal(phases, []string{"after", "before"}) {
			t.Errorf("hook phases %v", phases)
		}
		if inv := byName(spans, "toolgate.invoke"); len(inv) == 1 {
			if inv[0].Kind != tracepb.Span_SPAN_KIND_CLIENT || attrs(inv[0])["toolgate.server"] != "up" {
				t.Errorf("invoke span kind %v attrs %v", inv[0].Kind, attrs(inv[0]))
			}
			// The upstream got the invoke span as its parent.
			wantUp := "00-" + traceID + "-" + hex.EncodeToString(inv[0].SpanId) + "-01"
			if got := upHeaders.with(traceID); !slices.Contains(got, wantUp) {
				t.Errorf("upstream traceparents %v, want %s", got, wantUp)
			}
		}
		if len(hookHeaders.with(traceID)) != 2 {
			t.Errorf("webhook traceparents of trace %s: %v, want 2 (before, after)", traceID, hookHeaders.with(traceID))
		}
	}
	checkTree(httpTrace, httpParent)
	checkTree(mcpTrace, mcpParent)

	denied := byName(wait(deniedTrace, 2), "execute_tool mcp:up.lookup")
	if len(denied) != 1 {
		t.Fatalf("denied call: %d execute_tool spans", len(denied))
	}
	da := attrs(denied[0])
	if da["toolgate.decision"] != "deny" || da["toolgate.rule_id"] != "no-secret-q" || da["toolgate.status"] != "forbidden" || da["error.type"] != "forbidden" ||
		denied[0].Status.GetCode() != tracepb.Status_STATUS_CODE_ERROR {
		t.Errorf("denied call span: %v status %v", da, denied[0].Status)
	}
	if n := len(byName(rcv.trace(deniedTrace), "toolgate.invoke")); n != 0 {
		t.Errorf("a denied call has %d invoke spans", n)
	}

	// No argument value in any span's name, attributes or events.
	rcv.mu.Lock()
	for _, s := range rcv.spans {
		if strings.Contains(s.String(), argValue) || strings.Contains(s.String(), deniedValue) {
			t.Errorf("span %s carries argument content: %v", s.Name, s)
		}
	}
	services, bad := slices.Clone(rcv.services), rcv.bad
	total := len(rcv.spans)
	rcv.mu.Unlock()
	if bad != 0 || len(services) == 0 || services[0] != "toolgate-trace-test" {
		t.Errorf("receiver: %d undecodable requests, service names %v (want OTEL_SERVICE_NAME's)", bad, services)
	}
	t.Logf("%d spans received", total)
}

func names(spans []*tracepb.Span) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name)
	}
	return out
}

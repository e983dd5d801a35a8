package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/catalog"
	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/internal/auth"
	"github.com/toolgate/toolgate/internal/config"
	"github.com/toolgate/toolgate/internal/pipeline"
	"github.com/toolgate/toolgate/internal/schematest"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/ratelimit"
	"github.com/toolgate/toolgate/store"
	"github.com/toolgate/toolgate/store/memstore"
)

// fixture is a handler over a memstore, a pipeline with two native tools
// and an API key "k-alice" (tenant a).
type fixture struct {
	h   *Handler
	srv *httptest.Server
}

func newFixture(t *testing.T, mutate func(*Options)) *fixture {
	t.Helper()
	st, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	pipe, err := pipeline.New(pipeline.Options{Limiter: ratelimit.NewMemory(ratelimit.MemoryOptions{}),
		Events: store.EventLog(st), Receipts: store.ReceiptLog(st)})
	if err != nil {
		t.Fatal(err)
	}
	tools := []catalog.Tool{
		{Descriptor: catalog.ToolDescriptor{ToolID: "native:echo", Source: catalog.SourceHostExtension, SafetyTier: catalog.TierPure},
			Transport: catalog.TransportNative, Name: "echo"},
		{Descriptor: catalog.ToolDescriptor{ToolID: "native:other", Source: catalog.SourceWorkflow, SafetyTier: catalog.TierRead},
			Transport: catalog.TransportNative, Name: "other"},
		{Descriptor: catalog.ToolDescriptor{ToolID: "native:dir/file.read", Source: catalog.SourceHostExtension, SafetyTier: catalog.TierRead},
			Transport: catalog.TransportNative, Name: "dir/file.read"},
	}
	snap, err := catalog.NewSnapshot(tools, catalog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	prg, err := policy.Load("p.yaml", []byte(`rules: [{id: all, effect: allow, tools: ["native:echo", "native:dir/file.read"]}]`), policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	echo := pipeline.InvokerFunc(func(_ context.Context, _ *catalog.Tool, args json.RawMessage) (json.RawMessage, error) {
		return args, nil
	})
	pipe.Swap(&pipeline.State{Catalog: snap, Policy: prg, Invokers: map[string]pipeline.Invoker{"native:echo": echo}})
	a, err := auth.New(context.Background(), config.Auth{APIKeys: []config.APIKey{{ID: "alice", Tenant: "a", KeySHA256: auth.HashKey("k-alice")}}}, auth.Options{})
	if err != nil {
		t.Fatal(err)
	}
	opts := Options{Pipeline: pipe, Auth: a, Events: st, Sessions: st, Receipts: store.ReceiptLog(st)}
	if mutate != nil {
		mutate(&opts)
	}
	h, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(func() { h.Close(); srv.Close() })
	return &fixture{h: h, srv: srv}
}

func (f *fixture) do(t *testing.T, key, method, path, body string) (*http.Response, []byte) {
	t.Helper()
	req, _ := http.NewRequest(method, f.srv.URL+path, strings.NewReader(body))
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp, raw
}

// TestWriteError pins the one error mapper: the status of each kind of
// error, the extra headers, and that every body is a valid flat envelope.
func TestWriteError(t *testing.T) {
	f := newFixture(t, nil)
	cases := []struct {
		name   string
		err    error
		status int
		code   string
		header map[string]string
	}{
		{"invalid argument", invalid("toolId", "toolId is required"), 400, "invalid_argument", nil},
		{"not found", notFoundTool("x"), 404, "not_found", nil},
		{"forbidden with details", errcode.New(errcode.Forbidden, "no").WithDetails(map[string]any{"scope": "tool", "toolName": "t", "requiredScopes": []string{"s"}}), 403, "forbidden", nil},
		{"rate limited", errcode.New(errcode.RateLimited, "slow down").WithDetails(map[string]any{"retryAfterSeconds": 7}), 429, "rate_limited", map[string]string{"Retry-After": "7"}},
		{"rate limited without details", errcode.New(errcode.RateLimited, "slow down"), 429, "rate_limited", map[string]string{"Retry-After": "1"}},
		{"oversize", f.h.tooLarge(), 413, "invalid_argument", nil},
		{"method", &statusError{status: 405, err: errcode.New(errcode.InvalidArgument, "no"), header: http.Header{"Allow": {"POST"}}}, 405, "invalid_argument", map[string]string{"Allow": "POST"}},
		{"approval required refusal", withStatus(403, errcode.New(errcode.ApprovalRequired, "needs approval")), 403, "approval_required", nil},
		{"2xx code without status", errcode.New(errcode.ToolExecutionFailed, "boom"), 500, "internal_error", nil},
		{"audit unavailable", errcode.New(errcode.AuditUnavailable, "disk"), 503, "audit_unavailable", nil},
		{"plain error", errors.New("secret internal detail"), 500, "internal_error", nil},
		{"unauthenticated", errcode.New(errcode.Unauthenticated, "no credentials"), 401, "unauthenticated", map[string]string{"WWW-Authenticate": `ApiKey realm="toolgate", header="Authorization: Bearer, X-API-Key"`}},
		{"empty message", errcode.New(errcode.Conflict, ""), 409, "conflict", nil},
		{"unmarshalable details", errcode.New(errcode.Conflict, "x").WithDetails(map[string]any{"f": func() {}}), 409, "conflict", nil},
	}
	for _, c := range cases {
		rec := httptest.NewRecorder()
		f.h.writeError(rec, httptest.NewRequest("GET", "/x", nil), c.err)
		if rec.Code != c.status {
			t.Errorf("%s: status %d, want %d", c.name, rec.Code, c.status)
		}
		if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
			t.Errorf("%s: Content-Type %q", c.name, ct)
		}
		for k, v := range c.header {
			if got := rec.Header().Get(k); got != v {
				t.Errorf("%s: %s = %q, want %q", c.name, k, got, v)
			}
		}
		body := rec.Body.Bytes()
		schematest.Validate(t, "error-envelope.schema.json", json.RawMessage(body))
		var env envelope
		json.Unmarshal(body, &env)
		if env.Error != c.code {
			t.Errorf("%s: error %q, want %q", c.name, env.Error, c.code)
		}
		if strings.Contains(string(body), "secret internal detail") {
			t.Errorf("%s: the body leaks an internal error: %s", c.name, body)
		}
	}
}

// TestRouting: unknown paths, wrong methods and disabled seams answer the
// envelope; a path to clean is redirected.
func TestRouting(t *testing.T) {
	f := newFixture(t, nil)
	for _, c := range []struct {
		method, path string
		status       int
	}{
		{"GET", "/nope", 404},
		{"GET", "/v1/nope", 404},
		{"DELETE", "/v1/tools", 405},
		{"POST", "/.well-known/openwop", 405},
		{"POST", "/v1/host/sample/toolhooks/invoke", 404},
		{"GET", "/v1/host/sample/test/runs/__probe__/events", 404},
		{"GET", "/v1/tools/", 404},
	} {
		resp, body := f.do(t, "k-alice", c.method, c.path, "")
		if resp.StatusCode != c.status {
			t.Errorf("%s %s: %d %s", c.method, c.path, resp.StatusCode, body)
			continue
		}
		schematest.Validate(t, "error-envelope.schema.json", json.RawMessage(body))
		if c.status == 405 && resp.Header.Get("Allow") == "" {
			t.Errorf("%s %s: 405 without Allow", c.method, c.path)
		}
	}
	// {toolId} is URL-decoded, and may hold ':' and '/' (encoded or not).
	for _, p := range []string{"/v1/tools/native:echo", "/v1/tools/native%3Aecho", "/v1/tools/native:dir%2Ffile.read", "/v1/tools/native:dir/file.read"} {
		resp, body := f.do(t, "k-alice", "GET", p, "")
		var d catalog.ToolDescriptor
		json.Unmarshal(body, &d)
		if resp.StatusCode != 200 || !strings.HasPrefix(d.ToolID, "native:") {
			t.Errorf("GET %s: %d %s", p, resp.StatusCode, body)
		}
		schematest.Validate(t, "tool-descriptor.schema.json", json.RawMessage(body))
	}
	if resp, body := f.do(t, "k-alice", "GET", "/v1/tools/native:other", ""); resp.StatusCode != 404 {
		t.Errorf("hidden tool: %d %s", resp.StatusCode, body)
	}
	req, _ := http.NewRequest("GET", f.srv.URL+"/v1//tools", nil)
	resp, err := (&http.Transport{}).RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode < 300 || resp.StatusCode > 308 || resp.Header.Get("Location") != "/v1/tools" {
		t.Errorf("unclean path: %d %v", resp.StatusCode, resp.Header)
	}
}

// TestDiscovery: the document validates against capabilities.schema.json
// with the families at the root and in the mirror, advertises the sources
// of the catalog, sessionLifecycle and mcp only when told, and is public
// and cacheable.
func TestDiscovery(t *testing.T) {
	for _, lifecycle := range []bool{false, true} {
		f := newFixture(t, func(o *Options) { o.SessionLifecycle, o.MCP, o.MaxBodyBytes = lifecycle, lifecycle, 1234 })
		resp, body := f.do(t, "", "GET", "/.well-known/openwop", "")
		if resp.StatusCode != 200 || resp.Header.Get("Cache-Control") != "public, max-age=300" {
			t.Fatalf("discovery: %d %v", resp.StatusCode, resp.Header)
		}
		if err := CheckCapabilities(body); err != nil {
			t.Fatalf("discovery document: %v\n%s", err, body)
		}
		var c Capabilities
		json.Unmarshal(body, &c)
		if c.ToolCatalog.SessionLifecycle != lifecycle || c.Mirror.ToolCatalog.SessionLifecycle != lifecycle ||
			(len(c.SupportedTransports) == 2) != lifecycle || c.Limits.MaxRequestBodyBytes != 1234 {
			t.Errorf("lifecycle %v: %s", lifecycle, body)
		}
		if strings.Join(c.ToolCatalog.Sources, ",") != "host-extension,workflow" || !c.Mirror.ToolHooks.PrePostEvents {
			t.Errorf("families: %s", body)
		}
	}
}

// TestDiscoveryContentFull: with audit content "full" the events carry the
// redacted inputs, so prePostEvents (which promises content-free events) is
// not advertised.
func TestDiscoveryContentFull(t *testing.T) {
	f := newFixture(t, func(o *Options) { o.AuditContent = "full" })
	c := f.h.Capabilities()
	if c.ToolHooks.PrePostEvents || c.Mirror.ToolHooks.PrePostEvents || !c.ToolHooks.Supported {
		t.Fatalf("content full: %+v", c.ToolHooks)
	}
}

// TestCheckCapabilities: the discovery validator (stubbing only the
// unvendored prompt schemas) still rejects what the vendored schema
// rejects.
func TestCheckCapabilities(t *testing.T) {
	f := newFixture(t, nil)
	good, _ := json.Marshal(f.h.Capabilities())
	if err := CheckCapabilities(good); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{
		`{}`,
		`{"protocolVersion":"1.0","supportedEnvelopes":[],"schemaVersions":{},"limits":{"clarificationRounds":0,"schemaRounds":0}}`,
		`{"protocolVersion":"1.0","supportedEnvelopes":[],"schemaVersions":{},"limits":{"clarificationRounds":0,"schemaRounds":0,"envelopesPerTurn":0},"toolHooks":{"supported":true,"extra":1}}`,
		`{"protocolVersion":"1.0","supportedEnvelopes":[],"schemaVersions":{},"limits":{"clarificationRounds":0,"schemaRounds":0,"envelopesPerTurn":0},"toolCatalog":{"supported":true,"sources":["smtp"]}}`,
		`{"protocolVersion":"1.0","supportedEnvelopes":[],"schemaVersions":{},"limits":{"clarificationRounds":0,"schemaRounds":0,"envelopesPerTurn":0},"toolCatalog":{"supported":true,"compactView":true}}`,
	} {
		if CheckCapabilities([]byte(bad)) == nil {
			t.Errorf("accepted %s", bad)
		}
	}
}

// TestNewOptions: the required options are checked.
func TestNewOptions(t *testing.T) {
	if _, err := New(Options{}); errcode.CodeOf(err) != errcode.InvalidConfig {
		t.Errorf("empty options: %v", err)
	}
	f := newFixture(t, nil)
	o := f.h.opts
	o.Receipts, o.TestSeams = nil, true
	if _, err := New(o); errcode.CodeOf(err) != errcode.InvalidConfig {
		t.Errorf("seams without receipts: %v", err)
	}
}

// TestSeamInvokeValidation: the invoke seam refuses bodies it cannot run,
// with the envelope, and answers 200 with the stored pair otherwise.
func TestSeamInvokeValidation(t *testing.T) {
	f := newFixture(t, func(o *Options) { o.TestSeams = true })
	for _, body := range []string{
		`{}`, `{"principal":"p"}`, `{"toolName":"t"}`, `{"principal":"p","toolName":"bad name!"}`,
		`{"principal":"p","toolName":"t","requiredScopes":["a","a"]}`, `{"principal":"p","toolName":"t","args":[1]}`,
		`{"principal":"p","toolName":"t","transport":"smtp"}`, `[]`,
	} {
		resp, raw := f.do(t, "k-alice", "POST", "/v1/host/sample/toolhooks/invoke", body)
		if resp.StatusCode != 400 {
			t.Errorf("%s: %d %s", body, resp.StatusCode, raw)
		}
		schematest.Validate(t, "error-envelope.schema.json", json.RawMessage(raw))
	}
	resp, raw := f.do(t, "k-alice", "POST", "/v1/host/sample/toolhooks/invoke", `{"principal":"p","toolName":"native:t","transport":"http","grantedScopes":[],"extra":true}`)
	var pair InvokeResponse
	json.Unmarshal(raw, &pair)
	if resp.StatusCode != 200 || !strings.Contains(string(pair.ToolCalled), `"transport":"http"`) || !strings.Contains(string(pair.ToolReturned), `"status":"ok"`) {
		t.Fatalf("invoke: %d %s", resp.StatusCode, raw)
	}
	schematest.Validate(t, "run-event-payloads.schema.json#/$defs/agentToolCalled", pair.ToolCalled)
	schematest.Validate(t, "run-event-payloads.schema.json#/$defs/agentToolReturned", pair.ToolReturned)
	// A session over a gate tool the caller may see, and one it may not.
	resp, raw = f.do(t, "k-alice", "POST", "/v1/host/sample/tools/session-run", `{"toolId":"native:echo","args":{"a":1}}`)
	if resp.StatusCode != 200 {
		t.Fatalf("session-run over native:echo: %d %s", resp.StatusCode, raw)
	}
	if resp, raw := f.do(t, "k-alice", "POST", "/v1/host/sample/tools/session-run", `{"toolId":"native:other"}`); resp.StatusCode != 404 {
		t.Errorf("session-run over a hidden tool: %d %s", resp.StatusCode, raw)
	}
	if resp, raw := f.do(t, "k-alice", "POST", "/v1/host/sample/tools/session-run", ``); resp.StatusCode != 200 {
		t.Errorf("session-run with an empty body: %d %s", resp.StatusCode, raw)
	}
}

package httpapi_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolgate/toolgate/internal/auth"
	"github.com/toolgate/toolgate/internal/cli"
	"github.com/toolgate/toolgate/internal/httpapi"
	"github.com/toolgate/toolgate/internal/schematest"
)

// The tests of this file's package run a real `toolgate serve` (cli.Main,
// as the binary does) with a configuration file, an SQLite store in a
// temporary directory and one upstream MCP server (go-sdk, Streamable HTTP
// on 127.0.0.1), and talk to it over HTTP on 127.0.0.1. Every answer they
// receive goes through a RoundTripper that validates it against the
// vendored OpenWOP schemas (see validatingTransport), so "every discovery
// document, descriptor, event and error body validates" holds for every
// request any test makes.

// principals of the test configuration: id → (tenant, scopes).
var principals = []struct {
	id, tenant string
	scopes     []string
}{
	{"alice", "a", []string{"notes:read"}},
	{"bob", "b", []string{"notes:read"}},
	{"carol", "a", nil},
	{"root", "a", []string{"toolgate:admin", "notes:read"}},
	{"erin", "a", []string{"notes:write", "notes:read"}},
	{"dave", "a", []string{"toolgate:approve"}},
	{"audra", "a", []string{"notes:read", "toolgate:audit"}}, // reads every principal's events of tenant a
}

// serveConfig is the configuration of the running server (%s: the
// upstream URL, the store and key paths, the test_seams flag, the API keys).
const serveConfig = `
openwop: {test_seams: %t}
store: {driver: sqlite, dsn: %q}
signing: {key_file: %q}
auth:
  api_keys:
%s
servers:
  - {name: up, url: %q}
tools:
  - {match: "mcp:up.*", safety_tier: read, replay_policy: idempotent, egress: none}
  - {match: "mcp:up.write", safety_tier: write, scopes: [notes:write], replay_policy: non-deterministic}
  - {match: "mcp:up.*_notes", scopes: [notes:read]}
%s`

// defaultPolicy is the policy of startServe.
const defaultPolicy = `policy:
  default: deny
  rules:
    - {id: shared, effect: allow, tools: ["mcp:up.echo", "mcp:up.fail", "mcp:up.write", "mcp:up.limited"], reason: "shared tools"}
    - {id: no-forbidden-text, effect: deny, tools: ["mcp:up.echo"], when: 'has(args.text) && args.text == "forbidden"', reason: "that text is not allowed"}
    - {id: tenant-a-notes, effect: allow, tools: ["mcp:up.a_notes"], when: 'principal.tenant == "a"'}
    - {id: tenant-b-notes, effect: allow, tools: ["mcp:up.b_notes"], when: 'principal.tenant == "b"'}
  ratelimits:
    - {tools: ["mcp:up.limited"], per: principal_tool, rate: 1/h, burst: 1}
`

// server is one running `toolgate serve`.
type server struct {
	t      *testing.T
	base   string            // http://127.0.0.1:port
	keys   map[string]string // principal id → API key
	dir    string
	db     string
	http   *http.Client // validates every answer (validatingTransport)
	cancel context.CancelFunc
	exited chan int
	stderr *syncBuffer
	once   sync.Once

	cfgFile, cfgHead string // the config file, and its text before the policy block
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// startServe starts the upstream MCP server and `toolgate serve --config`
// with test_seams set as given, and waits until /readyz answers 200 (the
// upstream's tools are listed). The server stops at the end of the test.
func startServe(t *testing.T, seams bool) *server {
	t.Helper()
	return startServeWith(t, seams, defaultPolicy)
}

// startServeWith is startServe with tail (the policy block and anything
// after it) instead of defaultPolicy.
func startServeWith(t *testing.T, seams bool, tail string) *server {
	t.Helper()
	up := startUpstream(t)
	dir := t.TempDir()
	s := &server{t: t, keys: map[string]string{}, dir: dir, db: filepath.Join(dir, "toolgate.db"), exited: make(chan int, 1), stderr: &syncBuffer{}}
	var keyLines strings.Builder
	for _, p := range principals {
		k, err := auth.NewKey()
		if err != nil {
			t.Fatal(err)
		}
		s.keys[p.id] = k
		sc, _ := json.Marshal(p.scopes)
		if p.scopes == nil {
			sc = []byte("[]")
		}
		fmt.Fprintf(&keyLines, "    - {id: %s, key_sha256: %q, tenant: %s, scopes: %s}\n", p.id, auth.HashKey(k), p.tenant, sc)
	}
	cfg := fmt.Sprintf(serveConfig, seams, s.db, filepath.Join(dir, "toolgate.key"), keyLines.String(), up+"/mcp", tail)
	s.cfgFile = filepath.Join(dir, "toolgate.yaml")
	s.cfgHead = strings.TrimSuffix(cfg, tail)
	file := filepath.Join(dir, "toolgate.yaml")
	if err := os.WriteFile(file, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	pr, pw := io.Pipe()
	go func() {
		code := cli.Main(ctx, []string{"serve", "--config", file, "--listen", "127.0.0.1:0"}, strings.NewReader(""), pw, s.stderr)
		pw.Close()
		s.exited <- code
	}()
	sc := bufio.NewScanner(pr)
	for sc.Scan() && s.base == "" {
		if rest, ok := strings.CutPrefix(sc.Text(), "toolgate: OpenWOP HTTP API at "); ok {
			s.base = strings.TrimSuffix(strings.Fields(rest)[0], "/v1")
		}
	}
	go io.Copy(io.Discard, pr)
	if s.base == "" {
		cancel()
		t.Fatalf("serve printed no OpenWOP URL; stderr:\n%s", s.stderr.String())
	}
	s.http = &http.Client{Transport: &validatingTransport{t: t}}
	t.Cleanup(s.stop)
	deadline := time.Now().Add(30 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		resp, err := http.Get(s.base + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve not ready after 30 s; stderr:\n%s", s.stderr.String())
		}
		<-tick.C
	}
	return s
}

// stop shuts the server down (as SIGTERM does) and waits for it; it fails
// the test unless serve exits 0. Idempotent.
func (s *server) stop() {
	s.once.Do(func() {
		s.cancel()
		select {
		case code := <-s.exited:
			if code != cli.ExitOK {
				s.t.Errorf("serve exited %d; stderr:\n%s", code, s.stderr.String())
			}
		case <-time.After(time.Minute):
			s.t.Errorf("serve did not shut down within a minute")
		}
	})
}

// response is one HTTP answer, body read.
type response struct {
	status int
	header http.Header
	body   []byte
}

// json decodes the body into v, failing the test on error.
func (r response) json(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("decoding %s: %v", r.body, err)
	}
}

// do sends method path with body (nil: none; []byte: as is; else JSON) as
// principal who ("" = no credentials) and returns the answer.
func (s *server) do(t *testing.T, who, method, path string, body any) response {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		rd = bytes.NewReader(b)
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, s.base+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if who != "" {
		req.Header.Set("Authorization", "Bearer "+s.keys[who])
	}
	resp, err := s.http.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: raw}
}

// mcpSession connects a go-sdk MCP client to /mcp as principal who.
func (s *server) mcpSession(t *testing.T, who string) *mcp.ClientSession {
	t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "httpapi-test", Version: "1"}, nil)
	cs, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: s.base + "/mcp",
		HTTPClient: &http.Client{Transport: bearer{key: s.keys[who]}}}, nil)
	if err != nil {
		t.Fatalf("MCP connect as %s: %v", who, err)
	}
	return cs
}

type bearer struct{ key string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.key)
	return http.DefaultTransport.RoundTrip(r)
}

// startUpstream serves an MCP server over Streamable HTTP on 127.0.0.1 with
// the tools the configuration classifies: echo, fail (an isError result),
// write, limited, a_notes, b_notes and login (echoes its apiKey argument,
// in an isError result when fail is set).
func startUpstream(t *testing.T) string {
	t.Helper()
	srv := mcp.NewServer(&mcp.Implementation{Name: "upstream", Version: "1"}, nil)
	type textIn struct {
		Text     string  `json:"text,omitempty"`
		N        float64 `json:"n,omitempty"`
		Password string  `json:"password,omitempty"` // a credential-named argument (key-name redaction)
	}
	type textOut struct {
		Text string `json:"text"`
	}
	echo := func(_ context.Context, _ *mcp.CallToolRequest, in textIn) (*mcp.CallToolResult, textOut, error) {
		return nil, textOut{Text: in.Text}, nil
	}
	for _, name := range []string{"echo", "write", "limited", "a_notes", "b_notes"} {
		mcp.AddTool(srv, &mcp.Tool{Name: name, Description: "returns its text"}, echo)
	}
	mcp.AddTool(srv, &mcp.Tool{Name: "fail", Description: "always fails"},
		func(context.Context, *mcp.CallToolRequest, textIn) (*mcp.CallToolResult, textOut, error) {
			return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "upstream tool failed on purpose"}}}, textOut{}, nil
		})
	type loginIn struct {
		APIKey string `json:"apiKey"`
		Fail   bool   `json:"fail,omitempty"`
	}
	mcp.AddTool(srv, &mcp.Tool{Name: "login", Description: "echoes its apiKey, in an error when fail is set"},
		func(_ context.Context, _ *mcp.CallToolRequest, in loginIn) (*mcp.CallToolResult, textOut, error) {
			if in.Fail {
				return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "login failed: key " + in.APIKey + " is not valid"}}}, textOut{}, nil
			}
			return nil, textOut{Text: "logged in with " + in.APIKey}, nil
		})
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
	hs := httptest.NewServer(h)
	t.Cleanup(hs.Close)
	return hs.URL
}

// validatingTransport checks every answer of the HTTP surface against the
// vendored OpenWOP schemas, failing the test on a mismatch:
//
//   - every answer with status ≥ 400: error-envelope.schema.json, and
//     Content-Type application/json;
//   - 200 GET /.well-known/openwop: capabilities.schema.json;
//   - 200 GET /v1/tools: every item, tool-descriptor.schema.json;
//   - 200 GET /v1/tools/{id}: tool-descriptor.schema.json;
//   - 200 event reads (/v1/runs/…/events, the event-log seam): every event,
//     run-event.schema.json and its payload's definition;
//   - 200 toolhooks/invoke: the two payloads, agentToolCalled and
//     agentToolReturned.
type validatingTransport struct{ t *testing.T }

func (v *validatingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(r)
	if err != nil || strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		return resp, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	where := r.Method + " " + r.URL.Path
	check := func(ref string, raw []byte) {
		if err := schematest.Check(ref, json.RawMessage(raw)); err != nil {
			v.t.Errorf("%s: answer %d does not validate against %s: %v\n%s", where, resp.StatusCode, ref, err, raw)
		}
	}
	path := r.URL.Path
	switch {
	case resp.StatusCode >= 400:
		if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
			v.t.Errorf("%s: error answer %d has Content-Type %q", where, resp.StatusCode, ct)
		}
		check("error-envelope.schema.json", body)
	case resp.StatusCode != 200:
	case path == "/.well-known/openwop":
		if err := httpapi.CheckCapabilities(body); err != nil {
			v.t.Errorf("%s: the discovery document does not validate against capabilities.schema.json: %v\n%s", where, err, body)
		}
	case path == "/v1/tools":
		var items []json.RawMessage
		if err := json.Unmarshal(body, &items); err != nil {
			v.t.Errorf("%s: not a bare array: %s", where, body)
		}
		for _, it := range items {
			check("tool-descriptor.schema.json", it)
		}
	case strings.HasPrefix(path, "/v1/tools/"):
		check("tool-descriptor.schema.json", body)
	case strings.HasSuffix(path, "/events"):
		var doc struct{ Events []json.RawMessage }
		if err := json.Unmarshal(body, &doc); err != nil {
			v.t.Errorf("%s: %v", where, err)
		}
		for _, ev := range doc.Events {
			checkEvent(v.t, where, ev)
		}
	case path == "/v1/host/sample/toolhooks/invoke":
		var pair struct{ ToolCalled, ToolReturned json.RawMessage }
		json.Unmarshal(body, &pair)
		check("run-event-payloads.schema.json#/$defs/agentToolCalled", pair.ToolCalled)
		check("run-event-payloads.schema.json#/$defs/agentToolReturned", pair.ToolReturned)
	}
	return resp, nil
}

// payloadDefs maps the event types toolgate emits to their payload
// definitions in run-event-payloads.schema.json.
var payloadDefs = map[string]string{
	"agent.toolCalled":    "agentToolCalled",
	"agent.toolReturned":  "agentToolReturned",
	"tool.session.opened": "toolSessionOpened",
	"tool.session.closed": "toolSessionClosed",
}

// checkEvent validates one event document and its payload.
func checkEvent(t *testing.T, where string, raw []byte) {
	if err := schematest.Check("run-event.schema.json", json.RawMessage(raw)); err != nil {
		t.Errorf("%s: event does not validate: %v\n%s", where, err, raw)
	}
	var ev struct {
		Type    string          `json:"type"`
		Payload json.RawMessage `json:"payload"`
	}
	json.Unmarshal(raw, &ev)
	def, ok := payloadDefs[ev.Type]
	if !ok && strings.HasPrefix(ev.Type, "toolgate.approval.") {
		return // toolgate's vendor events: no payload schema in OpenWOP
	}
	if !ok {
		t.Errorf("%s: unexpected event type %q", where, ev.Type)
		return
	}
	if err := schematest.Check("run-event-payloads.schema.json#/$defs/"+def, ev.Payload); err != nil {
		t.Errorf("%s: %s payload does not validate: %v\n%s", where, ev.Type, err, ev.Payload)
	}
}

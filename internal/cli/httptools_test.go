package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolgate/toolgate/internal/auth"
)

// testAPI is a small HTTP API on 127.0.0.1 behind the HTTP tools of the
// tests: it records what it receives.
type testAPI struct {
	mu    sync.Mutex
	paths []string          // escaped path + "?" + raw query of each request
	keys  []string          // the X-Api-Key of each request
	posts []json.RawMessage // POST bodies
}

func (a *testAPI) seen(prefix string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for _, p := range a.paths {
		if strings.HasPrefix(p, prefix) {
			n++
		}
	}
	return n
}

func (a *testAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	a.mu.Lock()
	a.paths = append(a.paths, r.URL.EscapedPath()+"?"+r.URL.RawQuery)
	a.keys = append(a.keys, r.Header.Get("X-Api-Key"))
	if r.Method == http.MethodPost {
		a.posts = append(a.posts, body)
	}
	a.mu.Unlock()
	key := r.Header.Get("X-Api-Key")
	js := func(code int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		json.NewEncoder(w).Encode(v)
	}
	switch p := r.URL.Path; {
	case strings.HasPrefix(p, "/v1/weather/"):
		// Echoes the key it was sent (an API that reflects credentials).
		js(200, map[string]any{"city": strings.TrimPrefix(p, "/v1/weather/"), "units": r.URL.Query().Get("units"), "tempC": 21.5, "yourKey": key})
	case p == "/items":
		js(200, []any{"a", "b", 3})
	case p == "/big":
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		io.WriteString(w, strings.Repeat("all work and no play ", 100)) // 2.1 KB
	case p == "/fail":
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(500)
		io.WriteString(w, "internal trouble for key "+key+"\n"+strings.Repeat("x", 4096))
	case p == "/slow":
		<-r.Context().Done() // answers only when the client gives up
	case p == "/api/pets" && r.Method == http.MethodGet:
		js(200, []any{map[string]any{"id": "1", "name": "Rex"}})
	case p == "/api/pets" && r.Method == http.MethodPost:
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(201)
		w.Write(body)
	case strings.HasPrefix(p, "/api/pets/"):
		js(200, map[string]any{"id": strings.TrimPrefix(r.URL.EscapedPath(), "/api/pets/"), "name": "Rex"})
	default:
		http.NotFound(w, r)
	}
}

// Issue 17 acceptance 1: a local HTTP API as declared http_tools and as an
// OpenAPI import, through the real gateway (serve with a config file):
// tools/list (go-sdk client) and GET /v1/tools show them; tools/call and
// POST /v1/calls run them; a policy rule with a CEL condition on the
// arguments denies a call (which never reaches the API); a non-2xx answer
// is isError with the status and a bounded, redacted excerpt; an oversized
// body is cut and flagged response_too_large; a slow API is a timeout; and
// the credential sent to the API is in no sink (results, events,
// receipts, store files, log, traces, explain).
func TestServeHTTPTools(t *testing.T) {
	const secret = "wx-Secret-9f2Kq7Lm" // not a secret shape: only the credential registration knows it
	t.Setenv("TG_HTTP_TOOL_KEY", secret)
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
	api := &testAPI{}
	apiSrv := httptest.NewServer(api)
	t.Cleanup(apiSrv.Close)
	rcv := &otlpReceiver{}
	otlp := httptest.NewServer(rcv)
	t.Cleanup(otlp.Close)
	pet, err := filepath.Abs("../httptool/testdata/petstore.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	key, err := auth.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(dir, "toolgate.db")
	cfg := writeFile(t, "http.yaml", fmt.Sprintf(`listen: 127.0.0.1:0
log: {format: json, level: debug}
store: {driver: sqlite, dsn: %[1]s}
signing: {key_file: %[2]s}
audit: {content: full}
auth:
  api_keys:
    - {id: tester, key_sha256: "%[3]s", tenant: t1, scopes: [toolgate:audit]}
credentials:
  wx-key: {env: TG_HTTP_TOOL_KEY}
observability:
  tracing: {enabled: true, endpoint: "%[4]s/v1/traces", protocol: http}
http_tools:
  - name: weather
    title: Weather
    description: Current weather for a city
    url: "%[5]s/v1/weather/{city}?key={{credential:wx-key}}"
    query: {units: "{{args.units}}"}
    headers: {X-Api-Key: "{{credential:wx-key}}"}
    egress: {allow_cidrs: [127.0.0.0/8]}
  - {name: items, url: "%[5]s/items", egress: {allow_cidrs: [127.0.0.0/8]}}
  - {name: big, url: "%[5]s/big", max_response_bytes: 512, egress: {allow_cidrs: [127.0.0.0/8]}}
  - {name: broken, url: "%[5]s/fail", headers: {X-Api-Key: "{{credential:wx-key}}"}, egress: {allow_cidrs: [127.0.0.0/8]}}
  - {name: slow, url: "%[5]s/slow", timeout: 300ms, egress: {allow_cidrs: [127.0.0.0/8]}}
openapi:
  - file: %[6]s
    server: "%[5]s/api"
    operations: ["*Pet*"]
    name_prefix: pets_
    headers: {X-Api-Key: "{{credential:wx-key}}"}
    egress: {allow_cidrs: [127.0.0.0/8]}
tools:
  - {match: "http:pets_deletePet", approval: always}
policy:
  default: deny
  rules:
    - {id: http, effect: allow, tools: ["http:*"]}
    - {id: no-paris, effect: deny, tools: ["http:weather"], when: 'has(args.city) && args.city == "Paris"', reason: "no weather for Paris"}
    - {id: no-godzilla, effect: deny, tools: ["http:pets_createPet"], when: 'has(args.body) && has(args.body.name) && args.body.name == "Godzilla"'}
`, db, filepath.Join(dir, "toolgate.key"), auth.HashKey(key), otlp.URL, apiSrv.URL, pet))
	base, logs := startServeInProcess(t, cfg)
	base = strings.TrimSuffix(base, "/mcp")

	cl := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, nil)
	cs, err := cl.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: base + "/mcp",
		HTTPClient: &http.Client{Transport: bearerTransport{key: key}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()

	// tools/list: the declared tools and the selected operations.
	listed := map[string]*mcp.Tool{}
	for tool, err := range cs.Tools(t.Context(), nil) {
		if err != nil {
			t.Fatal(err)
		}
		listed[tool.Name] = tool
	}
	var names []string
	for n := range listed {
		names = append(names, n)
	}
	slices.Sort(names)
	want := []string{"big", "broken", "items", "pets_createPet", "pets_deletePet", "pets_getPet", "pets_listPets", "slow", "weather"}
	if !slices.Equal(names, want) {
		t.Fatalf("tools/list: %v, want %v", names, want)
	}
	if a := listed["weather"].Annotations; a == nil || !a.ReadOnlyHint || listed["weather"].Description != "Current weather for a city" {
		t.Errorf("weather: %+v %+v", listed["weather"], a)
	}
	if a := listed["pets_createPet"].Annotations; a == nil || a.ReadOnlyHint || !strings.Contains(listed["pets_createPet"].Description, "Adds a pet") {
		t.Errorf("pets_createPet: %+v", listed["pets_createPet"])
	}
	schema, _ := json.Marshal(listed["pets_getPet"].InputSchema)
	if !strings.Contains(string(schema), `"required":["petId"]`) || !strings.Contains(string(schema), `"The pet's id"`) {
		t.Errorf("pets_getPet inputSchema: %s", schema)
	}
	schema, _ = json.Marshal(listed["pets_createPet"].InputSchema)
	if !strings.Contains(string(schema), `"body":{`) || !strings.Contains(string(schema), `"required":["body"]`) || !strings.Contains(string(schema), `"null"`) {
		t.Errorf("pets_createPet inputSchema: %s", schema)
	}

	call := func(name, run string, args map[string]any) *mcp.CallToolResult {
		t.Helper()
		res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: name, Arguments: args, Meta: mcp.Meta{"toolgate/runId": run}})
		if err != nil {
			t.Fatalf("tools/call %s: %v; log:\n%s", name, err, logs())
		}
		return res
	}
	errCode := func(res *mcp.CallToolResult) string {
		e, _ := res.Meta["toolgate/error"].(map[string]any)
		c, _ := e["code"].(string)
		return c
	}
	asJSON := func(v any) string { b, _ := json.Marshal(v); return string(b) }

	// A call: path parameter escaped, query mapped, credential sent in the
	// header and the URL, echoed back by the API and scrubbed.
	res := call("weather", "run-weather", map[string]any{"city": "Zürich Nord", "units": "metric"})
	out := asJSON(res)
	if res.IsError || !strings.Contains(out, `"tempC":21.5`) || !strings.Contains(out, `"yourKey":"[REDACTED:wx-key]"`) || strings.Contains(out, secret) {
		t.Errorf("weather: %s", out)
	}
	if sc, _ := res.StructuredContent.(map[string]any); sc["units"] != "metric" {
		t.Errorf("weather structuredContent: %s", out)
	}
	if n := api.seen("/v1/weather/Z%C3%BCrich%20Nord?key=" + secret + "&units=metric"); n != 1 {
		t.Errorf("the API saw %v", api.paths)
	}
	if !slices.Contains(api.keys, secret) {
		t.Errorf("the credential was not sent: %v", api.keys)
	}
	// Deny by argument: refused, never sent.
	res = call("weather", "run-paris", map[string]any{"city": "Paris"})
	if !res.IsError || errCode(res) != "forbidden" || api.seen("/v1/weather/Paris") != 0 {
		t.Errorf("Paris: %s (API saw %v)", asJSON(res), api.paths)
	}
	// Arguments the inputSchema rejects (additionalProperties false).
	if res := call("weather", "run-bogus", map[string]any{"city": "Oslo", "bogus": 1}); !res.IsError || errCode(res) != "invalid_argument" || api.seen("/v1/weather/Oslo") != 0 {
		t.Errorf("bad arguments: %s", asJSON(res))
	}
	// A JSON array is wrapped.
	res = call("items", "run-items", nil)
	if sc := asJSON(res.StructuredContent); res.IsError || sc != `{"result":["a","b",3]}` {
		t.Errorf("items: %s", asJSON(res))
	}
	// Non-2xx: isError, status, a bounded redacted excerpt.
	res = call("broken", "run-broken", nil)
	out = asJSON(res)
	txt := res.Content[0].(*mcp.TextContent).Text
	if !res.IsError || errCode(res) != "tool_execution_failed" || !strings.HasPrefix(txt, "HTTP 500 Internal Server Error: internal trouble for key [REDACTED:wx-key]") ||
		len(txt) > 1100 || strings.Contains(out, secret) {
		t.Errorf("broken (%d bytes): %s", len(txt), out)
	}
	if e, _ := res.Meta["toolgate/error"].(map[string]any); asJSON(e["details"]) != `{"httpStatus":500}` {
		t.Errorf("broken details: %s", out)
	}
	// Oversized: cut and flagged.
	res = call("big", "run-big", nil)
	if !res.IsError || errCode(res) != "response_too_large" || len(res.Content) != 2 || len(res.Content[0].(*mcp.TextContent).Text) != 512 {
		t.Errorf("big: %s", asJSON(res))
	}
	// Timeout.
	start := time.Now()
	res = call("slow", "run-slow", nil)
	if !res.IsError || errCode(res) != "timeout" || time.Since(start) > 20*time.Second {
		t.Errorf("slow: %s", asJSON(res))
	}

	// OpenAPI operations: path escaping, query, body, deny by a body field.
	res = call("pets_getPet", "run-pet", map[string]any{"petId": "a/b"})
	if sc, _ := res.StructuredContent.(map[string]any); res.IsError || sc["id"] != "a%2Fb" {
		t.Errorf("getPet: %s", asJSON(res))
	}
	res = call("pets_listPets", "run-list", map[string]any{"limit": 2, "X-Request-Id": "r-1"})
	if res.IsError || api.seen("/api/pets?limit=2") != 1 {
		t.Errorf("listPets: %s, API saw %v", asJSON(res), api.paths)
	}
	res = call("pets_createPet", "run-create", map[string]any{"body": map[string]any{"name": "Tom", "tag": nil}})
	if sc, _ := res.StructuredContent.(map[string]any); res.IsError || sc["name"] != "Tom" {
		t.Errorf("createPet: %s", asJSON(res))
	}
	res = call("pets_createPet", "run-godzilla", map[string]any{"body": map[string]any{"name": "Godzilla"}})
	if !res.IsError || errCode(res) != "forbidden" {
		t.Errorf("Godzilla: %s", asJSON(res))
	}
	api.mu.Lock()
	if len(api.posts) != 1 || string(api.posts[0]) != `{"name":"Tom","tag":null}` {
		t.Errorf("POST bodies: %s", api.posts)
	}
	api.mu.Unlock()
	if res := call("pets_getPet", "run-nopet", map[string]any{}); !res.IsError || errCode(res) != "invalid_argument" || !strings.Contains(asJSON(res), "petId") {
		t.Errorf("getPet without petId: %s", asJSON(res))
	}

	// The HTTP door.
	do := func(method, path, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	code, body := do("POST", "/v1/calls", `{"toolId":"http:weather","runId":"run-http","args":{"city":"Oslo"}}`)
	if code != 200 || !strings.Contains(body, `"status":"ok"`) || !strings.Contains(body, `"structuredContent":{"city":"Oslo"`) || strings.Contains(body, secret) {
		t.Errorf("POST /v1/calls weather: %d %s", code, body)
	}
	code, body = do("POST", "/v1/calls", `{"toolId":"http:broken","runId":"run-http-broken","args":{}}`)
	if code != 200 || !strings.Contains(body, `"code":"tool_execution_failed"`) || !strings.Contains(body, `"httpStatus":500`) || strings.Contains(body, secret) {
		t.Errorf("POST /v1/calls broken: %d %s", code, body)
	}
	code, body = do("POST", "/v1/calls", `{"toolId":"http:weather","args":{"city":"Paris"}}`)
	if code != 403 {
		t.Errorf("POST /v1/calls Paris: %d %s", code, body)
	}
	code, body = do("GET", "/v1/tools", "")
	var descs []map[string]any
	json.Unmarshal([]byte(body), &descs)
	found, classified := false, false
	for _, d := range descs {
		if d["toolId"] == "http:weather" {
			found = d["source"] == "connector" && d["safetyTier"] == "read" && asJSON(d["auth"]) == `{"credentialRef":true}` && d["egress"] == "safe-fetch"
		}
		if d["toolId"] == "http:pets_deletePet" { // the tools: block applies to http:* ids
			classified = d["approval"] == "always" && d["safetyTier"] == "write"
		}
	}
	if code != 200 || !found || !classified {
		t.Errorf("GET /v1/tools: %d %s", code, body)
	}
	code, explain := do("POST", "/v1/policy/explain", `{"toolId":"http:weather","args":{"city":"Paris"}}`)
	if code != 200 || !strings.Contains(explain, "no-paris") {
		t.Errorf("explain: %d %s", code, explain)
	}

	// Every sink: events, receipts, the store's files, the log, traces.
	sinks := map[string]string{"explain": explain}
	for _, run := range []string{"run-weather", "run-broken", "run-big", "run-http", "run-http-broken", "run-paris"} {
		code, body := do("GET", "/v1/runs/"+run+"/events", "")
		if code != 200 || !strings.Contains(body, "agent.toolReturned") {
			t.Errorf("events of %s: %d %s", run, code, body)
		}
		sinks["events "+run] = body
	}
	code, body = do("GET", "/v1/receipts", "")
	if code != 200 || !strings.Contains(body, "http:weather") {
		t.Errorf("receipts: %d %s", code, body)
	}
	sinks["receipts"] = body
	if !strings.Contains(sinks["events run-weather"], "[REDACTED:wx-key]") {
		t.Errorf("the recorded outcome (audit content full) lacks the scrubbed echo: %s", sinks["events run-weather"])
	}
	waitUntil(t, 30*time.Second, "spans of the calls", func() bool {
		rcv.mu.Lock()
		defer rcv.mu.Unlock()
		return len(rcv.spans) >= 10
	})
	rcv.mu.Lock()
	var spans strings.Builder
	for _, s := range rcv.spans {
		spans.WriteString(s.String())
	}
	rcv.mu.Unlock()
	sinks["traces"] = spans.String()
	if !strings.Contains(sinks["traces"], "http:weather") {
		t.Errorf("no span names the tool: %.2000s", sinks["traces"])
	}
	sinks["log"] = logs()
	var files []byte
	for _, suffix := range []string{"", "-wal", "-shm"} {
		b, err := os.ReadFile(db + suffix)
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		files = append(files, b...)
	}
	if len(files) == 0 {
		t.Fatal("no store files")
	}
	sinks["store files"] = string(files)
	for name, s := range sinks {
		if strings.Contains(s, secret) {
			i := strings.Index(s, secret)
			t.Errorf("%s holds the credential: …%s…", name, s[max(0, i-200):min(len(s), i+100)])
		}
	}
}

// A broken OpenAPI document is a configuration error naming the file, for
// serve (which does not start) and validate.
func TestServeOpenAPIBadDocument(t *testing.T) {
	dir := t.TempDir()
	doc := filepath.Join(dir, "broken-api.yaml")
	os.WriteFile(doc, []byte("openapi: 3.0.3\ninfo: {title: x}\npaths:\n  /a:\n    get:\n      responses: {}\n"), 0o600)
	cfg := writeFile(t, "bad.yaml", fmt.Sprintf(`listen: 127.0.0.1:0
store: {driver: sqlite, dsn: %s}
signing: {key_file: %s}
openapi:
  - {file: %s, server: "http://127.0.0.1:1"}
`, filepath.Join(dir, "toolgate.db"), filepath.Join(dir, "toolgate.key"), doc))
	for _, args := range [][]string{{"validate", "--config", cfg, "--offline"}, {"serve", "--config", cfg}} {
		var stdout, stderr strings.Builder
		code := Main(t.Context(), args, strings.NewReader(""), &stdout, &stderr)
		if code == ExitOK || !strings.Contains(stderr.String(), "bad.yaml:5:") || !strings.Contains(stderr.String(), "OpenAPI document "+doc+" is not valid") {
			t.Errorf("%s: exit %d, stderr:\n%s", args[0], code, stderr.String())
		}
	}
	// A missing file, likewise.
	os.Remove(doc)
	var stderr strings.Builder
	if code := Main(t.Context(), []string{"validate", "--config", cfg, "--offline"}, strings.NewReader(""), io.Discard, &stderr); code == ExitOK || !strings.Contains(stderr.String(), doc) {
		t.Errorf("missing document: exit %d, stderr:\n%s", code, stderr.String())
	}
}

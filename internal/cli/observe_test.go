package cli

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/toolgate/toolgate/internal/auth"
	"github.com/toolgate/toolgate/internal/httpapi"
	"github.com/toolgate/toolgate/receipt"
)

// observeServe is a real `toolgate serve` (in this process) with an
// upstream of tools ok, fail (an isError result), lim (rate limited to one
// call) and file (denied for a path under /etc), /metrics on a listener of
// its own, and three API keys: an auditor and a plain caller of tenant t1,
// an auditor of tenant t2.
type observeServe struct {
	base    string            // http://host:port of the main listener
	metrics string            // the /metrics URL on the metrics listener
	keys    map[string]string // by key id
	keyFile string
	dir     string
}

func startObserveServe(t *testing.T) *observeServe {
	t.Helper()
	s := mcp.NewServer(&mcp.Implementation{Name: "obs", Version: "1"}, nil)
	for _, name := range []string{"ok", "lim", "file", "apr"} {
		mcp.AddTool(s, &mcp.Tool{Name: name}, func(context.Context, *mcp.CallToolRequest, map[string]any) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "done"}}}, nil, nil
		})
	}
	mcp.AddTool(s, &mcp.Tool{Name: "fail"}, func(context.Context, *mcp.CallToolRequest, map[string]any) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "upstream failed"}}}, nil, nil
	})
	up := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil))
	t.Cleanup(up.Close)

	dir := t.TempDir()
	o := &observeServe{keys: map[string]string{}, keyFile: filepath.Join(dir, "toolgate.key"), dir: dir}
	var keys strings.Builder
	for _, k := range []struct{ id, tenant, scopes string }{
		{"auditor-one", "t1", "[toolgate:audit]"}, {"caller-one", "t1", "[]"}, {"auditor-two", "t2", "[toolgate:audit]"},
		{"approver-one", "t1", "[toolgate:approve]"}} {
		key, err := auth.NewKey()
		if err != nil {
			t.Fatal(err)
		}
		o.keys[k.id] = key
		fmt.Fprintf(&keys, "    - {id: %s, key_sha256: \"%s\", tenant: %s, scopes: %s}\n", k.id, auth.HashKey(key), k.tenant, k.scopes)
	}
	cfg := fmt.Sprintf(`listen: 127.0.0.1:0
observability: {metrics_listen: "127.0.0.1:0"}
store: {driver: sqlite, dsn: %s}
signing: {key_file: %s}
auth:
  api_keys:
%sservers:
  - {name: up, url: "%s", sessions: shared}
policy:
  default: deny
  rules:
    - {id: no-etc, effect: deny, tools: ["mcp:up.file"], when: 'has(args.path) && args.path.startsWith("/etc")'}
    - {id: apr, effect: require_approval, tools: ["mcp:up.apr"]}
    - {id: all, effect: allow, tools: ["mcp:up.*"]}
  ratelimits:
    - {tools: ["mcp:up.lim"], per: principal_tool, rate: 1/h, burst: 1}
approvals: {ttl: 3s, wait: 60s}
`, filepath.Join(dir, "toolgate.db"), o.keyFile, keys.String(), up.URL)
	cfgFile := filepath.Join(dir, "toolgate.yaml")
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	errb := &lockedBuffer{}
	exited := make(chan int, 1)
	go func() {
		code := Main(ctx, []string{"serve", "--config", cfgFile}, strings.NewReader(""), pw, errb)
		pw.Close()
		exited <- code
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-exited:
		case <-time.After(60 * time.Second):
			t.Errorf("serve did not stop")
		}
	})
	sc := bufio.NewScanner(pr)
	for sc.Scan() {
		if u, ok := strings.CutPrefix(sc.Text(), "toolgate: metrics at "); ok {
			o.metrics = u
		}
		if u, ok := strings.CutPrefix(sc.Text(), "toolgate: MCP gateway at "); ok {
			o.base = strings.TrimSuffix(u, "/mcp")
			break
		}
	}
	go io.Copy(io.Discard, pr)
	if o.base == "" || o.metrics == "" {
		t.Fatalf("serve printed no URL (base %q, metrics %q); stderr: %s", o.base, o.metrics, errb.String())
	}
	waitUntil(t, 60*time.Second, "serve ready", func() bool { code, _ := readyz(o.base); return code == http.StatusOK })
	return o
}

// call makes one POST /v1/calls as key id and returns its HTTP status and
// decoded body.
func (o *observeServe) call(t *testing.T, keyID, tool, args string) (int, map[string]any) {
	t.Helper()
	code, body := o.get(t, keyID, http.MethodPost, "/v1/calls", fmt.Sprintf(`{"toolId":%q,"args":%s}`, tool, args))
	var m map[string]any
	if err := json.Unmarshal([]byte(body), &m); err != nil {
		t.Fatalf("POST /v1/calls %s: %d %s", tool, code, body)
	}
	return code, m
}

// get makes one request as key id ("" for none) and returns status and body.
func (o *observeServe) get(t *testing.T, keyID, method, path, body string) (int, string) {
	t.Helper()
	code, _, b := o.do(t, keyID, method, path, body)
	return code, b
}

func (o *observeServe) do(t *testing.T, keyID, method, path, body string) (int, http.Header, string) {
	t.Helper()
	req, _ := http.NewRequest(method, o.base+path, strings.NewReader(body))
	if keyID != "" {
		key, ok := o.keys[keyID]
		if !ok {
			key = keyID // a bad key as is
		}
		req.Header.Set("Authorization", "Bearer "+key)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

// TestServeMetricsAfterScriptedCalls is issue 16 acceptance 1: after calls
// that end ok, forbidden, rate limited and with an upstream error, the
// separate metrics listener's exposition parses with the Prometheus text
// parser and counts each, and names no principal and no argument.
func TestServeMetricsAfterScriptedCalls(t *testing.T) {
	o := startObserveServe(t)
	for _, c := range []struct {
		tool, args string
		code       int
		status     string
	}{
		{"mcp:up.ok", `{}`, 200, "ok"},
		{"mcp:up.ok", `{"q":"quarterly-numbers-XYZZY"}`, 200, "ok"},
		{"mcp:up.file", `{"path":"/etc/shadow-XYZZY"}`, 403, ""},
		{"mcp:up.lim", `{}`, 200, "ok"},
		{"mcp:up.lim", `{}`, 429, ""},
		{"mcp:up.fail", `{}`, 200, "error"},
	} {
		code, body := o.call(t, "caller-one", c.tool, c.args)
		if code != c.code || (c.status != "" && body["status"] != c.status) {
			t.Fatalf("%s %s: %d %v, want %d %s", c.tool, c.args, code, body, c.code, c.status)
		}
	}
	if code, _ := o.get(t, "not-a-key", http.MethodGet, "/v1/tools", ""); code != http.StatusUnauthorized {
		t.Fatalf("bad key: %d", code)
	}
	// /metrics is on its own listener only.
	if code, _ := o.get(t, "", http.MethodGet, "/metrics", ""); code != http.StatusNotFound {
		t.Errorf("/metrics on the main listener: %d, want 404", code)
	}
	resp, err := http.Get(o.metrics)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
		t.Fatalf("/metrics: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	text := string(raw)
	for _, leak := range []string{"caller-one", "XYZZY", "t1", o.keys["caller-one"]} {
		if strings.Contains(text, leak) {
			t.Errorf("/metrics contains %q", leak)
		}
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		t.Fatalf("the exposition does not parse: %v\n%s", err, text)
	}
	for _, w := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"toolgate_tool_calls_total", map[string]string{"tool_id": "mcp:up.ok", "transport": "http", "status": "ok"}, 2},
		{"toolgate_tool_calls_total", map[string]string{"tool_id": "mcp:up.file", "transport": "http", "status": "forbidden"}, 1},
		{"toolgate_tool_calls_total", map[string]string{"tool_id": "mcp:up.lim", "transport": "http", "status": "ok"}, 1},
		{"toolgate_tool_calls_total", map[string]string{"tool_id": "mcp:up.lim", "transport": "http", "status": "rate_limited"}, 1},
		{"toolgate_tool_calls_total", map[string]string{"tool_id": "mcp:up.fail", "transport": "http", "status": "error"}, 1},
		{"toolgate_tool_call_duration_seconds", map[string]string{"tool_id": "mcp:up.ok", "status": "ok"}, 2},
		{"toolgate_tool_call_duration_seconds", map[string]string{"tool_id": "mcp:up.file", "status": "forbidden"}, 1},
		{"toolgate_policy_decisions_total", map[string]string{"effect": "deny", "rule_id": "no-etc"}, 1},
		{"toolgate_policy_decisions_total", map[string]string{"effect": "allow", "rule_id": "all"}, 5},
		{"toolgate_upstream_call_duration_seconds", map[string]string{"server": "up"}, 4}, // ok ×2, lim and fail ran upstream
		{"toolgate_upstream_up", map[string]string{"server": "up"}, 1},
		{"toolgate_upstream_restarts_total", map[string]string{"server": "up"}, 0},
		{"toolgate_auth_refused_total", map[string]string{"reason": "unknown_api_key"}, 1},
		{"toolgate_mcp_sessions", nil, 0},
		{"toolgate_policy_would_deny_total", nil, 0},
		{"toolgate_approvals_pending", nil, 0},
		{"toolgate_store_commit_duration_seconds", nil, 6}, // every call's outcome was stored
		{"toolgate_store_unavailable_total", nil, 0},
		{"toolgate_store_queue_depth", nil, 0}, // nothing waits once every call has answered
		{"toolgate_approvals_resolved_total", map[string]string{"outcome": "approved"}, 0},
	} {
		got, ok := metricValue(fams[w.name], w.labels)
		if !ok || got != w.want {
			t.Errorf("%s%v = %v (found %v), want %v", w.name, w.labels, got, ok, w.want)
		}
	}
	for _, name := range []string{"go_goroutines", "go_memstats_heap_alloc_bytes", "process_cpu_seconds_total", "process_resident_memory_bytes"} {
		if fams[name] == nil {
			t.Errorf("no %s (Go runtime and process collectors)", name)
		}
	}
	// Approvals: one approved, one denied (each while its call waits),
	// one left to expire under its waiting call; every outcome is counted.
	o.approvalOutcomes(t)
	fams = o.scrape(t)
	for _, w := range []struct {
		outcome string
		want    float64
	}{{"approved", 1}, {"denied", 1}, {"expired", 1}} {
		got, ok := metricValue(fams["toolgate_approvals_resolved_total"], map[string]string{"outcome": w.outcome})
		if !ok || got != w.want {
			t.Errorf("toolgate_approvals_resolved_total{outcome=%q} = %v (found %v), want %v", w.outcome, got, ok, w.want)
		}
	}
	if got, _ := metricValue(fams["toolgate_approvals_pending"], nil); got != 0 {
		t.Errorf("toolgate_approvals_pending = %v after every approval ended, want 0", got)
	}
	// No principal label anywhere.
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "principal" || l.GetName() == "tenant" {
					t.Errorf("%s has a %s label", name, l.GetName())
				}
			}
		}
	}
}

// metricValue returns the value of f's metric whose labels include labels:
// a counter's or gauge's value, a histogram's sample count.
func metricValue(f *dto.MetricFamily, labels map[string]string) (float64, bool) {
	if f == nil {
		return 0, false
	}
next:
	for _, m := range f.GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		for k, v := range labels {
			if have[k] != v {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount()), true
		}
	}
	return 0, false
}

// pubkeyFile writes the serve's public key (base64, a line) and returns its
// path.
func (o *observeServe) pubkeyFile(t *testing.T) string {
	t.Helper()
	key, _, err := receipt.LoadOrCreateKey(o.keyFile)
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(o.dir, "toolgate.pub")
	pub := key.Public().(ed25519.PublicKey)
	if err := os.WriteFile(f, []byte(base64.StdEncoding.EncodeToString(pub)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// verify runs `toolgate receipts verify` on body (with --from from when
// it is not "") and returns its exit code and output.
func (o *observeServe) verify(t *testing.T, body, from string) (int, string) {
	t.Helper()
	f, err := os.CreateTemp(o.dir, "page-*.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(body)
	f.Close()
	args := []string{"receipts", "verify", f.Name(), "--pubkey", o.pubkeyFile(t)}
	if from != "" {
		args = append(args, "--from", from)
	}
	var out, errb strings.Builder
	code := Main(context.Background(), args, strings.NewReader(""), &out, &errb)
	return code, out.String() + errb.String()
}

// receiptIDs returns the receiptIds of a JSON Lines page, in order.
func receiptIDs(t *testing.T, body string) []string {
	t.Helper()
	var ids []string
	for line := range strings.SplitSeq(strings.TrimSpace(body), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("page line %q: %v", line, err)
		}
		if id, ok := m["receiptId"].(string); ok {
			ids = append(ids, id)
		}
	}
	return ids
}

// TestServeReceiptsOverHTTP is issue 16 point 8: GET /v1/receipts answers
// pages that `toolgate receipts verify` accepts, of the caller's tenant's
// receipts only, paged by limit and the next header; GET
// /v1/receipts/{id} answers one receipt, and 404 alike for an unknown
// receipt and another tenant's; both need the audit scope.
func TestServeReceiptsOverHTTP(t *testing.T) {
	o := startObserveServe(t)
	var t1IDs []string
	callAs := func(keyID, tool string) string {
		code, body := o.call(t, keyID, tool, `{}`)
		if code != 200 {
			t.Fatalf("%s %s: %d %v", keyID, tool, code, body)
		}
		return body["receiptId"].(string)
	}
	t1IDs = append(t1IDs, callAs("caller-one", "mcp:up.ok"), callAs("caller-one", "mcp:up.fail"))
	t2ID := callAs("auditor-two", "mcp:up.ok")
	for range 3 {
		t1IDs = append(t1IDs, callAs("auditor-one", "mcp:up.ok"))
	}

	// Without the audit scope: 403 on both routes.
	for _, p := range []string{"/v1/receipts", "/v1/receipts/" + t1IDs[0]} {
		if code, body := o.get(t, "caller-one", http.MethodGet, p, ""); code != http.StatusForbidden || !strings.Contains(body, `"forbidden"`) {
			t.Errorf("GET %s without the audit scope: %d %s", p, code, body)
		}
	}

	// Follow t1's pages from the start; each verifies on its own.
	var got []string
	from := "0"
	for pages := 0; from != ""; pages++ {
		if pages > 10 {
			t.Fatal("more than 10 pages")
		}
		code, hdr, body := o.do(t, "auditor-one", http.MethodGet, "/v1/receipts?limit=2&from="+from, "")
		if code != 200 || hdr.Get("Content-Type") != "application/jsonl" {
			t.Fatalf("page from %s: %d %s %s", from, code, hdr.Get("Content-Type"), body)
		}
		ids := receiptIDs(t, body)
		if len(ids) > 0 {
			if vc, out := o.verify(t, body, hdr.Get(httpapi.HeaderReceiptsFrom)); vc != 0 {
				t.Errorf("page from %s does not verify (exit %d): %s\n%s", from, vc, out, body)
			}
		}
		got = append(got, ids...)
		from = hdr.Get(httpapi.HeaderReceiptsNext)
	}
	if strings.Join(got, ",") != strings.Join(t1IDs, ",") {
		t.Errorf("t1's pages hold %v, want %v", got, t1IDs)
	}
	// The whole chain without a limit, as t1: its receipts only.
	code, hdr, body := o.do(t, "auditor-one", http.MethodGet, "/v1/receipts", "")
	if code != 200 || strings.Contains(body, t2ID) || strings.Contains(body, `"tenant":"t2"`) {
		t.Errorf("t1's chain page: %d %s", code, body)
	}
	if vc, out := o.verify(t, body, hdr.Get(httpapi.HeaderReceiptsFrom)); vc != 0 {
		t.Errorf("t1's first page does not verify: %s", out)
	}
	// t2 sees its one receipt only.
	var t2Got []string
	for from := "0"; from != ""; {
		_, hdr, body := o.do(t, "auditor-two", http.MethodGet, "/v1/receipts?from="+from, "")
		t2Got = append(t2Got, receiptIDs(t, body)...)
		if ids := receiptIDs(t, body); len(ids) > 0 {
			if vc, out := o.verify(t, body, hdr.Get(httpapi.HeaderReceiptsFrom)); vc != 0 {
				t.Errorf("t2's page does not verify: %s\n%s", out, body)
			}
		}
		from = hdr.Get(httpapi.HeaderReceiptsNext)
	}
	if len(t2Got) != 1 || t2Got[0] != t2ID {
		t.Errorf("t2's receipts: %v, want [%s]", t2Got, t2ID)
	}

	// One receipt: the same line the page has.
	code, one := o.get(t, "auditor-one", http.MethodGet, "/v1/receipts/"+t1IDs[1], "")
	if code != 200 || !strings.Contains(body, strings.TrimSpace(one)) || !strings.Contains(one, `"receiptId":"`+t1IDs[1]+`"`) {
		t.Errorf("GET /v1/receipts/%s: %d %s", t1IDs[1], code, one)
	}
	// Another tenant's receipt answers exactly as an unknown one.
	codeOther, other := o.get(t, "auditor-two", http.MethodGet, "/v1/receipts/"+t1IDs[1], "")
	codeNone, none := o.get(t, "auditor-two", http.MethodGet, "/v1/receipts/rcpt_nope", "")
	if codeOther != 404 || codeNone != 404 || strings.ReplaceAll(other, t1IDs[1], "ID") != strings.ReplaceAll(none, "rcpt_nope", "ID") {
		t.Errorf("another tenant's receipt: %d %s; unknown: %d %s", codeOther, other, codeNone, none)
	}
}

// scrape reads and parses the metrics listener's exposition.
func (o *observeServe) scrape(t *testing.T) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(o.metrics)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("the exposition does not parse: %v", err)
	}
	return fams
}

// approvalOutcomes runs three calls of mcp:up.apr (require_approval, ttl
// 3s) as caller-one: approver-one approves the first while it waits (it
// runs), denies the second (approval_denied), and lets the third expire
// (approval_expired once its waiting call reaches the expiry).
func (o *observeServe) approvalOutcomes(t *testing.T) {
	t.Helper()
	type answer struct {
		code int
		body map[string]any
	}
	pending := func(n int) string {
		var id string
		waitUntil(t, 30*time.Second, "approval pending", func() bool {
			code, body := o.get(t, "approver-one", http.MethodGet, "/v1/approvals", "")
			var l struct {
				Approvals []struct {
					ID          string `json:"id"`
					ArgsSummary string `json:"argsSummary"`
				} `json:"approvals"`
			}
			if code != 200 || json.Unmarshal([]byte(body), &l) != nil {
				t.Fatalf("GET /v1/approvals: %d %s", code, body)
			}
			for _, a := range l.Approvals {
				if strings.Contains(a.ArgsSummary, fmt.Sprintf(`"n":%d`, n)) {
					id = a.ID
					return true
				}
			}
			return false
		})
		return id
	}
	for n, verb := range map[int]string{1: "approve", 2: "deny"} {
		done := make(chan answer, 1)
		go func() {
			code, body := o.get(t, "caller-one", http.MethodPost, "/v1/calls", fmt.Sprintf(`{"toolId":"mcp:up.apr","args":{"n":%d}}`, n))
			var m map[string]any
			_ = json.Unmarshal([]byte(body), &m)
			done <- answer{code, m}
		}()
		id := pending(n)
		if code, body := o.get(t, "approver-one", http.MethodPost, "/v1/approvals/"+id+"/"+verb, `{"reason":"metrics test"}`); code != 200 {
			t.Fatalf("%s %s: %d %s", verb, id, code, body)
		}
		a := <-done
		if verb == "approve" && (a.code != 200 || a.body["status"] != "ok") {
			t.Fatalf("approved call: %d %v", a.code, a.body)
		}
		if verb == "deny" && !strings.Contains(fmt.Sprint(a.body), "approval_denied") {
			t.Fatalf("denied call: %d %v", a.code, a.body)
		}
	}
	code, body := o.get(t, "caller-one", http.MethodPost, "/v1/calls", `{"toolId":"mcp:up.apr","args":{"n":3}}`)
	if !strings.Contains(body, "approval_expired") {
		t.Fatalf("unresolved call: %d %s, want approval_expired", code, body)
	}
}

// TestServeReceiptsConcurrentTenantsAccounted: two tenants calling at the
// same time share checkpointed batches; paging /v1/receipts as each
// tenant, every page verifies offline, no page holds the other tenant's
// receipt, and the receipts served plus those the Toolgate-Receipts-Skipped
// header counts are exactly the tenant's calls (none vanishes silently);
// a page that withholds none starts exactly at ?from=.
func TestServeReceiptsConcurrentTenantsAccounted(t *testing.T) {
	o := startObserveServe(t)
	want := map[string]int{}
	page := func(keyID, tenant string, limit int) (served, skipped int) {
		for from := "0"; from != ""; {
			code, hdr, body := o.do(t, keyID, http.MethodGet, fmt.Sprintf("/v1/receipts?limit=%d&from=%s", limit, from), "")
			if code != 200 {
				t.Fatalf("%s page from %s: %d %s", keyID, from, code, body)
			}
			n, err := strconv.Atoi(hdr.Get(httpapi.HeaderReceiptsSkipped))
			if err != nil {
				t.Fatalf("%s page from %s: %s header %q", keyID, from, httpapi.HeaderReceiptsSkipped, hdr.Get(httpapi.HeaderReceiptsSkipped))
			}
			skipped += n
			ids := receiptIDs(t, body)
			served += len(ids)
			if len(ids) > 0 {
				// The page may start after ?from= (batches of the other
				// tenant alone are passed over uncounted), never before.
				if f := mustAtoi(t, hdr.Get(httpapi.HeaderReceiptsFrom)); f < mustAtoi(t, from) {
					t.Errorf("%s page from %s starts before it, at %d", keyID, from, f)
				}
				if vc, out := o.verify(t, body, hdr.Get(httpapi.HeaderReceiptsFrom)); vc != 0 {
					t.Errorf("%s page from %s does not verify: %s", keyID, from, out)
				}
				other := `"tenant":"t2"`
				if tenant == "t2" {
					other = `"tenant":"t1"`
				}
				if strings.Contains(body, other) {
					t.Errorf("%s page from %s holds the other tenant's receipt", keyID, from)
				}
			}
			from = hdr.Get(httpapi.HeaderReceiptsNext)
		}
		return served, skipped
	}
	// Rounds of concurrent calls until the group commit has mixed the
	// tenants in a batch (the defect's trigger), at most 20 rounds.
	mixed := false
	for round := 0; round < 20 && !mixed; round++ {
		var wg sync.WaitGroup
		for i := range 8 {
			key, tenant := "auditor-one", "t1"
			if i%2 == 1 {
				key, tenant = "auditor-two", "t2"
			}
			want[tenant]++
			wg.Add(1)
			go func() {
				defer wg.Done()
				code, body := o.call(t, key, "mcp:up.ok", `{}`)
				if code != 200 {
					t.Errorf("%s: %d %v", key, code, body)
				}
			}()
		}
		wg.Wait()
		// Receipts are checkpointed after the response: wait for the
		// chain's checkpoint to cover every call before paging.
		waitUntil(t, 30*time.Second, "checkpoint covers the calls", func() bool {
			s1, k1 := page("auditor-one", "t1", 1000)
			s2, k2 := page("auditor-two", "t2", 1000)
			return s1+k1 == want["t1"] && s2+k2 == want["t2"]
		})
		_, k1 := page("auditor-one", "t1", 1000)
		mixed = k1 > 0
	}
	if !mixed {
		t.Fatal("20 rounds of concurrent calls never shared a batch between tenants")
	}
	for _, c := range []struct {
		key, tenant string
		limit       int
	}{{"auditor-one", "t1", 1000}, {"auditor-one", "t1", 3}, {"auditor-two", "t2", 1000}, {"auditor-two", "t2", 2}} {
		served, skipped := page(c.key, c.tenant, c.limit)
		if served+skipped != want[c.tenant] {
			t.Errorf("%s limit %d: %d served + %d skipped, want %d calls", c.key, c.limit, served, skipped, want[c.tenant])
		}
	}
}

// TestServeReceiptsUnknownChain: ?chain= naming no chain the store holds
// is 404 not_found, not an empty page.
func TestServeReceiptsUnknownChain(t *testing.T) {
	o := startObserveServe(t)
	if code, body := o.call(t, "auditor-one", "mcp:up.ok", `{}`); code != 200 {
		t.Fatalf("call: %d %v", code, body)
	}
	code, body := o.get(t, "auditor-one", http.MethodGet, "/v1/receipts?chain=nosuch", "")
	if code != http.StatusNotFound || !strings.Contains(body, `"not_found"`) {
		t.Errorf("unknown chain: %d %s", code, body)
	}
	if code, body := o.get(t, "auditor-one", http.MethodGet, "/v1/receipts", ""); code != 200 {
		t.Errorf("own chain: %d %s", code, body)
	}
}

// mustAtoi is strconv.Atoi(s), failing the test when s is not an integer.
func mustAtoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("not an integer: %q", s)
	}
	return n
}

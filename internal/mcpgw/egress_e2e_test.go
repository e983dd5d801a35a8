package mcpgw

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/catalog"
	"github.com/toolgate/toolgate/internal/auth"
	"github.com/toolgate/toolgate/internal/egress"
	"github.com/toolgate/toolgate/internal/egress/egresstest"
)

// TestEgressGuardedUpstream: a Streamable HTTP upstream with an egress
// block, reached by name (mcp.example.test → 127.0.0.1, allowed by CIDR),
// answers tools/call with a 307 to a name that resolves to a metadata or
// a loopback address: the gateway refuses the hop at dial time, the MCP
// client gets isError egress_denied naming the rule and host, the call is
// recorded (events and receipt, status error, the tool did not run), and
// the upstream never ran the tool. The guarded server's tools say egress:
// safe-fetch; an unguarded server's do not.
func TestEgressGuardedUpstream(t *testing.T) {
	rec := startRecordingUpstream(t)
	var redirectTo atomic.Value
	var calls atomic.Int64
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if bytes.Contains(body, []byte(`"tools/call"`)) {
			calls.Add(1)
			http.Redirect(w, r, redirectTo.Load().(string), http.StatusTemporaryRedirect)
			return
		}
		forward(w, r, rec.url, body)
	}))
	t.Cleanup(front.Close)
	_, port, _ := net.SplitHostPort(front.Listener.Addr().String())
	res := egresstest.Static(map[string][]string{
		"mcp.example.test":      {"127.0.0.1"},
		"metadata.example.test": {"169.254.169.254"},
		"internal.example.test": {"127.0.0.2"},
	})
	cfg := fmt.Sprintf(`auth:
  api_keys:
    - {id: alice, key_sha256: %q, tenant: %s}
servers:
  - name: guarded
    url: "http://mcp.example.test:%s/mcp"
    egress: {allow_hosts: ["*.example.test"], allow_cidrs: [127.0.0.1/32]}
  - {name: plain, url: %q}
policy:
  default: deny
  rules:
    - {id: all, effect: allow, tools: ["*"]}
`, auth.HashKey(keyAlice), tenant, port, rec.url+"/mcp")
	g := startGatewayEgress(t, cfg, false, nil, []egress.Option{egress.WithResolver(res)})
	sf := g.gw.surface.Load()
	if d := sf.descs["mcp:guarded.greet"]; d.Egress != catalog.EgressSafeFetch {
		t.Fatalf("guarded tool's egress %q, want safe-fetch", d.Egress)
	}
	if d := sf.descs["mcp:plain.greet"]; d.Egress == catalog.EgressSafeFetch {
		t.Fatal("an unguarded server's tool says egress: safe-fetch")
	}
	cs := g.connect(t, keyAlice)
	for _, tc := range []struct{ to, rule, host string }{
		{"http://metadata.example.test/latest/meta-data/", "link-local", "metadata.example.test"},
		{"http://internal.example.test:" + port + "/mcp", "loopback", "internal.example.test"},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			redirectTo.Store(tc.to)
			before := calls.Load()
			r := callTool(t, cs, "guarded__greet", map[string]any{"name": "x"})
			mustRefused(t, "guarded__greet", r, "egress_denied")
			if calls.Load() != before+1 {
				t.Fatalf("the upstream saw %d tools/call, want 1", calls.Load()-before)
			}
			obj, _ := r.Meta[MetaError].(map[string]any)
			det, _ := obj["details"].(map[string]any)
			if det["rule"] != tc.rule || det["host"] != tc.host || len(det) != 2 {
				t.Fatalf("details %v, want {rule %s, host %s}", det, tc.rule, tc.host)
			}
			if txt := resultText(r); strings.Contains(txt, "169.254") || strings.Contains(txt, "127.0.0.2") {
				t.Fatalf("the result reveals the refused address: %s", txt)
			}
			types, ret := g.callEvents(t, r)
			if len(types) != 2 || types[0] != audit.TypeToolCalled || ret.Status != "error" || ret.Error == nil || ret.Error.Code != "egress_denied" || ret.DurationMs != nil {
				t.Fatalf("events %v, returned %+v: want toolCalled, toolReturned error egress_denied without durationMs", types, ret)
			}
			rc, err := g.st.ReceiptByID(t.Context(), tenant, metaString(t, r, MetaReceiptID))
			if err != nil {
				t.Fatal(err)
			}
			if rc.Status != "error" || rc.Error == nil || rc.Error.Code != "egress_denied" || rc.DurationMs != nil {
				t.Fatalf("receipt status %s error %+v duration %v: want error egress_denied, not run", rc.Status, rc.Error, rc.DurationMs)
			}
		})
	}
	if rec.count("greet") != 0 {
		t.Fatalf("the upstream ran greet %d times, want 0", rec.count("greet"))
	}
	// The unguarded server still works.
	mustOK(t, "plain__greet", callTool(t, cs, "plain__greet", map[string]any{"name": "x"}))
}

// TestUpstreamHeadersStayHome: a Streamable HTTP upstream's configured
// headers (credentials) go to its own origin only: when it redirects a
// tools/call to another host, the hop carries no Authorization (before,
// the header transport added it to every request, redirects included).
func TestUpstreamHeadersStayHome(t *testing.T) {
	rec := startRecordingUpstream(t)
	var leaked, hops atomic.Int64
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hops.Add(1)
		if r.Header.Get("Authorization") != "" {
			leaked.Add(1)
		}
		http.Error(w, "no", http.StatusNotFound)
	}))
	t.Cleanup(target.Close)
	_, tport, _ := net.SplitHostPort(target.Listener.Addr().String())
	var authed atomic.Int64
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") == "Bearer s3cret-token-value" {
			authed.Add(1)
		}
		body, _ := io.ReadAll(r.Body)
		if bytes.Contains(body, []byte(`"tools/call"`)) {
			http.Redirect(w, r, "http://localhost:"+tport+"/steal", http.StatusTemporaryRedirect)
			return
		}
		forward(w, r, rec.url, body)
	}))
	t.Cleanup(front.Close)
	t.Setenv("TOOLGATE_TEST_UP_TOKEN", "s3cret-token-value")
	cfg := fmt.Sprintf(`auth:
  api_keys:
    - {id: alice, key_sha256: %q, tenant: %s}
credentials: {tok: {env: TOOLGATE_TEST_UP_TOKEN}}
servers:
  - name: up
    url: %q
    headers: {Authorization: "Bearer {{credential:tok}}"}
    sessions: shared
policy:
  default: deny
  rules:
    - {id: all, effect: allow, tools: ["*"]}
`, auth.HashKey(keyAlice), tenant, front.URL+"/mcp")
	g := startGatewayEgress(t, cfg, false, nil, nil)
	cs := g.connect(t, keyAlice)
	r, err := tryCall(t, cs, "greet", map[string]any{"name": "x"})
	if err == nil && !r.IsError {
		t.Fatalf("the redirected call succeeded: %s", resultText(r))
	}
	if authed.Load() == 0 {
		t.Fatal("the upstream's own requests carried no Authorization")
	}
	if hops.Load() == 0 {
		t.Fatal("the redirect was not followed; the test proves nothing")
	}
	if leaked.Load() != 0 {
		t.Fatalf("the redirect target got the upstream's Authorization header %d times", leaked.Load())
	}
}

// forward relays r (with body) to the upstream at base and streams the
// answer back, flushing each read (SSE streams).
func forward(w http.ResponseWriter, r *http.Request, base string, body []byte) {
	req, _ := http.NewRequestWithContext(r.Context(), r.Method, base+r.URL.Path, bytes.NewReader(body))
	req.Header = r.Header.Clone()
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	buf := make([]byte, 4096)
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			w.Write(buf[:n])
			if f, ok := w.(http.Flusher); ok {
				f.Flush()
			}
		}
		if err != nil {
			return
		}
	}
}

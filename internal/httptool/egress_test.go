package httptool

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/toolgate/toolgate/catalog"
	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/internal/config"
	"github.com/toolgate/toolgate/internal/egress"
	"github.com/toolgate/toolgate/internal/egress/egresstest"
)

// countingAPI is an HTTP API on 127.0.0.1 that counts the requests it
// gets; /hop redirects to the URL in to.
func countingAPI(t *testing.T, to *atomic.Value) (*httptest.Server, *atomic.Int64, string) {
	t.Helper()
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		if r.URL.Path == "/hop" {
			http.Redirect(w, r, to.Load().(string), http.StatusTemporaryRedirect)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"ok":true}`))
	}))
	t.Cleanup(srv.Close)
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	return srv, &n, port
}

// buildGuarded builds the one tool of doc with the test resolver res.
func buildGuarded(t *testing.T, doc string, res *net.Resolver) Tool {
	t.Helper()
	cfg, err := config.Parse("t.yaml", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	tools, err := Build(context.Background(), cfg, Options{Egress: []egress.Option{egress.WithResolver(res)}})
	if err != nil || len(tools) != 1 {
		t.Fatalf("Build: %v %v", tools, err)
	}
	return tools[0]
}

// TestHTTPToolEgressGuard: HTTP tools are always behind the SSRF guard. A
// public-looking name that resolves to loopback, the metadata address, an
// IPv4-mapped loopback or CGNAT is refused at dial time with
// egress_denied {rule, host} and the counting server on 127.0.0.1 sees
// nothing; a redirect from an allowed API to a metadata name is refused
// at the hop; the same API allowed by allow_cidrs answers; the descriptor
// says egress: safe-fetch.
func TestHTTPToolEgressGuard(t *testing.T) {
	var to atomic.Value
	_, hits, port := countingAPI(t, &to)
	res := egresstest.Static(map[string][]string{
		"loop.example.test":     {"127.0.0.1"},
		"meta.example.test":     {"169.254.169.254"},
		"mapped.example.test":   {"::ffff:127.0.0.1"},
		"cgnat.example.test":    {"100.64.0.1"},
		"api.example.test":      {"127.0.0.1"},
		"metadata.example.test": {"169.254.169.254"},
	})
	for _, tc := range []struct{ host, rule string }{
		{"loop.example.test", "loopback"},
		{"meta.example.test", "link-local"},
		{"mapped.example.test", "loopback"},
		{"cgnat.example.test", "cgnat"},
	} {
		t.Run(tc.host, func(t *testing.T) {
			tool := buildGuarded(t, "http_tools:\n  - {name: x, url: \"http://"+tc.host+":"+port+"/data\"}\n", res)
			if tool.Descriptor.Egress != catalog.EgressSafeFetch {
				t.Fatalf("descriptor egress %q, want safe-fetch", tool.Descriptor.Egress)
			}
			out, err := tool.Invoker.Invoke(t.Context(), nil, json.RawMessage(`{}`))
			e := errcode.As(err)
			if e == nil || e.Code != errcode.EgressDenied || e.Details["rule"] != tc.rule || e.Details["host"] != tc.host {
				t.Fatalf("call: %s %v (details %v), want egress_denied {rule %s, host %s}", out, err, e, tc.rule, tc.host)
			}
			if strings.Contains(e.Message, "169.254") || strings.Contains(e.Message, "100.64") {
				t.Fatalf("the error reveals the refused address: %s", e.Message)
			}
			if hits.Load() != 0 {
				t.Fatalf("the refused API was reached %d times", hits.Load())
			}
		})
	}

	// A redirect from an allowed API to a metadata address: refused at
	// the hop (the API itself was reached once).
	to.Store("http://metadata.example.test/latest/meta-data/")
	tool := buildGuarded(t, "http_tools:\n  - {name: hop, url: \"http://api.example.test:"+port+"/hop\", egress: {allow_cidrs: [127.0.0.1/32]}}\n", res)
	_, err := tool.Invoker.Invoke(t.Context(), nil, json.RawMessage(`{}`))
	if e := errcode.As(err); e == nil || e.Code != errcode.EgressDenied || e.Details["rule"] != "link-local" || e.Details["host"] != "metadata.example.test" {
		t.Fatalf("redirect to metadata: %v, want egress_denied link-local", err)
	}
	if hits.Load() != 1 {
		t.Fatalf("the API saw %d requests, want 1 (the hop was not followed)", hits.Load())
	}

	// Allowed by CIDR: works.
	tool = buildGuarded(t, "http_tools:\n  - {name: ok, url: \"http://api.example.test:"+port+"/data\", egress: {allow_cidrs: [127.0.0.0/8]}}\n", res)
	out, err := tool.Invoker.Invoke(t.Context(), nil, json.RawMessage(`{}`))
	if err != nil || !strings.Contains(string(out), `"ok":true`) || hits.Load() != 2 {
		t.Fatalf("allowed call: %s %v (hits %d)", out, err, hits.Load())
	}

	// A host outside allow_hosts is refused before any dial.
	tool = buildGuarded(t, "http_tools:\n  - {name: h, url: \"http://api.example.test:"+port+"/data\", egress: {allow_hosts: [other.example.test], allow_cidrs: [127.0.0.0/8]}}\n", res)
	_, err = tool.Invoker.Invoke(t.Context(), nil, json.RawMessage(`{}`))
	if e := errcode.As(err); e == nil || e.Code != errcode.EgressDenied || e.Details["rule"] != egress.RuleHostNotAllowed {
		t.Fatalf("host not allowed: %v", err)
	}
	if hits.Load() != 2 {
		t.Fatalf("the API saw %d requests, want 2", hits.Load())
	}
}

// TestOpenAPIURLFetchGuarded: the `openapi: {url}` fetch at start goes
// through the entry's guard: a document on 127.0.0.1 is refused (naming
// the rule, nothing fetched) unless the entry's egress allows loopback.
func TestOpenAPIURLFetchGuarded(t *testing.T) {
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		http.ServeFile(w, r, "testdata/petstore.yaml")
	}))
	defer srv.Close()
	build := func(egressBlock string) error {
		cfg, err := config.Parse("t.yaml", []byte("openapi:\n  - {url: \""+srv.URL+"/petstore.yaml\", server: \""+srv.URL+"/api\""+egressBlock+"}\n"))
		if err != nil {
			t.Fatal(err)
		}
		_, err = Build(t.Context(), cfg, Options{})
		return err
	}
	if err := build(""); err == nil || !strings.Contains(err.Error(), "egress") || !strings.Contains(err.Error(), "loopback") || hits.Load() != 0 {
		t.Fatalf("unallowed fetch: %v (hits %d), want refused naming loopback, not fetched", err, hits.Load())
	}
	if err := build(", egress: {allow_cidrs: [127.0.0.0/8]}"); err != nil || hits.Load() != 1 {
		t.Fatalf("allowed fetch: %v (hits %d)", err, hits.Load())
	}
}

package egress_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/internal/egress"
	"github.com/toolgate/toolgate/internal/egress/egresstest"
)

// counting is a 127.0.0.1 test server that counts the requests reaching it
// and answers with h (200 "ok" when nil).
func counting(t *testing.T, h http.HandlerFunc) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		if h != nil {
			h(w, r)
			return
		}
		io.WriteString(w, "ok")
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

func port(srv *httptest.Server) string {
	_, p, _ := net.SplitHostPort(srv.Listener.Addr().String())
	return p
}

func get(t *testing.T, c *http.Client, url string) (*http.Response, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Do(req)
	if resp != nil {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	return resp, err
}

func wantDenied(t *testing.T, err error, rule, host string) {
	t.Helper()
	var d *egress.DeniedError
	if !errors.As(err, &d) {
		t.Fatalf("error %v: want a *egress.DeniedError", err)
	}
	if d.Rule != rule || d.Host != host {
		t.Fatalf("denied rule %q host %q, want %q %q", d.Rule, d.Host, rule, host)
	}
	e := egress.Error(err)
	if e == nil || e.Code != errcode.EgressDenied || e.Details["rule"] != rule || e.Details["host"] != host || len(e.Details) != 2 {
		t.Fatalf("errcode form %+v: want egress_denied {rule %s, host %s}", e, rule, host)
	}
	if d.Addr.IsValid() && d.Addr.String() != host && strings.Contains(e.Message, d.Addr.String()) {
		t.Fatalf("message %q reveals the refused address", e.Message)
	}
}

// TestRefusedAddresses: a public-looking name resolving to each refused
// class is refused at dial time with its rule, and no request reaches the
// listening 127.0.0.1 server.
func TestRefusedAddresses(t *testing.T) {
	srv, n := counting(t, nil)
	for _, tc := range []struct{ addr, rule string }{
		{"127.0.0.1", "loopback"},
		{"169.254.169.254", "link-local"},
		{"::ffff:127.0.0.1", "loopback"},
		{"::ffff:169.254.169.254", "link-local"},
		{"::127.0.0.1", "loopback"},
		{"64:ff9b::7f00:1", "loopback"},
		{"100.64.0.1", "cgnat"},
		{"10.1.2.3", "private"},
		{"172.16.0.1", "private"},
		{"192.168.1.1", "private"},
		{"fd00::1", "private"},
		{"fe80::1", "link-local"},
		{"::1", "loopback"},
		{"0.0.0.0", "unspecified"},
		{"::", "unspecified"},
		{"224.0.0.1", "multicast"},
		{"ff02::1", "multicast"},
		{"255.255.255.255", "broadcast"},
	} {
		t.Run(tc.addr, func(t *testing.T) {
			c := egress.NewClient(egress.Policy{}, egress.WithResolver(egresstest.Static(map[string][]string{"api.public.example": {tc.addr}})))
			_, err := get(t, c, "http://api.public.example:"+port(srv)+"/")
			wantDenied(t, err, tc.rule, "api.public.example")
		})
	}
	t.Run("ip-literal", func(t *testing.T) {
		c := egress.NewClient(egress.Policy{})
		_, err := get(t, c, srv.URL)
		wantDenied(t, err, "loopback", "127.0.0.1")
	})
	if got := n.Load(); got != 0 {
		t.Fatalf("%d requests reached the refused server, want 0", got)
	}
}

// TestAllowCIDR: an address in AllowCIDRs is dialed (its IPv4-mapped form
// too); one outside is still refused.
func TestAllowCIDR(t *testing.T) {
	srv, n := counting(t, nil)
	res := egresstest.Static(map[string][]string{"api.example.test": {"127.0.0.1"}, "mapped.example.test": {"::ffff:127.0.0.1"}})
	c := egress.NewClient(egress.Policy{AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}}, egress.WithResolver(res))
	resp, err := get(t, c, "http://api.example.test:"+port(srv)+"/")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("allowed by CIDR: %v", err)
	}
	if n.Load() != 1 {
		t.Fatalf("requests %d, want 1", n.Load())
	}
	c = egress.NewClient(egress.Policy{AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}, egress.WithResolver(res))
	_, err = get(t, c, "http://api.example.test:"+port(srv)+"/")
	wantDenied(t, err, "loopback", "api.example.test")
	if n.Load() != 1 {
		t.Fatalf("requests %d, want 1", n.Load())
	}
}

// TestHostAllowList: a host not in AllowHosts is refused before any dial;
// globs match subdomains only.
func TestHostAllowList(t *testing.T) {
	srv, n := counting(t, nil)
	res := egresstest.Static(map[string][]string{"api.example.test": {"127.0.0.1"}, "a.b.example.test": {"127.0.0.1"}, "evil.test": {"127.0.0.1"}})
	p := egress.Policy{AllowHosts: []string{"*.example.test"}, AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}
	c := egress.NewClient(p, egress.WithResolver(res))
	for _, h := range []string{"api.example.test", "a.b.example.test", "API.Example.Test"} {
		if _, err := get(t, c, "http://"+h+":"+port(srv)+"/"); err != nil {
			t.Fatalf("%s: %v", h, err)
		}
	}
	for _, h := range []string{"evil.test", "example.test", "127.0.0.1"} {
		_, err := get(t, c, "http://"+h+":"+port(srv)+"/")
		wantDenied(t, err, "host-not-allowed", h)
	}
	if n.Load() != 3 {
		t.Fatalf("requests %d, want 3", n.Load())
	}
}

// TestRedirectToMetadata: a redirect from an allowed host to a metadata
// address (by name and by IP literal) or to a host not allowed is refused;
// the redirect target never receives a request.
func TestRedirectToMetadata(t *testing.T) {
	target, hits := counting(t, nil)
	var to atomic.Value
	origin, _ := counting(t, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, to.Load().(string), http.StatusTemporaryRedirect)
	})
	res := egresstest.Static(map[string][]string{
		"api.example.test":      {"127.0.0.1"},
		"metadata.example.test": {"169.254.169.254"},
		"other.example.test":    {"127.0.0.1"},
	})
	p := egress.Policy{AllowHosts: []string{"*.example.test", "169.254.169.254"}, AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}}
	c := egress.NewClient(p, egress.WithResolver(res))
	for _, tc := range []struct{ to, rule, host string }{
		{"http://metadata.example.test/latest/meta-data/", "link-local", "metadata.example.test"},
		{"http://169.254.169.254/latest/meta-data/", "link-local", "169.254.169.254"},
		{"http://evil.test:" + port(target) + "/", "host-not-allowed", "evil.test"},
	} {
		to.Store(tc.to)
		_, err := get(t, c, "http://api.example.test:"+port(origin)+"/")
		wantDenied(t, err, tc.rule, tc.host)
	}
	// The bare transport (no CheckRedirect) refuses the hop too: the host
	// check runs for every request it sends.
	to.Store("http://evil.test:" + port(target) + "/")
	bare := &http.Client{Transport: egress.NewTransport(p, egress.WithResolver(res))}
	_, err := get(t, bare, "http://api.example.test:"+port(origin)+"/")
	wantDenied(t, err, "host-not-allowed", "evil.test")
	if hits.Load() != 0 {
		t.Fatalf("the redirect target got %d requests, want 0", hits.Load())
	}
}

// TestRedirectLimit: at most MaxRedirects hops (default 3) are followed;
// -1 follows none.
func TestRedirectLimit(t *testing.T) {
	srv, n := counting(t, func(w http.ResponseWriter, r *http.Request) {
		var i int
		fmt.Sscanf(r.URL.Path, "/r/%d", &i)
		if i >= 3 {
			io.WriteString(w, "done")
			return
		}
		http.Redirect(w, r, fmt.Sprintf("/r/%d", i+1), http.StatusFound)
	})
	res := egresstest.Static(map[string][]string{"api.example.test": {"127.0.0.1"}})
	allow := []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}
	url := "http://api.example.test:" + port(srv) + "/r/0"
	for _, tc := range []struct {
		max      int
		ok       bool
		requests int64
	}{{0, true, 4}, {3, true, 4}, {2, false, 3}, {-1, false, 1}} {
		n.Store(0)
		c := egress.NewClient(egress.Policy{MaxRedirects: tc.max, AllowCIDRs: allow}, egress.WithResolver(res))
		_, err := get(t, c, url)
		if tc.ok && err != nil {
			t.Fatalf("max %d: %v", tc.max, err)
		}
		if !tc.ok {
			wantDenied(t, err, "redirect-limit", "api.example.test")
		}
		if n.Load() != tc.requests {
			t.Fatalf("max %d: %d requests, want %d", tc.max, n.Load(), tc.requests)
		}
	}
}

// TestRebinding: the name resolves to a public address when a validator
// looks it up, then to 127.0.0.1 when the transport dials: the address
// dialed is the one checked, so the request is refused and never arrives.
func TestRebinding(t *testing.T) {
	srv, n := counting(t, nil)
	res := egresstest.Sequence("rebind.example.test", "93.184.215.14", "127.0.0.1")
	p := egress.Policy{}
	first, err := res.LookupNetIP(context.Background(), "ip4", "rebind.example.test")
	if err != nil || len(first) != 1 || p.AddrAllowed(first[0]) != "" {
		t.Fatalf("first lookup %v %v: want one public address", first, err)
	}
	_, err = get(t, egress.NewClient(p, egress.WithResolver(res)), "http://rebind.example.test:"+port(srv)+"/")
	wantDenied(t, err, "loopback", "rebind.example.test")
	if n.Load() != 0 {
		t.Fatalf("%d requests reached 127.0.0.1, want 0", n.Load())
	}
}

// TestEnvProxyIgnored: HTTP_PROXY in the environment is not used; a
// configured Proxy is, with the host allow-list still applied.
func TestEnvProxyIgnored(t *testing.T) {
	target, hits := counting(t, nil)
	proxy, proxied := counting(t, func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "via proxy "+r.URL.String())
	})
	t.Setenv("HTTP_PROXY", proxy.URL)
	t.Setenv("http_proxy", proxy.URL)
	t.Setenv("NO_PROXY", "")
	res := egresstest.Static(map[string][]string{"api.example.test": {"127.0.0.1"}})
	p := egress.Policy{AllowHosts: []string{"api.example.test"}, AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}}
	if _, err := get(t, egress.NewClient(p, egress.WithResolver(res)), "http://api.example.test:"+port(target)+"/"); err != nil {
		t.Fatal(err)
	}
	if hits.Load() != 1 || proxied.Load() != 0 {
		t.Fatalf("target %d proxy %d: want 1 0 (env proxy ignored)", hits.Load(), proxied.Load())
	}
	// A configured proxy is used (and dialed though it is on loopback);
	// a disallowed host is refused before reaching it.
	p.Proxy = proxy.URL
	p.AllowCIDRs = nil
	c := egress.NewClient(p, egress.WithResolver(res))
	if _, err := get(t, c, "http://api.example.test:"+port(target)+"/"); err != nil {
		t.Fatal(err)
	}
	if hits.Load() != 1 || proxied.Load() != 1 {
		t.Fatalf("target %d proxy %d: want 1 1 (configured proxy)", hits.Load(), proxied.Load())
	}
	_, err := get(t, c, "http://evil.test/")
	wantDenied(t, err, "host-not-allowed", "evil.test")
	if proxied.Load() != 1 {
		t.Fatalf("proxy got %d requests, want 1", proxied.Load())
	}
}

func TestPolicyValidate(t *testing.T) {
	for _, tc := range []struct {
		p  egress.Policy
		ok bool
	}{
		{egress.Policy{AllowHosts: []string{"api.example.com", "*.example.com", "*", "127.0.0.1"}}, true},
		{egress.Policy{AllowHosts: []string{""}}, false},
		{egress.Policy{AllowHosts: []string{"api.*.com"}}, false},
		{egress.Policy{AllowHosts: []string{"*example.com"}}, false},
		{egress.Policy{AllowHosts: []string{"http://x"}}, false},
		{egress.Policy{Proxy: "http://127.0.0.1:3128"}, true},
		{egress.Policy{Proxy: "socks5://proxy:1080"}, true},
		{egress.Policy{Proxy: "ftp://x"}, false},
		{egress.Policy{Proxy: "proxy:3128"}, false},
	} {
		err := tc.p.Validate()
		if (err == nil) != tc.ok {
			t.Errorf("%+v: %v, want ok=%v", tc.p, err, tc.ok)
		}
		if err != nil && errcode.CodeOf(err) != errcode.InvalidConfig {
			t.Errorf("%+v: code %s, want invalid_config", tc.p, errcode.CodeOf(err))
		}
	}
}

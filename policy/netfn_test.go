package policy

import (
	"strings"
	"testing"
)

// TestNetFunctions: the url and net helpers, as rules use them to look
// at URL arguments (issue 17 point 5). Every condition below is a deny
// rule over an allow-all, so true means deny.
func TestNetFunctions(t *testing.T) {
	for _, c := range []struct {
		when string
		args map[string]any
		deny bool
	}{
		{`url.host(args.url) == "api.example.com"`, map[string]any{"url": "https://API.Example.com./v1?q=1"}, true},
		{`url.host(args.url) == "api.example.com"`, map[string]any{"url": "https://evil.test/api.example.com"}, false},
		{`url.host(args.url) == "::1"`, map[string]any{"url": "http://[::1]:8080/"}, true},
		{`url.host(args.url) == "api.example.com"`, map[string]any{"url": "https://user:pw@api.example.com@evil.test/"}, false},
		{`url.scheme(args.url) != "https"`, map[string]any{"url": "HTTP://x.test/"}, true},
		{`url.scheme(args.url) != "https"`, map[string]any{"url": "https://x.test/"}, false},
		{`url.port(args.url) == 443`, map[string]any{"url": "https://x.test/"}, true},
		{`url.port(args.url) == 8443`, map[string]any{"url": "https://x.test:8443/"}, true},
		{`url.port(args.url) == 80`, map[string]any{"url": "http://x.test/"}, true},
		{`url.path(args.url).startsWith("/admin")`, map[string]any{"url": "https://x.test/admin/users"}, true},
		{`url.path(args.url).startsWith("/admin")`, map[string]any{"url": "https://x.test/public"}, false},
		{`net.ip(args.ip) in net.cidr("10.0.0.0/8")`, map[string]any{"ip": "10.1.2.3"}, true},
		{`net.ip(args.ip) in net.cidr("10.0.0.0/8")`, map[string]any{"ip": "::ffff:10.1.2.3"}, true},
		{`net.ip(args.ip) in net.cidr("10.0.0.0/8")`, map[string]any{"ip": "11.0.0.1"}, false},
		{`net.cidr("fd00::/8").contains(net.ip(args.ip))`, map[string]any{"ip": "fd12::1"}, true},
		{`net.cidr("fd00::/8").contains(net.ip(args.ip))`, map[string]any{"ip": "fe80::1"}, false},
		{`net.ip(args.ip).isLoopback()`, map[string]any{"ip": "127.0.0.1"}, true},
		{`net.ip(args.ip).isLoopback()`, map[string]any{"ip": "::ffff:127.0.0.1"}, true},
		{`net.ip(args.ip).isLinkLocal()`, map[string]any{"ip": "169.254.169.254"}, true},
		{`net.ip(args.ip).isPrivate()`, map[string]any{"ip": "192.168.1.1"}, true},
		{`net.ip(args.ip).isPrivate()`, map[string]any{"ip": "8.8.8.8"}, false},
		{`net.ip(args.ip).isCGNAT()`, map[string]any{"ip": "100.64.0.1"}, true},
		{`net.ip(args.ip).isUnspecified()`, map[string]any{"ip": "::"}, true},
		{`net.ip(args.ip).isMulticast()`, map[string]any{"ip": "ff02::1"}, true},
		{`!net.ip(args.ip).isPublic()`, map[string]any{"ip": "fe80::1%eth0"}, true},
		{`!net.ip(args.ip).isPublic()`, map[string]any{"ip": "93.184.215.14"}, false},
		{`net.ip(args.ip).class() == "cgnat"`, map[string]any{"ip": "100.100.1.1"}, true},
		{`net.ip(args.ip).class() == "public"`, map[string]any{"ip": "1.1.1.1"}, true},
		{`net.ip(args.ip) == net.ip("127.0.0.1")`, map[string]any{"ip": "127.0.0.1"}, true},
		{`string(net.ip(args.ip)) == "2001:db8::1"`, map[string]any{"ip": "2001:DB8:0::1"}, true},
		// The SSRF rule an HTTP fetch tool wants: an IP-literal host that
		// is not public is denied.
		{`!net.ip(url.host(args.url)).isPublic()`, map[string]any{"url": "http://169.254.169.254/latest/"}, true},
	} {
		p := load(t, "rules:\n  - {id: all, effect: allow, tools: [\"*\"]}\n  - {id: r, effect: deny, tools: [\"*\"], when: '"+c.when+"'}\n", Options{})
		d := p.Decide(t.Context(), call(alice, "mcp:web.fetch", nil, c.args))
		if (d.Effect == EffectDeny) != c.deny {
			t.Errorf("%s with %v: %s (%s), want deny=%v", c.when, c.args, d.Effect, d.Reason, c.deny)
		}
	}
}

// TestNetFunctionsFailClosed: malformed input is an evaluation error: the
// rule fails closed (deny, layer error) with the parser's message, even in
// an allow rule whose condition would otherwise grant.
func TestNetFunctionsFailClosed(t *testing.T) {
	p := load(t, `rules:
  - {id: internal-only, effect: allow, tools: ["*"], when: 'net.ip(args.ip) in net.cidr("10.0.0.0/8")'}
  - {id: https-only, effect: deny, tools: ["mcp:web.*"], when: 'url.scheme(args.url) != "https"'}
`, Options{})
	for _, c := range []struct {
		tool string
		args map[string]any
		msg  string
	}{
		{"mcp:x.y", map[string]any{"ip": "10.0.0.1.5"}, `net.ip: "10.0.0.1.5" is not an IP address`},
		{"mcp:x.y", map[string]any{"ip": "012.0.0.1"}, `is not an IP address`},
		{"mcp:x.y", map[string]any{"ip": "167772161"}, `is not an IP address`},
		{"mcp:x.y", map[string]any{"ip": "[10.0.0.1]"}, `is not an IP address`},
		{"mcp:web.get", map[string]any{"ip": "10.0.0.1", "url": "no-scheme/path"}, `url.scheme: url: "no-scheme/path" is not an absolute URL`},
		{"mcp:web.get", map[string]any{"ip": "10.0.0.1", "url": "http://x.test:99999/"}, `bad port`},
		{"mcp:web.get", map[string]any{"ip": "10.0.0.1", "url": "mailto:a@b.test"}, `not an absolute URL`},
	} {
		d := p.Decide(t.Context(), call(alice, c.tool, nil, c.args))
		if d.Effect != EffectDeny || d.Layer != LayerError || !strings.Contains(d.Reason, c.msg) {
			t.Errorf("%v: %s layer %s (%s), want deny by error naming %q", c.args, d.Effect, d.Layer, d.Reason, c.msg)
		}
	}
	if d := p.Decide(t.Context(), call(alice, "mcp:web.get", nil, map[string]any{"ip": "10.0.0.1", "url": "https://x.test/"})); d.Effect != EffectAllow {
		t.Errorf("well-formed: %s (%s)", d.Effect, d.Reason)
	}
}

// TestNetConstantArguments: a constant argument that can never parse is a
// load issue at its position.
func TestNetConstantArguments(t *testing.T) {
	_, err := Load("p.yaml", []byte(`rules:
  - {id: a, effect: deny, tools: ["*"], when: 'net.ip(args.ip) in net.cidr("bogus")'}
  - {id: b, effect: deny, tools: ["*"], when: 'net.ip("300.1.1.1").isLoopback()'}
  - {id: c, effect: deny, tools: ["*"], when: 'url.host("not a url") == args.h'}
`), Options{})
	if err == nil {
		t.Fatal("loaded")
	}
	for _, want := range []string{
		`p.yaml:2:`, `rule "a": when: net.cidr: "bogus" is not a CIDR prefix`,
		`p.yaml:3:`, `rule "b": when: net.ip: "300.1.1.1" is not an IP address`,
		`p.yaml:4:`, `rule "c": when: url.host: url: "not a url" is not an absolute URL`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("issues lack %q:\n%v", want, err)
		}
	}
}

// FuzzParseURL: the url functions' parser never panics, and what it
// accepts has a scheme, a lower-case host and a port in range.
func FuzzParseURL(f *testing.F) {
	for _, s := range []string{"https://api.example.com/v1", "http://[::1]:8080/x", "http://u:p@h.test@evil.test/", "mailto:a@b", "http://x:99999/", "//h/p", "HTTP://X.TEST./"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		scheme, host, port, _, err := ParseURL(s)
		if err != nil {
			return
		}
		if scheme == "" || host == "" || strings.ToLower(host) != host || strings.HasSuffix(host, ".") || port < -1 || port > 65535 {
			t.Fatalf("ParseURL(%q) = %q %q %d", s, scheme, host, port)
		}
	})
}

// FuzzParseIP: net.ip and net.cidr never panic; an accepted address has
// no zone and parses back to itself from its string form.
func FuzzParseIP(f *testing.F) {
	for _, s := range []string{"127.0.0.1", "::ffff:127.0.0.1", "fe80::1%eth0", "0177.0.0.1", "10.0.0.0/8", "fd00::/8", "2130706433"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if a, err := ParseIP(s); err == nil {
			b, err := ParseIP(a.String())
			if err != nil || a != b || a.Zone() != "" {
				t.Fatalf("ParseIP(%q) = %v, round trip %v %v", s, a, b, err)
			}
		}
		if p, err := ParseCIDR(s); err == nil && p != p.Masked() {
			t.Fatalf("ParseCIDR(%q) = %v not masked", s, p)
		}
	})
}

// TestNetFunctionsListTime: at list time the arguments are unknown, so a
// condition over them through the helpers is undecided: an allow rule
// still discloses the tool, a deny rule does not hide it.
func TestNetFunctionsListTime(t *testing.T) {
	p := load(t, `rules:
  - {id: internal, effect: allow, tools: ["mcp:a.*"], when: 'net.ip(url.host(args.url)) in net.cidr("10.0.0.0/8")'}
  - {id: all, effect: allow, tools: ["mcp:b.*"]}
  - {id: no-meta, effect: deny, tools: ["mcp:b.*"], when: 'net.ip(args.ip).isLinkLocal()'}
`, Options{})
	for _, tool := range []string{"mcp:a.fetch", "mcp:b.fetch"} {
		if !p.Disclose(t.Context(), call(alice, tool, nil, nil)) {
			t.Errorf("%s is hidden at list time", tool)
		}
	}
	if p.Disclose(t.Context(), call(alice, "mcp:c.fetch", nil, nil)) {
		t.Error("mcp:c.fetch (no rule) is shown")
	}
}

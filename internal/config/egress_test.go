package config

import (
	"net/netip"
	"strings"
	"testing"
)

// TestEgressBlock: a valid egress block converts to the guard's policy; a
// bad CIDR, host glob, redirect limit or proxy is an issue with file:line.
func TestEgressBlock(t *testing.T) {
	cfg, err := Parse("c.yaml", []byte(`
servers:
  - name: up
    url: http://mcp.example.test/mcp
    egress: {allow_hosts: ["*.example.test"], allow_cidrs: [127.0.0.1/32, "10.1.2.3/8"], max_redirects: 0}
`))
	if err != nil {
		t.Fatal(err)
	}
	p, err := cfg.Servers[0].Egress.Policy()
	if err != nil {
		t.Fatal(err)
	}
	if p.Redirects() != 0 || len(p.AllowCIDRs) != 2 || p.AllowCIDRs[1] != netip.MustParsePrefix("10.0.0.0/8") || !p.HostAllowed("a.example.test") {
		t.Fatalf("policy %+v", p)
	}
	_, err = Parse("c.yaml", []byte(`
credentials: {s: {env: X}}
servers:
  - name: up
    url: http://mcp.example.test/mcp
    egress:
      allow_cidrs: [bogus]
      allow_hosts: ["a.*.test"]
      max_redirects: -2
      proxy: "ftp://p"
  - name: stdio
    command: [x]
    egress: {}
hooks:
  - {name: h, mode: observe, url: "http://h.example.test/", secret: "{{credential:s}}", egress: {allow_cidrs: ["300.0.0.0/8"]}}
`))
	if err == nil {
		t.Fatal("bad egress blocks parsed")
	}
	for _, want := range []string{
		`c.yaml:7:21: servers[0].egress.allow_cidrs[0] "bogus": want a CIDR`,
		`c.yaml:8:21: servers[0].egress.allow_hosts[0] "a.*.test": want a host name`,
		`c.yaml:9:22: servers[0].egress.max_redirects -2`,
		`c.yaml:10:14: servers[0].egress.proxy "ftp://p"`,
		`servers[1].egress: only a Streamable HTTP server`,
		`c.yaml:15:`, `hooks[0].egress.allow_cidrs[0] "300.0.0.0/8"`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("issues lack %q:\n%v", want, err)
		}
	}
}

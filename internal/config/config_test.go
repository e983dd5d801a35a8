package config

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/policy"
)

// The configuration format of DESIGN.md, with a real key hash.
const designConfig = `
listen: 127.0.0.1:7070
naming: {prefix: auto, separator: "__"}
openwop: {test_seams: false}
store: {driver: sqlite, dsn: toolgate.db}
ratelimit: {backend: memory}
audit: {durability: sync, content: hash}
signing: {key_file: toolgate.key}
auth:
  api_keys:
    - {id: alice, key_sha256: "2bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b", tenant: acme, scopes: [fs:read, web:read]}
  jwt: {issuer: "https://id.example.com", audience: toolgate, jwks_url: "https://id.example.com/jwks", scopes_claim: scope, tenant_claim: tid}
credentials:
  gh-token: {env: GITHUB_TOKEN}
servers:
  - name: fs
    command: [npx, -y, "@modelcontextprotocol/server-filesystem", ./data]
  - name: remote
    url: http://127.0.0.1:9000/mcp
    headers: {Authorization: "Bearer {{credential:gh-token}}"}
tools:
  - {match: "mcp:fs.read_*", safety_tier: read, scopes: [fs:read], replay_policy: idempotent}
  - {match: "mcp:fs.write_file", safety_tier: write, scopes: [fs:write], approval: always}
policy:
  default: deny
  rules:
    - {id: readers, effect: allow, tools: ["mcp:fs.*"]}
    - {id: no-etc, effect: deny, tools: ["mcp:fs.*"], when: 'has(args.path) && args.path.startsWith("/etc")'}
    - {id: big-writes, effect: require_approval, tools: ["mcp:fs.write_file"], when: 'size(args.content) > 10000'}
  ratelimits:
    - {tools: ["*"], per: principal_tool, rate: 10/s, burst: 20}
approvals: {ttl: 15m, wait: 30s, approvers_scope: toolgate:approve}
hooks:
  - {name: siem, mode: observe, url: http://127.0.0.1:9100/hook, timeout: 500ms, secret: "{{credential:gh-token}}"}
`

func TestDesignConfigParses(t *testing.T) {
	cfg, err := Parse("toolgate.yaml", []byte(designConfig))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Policy == nil || len(cfg.Servers) != 2 || len(cfg.Classifications()) != 2 || cfg.Auth.JWT.TenantClaim != "tid" {
		t.Fatalf("cfg = %+v", cfg)
	}
	if rate, burst, ok := cfg.Policy.RateLimit("mcp:fs.read_file"); !ok || rate != 10 || burst != 20 {
		t.Errorf("rate limit = %v %v %v", rate, burst, ok)
	}
}

func TestDefaults(t *testing.T) {
	cfg, err := Parse("min.yaml", []byte("listen: 127.0.0.1:9999\n"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Naming.Prefix != "auto" || cfg.Naming.Separator != "__" || cfg.Store.Driver != "sqlite" || cfg.Audit.Content != "hash" ||
		cfg.RateLimit.OnUnavailable != "deny" || cfg.Signing.KeyFile != "toolgate.key" || cfg.Policy != nil {
		t.Fatalf("defaults: %+v", cfg)
	}
}

func TestIssuesAreLocatedAndComplete(t *testing.T) {
	src := `listen: 127.0.0.1:7070
bogus: 1
servers:
  - name: fs
    url: http://127.0.0.1:1/mcp
    headers: {Authorization: "Bearer {{credential:missing}}"}
    colour: red
policy:
  rules:
    - {id: r, effect: allow, tools: ["*"], when: 'principal.nope == 1'}
hooks:
  - {name: dlp, mode: enforce, url: http://127.0.0.1:1/h, secret: plaintext}
mcp: {max_body_bytes: 10}
`
	_, err := Parse("c.yaml", []byte(src))
	var issues policy.Issues
	if !errors.As(err, &issues) {
		t.Fatalf("err = %v", err)
	}
	if !errors.Is(err, &errcode.Error{Code: errcode.InvalidConfig}) {
		t.Errorf("issues are not invalid_config: %v", err)
	}
	text := err.Error()
	for _, want := range []string{`c.yaml:2:1: unknown key "bogus"`, `c.yaml:7:5: unknown key "colour"`, "undeclared credential", "c.yaml:10:",
		"c.yaml:12:5: hooks[0].secret: want a credential reference", "mcp.max_body_bytes 10"} {
		if !strings.Contains(text, want) {
			t.Errorf("issues lack %q:\n%s", want, text)
		}
	}
}

func TestMalformedYAML(t *testing.T) {
	for _, src := range []string{"", "listen: [unclosed", "\t- tab", "- a list\n- at the root\n"} {
		_, err := Parse("m.yaml", []byte(src))
		var issues policy.Issues
		if !errors.As(err, &issues) || len(issues) == 0 || issues[0].Pos.Line < 1 {
			t.Errorf("%q: err = %v", src, err)
		}
	}
}

func TestOneDocumentOnly(t *testing.T) {
	_, err := Parse("m.yaml", []byte("policy: {default: deny}\n---\npolicy: {default: allow}\n"))
	if err == nil || !strings.Contains(err.Error(), "2 YAML documents") {
		t.Fatalf("err = %v", err)
	}
}

func TestIssuesAreCapped(t *testing.T) {
	var b strings.Builder
	for i := 0; i < 5000; i++ {
		b.WriteString("k" + strings.Repeat("x", i%7) + string(rune('a'+i%26)) + "_" + strings.Repeat("y", i/26) + ": 1\n")
	}
	_, err := Parse("big.yaml", []byte(b.String()))
	var issues policy.Issues
	if !errors.As(err, &issues) || len(issues) != MaxIssues+1 || !strings.Contains(issues[MaxIssues].Message, "more issue") {
		t.Fatalf("%d issues, last %v", len(issues), issues[len(issues)-1])
	}
}

// A sqlite store.dsn must be a plain file path, and listen a real
// host:port: validate must refuse what serve would refuse (or misread).
func TestStorePathAndListen(t *testing.T) {
	for _, c := range []struct{ src, want string }{
		{"store: {dsn: 'file:toolgate.db'}", "c.yaml:1:14: store.dsn: database path \"file:toolgate.db\" is a URI"},
		{"store: {dsn: 'x.db?mode=memory'}", "contains '?'"},
		{"store: {dsn: ':memory:'}", "is not durable"},
		{"listen: '[::1:7074'", "want host:port"},
		{"listen: 'a b:7074'", `host "a b" is neither`},
		{"listen: '999.1.1.1:7074'", `host "999.1.1.1" is neither`},
		{"listen: '127.0.0.1:+7074'", "port is not a number"},
		{"listen: '127.0.0.1:70000'", "port is not a number"},
	} {
		_, err := Parse("c.yaml", []byte(c.src+"\n"))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want %q", c.src, err, c.want)
		}
	}
	for _, ok := range []string{"listen: '127.0.0.1:7070'", "listen: '[::1]:0'", "listen: 'localhost:7070'", "listen: ':7070'",
		"listen: 'gw-1.internal.example:7070'", "store: {dsn: 'data/toolgate.db'}"} {
		if _, err := Parse("c.yaml", []byte(ok+"\n")); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
}

// A number the field cannot hold says so (not "want a number, got a number").
func TestNumberOutOfRange(t *testing.T) {
	_, err := Parse("c.yaml", []byte("mcp: {max_body_bytes: 99999999999999999999}\n"))
	if err == nil || !strings.Contains(err.Error(), "c.yaml:1:23: want a whole number within range, got 9999999") {
		t.Fatalf("err = %v", err)
	}
}

// The session caps default to DefaultMaxSessions and
// DefaultMaxSessionsPerPrincipal (never above max_sessions); inherit_env
// and idle_timeout are stdio keys with checked values, every issue located.
func TestSessionCapsAndStdioKeys(t *testing.T) {
	cfg, err := Parse("ok.yaml", []byte(`servers:
  - {name: fs, command: [fs-server], inherit_env: [NODE_OPTIONS, HTTPS_PROXY], idle_timeout: 5m}
`))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.MCP.MaxSessions != DefaultMaxSessions || cfg.MCP.MaxSessionsPerPrincipal != DefaultMaxSessionsPerPrincipal {
		t.Errorf("caps = %d, %d; want the defaults", cfg.MCP.MaxSessions, cfg.MCP.MaxSessionsPerPrincipal)
	}
	if s := cfg.Servers[0]; strings.Join(s.InheritEnv, ",") != "NODE_OPTIONS,HTTPS_PROXY" || s.IdleTimeout != "5m" {
		t.Errorf("server = %+v", s)
	}
	cfg, err = Parse("small.yaml", []byte("mcp: {max_sessions: 4}\n"))
	if err != nil || cfg.MCP.MaxSessionsPerPrincipal != 4 {
		t.Fatalf("max_sessions 4: per principal %v, %v; want 4", cfg, err)
	}
	_, err = Parse("bad.yaml", []byte(`mcp: {max_sessions: -1, max_sessions_per_principal: -2}
servers:
  - {name: fs, command: [fs-server], inherit_env: [OK, "1BAD", OK], idle_timeout: soon, env: {"A-B": x}}
  - {name: remote, url: "http://127.0.0.1:1/mcp", inherit_env: [HOME], idle_timeout: 1m}
`))
	text := fmt.Sprint(err)
	for _, want := range []string{
		"bad.yaml:1:", "mcp.max_sessions -1: want at least 1", "mcp.max_sessions_per_principal -2: want at least 1",
		`bad.yaml:3:56: servers[0].inherit_env[1] "1BAD": want an environment variable name`,
		`servers[0].inherit_env[2] "OK" is a duplicate`,
		`servers[0].idle_timeout "soon" is not a duration`,
		`servers[0].env "A-B": want an environment variable name`,
		"bad.yaml:4:", "servers[1].inherit_env: only a stdio server", "servers[1].idle_timeout: only a stdio server",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("issues lack %q:\n%s", want, text)
		}
	}
	_, err = Parse("above.yaml", []byte("mcp: {max_sessions: 4, max_sessions_per_principal: 5}\n"))
	if err == nil || !strings.Contains(err.Error(), "above.yaml:1:52: mcp.max_sessions_per_principal 5 is above mcp.max_sessions 4") {
		t.Errorf("per principal above the total: %v", err)
	}
}

// The http: limits and the new auth.jwt keys are validated with file:line
// issues, all at once; valid values parse with their defaults applied.
func TestHTTPLimitsAndJWTKeys(t *testing.T) {
	bad := `http:
  read_header_timeout: fast
  read_body_timeout: -1s
  idle_timeout: 0s
  max_header_bytes: 100
  max_unauthenticated_conns: -2
auth:
  jwt:
    issuer: https://id.example.com
    audience: toolgate
    jwks_url: https://id.example.com/jwks
    jwks_refresh_interval: often
    resource: "https://gw.example.com/mcp?x=1"
    scopes_supported: ["a b"]
`
	_, err := Parse("h.yaml", []byte(bad))
	var is policy.Issues
	if !errors.As(err, &is) {
		t.Fatalf("err = %v", err)
	}
	for _, want := range []string{"h.yaml:2:", "http.read_header_timeout", "h.yaml:3:", "http.read_body_timeout", "h.yaml:4:", "http.idle_timeout",
		"h.yaml:5:", "http.max_header_bytes", "h.yaml:6:", "http.max_unauthenticated_conns",
		"h.yaml:12:", "jwks_refresh_interval", "h.yaml:13:", "auth.jwt.resource", "h.yaml:14:", "scopes_supported[0]"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("issues lack %q:\n%v", want, err)
		}
	}
	cfg, err := Parse("ok.yaml", []byte("http: {read_body_timeout: 5s}\n"))
	if err != nil {
		t.Fatal(err)
	}
	rh, rb, idle := cfg.HTTP.Durations()
	if rh != DefaultReadHeaderTimeout || rb.Seconds() != 5 || idle != DefaultIdleTimeout ||
		cfg.HTTP.MaxHeaderBytes != DefaultMaxHeaderBytes || cfg.HTTP.MaxUnauthenticatedConns != DefaultMaxUnauthenticatedConns {
		t.Errorf("defaults: %v %v %v %+v", rh, rb, idle, cfg.HTTP)
	}
}

// tools[].validate_args (issue 13 point 6): absent means validate; false
// reaches the classification; a value that is not a boolean is a located
// issue.
func TestToolsValidateArgs(t *testing.T) {
	cfg, err := Parse("v.yaml", []byte("tools:\n  - {match: \"mcp:a.*\"}\n  - {match: \"mcp:b.*\", validate_args: false}\n"))
	if err != nil {
		t.Fatal(err)
	}
	cl := cfg.Classifications()
	if cl[0].ValidateArgs != nil || cl[1].ValidateArgs == nil || *cl[1].ValidateArgs {
		t.Fatalf("classifications %+v %+v", cl[0], cl[1])
	}
	_, err = Parse("v.yaml", []byte("tools:\n  - {match: \"mcp:b.*\",\n     validate_args: sometimes}\n"))
	var issues policy.Issues
	if !errors.As(err, &issues) || len(issues) == 0 || issues[0].Pos.Line != 3 || !strings.Contains(issues[0].Message, "want true or false") {
		t.Fatalf("a non-boolean validate_args: %v", err)
	}
}

// audit.readers_scope (issue 12 point 7) defaults to toolgate:audit; a
// value with spaces is an issue located at its line.
func TestAuditReadersScope(t *testing.T) {
	cfg, err := Parse("min.yaml", []byte("listen: 127.0.0.1:9999\n"))
	if err != nil || cfg.Audit.ReadersScope != "toolgate:audit" {
		t.Fatalf("default readers_scope: %+v %v", cfg, err)
	}
	cfg, err = Parse("ok.yaml", []byte("audit: {readers_scope: \"acme:audit\"}\n"))
	if err != nil || cfg.Audit.ReadersScope != "acme:audit" {
		t.Fatalf("readers_scope: %+v %v", cfg, err)
	}
	_, err = Parse("bad.yaml", []byte("listen: 127.0.0.1:9999\naudit:\n  readers_scope: \"two words\"\n"))
	if err == nil || !strings.Contains(err.Error(), `bad.yaml:3:`) || !strings.Contains(err.Error(), "audit.readers_scope") {
		t.Fatalf("a readers_scope with a space: %v", err)
	}
}

// TestRateLimitRedisKeys: ratelimit.url must be a Redis URL and key_prefix
// only goes with the redis backend, each located; a valid redis section
// decodes with its defaults (on_unavailable deny).
func TestRateLimitRedisKeys(t *testing.T) {
	_, err := Parse("c.yaml", []byte("ratelimit:\n  backend: redis\n  url: http://127.0.0.1:6379\n"))
	if err == nil || !strings.Contains(err.Error(), "c.yaml:3:8: ratelimit.url: want redis://") {
		t.Errorf("http url: %v", err)
	}
	_, err = Parse("c.yaml", []byte("ratelimit:\n  key_prefix: x\n"))
	if err == nil || !strings.Contains(err.Error(), "c.yaml:2:15: ratelimit.key_prefix applies to the redis backend only") {
		t.Errorf("key_prefix on memory: %v", err)
	}
	c, err := Parse("c.yaml", []byte("ratelimit: {backend: redis, url: 'redis://127.0.0.1:6379/0', key_prefix: 'tg:'}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.RateLimit.OnUnavailable != "deny" || c.RateLimit.KeyPrefix != "tg:" {
		t.Errorf("decoded %+v", c.RateLimit)
	}
}

// approvals.binding_secret must be a credential reference to a declared
// credential (it is a secret shared by replicas, never a literal).
func TestApprovalBindingSecret(t *testing.T) {
	for _, c := range []struct{ secret, want string }{
		{`plaintext`, "approvals.binding_secret: want a credential reference"},
		{`"{{credential:nope}}"`, "{{credential:nope}} refers to an undeclared credential"},
		{`"{{credential:bind}}"`, ""},
	} {
		src := "credentials:\n  bind: {env: TG_BIND}\napprovals: {binding_secret: " + c.secret + "}\n"
		_, err := Parse("c.yaml", []byte(src))
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.secret, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: err = %v, want %q", c.secret, err, c.want)
		}
	}
}

// store.dsn for postgres must be a postgres:// URL; the refusal never
// quotes the DSN (a mistyped scheme once sent the whole DSN, password
// included, to the server, whose error quoted it).
func TestPostgresDSNIsURL(t *testing.T) {
	for _, dsn := range []string{
		"postgress://u:Sup3rSecretPW@127.0.0.1:5432/test?sslmode=disable",
		"host=127.0.0.1 user=u password=Sup3rSecretPW dbname=test",
		"postgres:///test?password=Sup3rSecretPW",
	} {
		_, err := Parse("c.yaml", []byte("store: {driver: postgres, dsn: \""+dsn+"\"}\n"))
		if err == nil || !strings.Contains(err.Error(), "store.dsn: want a URL postgres://") {
			t.Errorf("%s: err = %v", dsn, err)
			continue
		}
		if strings.Contains(err.Error(), "Sup3rSecretPW") {
			t.Errorf("the refusal quotes the password: %v", err)
		}
	}
	if _, err := Parse("c.yaml", []byte("store: {driver: postgres, dsn: \"postgresql://u@127.0.0.1/test?sslmode=disable\"}\n")); err != nil {
		t.Errorf("a postgres URL is refused: %v", err)
	}
}

// log: format and level (issue 16 point 3): defaults text and info, the
// closed sets validated with their location.
func TestLogSection(t *testing.T) {
	cfg, err := Parse("c.yaml", []byte("listen: 127.0.0.1:7070\n"))
	if err != nil || cfg.Log.Format != "text" || cfg.Log.Level != "info" || cfg.Log.SlogLevel() != slog.LevelInfo {
		t.Fatalf("defaults: %+v %v", cfg, err)
	}
	cfg, err = Parse("c.yaml", []byte("log: {format: json, level: debug}\n"))
	if err != nil || cfg.Log.Format != "json" || cfg.Log.SlogLevel() != slog.LevelDebug {
		t.Fatalf("json/debug: %+v %v", cfg, err)
	}
	_, err = Parse("c.yaml", []byte("log: {format: xml, level: loud}\n"))
	for _, want := range []string{`c.yaml:1:15: log.format "xml": want text or json`, `c.yaml:1:27: log.level "loud": want debug, info, warn or error`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("err = %v, want %q", err, want)
		}
	}
}

// observability.tracing: off by default; protocol, endpoint and
// sample_ratio are checked where they are written.
func TestTracingSection(t *testing.T) {
	cfg, err := Parse("c.yaml", []byte("listen: 127.0.0.1:7070\n"))
	if err != nil || cfg.Observability.Tracing.Enabled || cfg.Observability.Tracing.SampleRatio != nil {
		t.Fatalf("defaults: %+v %v", cfg.Observability, err)
	}
	cfg, err = Parse("c.yaml", []byte("observability: {tracing: {enabled: true, endpoint: \"http://127.0.0.1:4318\", protocol: grpc, sample_ratio: 0.5}}\n"))
	if tr := cfg.Observability.Tracing; err != nil || !tr.Enabled || tr.Protocol != "grpc" || tr.SampleRatio == nil || *tr.SampleRatio != 0.5 {
		t.Fatalf("set: %+v %v", cfg.Observability, err)
	}
	_, err = Parse("c.yaml", []byte("observability:\n  tracing: {enabled: true, endpoint: \"127.0.0.1:4318\", protocol: zipkin, sample_ratio: 1.5}\n"))
	for _, want := range []string{
		`c.yaml:2:66: observability.tracing.protocol "zipkin": want http or grpc`,
		`c.yaml:2:38: observability.tracing.endpoint "127.0.0.1:4318": want an http(s)://host:port URL`,
		`c.yaml:2:88: observability.tracing.sample_ratio 1.5: want a number from 0 to 1`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("err = %v, want %q", err, want)
		}
	}
}

// http_tools and openapi entries: every shape problem is a located issue.
func TestHTTPToolsIssues(t *testing.T) {
	doc := `credentials: {k: {env: K}}
http_tools:
  - {name: ok, url: "https://api.example.com/v1/{id}?key={{credential:k}}", headers: {X-Key: "{{credential:k}}"}}
  - {name: "bad name", url: "https://api.example.com/"}
  - {name: ok, method: FETCH, url: "https://{host}.example.com/"}
  - {name: q, url: "ftp://x/", body: args.1x, query: {a: "{{credential:nope}}", b: "{{env:HOME}}"}}
  - {name: g, url: "https://x.example/", body: args, timeout: 0s, max_response_bytes: -1, egress: {allow_cidrs: [10/8], max_redirects: 99, proxy: "socks5://p"}}
openapi:
  - {file: a.yaml, url: "https://x.example/a.json"}
  - {server: "https://x.example/{v}"}
`
	_, err := Parse("h.yaml", []byte(doc))
	if err == nil {
		t.Fatal("no issues")
	}
	for _, want := range []string{
		`h.yaml:4:`, `http_tools[1].name "bad name"`,
		`http_tools[2].name "ok" is a duplicate`, `http_tools[2].method "FETCH"`, `the host is literal`,
		`http_tools[3].url "ftp://x/"`, `http_tools[3].body "args.1x"`, `{{credential:nope}} refers to an undeclared credential`, `placeholder {{env:HOME}}`,
		`http_tools[4].body: a GET request has no body`, `http_tools[4].timeout "0s"`, `max_response_bytes -1`, `allow_cidrs[0] "10/8"`, `max_redirects 99`, `proxy "socks5://p"`,
		`openapi[0]: set exactly one of file or url`, `openapi[1]: set exactly one of file or url`, `openapi[1].server`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("issues lack %q:\n%v", want, err)
		}
	}
}

// observability.metrics_listen must not claim listen's socket: the same
// port with either host a wildcard, or hosts resolving to a common address
// (localhost through the hosts file), is an issue; another port, another
// loopback address or port 0 is fine.
func TestMetricsListenOverlap(t *testing.T) {
	for _, c := range []struct {
		listen, metrics string
		overlap         bool
	}{
		{"127.0.0.1:17070", "127.0.0.1:17070", true},
		{"127.0.0.1:17070", "localhost:17070", true},
		{"127.0.0.1:17070", "LocalHost.:17070", true},
		{"127.0.0.1:17070", ":17070", true},
		{"127.0.0.1:17070", "0.0.0.0:17070", true},
		{"127.0.0.1:17070", "[::]:17070", true},
		{":17070", "127.0.0.1:17070", true},
		{"127.0.0.1:17070", "[::ffff:127.0.0.1]:17070", true},
		{"127.0.0.1:17070", "127.0.0.1:17071", false},
		{"127.0.0.1:17070", "127.0.0.2:17070", false},
		{"127.0.0.1:17070", ":17071", false},
		{"127.0.0.1:0", "127.0.0.1:0", false},
		{"127.0.0.1:0", ":0", false},
	} {
		src := fmt.Sprintf("listen: %q\nobservability: {metrics_listen: %q}\n", c.listen, c.metrics)
		_, err := Parse("m.yaml", []byte(src))
		got := err != nil && strings.Contains(err.Error(), "overlaps listen")
		if got != c.overlap {
			t.Errorf("listen %s, metrics_listen %s: overlap reported %v, want %v (err %v)", c.listen, c.metrics, got, c.overlap, err)
		}
		if !c.overlap && err != nil {
			t.Errorf("listen %s, metrics_listen %s: %v", c.listen, c.metrics, err)
		}
	}
}

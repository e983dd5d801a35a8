// Package config loads toolgate's YAML configuration (DESIGN.md
// §Configuration): strict decoding (an unknown key is an error), then full
// validation, reporting every issue at once with file:line.
package config

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/netip"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/toolgate/toolgate/catalog"
	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/internal/egress"
	"github.com/toolgate/toolgate/internal/glob"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/store/sqlite"
)

// Config is the whole configuration file. Field docs give defaults.
type Config struct {
	Listen      string                `yaml:"listen"` // default 127.0.0.1:7070
	Naming      Naming                `yaml:"naming"`
	MCP         MCP                   `yaml:"mcp"`
	HTTP        HTTP                  `yaml:"http"`
	OpenWOP     OpenWOP               `yaml:"openwop"`
	Store       Store                 `yaml:"store"`
	RateLimit   RateLimit             `yaml:"ratelimit"`
	Audit       Audit                 `yaml:"audit"`
	Signing     Signing               `yaml:"signing"`
	Auth        Auth                  `yaml:"auth"`
	Credentials map[string]Credential `yaml:"credentials"`
	Servers     []Server              `yaml:"servers"`
	// HTTPTools are HTTP APIs served as tools http:<name> (httptools.go).
	HTTPTools []HTTPTool `yaml:"http_tools"`
	// OpenAPI imports the operations of OpenAPI 3 documents as HTTP tools.
	OpenAPI    []OpenAPI   `yaml:"openapi"`
	Tools      []ToolClass `yaml:"tools"`
	PolicyNode yaml.Node   `yaml:"policy"`
	Approvals  Approvals   `yaml:"approvals"`
	Hooks      []Hook      `yaml:"hooks"`
	Pinning    Pinning     `yaml:"pinning"`
	Log        Log         `yaml:"log"`
	// Observability configures /metrics and telemetry export (issue 16).
	Observability Observability `yaml:"observability"`

	// Derived by Load.
	File   string          `yaml:"-"`
	Policy *policy.Program `yaml:"-"` // nil when the file has no policy block (deny all)

	doc *yaml.Node // the document's root mapping, for PosOf
}

// Pinning controls tool-definition pinning (issue 17 §3): every tool's
// definition digest (catalog.DefinitionDigest) is kept in the store and
// compared with what the upstream lists.
type Pinning struct {
	// Mode is off (no digests kept), record (default: a new or changed
	// definition is served, the change recorded and evented) or enforce
	// (a new or changed definition is held: not listed, a call answers
	// tool_changed, until an operator approves it; the first listing of a
	// server whose tools have never been pinned pins them all).
	Mode string `yaml:"mode"`
}

// Naming controls tool names on the MCP surface.
type Naming struct {
	Prefix    string `yaml:"prefix"`    // auto (default) | always | never
	Separator string `yaml:"separator"` // default "__"
}

// MCP controls the agent-facing MCP endpoint (/mcp).
type MCP struct {
	// MaxBodyBytes bounds a request body; larger ones are refused with
	// 413. Default 4 MiB.
	MaxBodyBytes int64 `yaml:"max_body_bytes"`
	// SessionTimeout closes an MCP session (and its per-client upstream
	// sessions, for stdio servers their processes) idle this long.
	// Default 30m.
	SessionTimeout string `yaml:"session_timeout"`
	// MaxSessions bounds the open MCP sessions of the gateway; an
	// initialize beyond it is refused with HTTP 503 and a JSON-RPC error.
	// Default DefaultMaxSessions.
	MaxSessions int `yaml:"max_sessions"`
	// MaxSessionsPerPrincipal bounds the open MCP sessions of one
	// principal (tenant and id); an initialize beyond it is refused with
	// HTTP 429 and a JSON-RPC error. Default DefaultMaxSessionsPerPrincipal;
	// at most MaxSessions.
	MaxSessionsPerPrincipal int `yaml:"max_sessions_per_principal"`
}

// Defaults of the MCP session caps (mcp.max_sessions,
// mcp.max_sessions_per_principal). With per_client stdio servers each
// session may hold one process per server.
const (
	DefaultMaxSessions             = 512
	DefaultMaxSessionsPerPrincipal = 32
)

// OpenWOP controls the OpenWOP HTTP surface.
type OpenWOP struct {
	TestSeams bool `yaml:"test_seams"`
}

// Store selects the event/receipt store.
type Store struct {
	Driver      string `yaml:"driver"` // sqlite (default) | postgres | memory
	DSN         string `yaml:"dsn"`
	Synchronous string `yaml:"synchronous"` // sqlite: normal (default) | full
	// Journal (sqlite; nil means true) makes the journal file next to the
	// database (dsn + ".tgjournal") the durability point of events and
	// receipts; false commits every group to SQLite (sqlite.Options.NoJournal).
	Journal *bool `yaml:"journal"`
}

// NoJournal reports whether store.journal is false.
func (s Store) NoJournal() bool { return s.Journal != nil && !*s.Journal }

// RateLimit selects the rate-limit backend.
type RateLimit struct {
	Backend       string `yaml:"backend"` // memory (default) | redis
	URL           string `yaml:"url"`
	OnUnavailable string `yaml:"on_unavailable"` // deny (default) | allow
	// KeyPrefix starts every Redis key of the redis backend (default
	// "toolgate:rl:"); replicas that share limits use the same prefix.
	KeyPrefix string `yaml:"key_prefix"`
}

// Audit controls event content and durability.
type Audit struct {
	Durability string `yaml:"durability"` // sync (default)
	Content    string `yaml:"content"`    // hash (default) | full
	Retention  string `yaml:"retention"`  // e.g. 90d; empty keeps everything
	// ReadersScope is the scope that lets a principal read every event of
	// its tenant over the HTTP API (default toolgate:audit); without it a
	// principal reads only its own calls' events.
	ReadersScope string `yaml:"readers_scope"`
	// RecordScope is the scope a principal needs to ask for its calls to
	// be recorded (MCP _meta toolgate/record, /v1/calls record) or to
	// replay a recorded run (toolgate/replayOf, replayOf); default
	// toolgate:record. A request without it is refused (forbidden,
	// details.reason "record_scope") and the refusal is recorded.
	RecordScope string `yaml:"record_scope"`
	// RecordRetention (e.g. 7d) is how long recorded calls are kept: those
	// that started earlier are pruned at start, then hourly. Empty keeps
	// them.
	RecordRetention string `yaml:"record_retention"`
}

// Signing locates the Ed25519 receipt key.
type Signing struct {
	KeyFile string `yaml:"key_file"` // default toolgate.key, created 0600 on first start
}

// Auth lists API keys and the JWT verifier.
type Auth struct {
	APIKeys []APIKey `yaml:"api_keys"`
	JWT     *JWT     `yaml:"jwt"`
}

// APIKey is one API key, stored as the lowercase hex SHA-256 of the key.
type APIKey struct {
	ID        string            `yaml:"id"`
	KeySHA256 string            `yaml:"key_sha256"`
	Tenant    string            `yaml:"tenant"`
	Scopes    []string          `yaml:"scopes"`
	Attrs     map[string]string `yaml:"attributes"`
}

// JWT configures bearer-token verification against an OIDC issuer's JWKS.
type JWT struct {
	Issuer      string `yaml:"issuer"`
	Audience    string `yaml:"audience"`
	JWKSURL     string `yaml:"jwks_url"`
	ScopesClaim string `yaml:"scopes_claim"`
	TenantClaim string `yaml:"tenant_claim"`
	// JWKSRefreshInterval is the least time between two fetches of the
	// JWKS: a token naming a kid the cached set lacks refetches it at most
	// once per interval (a duration; default 60s).
	JWKSRefreshInterval string `yaml:"jwks_refresh_interval"`
	// Resource is the canonical URI of the MCP endpoint as clients reach
	// it (RFC 9728 resource, e.g. https://gw.example.com/mcp), named in
	// the protected-resource metadata and the WWW-Authenticate
	// resource_metadata URL. Default: derived from each request
	// (http(s)://<Host>/mcp); set it behind a TLS-terminating proxy.
	Resource string `yaml:"resource"`
	// ScopesSupported is the protected-resource metadata's
	// scopes_supported (RFC 9728 §2): the scopes a client may request.
	ScopesSupported []string `yaml:"scopes_supported"`
}

// HTTP bounds the listener's requests and connections (/mcp and /v1). Every
// field is optional; the defaults are the Default* constants.
type HTTP struct {
	// ReadHeaderTimeout bounds reading a request's line and headers
	// (default 10s).
	ReadHeaderTimeout string `yaml:"read_header_timeout"`
	// ReadBodyTimeout bounds reading a request's body, from the end of its
	// headers (default 30s); a body not received by then is refused (408)
	// and the connection closed. Responses, and SSE streams, are not cut.
	ReadBodyTimeout string `yaml:"read_body_timeout"`
	// IdleTimeout closes a keep-alive connection idle this long between
	// requests (default 2m).
	IdleTimeout string `yaml:"idle_timeout"`
	// MaxHeaderBytes bounds a request's line and headers (default 64 KiB,
	// at least 4 KiB).
	MaxHeaderBytes int `yaml:"max_header_bytes"`
	// MaxUnauthenticatedConns caps the connections that have not yet sent
	// a request with valid credentials (default 256); a new connection
	// beyond it is closed at once. Connections that authenticated are not
	// counted.
	MaxUnauthenticatedConns int `yaml:"max_unauthenticated_conns"`
}

// Defaults of the http: section.
const (
	DefaultReadHeaderTimeout       = 10 * time.Second
	DefaultReadBodyTimeout         = 30 * time.Second
	DefaultIdleTimeout             = 2 * time.Minute
	DefaultMaxHeaderBytes          = 64 << 10
	DefaultMaxUnauthenticatedConns = 256
)

// Durations returns the http: section's timeouts with defaults applied
// (a value that does not parse, which validation reports, is the default).
func (h HTTP) Durations() (readHeader, readBody, idle time.Duration) {
	get := func(s string, def time.Duration) time.Duration {
		if d, err := ParseDuration(s); err == nil {
			return d
		}
		return def
	}
	return get(h.ReadHeaderTimeout, DefaultReadHeaderTimeout), get(h.ReadBodyTimeout, DefaultReadBodyTimeout), get(h.IdleTimeout, DefaultIdleTimeout)
}

// Credential is a reference resolved at call time; its value is never logged.
type Credential struct {
	Env  string `yaml:"env"`
	File string `yaml:"file"`
}

// Server is one upstream MCP server: stdio (Command) or Streamable HTTP (URL).
type Server struct {
	Name    string            `yaml:"name"`
	Command []string          `yaml:"command"`
	Env     map[string]string `yaml:"env"`
	Cwd     string            `yaml:"cwd"`
	URL     string            `yaml:"url"`
	Headers map[string]string `yaml:"headers"`
	Timeout string            `yaml:"timeout"`
	// InheritEnv names the variables of the gateway's environment a stdio
	// server gets besides the minimal one (PATH, HOME, TMPDIR, TZ, LANG,
	// LANGUAGE, LC_*) and its own Env; nothing else of the gateway's
	// environment reaches it. Stdio only.
	InheritEnv []string `yaml:"inherit_env"`
	// IdleTimeout stops a per-client stdio server process (its whole
	// process group) after this long without a request from the gateway
	// and with none in flight or subscribed; the next use of the session
	// starts it again. Empty: never. Stdio only.
	IdleTimeout string `yaml:"idle_timeout"`
	// Sessions is per_client (default: one upstream session per downstream
	// MCP session, which relays logging, progress, sampling and
	// elicitation) or shared (one upstream session for every client:
	// cheaper, no server-to-client relaying).
	Sessions string `yaml:"sessions"`
	// Egress, when present, puts the server's Streamable HTTP requests
	// behind the SSRF guard (internal/egress) and marks its tools
	// egress: safe-fetch; absent, requests go out unguarded, as before.
	// Streamable HTTP only.
	Egress *Egress `yaml:"egress"`
}

// Policy converts e (servers[].egress, hooks[].egress; the type of
// http_tools[].egress too) to the SSRF guard's policy: max_redirects
// unset is the guard's default (3), 0 follows none. Errors: invalid_config
// for a bad CIDR, host glob, redirect limit or proxy URL (Validate reports
// the same issues with their location at load).
func (e Egress) Policy() (egress.Policy, error) {
	p := egress.Policy{AllowHosts: e.AllowHosts, Proxy: e.Proxy}
	if e.MaxRedirects != nil {
		if *e.MaxRedirects < 0 {
			return egress.Policy{}, errcode.Errorf(errcode.InvalidConfig, "egress max_redirects %d: want 0 (none) or more", *e.MaxRedirects)
		}
		p.MaxRedirects = *e.MaxRedirects
		if p.MaxRedirects == 0 {
			p.MaxRedirects = -1 // the guard's "none"
		}
	}
	for _, c := range e.AllowCIDRs {
		pr, err := netip.ParsePrefix(c)
		if err != nil {
			return egress.Policy{}, errcode.Errorf(errcode.InvalidConfig, "egress allow_cidrs %q is not a CIDR prefix (such as 10.0.0.0/8)", c)
		}
		p.AllowCIDRs = append(p.AllowCIDRs, pr.Masked())
	}
	if err := p.Validate(); err != nil {
		return egress.Policy{}, err
	}
	return p, nil
}

// Credential reference syntax in server env and headers values.
var credentialRef = regexp.MustCompile(`\{\{\s*credential:([^}\s]*)\s*\}\}`)

// ExpandCredentials replaces every {{credential:NAME}} in v with the value
// resolve returns for NAME (DESIGN.md decision 9: resolved at connect
// time, never stored in config). Errors: the first resolve error.
func ExpandCredentials(v string, resolve func(name string) (string, error)) (string, error) {
	var firstErr error
	out := credentialRef.ReplaceAllStringFunc(v, func(m string) string {
		name := credentialRef.FindStringSubmatch(m)[1]
		val, err := resolve(name)
		if err != nil && firstErr == nil {
			firstErr = err
		}
		return val
	})
	return out, firstErr
}

// Resolve reads a credential's value: the environment variable Env, or the
// contents of File with one trailing newline removed. Errors name the
// credential and the source, never the value.
func (c Credential) Resolve(name string) (string, error) {
	if c.Env != "" {
		v, ok := os.LookupEnv(c.Env)
		if !ok || v == "" {
			return "", fmt.Errorf("credential %s: environment variable %s is not set", name, c.Env)
		}
		return v, nil
	}
	b, err := os.ReadFile(c.File)
	if err != nil {
		return "", fmt.Errorf("credential %s: %v", name, err)
	}
	return strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r"), nil
}

// ToolClass is one `tools:` entry: descriptor facts for toolIds matching Match.
type ToolClass struct {
	Match        string   `yaml:"match"`
	SafetyTier   string   `yaml:"safety_tier"`
	Scopes       []string `yaml:"scopes"`
	ReplayPolicy string   `yaml:"replay_policy"`
	Approval     string   `yaml:"approval"`
	Egress       string   `yaml:"egress"`
	CostHint     string   `yaml:"cost_hint"`
	LatencyHint  string   `yaml:"latency_hint"`
	Title        string   `yaml:"title"`
	Description  string   `yaml:"description"`
	Timeout      string   `yaml:"timeout"`
	// ValidateArgs (validate_args, default true) validates each call's
	// arguments against the tool's inputSchema before the call is decided
	// further or dispatched; false turns that off for an upstream whose
	// schema is known to be wrong.
	ValidateArgs *bool `yaml:"validate_args"`
	// Record (record, default false) records every call of the matched
	// tools: their redacted arguments and results are stored for replay
	// (issue 18), kept for audit.record_retention.
	Record *bool `yaml:"record"`
}

// Approvals configures human approval.
type Approvals struct {
	TTL               string `yaml:"ttl"`
	Wait              string `yaml:"wait"`
	ApproversScope    string `yaml:"approvers_scope"`
	AllowSelfApproval bool   `yaml:"allow_self_approval"`
	// BindingSecret keys the HMAC that binds an approval to a call's exact
	// arguments, as a credential reference ("{{credential:NAME}}"). Every
	// replica sharing one store must have the same secret, so that a call
	// approved through one replica is matched (and consumed once) by its
	// retry on another. Empty: derived from the replica's signing key,
	// which suits one replica.
	BindingSecret string `yaml:"binding_secret"`
}

// Log configures the gateway's operator log (stderr). Every line, in
// either format, passes the redactor first (registered credential values
// and secret shapes are scrubbed, DESIGN.md decision 9).
type Log struct {
	// Format is text (default: log/slog's key=value lines) or json (one
	// JSON object per line, log/slog's JSONHandler: time, level, msg and
	// the line's attributes).
	Format string `yaml:"format"`
	// Level is the least severity written: debug, info (default), warn or
	// error.
	Level string `yaml:"level"`
}

// SlogLevel is l.Level as a slog.Level (info for an empty or unknown
// value, which validation reports).
func (l Log) SlogLevel() slog.Level {
	switch l.Level {
	case "debug":
		return slog.LevelDebug
	case "warn":
		return slog.LevelWarn
	case "error":
		return slog.LevelError
	}
	return slog.LevelInfo
}

// Observability configures what the gateway exports about itself: the
// /metrics listener and OpenTelemetry traces.
type Observability struct {
	// MetricsListen, when set, is a host:port of its own where /metrics
	// is served (and then not on Listen), so that it can stay off the
	// public listener. "" (default) serves /metrics on Listen.
	MetricsListen string `yaml:"metrics_listen"`
	// Tracing configures OpenTelemetry traces (off by default).
	Tracing Tracing `yaml:"tracing"`
}

// Tracing configures OpenTelemetry traces exported over OTLP (issue 16
// point 2). Off by default. A key left empty falls back to the standard
// OpenTelemetry environment variables (OTEL_EXPORTER_OTLP_ENDPOINT,
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, OTEL_EXPORTER_OTLP_PROTOCOL,
// OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG, OTEL_SERVICE_NAME,
// OTEL_RESOURCE_ATTRIBUTES, OTEL_EXPORTER_OTLP_HEADERS); a key that is set
// wins over them. OTEL_SDK_DISABLED=true turns tracing off whatever
// enabled says.
type Tracing struct {
	// Enabled turns tracing on (default false: no SDK tracer provider is
	// installed and the gate does no tracing work).
	Enabled bool `yaml:"enabled"`
	// Endpoint is the OTLP receiver's URL: http(s)://host:port, with a
	// path for OTLP/HTTP (default /v1/traces). Empty: the
	// OTEL_EXPORTER_OTLP_* variables, else the exporter's default
	// (localhost:4318 for http, localhost:4317 for grpc).
	Endpoint string `yaml:"endpoint"`
	// Protocol is http (OTLP/HTTP protobuf) or grpc. Empty:
	// OTEL_EXPORTER_OTLP_TRACES_PROTOCOL or OTEL_EXPORTER_OTLP_PROTOCOL
	// (grpc or http/protobuf), else http.
	Protocol string `yaml:"protocol"`
	// SampleRatio is the fraction of new traces sampled, 0 to 1, under a
	// parent-based sampler (a call whose incoming traceparent is sampled
	// is always traced). Unset: OTEL_TRACES_SAMPLER, else every trace.
	SampleRatio *float64 `yaml:"sample_ratio"`
}

// Hook is a config-declared webhook hook.
type Hook struct {
	Name     string `yaml:"name"`
	Mode     string `yaml:"mode"` // observe | enforce
	URL      string `yaml:"url"`
	Timeout  string `yaml:"timeout"`
	Mutating bool   `yaml:"mutating"`
	Content  string `yaml:"content"` // hash (default) | full
	// Secret is the HMAC-SHA256 signing key, as a credential reference
	// ("{{credential:NAME}}"); required.
	Secret string `yaml:"secret"`
	// Egress, when present, puts the hook's requests behind the SSRF
	// guard (internal/egress); absent, they go out unguarded, as before.
	Egress *Egress `yaml:"egress"`
}

// Classifications converts the `tools:` entries for catalog.Classify.
func (c *Config) Classifications() []catalog.Classification {
	out := make([]catalog.Classification, len(c.Tools))
	for i, t := range c.Tools {
		out[i] = catalog.Classification{
			Match: t.Match, SafetyTier: catalog.SafetyTier(t.SafetyTier), Scopes: t.Scopes,
			ReplayPolicy: catalog.ReplayPolicy(t.ReplayPolicy), Approval: catalog.Approval(t.Approval),
			Egress: catalog.Egress(t.Egress), CostHint: catalog.Hint(t.CostHint), LatencyHint: catalog.Hint(t.LatencyHint),
			Title: t.Title, Description: t.Description, ValidateArgs: t.ValidateArgs, Record: t.Record,
		}
	}
	return out
}

// MaxFileSize bounds a configuration file (bytes).
const MaxFileSize = 8 << 20

// MaxIssues bounds how many issues are reported; the rest are counted.
const MaxIssues = 200

// Load reads and validates the file at path. The error, when not an I/O
// error, is policy.Issues listing every problem with file:line.
func Load(path string) (*Config, error) {
	data, err := readFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(path, data)
}

// readFile reads a configuration file, at most MaxFileSize bytes.
func readFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading config: %w", err)
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.IsDir() {
		return nil, fmt.Errorf("reading config: %s is a directory", path)
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("reading config: %w", err)
	}
	if len(data) > MaxFileSize {
		return nil, fmt.Errorf("reading config: %s is larger than %d MiB", path, MaxFileSize>>20)
	}
	return data, nil
}

var lineMsg = regexp.MustCompile(`^line (\d+): (.*)$`)

// Parse decodes and validates a configuration document named file. The
// error is policy.Issues listing every problem with file:line:col.
func Parse(file string, data []byte) (*Config, error) {
	cfg, issues := parse(file, data)
	if len(issues) > 0 {
		return nil, issues
	}
	return cfg, nil
}

// parse is Parse returning what it decoded even when there are issues
// (nil when the document could not be decoded at all), for LoadAll.
func parse(file string, data []byte) (*Config, policy.Issues) {
	var issues policy.Issues
	add := func(n *yaml.Node, format string, args ...any) {
		p := policy.Pos{File: file}
		if n != nil {
			p.Line, p.Col = n.Line, n.Column
		}
		issues = append(issues, policy.Issue{Pos: p, Message: fmt.Sprintf(format, args...)})
	}
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, policy.Issues{{Pos: syntaxPos(file, data, err), Message: yamlSyntax(err)}}
	}
	cfg := &Config{File: file}
	if len(root.Content) == 0 {
		return nil, policy.Issues{{Pos: policy.Pos{File: file, Line: 1, Col: 1}, Message: "the configuration is empty"}}
	}
	if n := countDocuments(data); n > 1 {
		return nil, policy.Issues{{Pos: policy.Pos{File: file, Line: 1, Col: 1}, Message: fmt.Sprintf("the file holds %d YAML documents; a configuration is exactly one", n)}}
	}
	if root.Content[0].Kind != yaml.MappingNode {
		n := root.Content[0]
		return nil, policy.Issues{{Pos: policy.Pos{File: file, Line: n.Line, Col: n.Column}, Message: "the configuration must be a mapping of keys (listen, servers, policy, ...)"}}
	}
	lines := indexLines(&root)
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(cfg); err != nil {
		var te *yaml.TypeError
		if !errors.As(err, &te) {
			return nil, policy.Issues{{Pos: syntaxPos(file, data, err), Message: yamlSyntax(err)}}
		}
		for _, m := range te.Errors {
			p := policy.Pos{File: file}
			if sm := lineMsg.FindStringSubmatch(m); sm != nil {
				p.Line, _ = strconv.Atoi(sm[1])
				m = friendly(sm[2]) + keyHint(sm[2])
				p.Col = columnOf(lines, p.Line, sm[2])
			}
			issues = append(issues, policy.Issue{Pos: p, Message: m})
		}
	}
	doc := root.Content[0]
	cfg.doc = doc
	at := func(path ...any) *yaml.Node { return find(doc, path...) }

	cfg.applyDefaults()
	cfg.validate(at, add)

	if cfg.PolicyNode.Kind != 0 {
		// Parse and compile even when parsing found issues, so that CEL
		// and rule errors are reported in the same run.
		spec, pis := policy.ParseNodeSource(file, data, &cfg.PolicyNode)
		issues = append(issues, pis...)
		prog, err := policy.Compile(spec, policy.Options{})
		if err != nil {
			var ci policy.Issues
			if errors.As(err, &ci) {
				issues = appendNew(issues, ci)
			} else {
				add(&cfg.PolicyNode, "%v", err)
			}
		}
		cfg.Policy = prog
	}
	if len(issues) > 0 {
		issues = issues.Sorted()
		if len(issues) > MaxIssues {
			more := len(issues) - MaxIssues
			issues = append(issues[:MaxIssues], policy.Issue{Pos: policy.Pos{File: file, Line: issues[MaxIssues].Pos.Line},
				Message: fmt.Sprintf("... and %d more issue(s)", more)})
		}
		return cfg, issues
	}
	return cfg, nil
}

// appendNew appends the issues of more that are not already in issues.
func appendNew(issues, more policy.Issues) policy.Issues {
	seen := make(map[policy.Issue]bool, len(issues))
	for _, i := range issues {
		seen[i] = true
	}
	for _, i := range more {
		if !seen[i] {
			issues = append(issues, i)
		}
	}
	return issues
}

var (
	unknownField = regexp.MustCompile(`^field (\S+) not found in type \S+$`)
	cannotDecode = regexp.MustCompile("^cannot unmarshal !!(\\w+) (`[^`]*` )?into (\\S+)$")
)

// friendly rewrites yaml.v3's decode errors without Go type names.
func friendly(msg string) string {
	if sm := unknownField.FindStringSubmatch(msg); sm != nil {
		return fmt.Sprintf("unknown key %q", sm[1])
	}
	if sm := cannotDecode.FindStringSubmatch(msg); sm != nil {
		want := "a mapping"
		switch t := sm[3]; {
		case t == "string":
			want = "a string"
		case t == "bool":
			want = "true or false"
		case strings.HasPrefix(t, "int") || strings.HasPrefix(t, "float"):
			want = "a number"
		case strings.HasPrefix(t, "[]"):
			want = "a list"
		}
		got := map[string]string{"seq": "a list", "map": "a mapping", "str": "a string", "int": "a number", "float": "a number", "bool": "a boolean", "null": "null"}[sm[1]]
		if got == "" {
			got = sm[1]
		}
		v := strings.Trim(strings.TrimSpace(sm[2]), "`")
		if want == "a number" && got == "a number" {
			if sm[1] == "float" && (strings.HasPrefix(sm[3], "int") || strings.HasPrefix(sm[3], "uint")) {
				return fmt.Sprintf("want a whole number within range, got %s", v)
			}
			return fmt.Sprintf("number %s is out of range", v)
		}
		if v != "" {
			got += fmt.Sprintf(" (%s)", v)
		}
		return fmt.Sprintf("wrong type: want %s, got %s", want, got)
	}
	return msg
}

// indexLines maps each line to the nodes that start on it, in document order.
func indexLines(root *yaml.Node) map[int][]*yaml.Node {
	idx := map[int][]*yaml.Node{}
	var walk func(n *yaml.Node)
	walk = func(n *yaml.Node) {
		idx[n.Line] = append(idx[n.Line], n)
		for _, c := range n.Content {
			walk(c)
		}
	}
	walk(root)
	return idx
}

// columnOf finds the column of a decode error on line: the key it names
// (for an unknown field), else the first node on that line.
func columnOf(lines map[int][]*yaml.Node, line int, msg string) int {
	nodes := lines[line]
	if sm := unknownField.FindStringSubmatch(msg); sm != nil {
		for _, n := range nodes {
			if n.Value == sm[1] {
				return n.Column
			}
		}
	}
	if sm := cannotDecode.FindStringSubmatch(msg); sm != nil {
		for _, n := range nodes {
			if n.Tag == "!!"+sm[1] && !(n.Kind == yaml.MappingNode && n.Line == 1 && n.Column == 1) {
				return n.Column
			}
		}
	}
	if len(nodes) > 0 {
		return nodes[0].Column
	}
	return 1
}

// countDocuments counts the YAML documents in data.
func countDocuments(data []byte) int {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	n := 0
	for {
		var doc yaml.Node
		if err := dec.Decode(&doc); err != nil {
			return n
		}
		n++
	}
}

var linePrefix = regexp.MustCompile(`^yaml: (line \d+: )?`)

// yamlSyntax is a YAML syntax error without its "yaml: line N:" prefix.
func yamlSyntax(err error) string {
	return "YAML syntax: " + linePrefix.ReplaceAllString(err.Error(), "")
}

// yamlErrLine is the line yaml.v3 names in err, 1 if none.
func yamlErrLine(err error) int {
	if sm := regexp.MustCompile(`line (\d+)`).FindStringSubmatch(err.Error()); sm != nil {
		n, _ := strconv.Atoi(sm[1])
		return n
	}
	return 1
}

// find walks a mapping/sequence path (string keys, int indexes) and returns
// the value node, or the deepest node found on the way (for a position).
func find(n *yaml.Node, path ...any) *yaml.Node {
	cur := n
	for _, p := range path {
		switch k := p.(type) {
		case string:
			if cur.Kind != yaml.MappingNode {
				return cur
			}
			found := false
			for i := 0; i+1 < len(cur.Content); i += 2 {
				if cur.Content[i].Value == k {
					cur, found = cur.Content[i+1], true
					break
				}
			}
			if !found {
				return cur
			}
		case int:
			if cur.Kind != yaml.SequenceNode || k >= len(cur.Content) {
				return cur
			}
			cur = cur.Content[k]
		}
	}
	return cur
}

func (c *Config) applyDefaults() {
	if c.Listen == "" {
		c.Listen = "127.0.0.1:7070"
	}
	if c.Naming.Prefix == "" {
		c.Naming.Prefix = "auto"
	}
	if c.Naming.Separator == "" {
		c.Naming.Separator = "__"
	}
	if c.Store.Driver == "" {
		c.Store.Driver = "sqlite"
	}
	if c.Store.DSN == "" && c.Store.Driver == "sqlite" {
		c.Store.DSN = "toolgate.db"
	}
	if c.Store.Synchronous == "" {
		c.Store.Synchronous = "normal"
	}
	if c.RateLimit.Backend == "" {
		c.RateLimit.Backend = "memory"
	}
	if c.RateLimit.OnUnavailable == "" {
		c.RateLimit.OnUnavailable = "deny"
	}
	if c.Audit.Durability == "" {
		c.Audit.Durability = "sync"
	}
	if c.Audit.Content == "" {
		c.Audit.Content = "hash"
	}
	if c.Audit.RecordScope == "" {
		c.Audit.RecordScope = "toolgate:record"
	}
	if c.Audit.ReadersScope == "" {
		c.Audit.ReadersScope = "toolgate:audit"
	}
	if c.Signing.KeyFile == "" {
		c.Signing.KeyFile = "toolgate.key"
	}
	if c.MCP.MaxBodyBytes == 0 {
		c.MCP.MaxBodyBytes = 4 << 20
	}
	if c.MCP.MaxSessions == 0 {
		c.MCP.MaxSessions = DefaultMaxSessions
	}
	if c.MCP.MaxSessionsPerPrincipal == 0 {
		c.MCP.MaxSessionsPerPrincipal = min(DefaultMaxSessionsPerPrincipal, c.MCP.MaxSessions)
	}
	if c.HTTP.MaxHeaderBytes == 0 {
		c.HTTP.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	if c.HTTP.MaxUnauthenticatedConns == 0 {
		c.HTTP.MaxUnauthenticatedConns = DefaultMaxUnauthenticatedConns
	}
	for i := range c.Servers {
		if c.Servers[i].Sessions == "" {
			c.Servers[i].Sessions = "per_client"
		}
	}
	if c.Approvals.TTL == "" {
		c.Approvals.TTL = "15m"
	}
	if c.Approvals.Wait == "" {
		c.Approvals.Wait = "30s"
	}
	if c.Approvals.ApproversScope == "" {
		c.Approvals.ApproversScope = "toolgate:approve"
	}
	if c.Pinning.Mode == "" {
		c.Pinning.Mode = "record"
	}
	if c.Log.Format == "" {
		c.Log.Format = "text"
	}
	if c.Log.Level == "" {
		c.Log.Level = "info"
	}
	c.applyHTTPDefaults()
}

var (
	sha256Hex  = regexp.MustCompile(`^[0-9a-f]{64}$`)
	identRe    = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,63}$`)
	separatorR = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,4}$`)
	envName    = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

func oneOf(v string, allowed ...string) bool {
	for _, a := range allowed {
		if v == a {
			return true
		}
	}
	return false
}

func validDuration(s string) bool {
	_, err := ParseDuration(s)
	return err == nil
}

// ParseDuration parses a positive duration of the configuration: a whole
// number of days ("90d") or a Go duration ("720h", "500ms"). Errors: a
// plain error naming the accepted forms, for an empty, malformed, zero or
// negative value, or more days than a time.Duration holds (about 106751).
func ParseDuration(s string) (time.Duration, error) {
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil || n <= 0 || n > int(math.MaxInt64/int64(24*time.Hour)) {
			return 0, fmt.Errorf("duration %q: want a positive whole number of days such as 90d, or a Go duration such as 720h", s)
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("duration %q: want a positive duration such as 90d, 720h or 500ms", s)
	}
	return d, nil
}

func (c *Config) validate(at func(...any) *yaml.Node, add func(*yaml.Node, string, ...any)) {
	if _, _, err := splitHostPort(c.Listen); err != nil {
		add(at("listen"), "listen %q: %v", c.Listen, err)
	}
	if c.Observability.MetricsListen != "" {
		if _, _, err := splitHostPort(c.Observability.MetricsListen); err != nil {
			add(at("observability", "metrics_listen"), "observability.metrics_listen %q: %v", c.Observability.MetricsListen, err)
		} else if listenOverlap(c.Listen, c.Observability.MetricsListen) {
			add(at("observability", "metrics_listen"), "observability.metrics_listen %q: overlaps listen %q (the same port on the same or a wildcard address; leave it out to serve /metrics there)", c.Observability.MetricsListen, c.Listen)
		}
	}
	if !oneOf(c.Naming.Prefix, "auto", "always", "never") {
		add(at("naming", "prefix"), "naming.prefix %q: want auto, always or never", c.Naming.Prefix)
	}
	if !separatorR.MatchString(c.Naming.Separator) {
		add(at("naming", "separator"), "naming.separator %q: want 1-4 characters of [a-zA-Z0-9_-] (model function names allow only those)", c.Naming.Separator)
	}
	if !oneOf(c.Store.Driver, "sqlite", "postgres", "memory") {
		add(at("store", "driver"), "store.driver %q: want sqlite, postgres or memory", c.Store.Driver)
	}
	if c.Store.Driver == "sqlite" {
		if msg := sqlite.PathProblem(c.Store.DSN); msg != "" {
			add(at("store", "dsn"), "store.dsn: %s", msg)
		}
	}
	if c.Store.Driver == "postgres" && c.Store.DSN == "" {
		add(at("store"), "store.dsn is required for postgres")
	} else if c.Store.Driver == "postgres" {
		// A URL only: a keyword/value DSN, or a mistyped scheme that makes
		// one ("postgress://user:pw@…"), would send its words to the server
		// as settings, whose refusal quotes them, password included. The
		// message never quotes the DSN.
		if u, err := url.Parse(c.Store.DSN); err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") || u.Host == "" {
			add(at("store", "dsn"), "store.dsn: want a URL postgres://user[:password]@host[:port]/database[?param=value…] (scheme postgres or postgresql, with a host; a keyword/value DSN is not accepted)")
		}
	}
	if !oneOf(c.Store.Synchronous, "normal", "full") {
		add(at("store", "synchronous"), "store.synchronous %q: want normal or full", c.Store.Synchronous)
	}
	if !oneOf(c.RateLimit.Backend, "memory", "redis") {
		add(at("ratelimit", "backend"), "ratelimit.backend %q: want memory or redis", c.RateLimit.Backend)
	}
	if c.RateLimit.Backend == "redis" && c.RateLimit.URL == "" {
		add(at("ratelimit"), "ratelimit.url is required for the redis backend")
	}
	if u := c.RateLimit.URL; u != "" && !strings.HasPrefix(u, "redis://") && !strings.HasPrefix(u, "rediss://") && !strings.HasPrefix(u, "unix://") {
		add(at("ratelimit", "url"), "ratelimit.url: want redis://host:port[/db], rediss:// (TLS) or unix://path")
	}
	if c.RateLimit.KeyPrefix != "" && c.RateLimit.Backend != "redis" {
		add(at("ratelimit", "key_prefix"), "ratelimit.key_prefix applies to the redis backend only")
	}
	if !oneOf(c.RateLimit.OnUnavailable, "deny", "allow") {
		add(at("ratelimit", "on_unavailable"), "ratelimit.on_unavailable %q: want deny or allow", c.RateLimit.OnUnavailable)
	}
	if !oneOf(c.Audit.Durability, "sync") {
		add(at("audit", "durability"), "audit.durability %q: only sync is supported", c.Audit.Durability)
	}
	if !oneOf(c.Audit.Content, "hash", "full") {
		add(at("audit", "content"), "audit.content %q: want hash or full", c.Audit.Content)
	}
	if strings.TrimSpace(c.Audit.ReadersScope) != c.Audit.ReadersScope || strings.ContainsAny(c.Audit.ReadersScope, " \t\r\n") {
		add(at("audit", "readers_scope"), "audit.readers_scope %q: a scope is one word without spaces", c.Audit.ReadersScope)
	}
	if c.Audit.RecordRetention != "" && !validDuration(c.Audit.RecordRetention) {
		add(at("audit", "record_retention"), "audit.record_retention %q: want a duration such as 7d or 168h", c.Audit.RecordRetention)
	}
	if strings.TrimSpace(c.Audit.RecordScope) != c.Audit.RecordScope || strings.ContainsAny(c.Audit.RecordScope, " \t\r\n") {
		add(at("audit", "record_scope"), "audit.record_scope %q: a scope is one word without spaces", c.Audit.RecordScope)
	}
	if c.Audit.Retention != "" && !validDuration(c.Audit.Retention) {
		add(at("audit", "retention"), "audit.retention %q: want a duration such as 90d or 720h", c.Audit.Retention)
	}
	keyIDs := map[string]bool{}
	for i, k := range c.Auth.APIKeys {
		if !identRe.MatchString(k.ID) {
			add(at("auth", "api_keys", i), "auth.api_keys[%d].id %q: want 1-64 characters of [a-zA-Z0-9_.-], starting with a letter or digit", i, k.ID)
		} else if keyIDs[k.ID] {
			add(at("auth", "api_keys", i, "id"), "auth.api_keys[%d].id %q is a duplicate", i, k.ID)
		}
		keyIDs[k.ID] = true
		if !sha256Hex.MatchString(k.KeySHA256) {
			add(at("auth", "api_keys", i, "key_sha256"), "auth.api_keys[%d].key_sha256: want 64 lowercase hex characters (sha256 of the key; never the key itself)", i)
		}
	}
	if j := c.Auth.JWT; j != nil {
		if j.Issuer == "" || j.Audience == "" || j.JWKSURL == "" {
			add(at("auth", "jwt"), "auth.jwt needs issuer, audience and jwks_url")
		}
		if j.JWKSURL != "" {
			if u, err := url.Parse(j.JWKSURL); err != nil || (u.Scheme != "https" && u.Scheme != "http") {
				add(at("auth", "jwt", "jwks_url"), "auth.jwt.jwks_url %q is not an http(s) URL", j.JWKSURL)
			}
		}
		if j.JWKSRefreshInterval != "" && !validDuration(j.JWKSRefreshInterval) {
			add(at("auth", "jwt", "jwks_refresh_interval"), "auth.jwt.jwks_refresh_interval %q: want a duration such as 60s or 5m", j.JWKSRefreshInterval)
		}
		if j.Resource != "" {
			if u, err := url.Parse(j.Resource); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.Fragment != "" || u.RawQuery != "" || u.User != nil {
				add(at("auth", "jwt", "resource"), "auth.jwt.resource %q: want an absolute http(s) URL without user, query or fragment (RFC 9728 §1.2), e.g. https://gw.example.com/mcp", j.Resource)
			}
		}
		for i, sc := range j.ScopesSupported {
			if sc == "" || strings.ContainsAny(sc, " \"\\") || !printableASCII(sc) {
				add(at("auth", "jwt", "scopes_supported", i), "auth.jwt.scopes_supported[%d] %q: want a scope token (printable ASCII without space, quote or backslash)", i, sc)
			}
		}
	}
	for name, cr := range c.Credentials {
		n := at("credentials", name)
		if (cr.Env == "") == (cr.File == "") {
			add(n, "credentials.%s: set exactly one of env or file", name)
		}
	}
	if c.MCP.SessionTimeout != "" && !validDuration(c.MCP.SessionTimeout) {
		add(at("mcp", "session_timeout"), "mcp.session_timeout %q is not a duration", c.MCP.SessionTimeout)
	}
	for _, d := range []struct{ k, v string }{{"read_header_timeout", c.HTTP.ReadHeaderTimeout}, {"read_body_timeout", c.HTTP.ReadBodyTimeout}, {"idle_timeout", c.HTTP.IdleTimeout}} {
		if d.v != "" && !validDuration(d.v) {
			add(at("http", d.k), "http.%s %q: want a positive duration such as 10s or 2m", d.k, d.v)
		}
	}
	if c.HTTP.MaxHeaderBytes < 4096 || c.HTTP.MaxHeaderBytes > 16<<20 {
		add(at("http", "max_header_bytes"), "http.max_header_bytes %d: want 4096 to 16777216", c.HTTP.MaxHeaderBytes)
	}
	if c.HTTP.MaxUnauthenticatedConns < 1 {
		add(at("http", "max_unauthenticated_conns"), "http.max_unauthenticated_conns %d: want at least 1", c.HTTP.MaxUnauthenticatedConns)
	}
	if c.MCP.MaxBodyBytes < 1024 {
		add(at("mcp", "max_body_bytes"), "mcp.max_body_bytes %d: want at least 1024", c.MCP.MaxBodyBytes)
	}
	if c.MCP.MaxSessions < 1 {
		add(at("mcp", "max_sessions"), "mcp.max_sessions %d: want at least 1", c.MCP.MaxSessions)
	}
	if c.MCP.MaxSessionsPerPrincipal < 1 {
		add(at("mcp", "max_sessions_per_principal"), "mcp.max_sessions_per_principal %d: want at least 1", c.MCP.MaxSessionsPerPrincipal)
	} else if c.MCP.MaxSessions >= 1 && c.MCP.MaxSessionsPerPrincipal > c.MCP.MaxSessions {
		add(at("mcp", "max_sessions_per_principal"), "mcp.max_sessions_per_principal %d is above mcp.max_sessions %d", c.MCP.MaxSessionsPerPrincipal, c.MCP.MaxSessions)
	}
	names := map[string]bool{}
	for i, s := range c.Servers {
		n := at("servers", i)
		if !oneOf(s.Sessions, "per_client", "shared") {
			add(at("servers", i, "sessions"), "servers[%d].sessions %q: want per_client or shared", i, s.Sessions)
		}
		if err := catalog.ValidServerName(s.Name); err != nil {
			add(n, "servers[%d].name: %s", i, errcode.As(err).Message)
		} else if strings.Contains(s.Name, c.Naming.Separator) {
			add(at("servers", i, "name"), "servers[%d].name %q contains the naming separator %q", i, s.Name, c.Naming.Separator)
		}
		if names[s.Name] {
			add(at("servers", i, "name"), "servers[%d].name %q is a duplicate", i, s.Name)
		}
		names[s.Name] = true
		if (len(s.Command) == 0) == (s.URL == "") {
			add(n, "servers[%d] (%s): set exactly one of command (stdio) or url (Streamable HTTP)", i, s.Name)
		}
		if s.URL != "" {
			if u, err := url.Parse(s.URL); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
				add(at("servers", i, "url"), "servers[%d].url %q is not an http(s) URL", i, s.URL)
			}
		}
		if s.Timeout != "" && !validDuration(s.Timeout) {
			add(at("servers", i, "timeout"), "servers[%d].timeout %q is not a duration", i, s.Timeout)
		}
		if s.Egress != nil && len(s.Command) > 0 {
			add(at("servers", i, "egress"), "servers[%d].egress: only a Streamable HTTP server (url) makes outbound requests", i)
		}
		if s.Egress != nil {
			c.checkEgress(*s.Egress, at("servers", i, "egress"), fmt.Sprintf("servers[%d].egress", i), add)
		}
		if s.IdleTimeout != "" {
			if !validDuration(s.IdleTimeout) {
				add(at("servers", i, "idle_timeout"), "servers[%d].idle_timeout %q is not a duration", i, s.IdleTimeout)
			} else if len(s.Command) == 0 {
				add(at("servers", i, "idle_timeout"), "servers[%d].idle_timeout: only a stdio server (command) has a process to stop", i)
			}
		}
		if len(s.InheritEnv) > 0 && len(s.Command) == 0 {
			add(at("servers", i, "inherit_env"), "servers[%d].inherit_env: only a stdio server (command) has an environment", i)
		}
		seenEnv := map[string]bool{}
		for j, name := range s.InheritEnv {
			switch {
			case !envName.MatchString(name):
				add(at("servers", i, "inherit_env", j), "servers[%d].inherit_env[%d] %q: want an environment variable name ([A-Za-z_][A-Za-z0-9_]*)", i, j, name)
			case seenEnv[name]:
				add(at("servers", i, "inherit_env", j), "servers[%d].inherit_env[%d] %q is a duplicate", i, j, name)
			}
			seenEnv[name] = true
		}
		for k := range s.Env {
			if !envName.MatchString(k) {
				add(at("servers", i, "env", k), "servers[%d].env %q: want an environment variable name ([A-Za-z_][A-Za-z0-9_]*)", i, k)
			}
		}
		for _, v := range s.Headers {
			c.checkRefs(v, at("servers", i, "headers"), add)
		}
		for _, v := range s.Env {
			c.checkRefs(v, at("servers", i, "env"), add)
		}
	}
	c.validateHTTPTools(at, add)
	for i, t := range c.Tools {
		n := at("tools", i)
		if t.Match == "" {
			add(n, "tools[%d]: match is required", i)
		} else if err := glob.ValidToolPattern(t.Match); err != nil {
			add(at("tools", i, "match"), "tools[%d].match: %v", i, err)
		}
		if t.SafetyTier != "" && !oneOf(t.SafetyTier, "pure", "read", "write", "exec") {
			add(at("tools", i, "safety_tier"), "tools[%d].safety_tier %q: want pure, read, write or exec", i, t.SafetyTier)
		}
		if t.ReplayPolicy != "" && !oneOf(t.ReplayPolicy, "deterministic", "idempotent", "non-deterministic") {
			add(at("tools", i, "replay_policy"), "tools[%d].replay_policy %q: want deterministic, idempotent or non-deterministic", i, t.ReplayPolicy)
		}
		if t.Approval != "" && !oneOf(t.Approval, "never", "conditional", "always") {
			add(at("tools", i, "approval"), "tools[%d].approval %q: want never, conditional or always", i, t.Approval)
		}
		if t.Egress != "" && !oneOf(t.Egress, "none", "safe-fetch", "host-mediated", "host-owned") {
			add(at("tools", i, "egress"), "tools[%d].egress %q: want none, safe-fetch, host-mediated or host-owned", i, t.Egress)
		}
		for _, h := range []struct{ k, v string }{{"cost_hint", t.CostHint}, {"latency_hint", t.LatencyHint}} {
			if h.v != "" && !oneOf(h.v, "low", "medium", "high") {
				add(at("tools", i, h.k), "tools[%d].%s %q: want low, medium or high", i, h.k, h.v)
			}
		}
		if t.SafetyTier == "exec" && !strings.HasPrefix(t.Match, "x-host-") {
			add(at("tools", i, "safety_tier"), "tools[%d]: safety_tier exec is only allowed for host-extension tools (x-host-*), not %q (RFC 0078 §C)", i, t.Match)
		}
		if t.Timeout != "" && !validDuration(t.Timeout) {
			add(at("tools", i, "timeout"), "tools[%d].timeout %q is not a duration", i, t.Timeout)
		}
	}
	for _, d := range []struct{ k, v string }{{"ttl", c.Approvals.TTL}, {"wait", c.Approvals.Wait}} {
		if !validDuration(d.v) {
			add(at("approvals", d.k), "approvals.%s %q is not a duration", d.k, d.v)
		}
	}
	if b := c.Approvals.BindingSecret; b != "" {
		if !credRef.MatchString(b) || strings.TrimSpace(credRef.ReplaceAllString(b, "")) != "" {
			add(at("approvals", "binding_secret"), "approvals.binding_secret: want a credential reference such as \"{{credential:approval-binding}}\" (shared by every replica)")
		} else {
			c.checkRefs(b, at("approvals", "binding_secret"), add)
		}
	}
	if !oneOf(c.Pinning.Mode, "off", "record", "enforce") {
		add(at("pinning", "mode"), "pinning.mode %q: want off, record or enforce", c.Pinning.Mode)
	}
	if !oneOf(c.Log.Format, "text", "json") {
		add(at("log", "format"), "log.format %q: want text or json", c.Log.Format)
	}
	if !oneOf(c.Log.Level, "debug", "info", "warn", "error") {
		add(at("log", "level"), "log.level %q: want debug, info, warn or error", c.Log.Level)
	}
	if tr := c.Observability.Tracing; tr.Protocol != "" || tr.Endpoint != "" || tr.SampleRatio != nil {
		if !oneOf(tr.Protocol, "", "http", "grpc") {
			add(at("observability", "tracing", "protocol"), "observability.tracing.protocol %q: want http or grpc", tr.Protocol)
		}
		if tr.Endpoint != "" {
			if u, err := url.Parse(tr.Endpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				add(at("observability", "tracing", "endpoint"), "observability.tracing.endpoint %q: want an http(s)://host:port URL", tr.Endpoint)
			}
		}
		if r := tr.SampleRatio; r != nil && !(*r >= 0 && *r <= 1) {
			add(at("observability", "tracing", "sample_ratio"), "observability.tracing.sample_ratio %v: want a number from 0 to 1", *r)
		}
	}
	hookNames := map[string]bool{}
	for i, h := range c.Hooks {
		if !identRe.MatchString(h.Name) || hookNames[h.Name] {
			add(at("hooks", i, "name"), "hooks[%d].name %q: want a unique name of [a-zA-Z0-9_.-]", i, h.Name)
		}
		hookNames[h.Name] = true
		if !oneOf(h.Mode, "observe", "enforce") {
			add(at("hooks", i, "mode"), "hooks[%d].mode %q: want observe or enforce", i, h.Mode)
		}
		if h.Mutating && h.Mode != "enforce" {
			add(at("hooks", i, "mutating"), "hooks[%d]: only an enforce hook may be mutating", i)
		}
		if u, err := url.Parse(h.URL); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			add(at("hooks", i, "url"), "hooks[%d].url %q is not an http(s) URL", i, h.URL)
		}
		if h.Timeout != "" && !validDuration(h.Timeout) {
			add(at("hooks", i, "timeout"), "hooks[%d].timeout %q is not a duration", i, h.Timeout)
		}
		if h.Egress != nil {
			c.checkEgress(*h.Egress, at("hooks", i, "egress"), fmt.Sprintf("hooks[%d].egress", i), add)
		}
		if h.Content != "" && !oneOf(h.Content, "hash", "full") {
			add(at("hooks", i, "content"), "hooks[%d].content %q: want hash or full", i, h.Content)
		}
		if !credRef.MatchString(h.Secret) || strings.TrimSpace(credRef.ReplaceAllString(h.Secret, "")) != "" {
			add(at("hooks", i), "hooks[%d].secret: want a credential reference such as \"{{credential:hook-secret}}\" (the HMAC-SHA256 signing key)", i)
		} else {
			c.checkRefs(h.Secret, at("hooks", i, "secret"), add)
		}
	}
}

var credRef = regexp.MustCompile(`\{\{\s*credential:([^}\s]*)\s*\}\}`)

// checkRefs reports references to undeclared credentials.
func (c *Config) checkRefs(v string, n *yaml.Node, add func(*yaml.Node, string, ...any)) {
	for _, m := range credRef.FindAllStringSubmatch(v, -1) {
		if _, ok := c.Credentials[m[1]]; !ok {
			add(n, "{{credential:%s}} refers to an undeclared credential", m[1])
		}
	}
}

// printableASCII reports whether s holds only printable ASCII.
func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// ValidIdent reports whether s is a valid identifier for an API key id or a
// hook name: 1-64 characters of [a-zA-Z0-9_.-], starting with a letter or
// digit.
func ValidIdent(s string) bool { return identRe.MatchString(s) }

func splitHostPort(s string) (string, int, error) {
	host, portText, err := net.SplitHostPort(s)
	if err != nil {
		return "", 0, errors.New("want host:port, with an IPv6 host in brackets ([::1]:7070)")
	}
	port, err := strconv.Atoi(portText)
	if err != nil || port < 0 || port > 65535 || portText[0] < '0' || portText[0] > '9' {
		return "", 0, errors.New("port is not a number in 0-65535")
	}
	if host != "" && net.ParseIP(host) == nil && (!hostnameR.MatchString(host) || strings.Trim(host, "0123456789.") == "") {
		return "", 0, fmt.Errorf("host %q is neither an IP address nor a host name", host)
	}
	return host, port, nil
}

// listenOverlap reports whether listen addresses a and b (host:port, as
// splitHostPort accepts) would claim the same socket: the same non-zero
// port and either host a wildcard (empty, 0.0.0.0, ::) or both hosts
// naming a common address. IP literals compare as addresses (an
// IPv4-mapped IPv6 address as its IPv4 form); "localhost" (and names
// under .localhost) resolves through the system resolver's local answers
// (the hosts file; 127.0.0.1 and ::1 when it has none), never the
// network; another host name compares by its text, case-insensitively.
// Port 0 (any free port) never overlaps.
func listenOverlap(a, b string) bool {
	ha, pa, err := splitHostPort(a)
	if err != nil {
		return false
	}
	hb, pb, err := splitHostPort(b)
	if err != nil || pa != pb || pa == 0 {
		return false
	}
	if wildcardHost(ha) || wildcardHost(hb) {
		return true
	}
	as, bs := listenAddrs(ha), listenAddrs(hb)
	for _, x := range as {
		for _, y := range bs {
			if x == y {
				return true
			}
		}
	}
	return false
}

// localResolver is the system resolver's local part: the hosts file
// (Go's resolver), with every DNS connection refused.
var localResolver = &net.Resolver{PreferGo: true, Dial: func(context.Context, string, string) (net.Conn, error) {
	return nil, errors.New("validate resolves no host name over the network")
}}

// wildcardHost reports whether a listen host binds every address.
func wildcardHost(h string) bool {
	if h == "" {
		return true
	}
	ip, err := netip.ParseAddr(h)
	return err == nil && ip.Unmap().IsUnspecified()
}

// listenAddrs is what listenOverlap compares of host h: its addresses
// (an IP literal; localhost's local answers), else its lowercased name.
func listenAddrs(h string) []string {
	if ip, err := netip.ParseAddr(h); err == nil {
		return []string{ip.Unmap().String()}
	}
	name := strings.ToLower(strings.TrimSuffix(h, "."))
	if name != "localhost" && !strings.HasSuffix(name, ".localhost") {
		return []string{"name:" + name}
	}
	var out []string
	// Go's resolver reads the hosts file; its DNS dial is refused, so
	// validate never touches the network.
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if ips, err := localResolver.LookupNetIP(ctx, "ip", name); err == nil {
		for _, ip := range ips {
			out = append(out, ip.Unmap().String())
		}
	}
	if len(out) == 0 {
		out = []string{"127.0.0.1", "::1"}
	}
	return out
}

// hostnameR matches a DNS host name (RFC 1123 labels); an all-numeric one
// must be an IP address instead.
var hostnameR = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\.?$`)

package config

import (
	"fmt"
	"net"
	"net/url"
	"regexp"
	"strings"

	"go.yaml.in/yaml/v3"
)

// HTTPTool is one `http_tools:` entry: a plain HTTP API called as the tool
// `http:<Name>` (transport http, issue 17 point 1). The request is built
// from the call's arguments at call time:
//
//   - URL: `{param}` in its path is replaced by the argument param,
//     percent-escaped as one path segment (a missing argument refuses the
//     call); `{{credential:NAME}}` may appear in its path or query; the
//     scheme and host are literal (never taken from arguments);
//   - Query: query parameter name → value template; a template is literal
//     text with `{{args.NAME}}` (an argument) and `{{credential:NAME}}`
//     parts; a parameter whose template names an argument the call lacks
//     is left out; an array argument repeats the parameter;
//   - Headers: header name → value template (the same syntax);
//   - Body: "none", "args" (the arguments not used in the path or query,
//     as a JSON object) or "args.NAME" (that one argument's JSON value),
//     sent as application/json.
//
// A plain value; see docs/CONFIG.md for the defaults.
type HTTPTool struct {
	Name        string            `yaml:"name"`
	Title       string            `yaml:"title"`
	Description string            `yaml:"description"`
	Method      string            `yaml:"method"` // GET (default), HEAD, POST, PUT, PATCH, DELETE
	URL         string            `yaml:"url"`
	Headers     map[string]string `yaml:"headers"`
	Query       map[string]string `yaml:"query"`
	// Body is none, args or args.NAME; default none for GET, HEAD and
	// DELETE, args otherwise.
	Body string `yaml:"body"`
	// InputSchema is the JSON Schema of the arguments (an object schema);
	// default: an object with one property per {param} and {{args.NAME}}
	// (the path parameters required).
	InputSchema map[string]any `yaml:"input_schema"`
	// Timeout bounds one request, headers and body (default 30s); the
	// gateway's bound of every call (60 s) applies too.
	Timeout string `yaml:"timeout"`
	// MaxResponseBytes bounds the response body read (default 1 MiB); a
	// longer body is cut there and the call answers response_too_large.
	MaxResponseBytes int64  `yaml:"max_response_bytes"`
	Egress           Egress `yaml:"egress"`
}

// Egress is the outbound-network policy of an HTTP tool or an OpenAPI
// import (issue 17 point 2, OpenWOP RFC 0076 safe-fetch): the hosts and
// CIDRs its requests may reach, the redirects it may follow and the proxy
// it uses. A plain value.
type Egress struct {
	// AllowHosts lists the host names (exact, or "*.example.com" for any
	// subdomain) the requests may reach, redirect hops included; empty:
	// any host (the dialed address is checked whatever the host).
	AllowHosts []string `yaml:"allow_hosts"`
	// AllowCIDRs lists networks (10.0.0.0/8, fd00::/8) that may be dialed
	// although they are private, loopback or link-local. HTTP tools are
	// always behind the SSRF guard: an API on 127.0.0.1 or a private
	// network needs its CIDR here.
	AllowCIDRs []string `yaml:"allow_cidrs"`
	// MaxRedirects bounds the redirects followed (default 3; 0 follows
	// none).
	MaxRedirects *int `yaml:"max_redirects"`
	// Proxy is an http(s) proxy URL; empty: none (the environment's
	// HTTP_PROXY and the like are never used).
	Proxy string `yaml:"proxy"`
}

// Redirects is e.MaxRedirects with its default (DefaultMaxRedirects).
func (e Egress) Redirects() int {
	if e.MaxRedirects == nil {
		return DefaultMaxRedirects
	}
	return *e.MaxRedirects
}

// OpenAPI is one `openapi:` entry: an OpenAPI 3 document (File or URL)
// whose operations matching Operations become HTTP tools
// `http:<NamePrefix><operationId>`. A plain value.
type OpenAPI struct {
	File string `yaml:"file"` // a path, relative to the working directory
	URL  string `yaml:"url"`  // an http(s) URL fetched at start
	// Server is the base URL of the API; default the document's first
	// server (its variables at their defaults).
	Server string `yaml:"server"`
	// Operations are globs on operationId; default every operation.
	Operations []string          `yaml:"operations"`
	NamePrefix string            `yaml:"name_prefix"`
	Headers    map[string]string `yaml:"headers"` // sent with every request (credential references allowed)
	Timeout    string            `yaml:"timeout"` // as http_tools[].timeout
	// MaxResponseBytes is as http_tools[].max_response_bytes.
	MaxResponseBytes int64  `yaml:"max_response_bytes"`
	Egress           Egress `yaml:"egress"`
}

// Defaults of HTTP tools.
const (
	DefaultHTTPToolTimeout  = "30s"
	DefaultMaxResponseBytes = 1 << 20
	DefaultMaxRedirects     = 3
)

var (
	// httpToolName is the alphabet of an HTTP tool's name: a toolId name
	// that is also a valid MCP-surface name once dots become the separator.
	httpToolName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)
	headerName   = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
	// pathParam is a {param} of an http_tools URL path.
	pathParam = regexp.MustCompile(`\{([A-Za-z_][A-Za-z0-9_-]*)\}`)
	// argRef is an {{args.NAME}} of a value template.
	argRef = regexp.MustCompile(`\{\{\s*args\.([A-Za-z_][A-Za-z0-9_-]*)\s*\}\}`)
	// anyRef is any {{...}} placeholder.
	anyRef = regexp.MustCompile(`\{\{[^}]*\}\}`)
)

// applyHTTPDefaults fills in the defaults of http_tools and openapi
// entries.
func (c *Config) applyHTTPDefaults() {
	for i := range c.HTTPTools {
		t := &c.HTTPTools[i]
		if t.Method == "" {
			t.Method = "GET"
		}
		t.Method = strings.ToUpper(t.Method)
		if t.Body == "" {
			t.Body = "args"
			if t.Method == "GET" || t.Method == "HEAD" || t.Method == "DELETE" {
				t.Body = "none"
			}
		}
		if t.Timeout == "" {
			t.Timeout = DefaultHTTPToolTimeout
		}
		if t.MaxResponseBytes == 0 {
			t.MaxResponseBytes = DefaultMaxResponseBytes
		}
	}
	for i := range c.OpenAPI {
		o := &c.OpenAPI[i]
		if o.Timeout == "" {
			o.Timeout = DefaultHTTPToolTimeout
		}
		if o.MaxResponseBytes == 0 {
			o.MaxResponseBytes = DefaultMaxResponseBytes
		}
	}
}

// validateHTTPTools reports the issues of http_tools and openapi entries
// (the shapes only: an OpenAPI document is read by internal/httptool).
func (c *Config) validateHTTPTools(at func(...any) *yaml.Node, add func(*yaml.Node, string, ...any)) {
	names := map[string]bool{}
	for i, t := range c.HTTPTools {
		key := func(k ...any) *yaml.Node { return at(append([]any{"http_tools", i}, k...)...) }
		if !httpToolName.MatchString(t.Name) {
			add(key("name"), "http_tools[%d].name %q: want 1-64 characters of [A-Za-z0-9_.-], starting with a letter or digit", i, t.Name)
		} else if names[t.Name] {
			add(key("name"), "http_tools[%d].name %q is a duplicate", i, t.Name)
		}
		names[t.Name] = true
		if !oneOf(t.Method, "GET", "HEAD", "POST", "PUT", "PATCH", "DELETE") {
			add(key("method"), "http_tools[%d].method %q: want GET, HEAD, POST, PUT, PATCH or DELETE", i, t.Method)
		}
		params := c.checkToolURL(t.URL, key("url"), fmt.Sprintf("http_tools[%d].url", i), add)
		used := map[string]bool{}
		for _, p := range params {
			used[p] = true
		}
		for k, v := range t.Query {
			if k == "" {
				add(key("query"), "http_tools[%d].query: a parameter name is empty", i)
			}
			c.checkTemplate(v, key("query", k), fmt.Sprintf("http_tools[%d].query.%s", i, k), add)
			for _, m := range argRef.FindAllStringSubmatch(v, -1) {
				used[m[1]] = true
			}
		}
		for k, v := range t.Headers {
			if !headerName.MatchString(k) {
				add(key("headers"), "http_tools[%d].headers: %q is not a header name", i, k)
			}
			c.checkTemplate(v, key("headers", k), fmt.Sprintf("http_tools[%d].headers.%s", i, k), add)
		}
		switch {
		case t.Body == "none" || t.Body == "args":
		case strings.HasPrefix(t.Body, "args.") && argName.MatchString(strings.TrimPrefix(t.Body, "args.")):
		default:
			add(key("body"), "http_tools[%d].body %q: want none, args (the arguments not used in the URL or query) or args.NAME (one argument)", i, t.Body)
		}
		if t.Body != "none" && (t.Method == "GET" || t.Method == "HEAD") {
			add(key("body"), "http_tools[%d].body: a %s request has no body (want none)", i, t.Method)
		}
		if t.InputSchema != nil {
			if ty, ok := t.InputSchema["type"]; ok && ty != "object" {
				add(key("input_schema"), "http_tools[%d].input_schema: the arguments are an object (type: object), not %v", i, ty)
			}
		}
		if !validDuration(t.Timeout) {
			add(key("timeout"), "http_tools[%d].timeout %q is not a duration", i, t.Timeout)
		}
		if t.MaxResponseBytes < 1 {
			add(key("max_response_bytes"), "http_tools[%d].max_response_bytes %d: want at least 1", i, t.MaxResponseBytes)
		}
		c.checkEgress(t.Egress, key("egress"), fmt.Sprintf("http_tools[%d].egress", i), add)
	}
	for i, o := range c.OpenAPI {
		key := func(k ...any) *yaml.Node { return at(append([]any{"openapi", i}, k...)...) }
		where := fmt.Sprintf("openapi[%d]", i)
		if (o.File == "") == (o.URL == "") {
			add(at("openapi", i), "%s: set exactly one of file or url", where)
		}
		if o.URL != "" {
			if u, err := url.Parse(o.URL); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
				add(key("url"), "%s.url %q is not an http(s) URL", where, o.URL)
			}
		}
		if o.Server != "" {
			if u, err := url.Parse(o.Server); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || strings.ContainsAny(o.Server, "{}") {
				add(key("server"), "%s.server %q: want an absolute http(s) URL without placeholders", where, o.Server)
			}
		}
		for j, g := range o.Operations {
			if g == "" {
				add(key("operations", j), "%s.operations[%d] is empty", where, j)
			} else if strings.ContainsFunc(g, func(r rune) bool { return r < 0x20 || r == 0x7f }) || len(g) > 512 {
				add(key("operations", j), "%s.operations[%d]: want a glob on operationId (at most 512 bytes, no control characters)", where, j)
			}
		}
		if o.NamePrefix != "" && !httpToolName.MatchString(o.NamePrefix) {
			add(key("name_prefix"), "%s.name_prefix %q: want characters of [A-Za-z0-9_.-], starting with a letter or digit", where, o.NamePrefix)
		}
		for k, v := range o.Headers {
			if !headerName.MatchString(k) {
				add(key("headers"), "%s.headers: %q is not a header name", where, k)
			}
			if argRef.MatchString(v) {
				add(key("headers", k), "%s.headers.%s: an import's headers take literal text and credential references only", where, k)
			}
			c.checkTemplate(v, key("headers", k), where+".headers."+k, add)
		}
		if !validDuration(o.Timeout) {
			add(key("timeout"), "%s.timeout %q is not a duration", where, o.Timeout)
		}
		if o.MaxResponseBytes < 1 {
			add(key("max_response_bytes"), "%s.max_response_bytes %d: want at least 1", where, o.MaxResponseBytes)
		}
		c.checkEgress(o.Egress, key("egress"), where+".egress", add)
	}
}

var argName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_-]*$`)

// checkToolURL checks an http_tools URL template and returns its path
// parameters.
func (c *Config) checkToolURL(raw string, n *yaml.Node, where string, add func(*yaml.Node, string, ...any)) []string {
	probe := anyRef.ReplaceAllString(pathParam.ReplaceAllString(raw, "p"), "v")
	u, err := url.Parse(probe)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		add(n, "%s %q: want an absolute http(s) URL", where, raw)
		return nil
	}
	if u.User != nil || u.Fragment != "" {
		add(n, "%s %q: a tool URL has no user info or fragment (put credentials in headers)", where, raw)
	}
	rest := raw[strings.Index(raw, "://")+3:]
	host := rest
	if i := strings.IndexAny(rest, "/?"); i >= 0 {
		host = rest[:i]
	}
	if strings.ContainsAny(host, "{}") {
		add(n, "%s %q: the host is literal (no {param} or {{...}} in it)", where, raw)
	}
	pathPart := rest[len(host):]
	query := ""
	if i := strings.IndexByte(pathPart, '?'); i >= 0 {
		pathPart, query = pathPart[:i], pathPart[i+1:]
	}
	if pathParam.MatchString(anyRef.ReplaceAllString(query, "")) {
		add(n, "%s %q: {param} is replaced in the path only; map query parameters with query:", where, raw)
	}
	var params []string
	for _, m := range pathParam.FindAllStringSubmatch(anyRef.ReplaceAllString(pathPart, ""), -1) {
		params = append(params, m[1])
	}
	c.checkTemplate(raw, n, where, add)
	return params
}

// checkTemplate reports placeholders of v that are neither {{args.NAME}}
// nor a declared {{credential:NAME}}.
func (c *Config) checkTemplate(v string, n *yaml.Node, where string, add func(*yaml.Node, string, ...any)) {
	for _, m := range anyRef.FindAllString(v, -1) {
		if !argRef.MatchString(m) && !credRef.MatchString(m) {
			add(n, "%s: placeholder %s: want {{args.NAME}} or {{credential:NAME}}", where, m)
		}
	}
	c.checkRefs(v, n, add)
}

// checkEgress reports the issues of an egress block.
func (c *Config) checkEgress(e Egress, n *yaml.Node, where string, add func(*yaml.Node, string, ...any)) {
	for j, h := range e.AllowHosts {
		name := strings.TrimPrefix(h, "*.")
		if name == "" || (!hostnameR.MatchString(name) && net.ParseIP(name) == nil) {
			add(find(n, "allow_hosts", j), "%s.allow_hosts[%d] %q: want a host name, *.domain or an IP address", where, j, h)
		}
	}
	for j, s := range e.AllowCIDRs {
		if _, _, err := net.ParseCIDR(s); err != nil {
			add(find(n, "allow_cidrs", j), "%s.allow_cidrs[%d] %q: want a CIDR such as 10.0.0.0/8", where, j, s)
		}
	}
	if e.MaxRedirects != nil && (*e.MaxRedirects < 0 || *e.MaxRedirects > 20) {
		add(find(n, "max_redirects"), "%s.max_redirects %d: want 0 to 20", where, *e.MaxRedirects)
	}
	if e.Proxy != "" {
		if u, err := url.Parse(e.Proxy); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			add(find(n, "proxy"), "%s.proxy %q: want an http(s) proxy URL", where, e.Proxy)
		}
	}
}

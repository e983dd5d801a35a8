package httptool

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/toolgate/toolgate/catalog"
	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/internal/config"
	"github.com/toolgate/toolgate/policy"
)

// Build returns the HTTP tools of cfg: every `http_tools:` entry and every
// selected operation of every `openapi:` import, sorted by toolId. It
// reads the OpenAPI documents (a `url:` one fetched now, within
// Options.FetchTimeout) and validates them. With Options.Secret set, every
// credential a tool's URL, query or headers reference that resolves is
// resolved here and registered through Secret (so it is redacted before
// any call);
// requests resolve them again at each call (and register them again).
//
// Errors: policy.Issues (code-free, located at the config entry: a
// document that cannot be read or does not validate, naming its file or
// URL; a duplicate toolId; an operation whose inputSchema cannot be built;
// a referenced credential that does not resolve is not an error).
// Safe for concurrent use; the returned tools are the caller's.
func Build(ctx context.Context, cfg *config.Config, opts Options) ([]Tool, error) {
	if opts.Client == nil {
		eg := opts.Egress
		opts.Client = func(_ string, e config.Egress) *http.Client { return GuardedClient(e, eg...) }
	}
	if opts.FetchTimeout <= 0 {
		opts.FetchTimeout = 30 * time.Second
	}
	resolve := func(name string) (string, error) {
		cr, ok := cfg.Credentials[name]
		if !ok {
			return "", fmt.Errorf("credential %s is not declared", name)
		}
		return cr.Resolve(name)
	}
	var issues policy.Issues
	var tools []Tool
	seen := map[string]policy.Pos{}
	addTool := func(t Tool, pos policy.Pos) {
		if in, ok := t.Invoker.(*invoker); ok {
			t.Credentials = in.s.credentials()
		}
		id := t.Descriptor.ToolID
		if prev, dup := seen[id]; dup {
			issues = append(issues, policy.Issue{Pos: pos, Message: fmt.Sprintf("tool %s is defined twice (also at %s)", id, prev)})
			return
		}
		if err := t.Descriptor.Validate(); err != nil {
			issues = append(issues, policy.Issue{Pos: pos, Message: fmt.Sprintf("tool %s: %s", id, errcode.As(err).Message)})
			return
		}
		// Every credential the tool references that resolves is
		// registered for redaction now, so that its value is redacted
		// from the first call of any tool on (not only once an HTTP tool
		// sent it). One that does not resolve does not stop the start:
		// its tool's calls fail (upstream_unavailable) and the console
		// shows it "needed, missing"; a value that appears later is
		// registered when a call first resolves it.
		if in, ok := t.Invoker.(*invoker); ok && opts.Secret != nil {
			for _, name := range in.s.credentials() {
				if v, err := resolve(name); err == nil {
					opts.Secret(name, v)
				}
			}
		}
		seen[id] = pos
		tools = append(tools, t)
	}
	for i, ht := range cfg.HTTPTools {
		t, err := declared(ht, opts.Client(ht.Name, ht.Egress), resolve, opts.Secret)
		pos := cfg.PosOf("http_tools", i)
		if err != nil {
			issues = append(issues, policy.Issue{Pos: pos, Message: fmt.Sprintf("http_tools[%d] (%s): %v", i, ht.Name, err)})
			continue
		}
		t.Source = "http_tools:" + ht.Name
		addTool(t, pos)
	}
	for i, oa := range cfg.OpenAPI {
		pos := cfg.PosOf("openapi", i)
		if oa.URL != "" && opts.SkipURLs {
			continue
		}
		ts, err := importOpenAPI(ctx, oa, opts, resolve)
		if err != nil {
			issues = append(issues, policy.Issue{Pos: pos, Message: fmt.Sprintf("openapi[%d]: %v", i, err)})
			continue
		}
		src := "openapi:" + oa.File
		if oa.File == "" {
			src = "openapi:" + oa.URL
		}
		for _, t := range ts {
			t.Source = src
			addTool(t, pos)
		}
	}
	if len(issues) > 0 {
		return nil, issues.Sorted()
	}
	slices.SortFunc(tools, func(a, b Tool) int { return strings.Compare(a.Descriptor.ToolID, b.Descriptor.ToolID) })
	return tools, nil
}

// descriptor is the descriptor of an HTTP tool before classification:
// source connector; GET and HEAD read and idempotent, every other method
// write; auth.credentialRef when a request carries a credential; egress
// safe-fetch (every HTTP tool is behind the SSRF guard).
func descriptor(name, method, title, desc string, schema json.RawMessage, creds bool) catalog.ToolDescriptor {
	d := catalog.ToolDescriptor{ToolID: catalog.HTTPToolID(name), Source: catalog.SourceConnector, Title: title,
		Description: desc, InputSchema: schema, SafetyTier: catalog.TierWrite, Egress: catalog.EgressSafeFetch}
	if method == http.MethodGet || method == http.MethodHead {
		d.SafetyTier, d.ReplayPolicy = catalog.TierRead, catalog.ReplayIdempotent
	}
	if creds {
		d.Auth = &catalog.Auth{CredentialRef: true}
	}
	return d
}

// declared builds one `http_tools:` entry.
func declared(ht config.HTTPTool, client *http.Client, resolve func(string) (string, error), secret func(string, string)) (Tool, error) {
	timeout, err := config.ParseDuration(ht.Timeout)
	if err != nil {
		return Tool{}, err
	}
	rest := ht.URL[strings.Index(ht.URL, "://")+3:]
	hostEnd := len(rest)
	if i := strings.IndexAny(rest, "/?"); i >= 0 {
		hostEnd = i
	}
	base := ht.URL[:strings.Index(ht.URL, "://")+3+hostEnd]
	pathPart, query := rest[hostEnd:], ""
	if i := strings.IndexByte(pathPart, '?'); i >= 0 {
		pathPart, query = pathPart[:i], pathPart[i+1:]
	}
	s := spec{id: catalog.HTTPToolID(ht.Name), method: ht.Method, base: base, path: compileTemplate(pathPart, true),
		rawQuery: compileTemplate(query, false), timeout: timeout, maxBytes: ht.MaxResponseBytes, body: "none"}
	creds := s.path.usesCredential() || s.rawQuery.usesCredential()
	for _, k := range sortedKeys(ht.Query) {
		p := param{name: k, tmpl: compileTemplate(ht.Query[k], false)}
		creds = creds || p.tmpl.usesCredential()
		s.query = append(s.query, p)
	}
	for _, k := range sortedKeys(ht.Headers) {
		p := param{name: k, tmpl: compileTemplate(ht.Headers[k], false)}
		creds = creds || p.tmpl.usesCredential()
		s.headers = append(s.headers, p)
	}
	switch {
	case ht.Body == "args" || ht.Body == "none":
		s.body = ht.Body
	case strings.HasPrefix(ht.Body, "args."):
		s.body = strings.TrimPrefix(ht.Body, "args.")
	}
	var schema json.RawMessage
	if ht.InputSchema != nil {
		if schema, err = json.Marshal(ht.InputSchema); err != nil {
			return Tool{}, fmt.Errorf("input_schema: %v", err)
		}
	} else {
		schema = defaultSchema(s)
	}
	d := descriptor(ht.Name, ht.Method, ht.Title, ht.Description, schema, creds)
	return Tool{Descriptor: d, Invoker: &invoker{s: s, client: client, resolve: resolve, secret: secret}}, nil
}

// defaultSchema is the inputSchema of a declared tool without one: an
// object with one property per argument the request names (the path
// parameters required; the body argument, when named, of any type), and
// further properties allowed when the body is "args".
func defaultSchema(s spec) json.RawMessage {
	props := map[string]any{}
	var required []string
	scalar := map[string]any{"type": []string{"string", "number", "integer", "boolean"}}
	for _, a := range s.path.args() {
		props[a] = scalar
		if !slices.Contains(required, a) {
			required = append(required, a)
		}
	}
	for _, a := range s.rawQuery.args() {
		props[a] = scalar
	}
	for _, ps := range [][]param{s.query, s.headers} {
		for _, p := range ps {
			for _, a := range p.tmpl.args() {
				if _, ok := props[a]; !ok {
					props[a] = map[string]any{"type": []string{"string", "number", "integer", "boolean", "array"}}
				}
			}
		}
	}
	if s.body != "none" && s.body != "args" {
		props[s.body] = map[string]any{}
	}
	sch := map[string]any{"type": "object", "properties": props}
	if len(required) > 0 {
		slices.Sort(required)
		sch["required"] = required
	}
	if s.body != "args" {
		sch["additionalProperties"] = false
	}
	b, _ := json.Marshal(sch)
	return b
}

func sortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

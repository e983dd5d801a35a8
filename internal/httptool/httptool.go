// Package httptool is toolgate's HTTP tool transport (issue 17 point 1):
// plain HTTP APIs served as tools `http:<name>` (transport http, source
// connector), declared one by one (`http_tools:`) or imported from
// OpenAPI 3 documents (`openapi:`, openapi.go). Build turns the
// configuration into catalog descriptors and pipeline invokers; the MCP
// gateway serves them beside upstream MCP and native tools, so every call
// runs the same pipeline (decision, limits, approval, hooks, events,
// receipts).
//
// # Requests
//
// A call's arguments fill the request as config.HTTPTool describes: path
// parameters percent-escaped as one segment each, query parameters and
// headers from value templates, and the body ("args", "args.NAME" or
// none) as JSON. `{{credential:NAME}}` references are resolved at
// Build when Options.Secret is set (each value that resolves registered
// for redaction before any call) and again at
// call time, each value registered before the request is sent.
//
// # Results
//
// The invoker's output is an MCP CallToolResult (as for an upstream MCP
// tool), the same on MCP and as the `outcome` of POST /v1/calls:
//
//   - 2xx with a JSON body (application/json or +json): structuredContent
//     is the body when it is an object, else {"result": body}; one text
//     content holds the JSON;
//   - 2xx with another body: one text content (a body that is not UTF-8
//     text is described, not copied);
//   - non-2xx: isError, text "HTTP <status>: <excerpt>", the excerpt at
//     most MaxExcerpt bytes; the call's error is tool_execution_failed
//     with details {httpStatus};
//   - a body over max_response_bytes: redacted, then cut there (never
//     leaving a prefix of a credential at the cut), isError, the cut text
//     plus a note; the call's error is response_too_large with details
//     {limitBytes, httpStatus};
//   - no answer within the tool's timeout: timeout; no connection:
//     upstream_unavailable; more redirects than allowed:
//     tool_execution_failed.
//
// `_meta["toolgate/http"]` of each result is {status, contentType}.
// Every resolved credential value the API echoes in a response is
// replaced by `[REDACTED:<name>]` before the result leaves the invoker
// (and the pipeline redacts recorded content and messages again).
package httptool

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/toolgate/toolgate/catalog"
	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/internal/config"
	"github.com/toolgate/toolgate/internal/egress"
	"github.com/toolgate/toolgate/internal/pipeline"
)

// MaxExcerpt bounds the excerpt of a non-2xx body in a result and an error
// message (bytes).
const MaxExcerpt = 1024

// MetaHTTP is the result _meta key of an HTTP tool's answer:
// {status, contentType}.
const MetaHTTP = "toolgate/http"

// Tool is one HTTP tool: its descriptor (toolId http:<name>, before the
// `tools:` classification) and its invoker. A plain value; Invoker is safe
// for concurrent use.
type Tool struct {
	Descriptor catalog.ToolDescriptor
	Invoker    pipeline.Invoker
	// Source names the config entry the tool comes from, the unit of
	// tool-definition pinning (a "server" of store.Pin): "http_tools:<name>"
	// for an `http_tools:` entry, "openapi:<file or url>" for an operation
	// of an `openapi:` import.
	Source string
	// Credentials names the `credentials:` entries the tool's requests
	// reference ({{credential:NAME}} in its URL, query or headers),
	// sorted and unique; empty when it needs none (then
	// Descriptor.Auth.CredentialRef is false). Build sets it.
	Credentials []string
}

// ClientFunc returns the *http.Client that carries the requests of one
// tool (or the fetch of one `openapi: {url}` document), given its egress
// block (the merge point of the SSRF guard, issue 17 point 2). It is
// called once per tool, and once per fetched document, by Build.
type ClientFunc func(name string, e config.Egress) *http.Client

// Options configures Build. The zero value is usable.
type Options struct {
	// Client is the HTTP client of each tool; nil: GuardedClient with
	// Egress as its guard options.
	Client ClientFunc
	// Egress are options of the SSRF guard of every tool when Client is
	// nil (tests: egress.WithResolver).
	Egress []egress.Option
	// Secret registers a resolved credential value for redaction (id,
	// value): at Build for every credential a tool references that
	// resolves, and again before each request carrying it is sent; nil:
	// none, and credentials are resolved only at call time.
	Secret func(id, value string)
	// FetchTimeout bounds reading an `openapi: {url}` document at Build
	// (default 30 s); the document is at most MaxDocumentBytes.
	FetchTimeout time.Duration
	// SkipURLs leaves out the `openapi: {url}` imports (validate
	// --offline).
	SkipURLs bool
}

// GuardedClient is the client of an HTTP tool: HTTP tools are always
// behind the SSRF guard (internal/egress, OpenWOP RFC 0076 safe-fetch),
// whether or not their entry has an egress block, since an agent drives
// their arguments. Every connection's dialed address is checked at dial
// time, for the first request and each redirect hop: loopback,
// link-local, private, CGNAT, unspecified, multicast and the IPv6 forms
// embedding them are refused unless e.AllowCIDRs holds the address; each
// request's host must match e.AllowHosts (empty: any host). It follows at
// most e.Redirects() redirects (past that: tool_execution_failed), each
// one dropping the headers that carried credentials when it leaves the
// original host; it uses e.Proxy when set and never a proxy from the
// environment; it has no client-wide timeout (each call has the tool's
// own). A refused request fails with an *egress.DeniedError in its chain
// (the invoker answers egress_denied {rule, host}). An e that does not
// convert (never after config validation) gives a client whose every
// request fails with invalid_config. Safe for concurrent use.
func GuardedClient(e config.Egress, opts ...egress.Option) *http.Client {
	pol, err := e.Policy()
	if err != nil {
		return &http.Client{Transport: failTransport{err}}
	}
	tr := egress.NewTransport(pol, opts...)
	tr.MaxIdleConns, tr.MaxIdleConnsPerHost = 64, 16
	limit, hosts := LimitRedirects(e.Redirects()), egress.CheckRedirect(pol)
	return &http.Client{Transport: tr, CheckRedirect: func(req *http.Request, via []*http.Request) error {
		if err := limit(req, via); err != nil {
			return err
		}
		return hosts(req, via)
	}}
}

// DefaultClient is GuardedClient with default guard options (a
// ClientFunc).
func DefaultClient(_ string, e config.Egress) *http.Client { return GuardedClient(e) }

// failTransport fails every request with err.
type failTransport struct{ err error }

func (f failTransport) RoundTrip(*http.Request) (*http.Response, error) { return nil, f.err }

// errTooManyRedirects is what LimitRedirects returns past the limit.
type errTooManyRedirects int

func (e errTooManyRedirects) Error() string {
	return fmt.Sprintf("more than %d redirects (egress.max_redirects)", int(e))
}

// LimitRedirects is an http.Client CheckRedirect that follows at most max
// redirects, and drops from a redirected request every header the tool
// filled from a credential when the redirect leaves the original host
// (net/http itself drops only Authorization, Cookie and WWW-Authenticate).
func LimitRedirects(max int) func(*http.Request, []*http.Request) error {
	return func(req *http.Request, via []*http.Request) error {
		if len(via) > max {
			return errTooManyRedirects(max)
		}
		if len(via) > 0 && req.URL.Host != via[0].URL.Host {
			if names, ok := via[0].Context().Value(credHeadersKey{}).([]string); ok {
				for _, h := range names {
					req.Header.Del(h)
				}
			}
		}
		return nil
	}
}

type credHeadersKey struct{}

// part is one piece of a value template: literal text, an argument, or a
// credential.
type part struct {
	lit, arg, cred string
}

// template is a compiled value template.
type template []part

var (
	placeholder = regexp.MustCompile(`\{\{\s*(args\.|credential:)([^}\s]*)\s*\}\}`)
	pathParam   = regexp.MustCompile(`\{([A-Za-z_][A-Za-z0-9_-]*)\}`)
)

// compileTemplate parses literal text with {{args.NAME}} and
// {{credential:NAME}} parts; with path set, {param} is an argument too.
func compileTemplate(s string, path bool) template {
	var t template
	lit := func(x string) {
		if x == "" {
			return
		}
		if !path {
			t = append(t, part{lit: x})
			return
		}
		last := 0
		for _, m := range pathParam.FindAllStringSubmatchIndex(x, -1) {
			if m[0] > last {
				t = append(t, part{lit: x[last:m[0]]})
			}
			t = append(t, part{arg: x[m[2]:m[3]]})
			last = m[1]
		}
		if last < len(x) {
			t = append(t, part{lit: x[last:]})
		}
	}
	last := 0
	for _, m := range placeholder.FindAllStringSubmatchIndex(s, -1) {
		lit(s[last:m[0]])
		if s[m[2]:m[3]] == "args." {
			t = append(t, part{arg: s[m[4]:m[5]]})
		} else {
			t = append(t, part{cred: s[m[4]:m[5]]})
		}
		last = m[1]
	}
	lit(s[last:])
	return t
}

// args returns the argument names t refers to.
func (t template) args() []string {
	var out []string
	for _, p := range t {
		if p.arg != "" {
			out = append(out, p.arg)
		}
	}
	return out
}

// usesCredential reports whether t holds a credential reference.
func (t template) usesCredential() bool {
	for _, p := range t {
		if p.cred != "" {
			return true
		}
	}
	return false
}

// credentials returns the names of the credentials s references, sorted
// and unique.
func (s *spec) credentials() []string {
	var names []string
	add := func(t template) {
		for _, p := range t {
			if p.cred != "" && !slices.Contains(names, p.cred) {
				names = append(names, p.cred)
			}
		}
	}
	add(s.path)
	add(s.rawQuery)
	for _, p := range s.query {
		add(p.tmpl)
	}
	for _, p := range s.headers {
		add(p.tmpl)
	}
	slices.Sort(names)
	return names
}

// param is one query parameter or header filled from a template.
type param struct {
	name string
	tmpl template
}

// spec is everything an invoker needs to build a request.
type spec struct {
	id       string // toolId
	method   string
	base     string   // scheme://host (literal)
	path     template // the URL path (escaped per segment)
	rawQuery template // the URL template's own query (escaped per value)
	query    []param
	headers  []param
	// body: "none", "args" (the arguments the URL and query did not use),
	// or an argument name.
	body     string
	timeout  time.Duration
	maxBytes int64
}

// invoker calls one HTTP tool.
type invoker struct {
	s       spec
	client  *http.Client
	resolve func(name string) (string, error)
	secret  func(id, value string)
}

// Invoke builds the request from args, sends it and maps the answer (see
// the package doc).
func (in *invoker) Invoke(ctx context.Context, _ *catalog.Tool, raw json.RawMessage) (json.RawMessage, error) {
	var args map[string]any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&args); err != nil {
		return nil, errcode.Errorf(errcode.InvalidArgument, "%s: the arguments are not a JSON object", in.s.id)
	}
	creds := map[string]string{} // name → value, for scrubbing the answer
	req, credHeaders, err := in.request(ctx, args, creds)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeoutCause(ctx, in.s.timeout, errToolTimeout)
	defer cancel()
	if len(credHeaders) > 0 {
		ctx = context.WithValue(ctx, credHeadersKey{}, credHeaders)
	}
	req = req.WithContext(ctx)
	resp, err := in.client.Do(req)
	if err != nil {
		return nil, in.sendError(ctx, err)
	}
	defer resp.Body.Close()
	// Read past the limit by the longest credential less one byte (and
	// one more to see a cut), so that a credential straddling the limit
	// is redacted whole before the body is cut.
	extra := int64(1)
	for _, v := range creds {
		extra = max(extra, int64(len(v)))
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, in.s.maxBytes+extra))
	if err != nil {
		if context.Cause(ctx) == errToolTimeout {
			return nil, errcode.Errorf(errcode.Timeout, "%s: the response did not arrive within %s", in.s.id, in.s.timeout)
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, errcode.Errorf(errcode.ToolExecutionFailed, "%s: reading the response: %v", in.s.id, scrubErr(err))
	}
	return answer(in.s, resp, body, creds)
}

var errToolTimeout = errors.New("http tool timeout")

// sendError maps a failed client.Do.
func (in *invoker) sendError(ctx context.Context, err error) error {
	if context.Cause(ctx) == errToolTimeout {
		return errcode.Errorf(errcode.Timeout, "%s: no response within %s (timeout)", in.s.id, in.s.timeout)
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	var tm errTooManyRedirects
	if errors.As(err, &tm) {
		return errcode.Errorf(errcode.ToolExecutionFailed, "%s: %v", in.s.id, tm).WithDetails(map[string]any{"maxRedirects": int(tm)})
	}
	// A refusal of the egress guard names its rule and host (never the
	// refused address).
	if d := egress.Error(err); d != nil {
		return errcode.Errorf(errcode.EgressDenied, "%s: %s", in.s.id, d.Message).WithDetails(d.Details)
	}
	// Any other error that carries its own code keeps it.
	if e := errcode.As(err); e != nil {
		return e
	}
	return errcode.Errorf(errcode.UpstreamUnavailable, "%s: %v", in.s.id, scrubErr(err))
}

// scrubErr is err without the request URL net/http puts in a *url.Error
// (it may carry a credential in its query).
func scrubErr(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// request builds the HTTP request of one call; it returns the names of
// the headers that carry a credential.
func (in *invoker) request(ctx context.Context, args map[string]any, creds map[string]string) (*http.Request, []string, error) {
	used := map[string]bool{}
	cred := func(name string) (string, error) {
		if v, ok := creds[name]; ok {
			return v, nil
		}
		v, err := in.resolve(name)
		if err != nil {
			return "", errcode.Errorf(errcode.UpstreamUnavailable, "%s: %v", in.s.id, err)
		}
		creds[name] = v
		return v, nil
	}
	path, ok, err := in.expand(in.s.path, args, used, cred, url.PathEscape, true)
	if err != nil {
		return nil, nil, err
	}
	if !ok {
		return nil, nil, errcode.Errorf(errcode.InvalidArgument, "%s: a path parameter of the URL is missing (%s)", in.s.id, strings.Join(missing(in.s.path, args), ", "))
	}
	u := in.s.base + path
	q, ok, err := in.expand(in.s.rawQuery, args, used, cred, url.QueryEscape, false)
	if err != nil {
		return nil, nil, err
	}
	var extra []string
	if ok && q != "" {
		extra = append(extra, q)
	}
	for _, p := range in.s.query {
		vals, ok, err := in.values(p.tmpl, args, used, cred)
		if err != nil {
			return nil, nil, err
		}
		if !ok {
			continue
		}
		for _, v := range vals {
			extra = append(extra, url.QueryEscape(p.name)+"="+url.QueryEscape(v))
		}
	}
	if len(extra) > 0 {
		u += "?" + strings.Join(extra, "&")
	}
	var body io.Reader
	hasBody := false
	switch in.s.body {
	case "none":
	case "args":
		rest := map[string]any{}
		for k, v := range args {
			if !used[k] {
				rest[k] = v
			}
		}
		b, err := json.Marshal(rest)
		if err != nil {
			return nil, nil, errcode.Errorf(errcode.InvalidArgument, "%s: encoding the body: %v", in.s.id, err)
		}
		body, hasBody = bytes.NewReader(b), true
	default:
		if v, present := args[in.s.body]; present {
			b, err := json.Marshal(v)
			if err != nil {
				return nil, nil, errcode.Errorf(errcode.InvalidArgument, "%s: encoding the body: %v", in.s.id, err)
			}
			body, hasBody = bytes.NewReader(b), true
		}
	}
	req, err := http.NewRequestWithContext(ctx, in.s.method, u, body)
	if err != nil {
		return nil, nil, errcode.Errorf(errcode.InvalidArgument, "%s: the arguments do not make a valid URL", in.s.id)
	}
	if hasBody {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json, */*;q=0.5")
	var credHeaders []string
	for _, h := range in.s.headers {
		vals, ok, err := in.values(h.tmpl, args, used, cred)
		if err != nil {
			return nil, nil, err
		}
		if !ok || len(vals) == 0 {
			continue
		}
		v := strings.Join(vals, ",")
		if strings.ContainsAny(v, "\r\n\x00") {
			return nil, nil, errcode.Errorf(errcode.InvalidArgument, "%s: header %s: the value holds a control character (CR, LF or NUL)", in.s.id, h.name)
		}
		req.Header.Set(h.name, v)
		if h.tmpl.usesCredential() {
			credHeaders = append(credHeaders, h.name)
		}
	}
	for name, v := range creds {
		if in.secret != nil {
			in.secret(name, v)
		}
	}
	return req, credHeaders, nil
}

// missing lists the arguments t names that args lacks.
func missing(t template, args map[string]any) []string {
	var out []string
	for _, a := range t.args() {
		if v, ok := args[a]; !ok || v == nil {
			out = append(out, a)
		}
	}
	return out
}

// expand fills t from args (escape applied to every argument and
// credential value); ok is false when an argument t names is absent or
// null. strict (the URL path) refuses arrays and objects, and "", "." and
// ".." (invalid_argument naming the parameter).
func (in *invoker) expand(t template, args map[string]any, used map[string]bool, cred func(string) (string, error), escape func(string) string, strict bool) (string, bool, error) {
	var b strings.Builder
	for _, p := range t {
		switch {
		case p.cred != "":
			v, err := cred(p.cred)
			if err != nil {
				return "", false, err
			}
			b.WriteString(escape(v))
		case p.arg != "":
			v, present := args[p.arg]
			if !present || v == nil {
				return "", false, nil
			}
			used[p.arg] = true
			s, err := scalar(v)
			if err != nil {
				return "", false, errcode.Errorf(errcode.InvalidArgument, "%s: argument %s: %v", in.s.id, p.arg, err)
			}
			// A path parameter of "", "." or ".." would make an empty
			// or dot segment (the collection, or a walk up the path).
			if strict && (s == "" || s == "." || s == "..") {
				return "", false, errcode.Errorf(errcode.InvalidArgument, "%s: path parameter %s: %q is not allowed (empty, \".\" and \"..\" make no path segment)", in.s.id, p.arg, s)
			}
			b.WriteString(escape(s))
		default:
			b.WriteString(p.lit)
		}
	}
	return b.String(), true, nil
}

// values fills a query parameter or header template: one value, or one per
// element when the template is exactly one array argument.
func (in *invoker) values(t template, args map[string]any, used map[string]bool, cred func(string) (string, error)) ([]string, bool, error) {
	if len(t) == 1 && t[0].arg != "" {
		if arr, ok := args[t[0].arg].([]any); ok {
			used[t[0].arg] = true
			out := make([]string, 0, len(arr))
			for _, v := range arr {
				s, err := scalar(v)
				if err != nil {
					return nil, false, errcode.Errorf(errcode.InvalidArgument, "%s: argument %s: %v", in.s.id, t[0].arg, err)
				}
				out = append(out, s)
			}
			return out, true, nil
		}
	}
	s, ok, err := in.expand(t, args, used, cred, func(s string) string { return s }, false)
	if err != nil || !ok {
		return nil, ok, err
	}
	return []string{s}, true, nil
}

// scalar is the text of a JSON scalar argument.
func scalar(v any) (string, error) {
	switch x := v.(type) {
	case string:
		return x, nil
	case json.Number:
		return x.String(), nil
	case bool:
		return strconv.FormatBool(x), nil
	}
	return "", errors.New("want a string, number or boolean")
}

// result is the CallToolResult an invoker outputs.
type result struct {
	Content           []textContent  `json:"content"`
	StructuredContent any            `json:"structuredContent,omitempty"`
	IsError           bool           `json:"isError,omitempty"`
	Meta              map[string]any `json:"_meta,omitempty"`
}

type textContent struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

func text(s string) textContent { return textContent{Type: "text", Text: s} }

// answer maps a response (body read up to maxBytes plus the longest
// credential's length) to the invoker's output and error. A body over
// maxBytes is redacted whole, then cut at maxBytes, and a cut text never
// ends in a prefix of a credential.
func answer(s spec, resp *http.Response, body []byte, creds map[string]string) (json.RawMessage, error) {
	ct := resp.Header.Get("Content-Type")
	meta := map[string]any{MetaHTTP: map[string]any{"status": resp.StatusCode, "contentType": ct}}
	cut := int64(len(body)) > s.maxBytes
	scrubbed := scrubText(body, creds)
	if cut {
		scrubbed = cutScrubbed(scrubbed, s.maxBytes, creds)
		body = body[:s.maxBytes]
	}
	status := fmt.Sprintf("HTTP %d", resp.StatusCode)
	if t := http.StatusText(resp.StatusCode); t != "" {
		status += " " + t
	}
	switch {
	case resp.StatusCode < 200 || resp.StatusCode > 299:
		ex := excerpt(scrubbed, MaxExcerpt)
		msg := status
		if ex != "" {
			msg += ": " + ex
		}
		out, _ := json.Marshal(result{Content: []textContent{text(msg)}, IsError: true, Meta: meta})
		return out, errcode.New(errcode.ToolExecutionFailed, s.id+": "+msg).WithDetails(map[string]any{"httpStatus": resp.StatusCode})
	case cut:
		note := fmt.Sprintf("the response was cut at %d bytes (max_response_bytes); it is incomplete", s.maxBytes)
		out, _ := json.Marshal(result{Content: []textContent{text(bodyText(scrubbed, ct)), text(note)}, IsError: true, Meta: meta})
		return out, errcode.Errorf(errcode.ResponseTooLarge, "%s: the response body is larger than max_response_bytes (%d): %s", s.id, s.maxBytes, status).
			WithDetails(map[string]any{"limitBytes": s.maxBytes, "httpStatus": resp.StatusCode})
	}
	r := result{Meta: meta}
	if isJSON(ct) && json.Valid(body) {
		var v any
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.UseNumber()
		if err := dec.Decode(&v); err == nil {
			v = scrubValue(v, creds)
			if _, obj := v.(map[string]any); obj {
				r.StructuredContent = v
			} else {
				r.StructuredContent = map[string]any{"result": v}
			}
			b, _ := json.Marshal(v)
			r.Content = []textContent{text(string(b))}
		}
	}
	if r.Content == nil {
		if len(body) == 0 {
			r.Content = []textContent{text("(" + status + ", empty body)")}
		} else {
			r.Content = []textContent{text(bodyText(scrubText(body, creds), ct))}
		}
	}
	out, err := json.Marshal(r)
	if err != nil {
		return nil, errcode.Wrap(errcode.ToolExecutionFailed, err, s.id+": encoding the result")
	}
	return out, nil
}

// isJSON reports whether a Content-Type is JSON (application/json or
// +json).
func isJSON(ct string) bool {
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return false
	}
	return mt == "application/json" || strings.HasSuffix(mt, "+json")
}

// bodyText is a body as text: the body when it is UTF-8 (a cut last rune
// dropped), else a description.
func bodyText(b []byte, ct string) string {
	s := validPrefix(b)
	if len(s) < len(b)-utf8.UTFMax || strings.ContainsRune(s, 0) {
		return fmt.Sprintf("(a binary body of %d bytes, Content-Type %q)", len(b), ct)
	}
	return s
}

// validPrefix is the longest valid UTF-8 prefix of b (at most one partial
// rune short of it).
func validPrefix(b []byte) string {
	for i := 0; i < utf8.UTFMax && !utf8.Valid(b); i++ {
		b = b[:len(b)-1]
	}
	if !utf8.Valid(b) {
		return strings.ToValidUTF8(string(b), "\uFFFD")
	}
	return string(b)
}

// excerpt is at most n bytes of b as UTF-8 text, whitespace collapsed,
// with "…" when cut.
func excerpt(b []byte, n int) string {
	s := strings.Join(strings.Fields(strings.ToValidUTF8(string(b), "\uFFFD")), " ")
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// cutScrubbed is the redacted body b cut at n bytes, without a suffix
// that is a prefix of a credential value (the rest of it was past the
// cut, or past what was read).
func cutScrubbed(b []byte, n int64, creds map[string]string) []byte {
	if int64(len(b)) > n {
		b = b[:n]
	}
	for {
		trim := 0
		for _, v := range creds {
			for k := min(len(v)-1, len(b)); k > trim; k-- {
				if bytes.HasSuffix(b, []byte(v[:k])) {
					trim = k
					break
				}
			}
		}
		if trim == 0 {
			return b
		}
		b = b[:len(b)-trim]
	}
}

// scrubText replaces every credential value in b by [REDACTED:<name>].
func scrubText(b []byte, creds map[string]string) []byte {
	for _, name := range sortedNames(creds) {
		if v := creds[name]; v != "" {
			b = bytes.ReplaceAll(b, []byte(v), []byte("[REDACTED:"+name+"]"))
		}
	}
	return b
}

// scrubValue replaces every credential value in the strings (and keys) of
// a decoded JSON value.
func scrubValue(v any, creds map[string]string) any {
	if len(creds) == 0 {
		return v
	}
	str := func(s string) string { return string(scrubText([]byte(s), creds)) }
	switch x := v.(type) {
	case string:
		return str(x)
	case []any:
		for i := range x {
			x[i] = scrubValue(x[i], creds)
		}
		return x
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[str(k)] = scrubValue(e, creds)
		}
		return out
	}
	return v
}

func sortedNames(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	// Longer values first, so that a value containing another is
	// replaced whole.
	sort.Slice(out, func(i, j int) bool {
		if len(m[out[i]]) != len(m[out[j]]) {
			return len(m[out[i]]) > len(m[out[j]])
		}
		return out[i] < out[j]
	})
	return out
}

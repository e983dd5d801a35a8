package httptool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/toolgate/toolgate/catalog"
	"github.com/toolgate/toolgate/internal/config"
	"github.com/toolgate/toolgate/internal/egress"
	"github.com/toolgate/toolgate/internal/glob"
)

// MaxDocumentBytes bounds an OpenAPI document (file or URL).
const MaxDocumentBytes = 8 << 20

// BodyProperty is the inputSchema property of an imported operation's JSON
// request body; RenamedBodyProperty is used instead when the operation
// also has a parameter named "body".
const (
	BodyProperty        = "body"
	RenamedBodyProperty = "requestBody"
)

// maxSchemaDepth bounds the inlining of nested and recursive schemas.
const maxSchemaDepth = 32

// importOpenAPI reads, validates and converts one `openapi:` entry.
func importOpenAPI(ctx context.Context, oa config.OpenAPI, opts Options, resolve func(string) (string, error)) ([]Tool, error) {
	src := oa.File
	var data []byte
	var err error
	if oa.File != "" {
		data, err = readDocument(oa.File)
	} else {
		src = oa.URL
		data, err = fetchDocument(ctx, oa.URL, opts.Client(oa.NamePrefix, oa.Egress), opts)
	}
	if err != nil {
		return nil, err
	}
	return convert(ctx, src, data, oa, opts.Client(oa.NamePrefix, oa.Egress), resolve, opts.Secret)
}

// readDocument reads an OpenAPI file of at most MaxDocumentBytes.
func readDocument(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("OpenAPI document %s: %v", path, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxDocumentBytes+1))
	if err != nil {
		return nil, fmt.Errorf("OpenAPI document %s: %v", path, err)
	}
	if len(data) > MaxDocumentBytes {
		return nil, fmt.Errorf("OpenAPI document %s is larger than %d MiB", path, MaxDocumentBytes>>20)
	}
	return data, nil
}

// fetchDocument GETs an OpenAPI document within opts.FetchTimeout with
// client: the entry's own guarded client (the egress block of the entry
// applies to the fetch too: a document on loopback or a private network
// needs egress.allow_cidrs; a refusal names the rule).
func fetchDocument(ctx context.Context, rawURL string, client *http.Client, opts Options) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, opts.FetchTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, rawURL, nil)
	if err != nil {
		return nil, fmt.Errorf("OpenAPI document %s: %v", rawURL, err)
	}
	resp, err := client.Do(req)
	if err != nil {
		if d := egress.Error(err); d != nil {
			return nil, fmt.Errorf("OpenAPI document %s: refused by the egress guard: %s (allow it with egress.allow_cidrs or allow_hosts)", rawURL, d.Message)
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("OpenAPI document %s: not fetched within %s", rawURL, opts.FetchTimeout)
		}
		return nil, fmt.Errorf("OpenAPI document %s: %v", rawURL, scrubErr(err))
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("OpenAPI document %s: HTTP %d", rawURL, resp.StatusCode)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, MaxDocumentBytes+1))
	if err != nil {
		return nil, fmt.Errorf("OpenAPI document %s: %v", rawURL, err)
	}
	if len(data) > MaxDocumentBytes {
		return nil, fmt.Errorf("OpenAPI document %s is larger than %d MiB", rawURL, MaxDocumentBytes>>20)
	}
	return data, nil
}

// toolNameChar is what a tool name may hold; other characters of an
// operationId become '_'.
var toolNameChar = regexp.MustCompile(`[^A-Za-z0-9_.-]`)

// convert turns an OpenAPI document (src names it in errors) into the
// tools of oa. Errors name src: a document that does not parse or
// validate, external references, no usable server, an operation whose
// schema cannot be converted, two operations with one tool name.
func convert(ctx context.Context, src string, data []byte, oa config.OpenAPI, client *http.Client, resolve func(string) (string, error), secret func(string, string)) (_ []Tool, err error) {
	defer func() {
		// The document is untrusted input: a panic of the loader or the
		// conversion is a config error, never a crash.
		if r := recover(); r != nil {
			err = fmt.Errorf("OpenAPI document %s: cannot be read (%v)", src, r)
		}
	}()
	loader := openapi3.NewLoader()
	loader.IsExternalRefsAllowed = false
	loader.Context = ctx
	doc, err := loader.LoadFromData(data)
	if err != nil {
		return nil, fmt.Errorf("OpenAPI document %s does not parse: %v", src, err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.") {
		return nil, fmt.Errorf("OpenAPI document %s: openapi %q: want an OpenAPI 3 document", src, doc.OpenAPI)
	}
	if err := doc.Validate(ctx); err != nil {
		return nil, fmt.Errorf("OpenAPI document %s is not valid: %v", src, err)
	}
	server := oa.Server
	if server == "" {
		if server, err = docServer(doc, oa); err != nil {
			return nil, fmt.Errorf("OpenAPI document %s: %v", src, err)
		}
	}
	server = strings.TrimSuffix(server, "/")
	su, err := url.Parse(server)
	if err != nil || (su.Scheme != "http" && su.Scheme != "https") || su.Host == "" || strings.ContainsAny(server, "{}?#") {
		return nil, fmt.Errorf("OpenAPI document %s: server %q: want an absolute http(s) URL", src, server)
	}
	timeout, err := config.ParseDuration(oa.Timeout)
	if err != nil {
		return nil, err
	}
	var headers []param
	creds := false
	for _, k := range sortedKeys(oa.Headers) {
		p := param{name: k, tmpl: compileTemplate(oa.Headers[k], false)}
		creds = creds || p.tmpl.usesCredential()
		headers = append(headers, p)
	}
	var tools []Tool
	names := map[string]string{}
	if doc.Paths == nil {
		return nil, nil
	}
	pathItems := doc.Paths.Map()
	paths := make([]string, 0, len(pathItems))
	for p := range pathItems {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		item := pathItems[p]
		ops := item.Operations()
		methods := make([]string, 0, len(ops))
		for m := range ops {
			methods = append(methods, m)
		}
		sort.Strings(methods)
		for _, method := range methods {
			op := ops[method]
			if op == nil || op.OperationID == "" || !selected(oa.Operations, op.OperationID) {
				continue
			}
			method = strings.ToUpper(method)
			if !slices.Contains([]string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"}, method) {
				continue
			}
			name := oa.NamePrefix + toolNameChar.ReplaceAllString(op.OperationID, "_")
			if len(name) > 64 {
				return nil, fmt.Errorf("OpenAPI document %s: operation %s: tool name %q is longer than 64 characters", src, op.OperationID, name)
			}
			where := method + " " + p
			if prev, dup := names[name]; dup {
				return nil, fmt.Errorf("OpenAPI document %s: operations %s and %s both make tool %s", src, prev, where, catalog.HTTPToolID(name))
			}
			names[name] = where
			t, err := operationTool(name, method, server, p, item, op, headers, creds, timeout, oa.MaxResponseBytes)
			if err != nil {
				return nil, fmt.Errorf("OpenAPI document %s: operation %s (%s): %v", src, op.OperationID, where, err)
			}
			t.Invoker = &invoker{s: t.spec, client: client, resolve: resolve, secret: secret}
			tools = append(tools, t.Tool)
		}
	}
	return tools, nil
}

// docServer is the document's first server URL with its variables at
// their defaults, resolved against the document's URL for a relative one.
func docServer(doc *openapi3.T, oa config.OpenAPI) (string, error) {
	if len(doc.Servers) == 0 || doc.Servers[0] == nil {
		return "", errors.New("the document names no server: set openapi[].server")
	}
	s := doc.Servers[0]
	u := s.URL
	for name, v := range s.Variables {
		if v != nil {
			u = strings.ReplaceAll(u, "{"+name+"}", v.Default)
		}
	}
	if !strings.Contains(u, "://") && oa.URL != "" {
		base, err := url.Parse(oa.URL)
		if err != nil {
			return "", err
		}
		ref, err := url.Parse(u)
		if err != nil {
			return "", fmt.Errorf("server %q: %v", u, err)
		}
		u = base.ResolveReference(ref).String()
	}
	if !strings.Contains(u, "://") {
		return "", fmt.Errorf("server %q is relative: set openapi[].server", u)
	}
	return u, nil
}

// selected reports whether operationId matches one of globs (every
// operation when there are none).
func selected(globs []string, id string) bool {
	if len(globs) == 0 {
		return true
	}
	for _, g := range globs {
		if glob.Match(g, id) {
			return true
		}
	}
	return false
}

type opTool struct {
	Tool
	spec spec
}

// operationTool builds the tool of one operation: its inputSchema has one
// property per path, query and header parameter (cookie parameters are
// not supported and make the operation an error when required) and
// BodyProperty for a JSON request body.
func operationTool(name, method, server, path string, item *openapi3.PathItem, op *openapi3.Operation, headers []param, creds bool, timeout time.Duration, maxBytes int64) (opTool, error) {
	var t opTool
	params := map[string]*openapi3.Parameter{} // in + "\x00" + name → parameter (operation's override the path item's)
	var order []string
	for _, list := range []openapi3.Parameters{item.Parameters, op.Parameters} {
		for _, pr := range list {
			if pr == nil || pr.Value == nil {
				continue
			}
			k := pr.Value.In + "\x00" + pr.Value.Name
			if _, ok := params[k]; !ok {
				order = append(order, k)
			}
			params[k] = pr.Value
		}
	}
	props := map[string]any{}
	var required []string
	s := spec{id: catalog.HTTPToolID(name), method: method, body: "none", maxBytes: maxBytes, headers: slices.Clone(headers)}
	pathT := path
	for _, k := range order {
		pr := params[k]
		var schema map[string]any
		switch {
		case pr.Schema != nil:
			schema = convertSchema(pr.Schema, 0, map[*openapi3.Schema]bool{})
		case len(pr.Content) > 0:
			for _, mt := range pr.Content {
				if mt != nil && mt.Schema != nil {
					schema = convertSchema(mt.Schema, 0, map[*openapi3.Schema]bool{})
				}
				break
			}
		}
		if schema == nil {
			schema = map[string]any{}
		}
		if pr.Description != "" {
			if _, has := schema["description"]; !has {
				schema["description"] = pr.Description
			}
		}
		if _, dup := props[pr.Name]; dup {
			return t, fmt.Errorf("parameter %s appears in two places (%s); tool arguments are by name", pr.Name, pr.In)
		}
		switch pr.In {
		case openapi3.ParameterInPath:
			if !strings.Contains(pathT, "{"+pr.Name+"}") {
				return t, fmt.Errorf("path parameter %s is not in the path %s", pr.Name, path)
			}
			required = append(required, pr.Name)
		case openapi3.ParameterInQuery:
			s.query = append(s.query, param{name: pr.Name, tmpl: template{{arg: pr.Name}}})
			if pr.Required {
				required = append(required, pr.Name)
			}
		case openapi3.ParameterInHeader:
			s.headers = append(s.headers, param{name: pr.Name, tmpl: template{{arg: pr.Name}}})
			if pr.Required {
				required = append(required, pr.Name)
			}
		default:
			if pr.Required {
				return t, fmt.Errorf("required %s parameter %s is not supported", pr.In, pr.Name)
			}
			continue
		}
		props[pr.Name] = schema
	}
	// Path parameters: {name} in the path becomes an argument part (any
	// name; the path template of an OpenAPI document is not limited to
	// the declared-tool alphabet).
	s.path = pathTemplate(pathT)
	for _, a := range s.path.args() {
		if _, ok := params[openapi3.ParameterInPath+"\x00"+a]; !ok {
			return t, fmt.Errorf("the path %s names {%s}, which no path parameter declares", path, a)
		}
	}
	s.base = server
	if op.RequestBody != nil && op.RequestBody.Value != nil {
		rb := op.RequestBody.Value
		var bodySchema *openapi3.SchemaRef
		found := false
		for _, ct := range sortedContent(rb.Content) {
			if isJSON(ct) {
				found = true
				if mt := rb.Content[ct]; mt != nil {
					bodySchema = mt.Schema
				}
				break
			}
		}
		if !found {
			if rb.Required {
				return t, errors.New("the request body has no JSON media type (only application/json and +json are supported)")
			}
		} else {
			prop := BodyProperty
			if _, taken := props[prop]; taken {
				prop = RenamedBodyProperty
			}
			schema := map[string]any{}
			if bodySchema != nil {
				schema = convertSchema(bodySchema, 0, map[*openapi3.Schema]bool{})
			}
			if rb.Description != "" {
				if _, has := schema["description"]; !has {
					schema["description"] = rb.Description
				}
			}
			props[prop] = schema
			if rb.Required {
				required = append(required, prop)
			}
			s.body = prop
		}
	}
	sch := map[string]any{"type": "object", "properties": props, "additionalProperties": false}
	if len(required) > 0 {
		slices.Sort(required)
		sch["required"] = slices.Compact(required)
	}
	raw, err := json.Marshal(sch)
	if err != nil {
		return t, fmt.Errorf("building its inputSchema: %v", err)
	}
	desc := op.Summary
	if op.Description != "" {
		if desc != "" && desc != op.Description {
			desc += "\n\n" + op.Description
		} else {
			desc = op.Description
		}
	}
	s.timeout = timeout
	t.spec = s
	t.Descriptor = descriptor(name, method, op.Summary, desc, raw, creds)
	return t, nil
}

// pathTemplate compiles an OpenAPI path: {name} (any name without braces)
// is an argument, the rest literal.
func pathTemplate(p string) template {
	var t template
	for p != "" {
		i := strings.IndexByte(p, '{')
		j := strings.IndexByte(p, '}')
		if i < 0 || j < i {
			t = append(t, part{lit: p})
			break
		}
		if i > 0 {
			t = append(t, part{lit: p[:i]})
		}
		t = append(t, part{arg: p[i+1 : j]})
		p = p[j+1:]
	}
	return t
}

func sortedContent(c openapi3.Content) []string {
	out := make([]string, 0, len(c))
	for k := range c {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// convertSchema turns an OpenAPI schema into a self-contained JSON Schema
// (references inlined; a recursive reference, or nesting deeper than
// maxSchemaDepth, becomes {} which accepts anything). OpenAPI 3.0's
// nullable becomes a "null" type; exclusiveMinimum/Maximum of either
// version become the JSON Schema number form; OpenAPI-only keywords
// (discriminator, xml, example, readOnly…) are dropped.
func convertSchema(ref *openapi3.SchemaRef, depth int, onPath map[*openapi3.Schema]bool) map[string]any {
	if ref == nil || ref.Value == nil || depth > maxSchemaDepth {
		return map[string]any{}
	}
	s := ref.Value
	if onPath[s] {
		return map[string]any{}
	}
	if s.Always != nil {
		if *s.Always {
			return map[string]any{}
		}
		return map[string]any{"not": map[string]any{}}
	}
	onPath[s] = true
	defer delete(onPath, s)
	sub := func(r *openapi3.SchemaRef) map[string]any { return convertSchema(r, depth+1, onPath) }
	out := map[string]any{}
	if s.Type != nil && len(*s.Type) > 0 {
		types := slices.Clone([]string(*s.Type))
		if s.Nullable && !slices.Contains(types, "null") {
			types = append(types, "null")
		}
		if len(types) == 1 {
			out["type"] = types[0]
		} else {
			out["type"] = types
		}
	}
	set := func(k string, v any, ok bool) {
		if ok {
			out[k] = v
		}
	}
	setU := func(k string, p *uint64) {
		if p != nil {
			out[k] = *p
		}
	}
	setF := func(k string, p *float64) {
		if p != nil {
			out[k] = *p
		}
	}
	set("title", s.Title, s.Title != "")
	set("description", s.Description, s.Description != "")
	set("format", s.Format, s.Format != "")
	set("enum", s.Enum, len(s.Enum) > 0)
	set("default", s.Default, s.Default != nil)
	set("const", s.Const, s.Const != nil)
	set("pattern", s.Pattern, s.Pattern != "")
	set("minLength", s.MinLength, s.MinLength > 0)
	setU("maxLength", s.MaxLength)
	set("minItems", s.MinItems, s.MinItems > 0)
	setU("maxItems", s.MaxItems)
	set("uniqueItems", true, s.UniqueItems)
	set("minProperties", s.MinProps, s.MinProps > 0)
	setU("maxProperties", s.MaxProps)
	setF("multipleOf", s.MultipleOf)
	switch {
	case s.ExclusiveMin.Value != nil:
		out["exclusiveMinimum"] = *s.ExclusiveMin.Value
		setF("minimum", s.Min)
	case s.ExclusiveMin.Bool != nil && *s.ExclusiveMin.Bool && s.Min != nil:
		out["exclusiveMinimum"] = *s.Min
	default:
		setF("minimum", s.Min)
	}
	switch {
	case s.ExclusiveMax.Value != nil:
		out["exclusiveMaximum"] = *s.ExclusiveMax.Value
		setF("maximum", s.Max)
	case s.ExclusiveMax.Bool != nil && *s.ExclusiveMax.Bool && s.Max != nil:
		out["exclusiveMaximum"] = *s.Max
	default:
		setF("maximum", s.Max)
	}
	if s.Items != nil {
		out["items"] = sub(s.Items)
	}
	if len(s.Properties) > 0 {
		props := map[string]any{}
		for k, v := range s.Properties {
			props[k] = sub(v)
		}
		out["properties"] = props
	}
	set("required", s.Required, len(s.Required) > 0)
	if ap := s.AdditionalProperties; ap.Has != nil {
		out["additionalProperties"] = *ap.Has
	} else if ap.Schema != nil {
		out["additionalProperties"] = sub(ap.Schema)
	}
	for k, list := range map[string]openapi3.SchemaRefs{"oneOf": s.OneOf, "anyOf": s.AnyOf, "allOf": s.AllOf} {
		if len(list) > 0 {
			items := make([]any, len(list))
			for i, r := range list {
				items[i] = sub(r)
			}
			out[k] = items
		}
	}
	if s.Not != nil {
		out["not"] = sub(s.Not)
	}
	if s.Nullable && s.Type == nil {
		// nullable without a type: anything, null included.
		delete(out, "type")
	}
	return out
}

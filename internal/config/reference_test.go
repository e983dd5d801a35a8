package config_test

import (
	"fmt"
	"os"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/toolgate/toolgate/catalog"
	"github.com/toolgate/toolgate/internal/auth"
	"github.com/toolgate/toolgate/internal/config"
	"github.com/toolgate/toolgate/internal/mcpgw"
	"github.com/toolgate/toolgate/internal/pipeline"
	"github.com/toolgate/toolgate/policy"
	rlredis "github.com/toolgate/toolgate/ratelimit/redis"
)

// The policy: block is decoded by the policy package, not into Go structs;
// these mirror its keys (policy.Keys, checked below) and their types for
// the reference walk.
type policyDoc struct {
	Default    string         `yaml:"default"`
	Mode       string         `yaml:"mode"`
	Rules      []ruleDoc      `yaml:"rules"`
	RateLimits []rateLimitDoc `yaml:"ratelimits"`
}

type ruleDoc struct {
	ID       string   `yaml:"id"`
	Effect   string   `yaml:"effect"`
	Tools    []string `yaml:"tools"`
	Scopes   []string `yaml:"scopes"`
	When     string   `yaml:"when"`
	Reason   string   `yaml:"reason"`
	Mode     string   `yaml:"mode"`
	Approver string   `yaml:"approver"`
}

type rateLimitDoc struct {
	Tools []string `yaml:"tools"`
	Per   string   `yaml:"per"`
	Rate  string   `yaml:"rate"`
	Burst int      `yaml:"burst"`
}

// refKey is one configuration key: its path in the reference's notation
// (a.b, list[].c, map.<name>.d), its type, and for a scalar its value in a
// parsed configuration.
type refKey struct {
	path, typ string
	scalar    bool
	value     reflect.Value // invalid when the walk had no value (policy keys)
}

var yamlNodeType = reflect.TypeOf(yaml.Node{})

// typeName is the reference's name of a Go field type.
func typeName(t reflect.Type) string {
	if t == yamlNodeType {
		return "mapping"
	}
	switch t.Kind() {
	case reflect.String:
		return "string"
	case reflect.Int, reflect.Int64:
		return "integer"
	case reflect.Bool:
		return "boolean"
	case reflect.Float64:
		return "number"
	case reflect.Pointer:
		if t.Elem().Kind() == reflect.Bool {
			return "boolean"
		}
		return typeName(t.Elem())
	case reflect.Struct:
		return "mapping"
	case reflect.Slice:
		if t.Elem().Kind() == reflect.String {
			return "list of strings"
		}
		return "list of mappings"
	case reflect.Map:
		if t.Elem().Kind() == reflect.Interface {
			return "mapping" // free-form (a JSON Schema)
		}
		if t.Elem().Kind() == reflect.String {
			return "map of strings"
		}
		return "map of mappings"
	}
	panic("reference: no type name for " + t.String())
}

// walkKeys lists the keys of struct type t (with its value v, possibly
// invalid) under prefix, recursing into nested structs, pointers to
// structs, slices of structs, maps of structs and the policy block.
func walkKeys(prefix string, t reflect.Type, v reflect.Value, out *[]refKey) {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := strings.Split(f.Tag.Get("yaml"), ",")[0]
		if tag == "" || tag == "-" {
			continue
		}
		path := tag
		if prefix != "" {
			path = prefix + "." + tag
		}
		var fv reflect.Value
		if v.IsValid() {
			fv = v.Field(i)
		}
		ft := f.Type
		k := refKey{path: path, typ: typeName(ft)}
		if ft == yamlNodeType {
			*out = append(*out, k)
			walkKeys(path, reflect.TypeOf(policyDoc{}), reflect.Value{}, out)
			continue
		}
		switch {
		case ft.Kind() == reflect.Pointer && ft.Elem().Kind() == reflect.Struct:
			*out = append(*out, k)
			var ev reflect.Value
			if fv.IsValid() && !fv.IsNil() {
				ev = fv.Elem()
			}
			walkKeys(path, ft.Elem(), ev, out)
		case ft.Kind() == reflect.Struct:
			*out = append(*out, k)
			walkKeys(path, ft, fv, out)
		case ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct:
			*out = append(*out, k)
			var ev reflect.Value
			if fv.IsValid() && fv.Len() > 0 {
				ev = fv.Index(0)
			}
			walkKeys(path+"[]", ft.Elem(), ev, out)
		case ft.Kind() == reflect.Map && ft.Elem().Kind() == reflect.Struct:
			*out = append(*out, k)
			var ev reflect.Value
			if fv.IsValid() && fv.Len() > 0 {
				keys := fv.MapKeys()
				sort.Slice(keys, func(a, b int) bool { return keys[a].String() < keys[b].String() })
				ev = fv.MapIndex(keys[0])
			}
			walkKeys(path+".<name>", ft.Elem(), ev, out)
		default:
			k.scalar = ft.Kind() != reflect.Slice && ft.Kind() != reflect.Map
			k.value = fv
			*out = append(*out, k)
		}
	}
}

// probe is a configuration with one entry in every list and map, so that
// the walk sees the defaults Parse applies to entries too.
const probe = `
credentials: {c: {env: TOOLGATE_PROBE}}
auth:
  api_keys: [{id: k, key_sha256: "` + "0000000000000000000000000000000000000000000000000000000000000000" + `", tenant: t}]
  jwt: {issuer: "https://id.example", audience: a, jwks_url: "https://id.example/jwks"}
servers: [{name: s, command: [x]}]
tools: [{match: "mcp:s.*"}]
hooks: [{name: h, mode: observe, url: "http://127.0.0.1:1/", secret: "{{credential:c}}"}]
`

// codeKeys is every key of the configuration with its value after Parse's
// defaults.
func codeKeys(t *testing.T) []refKey {
	t.Helper()
	cfg, err := config.Parse("probe.yaml", []byte(probe))
	if err != nil {
		t.Fatal(err)
	}
	var keys []refKey
	walkKeys("", reflect.TypeOf(*cfg), reflect.ValueOf(*cfg), &keys)
	return keys
}

// docRow is one row of a key table of docs/CONFIG.md.
type docRow struct {
	line              int
	typ, def, meaning string
}

var rowRe = regexp.MustCompile("^\\| `([^`]+)` \\| ([^|]+?) \\| ([^|]+?) \\| (.+) \\|$")

// readReference parses docs/CONFIG.md: its key table rows (| `key` | type
// | default | meaning |) and its yaml code blocks.
func readReference(t *testing.T) (rows map[string]docRow, examples []string) {
	t.Helper()
	data, err := os.ReadFile("../../docs/CONFIG.md")
	if err != nil {
		t.Fatal(err)
	}
	rows = map[string]docRow{}
	var block []string
	inYAML := false
	for i, line := range strings.Split(string(data), "\n") {
		switch {
		case inYAML && line == "```":
			examples = append(examples, strings.Join(block, "\n")+"\n")
			block, inYAML = nil, false
		case inYAML:
			block = append(block, line)
		case line == "```yaml":
			inYAML = true
		default:
			m := rowRe.FindStringSubmatch(line)
			if m == nil {
				continue
			}
			if _, dup := rows[m[1]]; dup {
				t.Errorf("docs/CONFIG.md:%d: key %s documented twice", i+1, m[1])
			}
			rows[m[1]] = docRow{line: i + 1, typ: m[2], def: m[3], meaning: m[4]}
		}
	}
	if len(rows) == 0 || len(examples) == 0 {
		t.Fatalf("docs/CONFIG.md: %d key rows, %d yaml examples", len(rows), len(examples))
	}
	return rows, examples
}

// The policy mirror above holds exactly the keys the policy parser accepts.
func TestReferencePolicyKeys(t *testing.T) {
	doc, rule, rl := policy.Keys()
	for _, c := range []struct {
		typ  reflect.Type
		want []string
	}{{reflect.TypeOf(policyDoc{}), doc}, {reflect.TypeOf(ruleDoc{}), rule}, {reflect.TypeOf(rateLimitDoc{}), rl}} {
		var got []string
		for i := 0; i < c.typ.NumField(); i++ {
			got = append(got, c.typ.Field(i).Tag.Get("yaml"))
		}
		slices.Sort(got)
		want := slices.Sorted(slices.Values(c.want))
		if !slices.Equal(got, want) {
			t.Errorf("%s keys %v, the policy parser accepts %v", c.typ.Name(), got, want)
		}
	}
}

// docs/CONFIG.md documents every key of internal/config (and of the policy
// block) with its type, and no key that does not exist (issue 16 point 7).
func TestReferenceKeys(t *testing.T) {
	rows, _ := readReference(t)
	seen := map[string]bool{}
	for _, k := range codeKeys(t) {
		seen[k.path] = true
		r, ok := rows[k.path]
		if !ok {
			t.Errorf("key %s (%s) is not in docs/CONFIG.md", k.path, k.typ)
			continue
		}
		if r.typ != k.typ {
			t.Errorf("docs/CONFIG.md:%d: %s has type %q, the code %q", r.line, k.path, r.typ, k.typ)
		}
		if strings.TrimSpace(r.meaning) == "" {
			t.Errorf("docs/CONFIG.md:%d: %s has no description", r.line, k.path)
		}
	}
	for path, r := range rows {
		if !seen[path] {
			t.Errorf("docs/CONFIG.md:%d: %s is not a configuration key", r.line, path)
		}
	}
}

// effective holds the defaults that apply where a key is left empty but
// that Parse does not write into the Config: the code's constants.
func effective() map[string]string {
	validate := catalog.ToolDescriptor{ToolID: "mcp:s.t", Source: catalog.SourceMCP}
	catalog.Classify(&validate, []catalog.Classification{{Match: "*"}})
	return map[string]string{
		"http.read_header_timeout":       config.DefaultReadHeaderTimeout.String(),
		"http.read_body_timeout":         config.DefaultReadBodyTimeout.String(),
		"http.idle_timeout":              config.DefaultIdleTimeout.String(),
		"mcp.session_timeout":            mcpgw.DefaultSessionTimeout.String(),
		"auth.jwt.jwks_refresh_interval": auth.DefaultJWKSRefreshInterval.String(),
		"auth.jwt.scopes_claim":          auth.DefaultScopesClaim,
		"auth.jwt.tenant_claim":          auth.DefaultTenantClaim,
		"servers[].timeout":              pipeline.DefaultToolTimeout.String(),
		"tools[].timeout":                pipeline.DefaultToolTimeout.String(),
		"hooks[].timeout":                pipeline.DefaultHookTimeout.String(),
		"ratelimit.key_prefix":           rlredis.DefaultPrefix,
		"tools[].validate_args":          fmt.Sprint(!validate.SkipArgsValidation),
		// serve sends the arguments only for content: full.
		"hooks[].content": "hash",
		// An unclassified MCP tool is write (catalog.Classify).
		"tools[].safety_tier": string(validate.SafetyTier),
	}
}

var firstCode = regexp.MustCompile("`([^`]*)`")

// sameValue reports whether the documented default doc equals the code's
// value code: as durations when both parse as one, else as text.
func sameValue(doc, code string) bool {
	if doc == code {
		return true
	}
	d1, err1 := config.ParseDuration(doc)
	d2, err2 := config.ParseDuration(code)
	return err1 == nil && err2 == nil && d1 == d2
}

// Every scalar key's documented default is the code's: the value Parse
// applies, or the constant the code uses when the key is left empty; a
// key with neither is documented with "—" (or `false` for a boolean). A
// key documented "required" must be one the probe (a minimal valid
// configuration) has to set.
func TestReferenceDefaults(t *testing.T) {
	rows, _ := readReference(t)
	eff := effective()
	var root yaml.Node
	if err := yaml.Unmarshal([]byte(probe), &root); err != nil {
		t.Fatal(err)
	}
	set := map[string]bool{} // keys the probe sets: their values are not defaults
	examplePaths("", reflect.TypeOf(config.Config{}), root.Content[0], set)
	for _, k := range codeKeys(t) {
		r, ok := rows[k.path]
		if !ok || !k.scalar || !k.value.IsValid() || (set[k.path] && r.def != "required") {
			continue
		}
		var code string
		if !k.value.IsZero() {
			v := k.value
			if v.Kind() == reflect.Pointer {
				v = v.Elem()
			}
			code = fmt.Sprint(v.Interface())
		} else if e, ok := eff[k.path]; ok {
			code = e
		}
		m := firstCode.FindStringSubmatch(r.def)
		switch {
		case r.def == "required" && set[k.path]:
			// The probe, a minimal configuration Parse accepts, sets it.
		case r.def == "required":
			t.Errorf("docs/CONFIG.md:%d: %s is documented as required, but Parse accepts a configuration without it", r.line, k.path)
		case code == "" && (r.def == "—" || (k.typ == "boolean" && r.def == "`false`")):
		case code == "":
			t.Errorf("docs/CONFIG.md:%d: %s documents default %s; the code applies none (document —)", r.line, k.path, r.def)
		case m == nil || !sameValue(m[1], code):
			t.Errorf("docs/CONFIG.md:%d: %s documents default %s; the code's is %q", r.line, k.path, r.def, code)
		}
	}
	for path := range eff {
		if _, ok := rows[path]; !ok {
			t.Errorf("effective default for %s, which docs/CONFIG.md does not document", path)
		}
	}
}

// Every yaml example of docs/CONFIG.md is a valid configuration on its own,
// and every documented key appears in one of them.
func TestReferenceExamples(t *testing.T) {
	rows, examples := readReference(t)
	used := map[string]bool{}
	for i, ex := range examples {
		if _, err := config.Parse(fmt.Sprintf("CONFIG.md example %d", i+1), []byte(ex)); err != nil {
			t.Errorf("example %d does not parse:\n%s\n%v", i+1, ex, err)
		}
		var root yaml.Node
		if err := yaml.Unmarshal([]byte(ex), &root); err != nil || len(root.Content) == 0 {
			continue
		}
		examplePaths("", reflect.TypeOf(config.Config{}), root.Content[0], used)
	}
	for path, r := range rows {
		if !used[path] {
			t.Errorf("docs/CONFIG.md:%d: %s appears in no yaml example", r.line, path)
		}
	}
}

// examplePaths marks in used the reference path of every key set in the
// mapping node n, read as the struct type t.
func examplePaths(prefix string, t reflect.Type, n *yaml.Node, used map[string]bool) {
	if n.Kind != yaml.MappingNode {
		return
	}
	fields := map[string]reflect.Type{}
	for i := 0; i < t.NumField(); i++ {
		if tag := strings.Split(t.Field(i).Tag.Get("yaml"), ",")[0]; tag != "" && tag != "-" {
			fields[tag] = t.Field(i).Type
		}
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		key, val := n.Content[i].Value, n.Content[i+1]
		ft, ok := fields[key]
		if !ok {
			continue
		}
		path := key
		if prefix != "" {
			path = prefix + "." + key
		}
		used[path] = true
		if ft == yamlNodeType {
			ft = reflect.TypeOf(policyDoc{})
		}
		if ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		switch {
		case ft.Kind() == reflect.Struct:
			examplePaths(path, ft, val, used)
		case ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct && val.Kind == yaml.SequenceNode:
			for _, item := range val.Content {
				examplePaths(path+"[]", ft.Elem(), item, used)
			}
		case ft.Kind() == reflect.Map && ft.Elem().Kind() == reflect.Struct && val.Kind == yaml.MappingNode:
			for j := 1; j < len(val.Content); j += 2 {
				examplePaths(path+".<name>", ft.Elem(), val.Content[j], used)
			}
		}
	}
}

// Package schematest validates JSON values against the vendored OpenWOP v1
// JSON Schemas (testdata/openwop/schemas, JSON Schema 2020-12) in tests.
//
// Use Validate(t, "tool-descriptor.schema.json", v) for a whole schema, or
// ValidateRef(t, "run-event-payloads.schema.json#/$defs/agentToolCalled", v)
// for a definition inside one. v may be any Go value (it is marshalled to JSON
// first) or json.RawMessage. Compiled schemas are cached; safe for concurrent use.
package schematest

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

var (
	mu       sync.Mutex
	compiler *jsonschema.Compiler
	cache    = map[string]*jsonschema.Schema{}
)

// Dir is the directory holding the vendored schema files.
func Dir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "testdata", "openwop", "schemas")
}

func schemaFor(ref string) (*jsonschema.Schema, error) {
	mu.Lock()
	defer mu.Unlock()
	if s, ok := cache[ref]; ok {
		return s, nil
	}
	if compiler == nil {
		c := jsonschema.NewCompiler()
		c.DefaultDraft(jsonschema.Draft2020)
		c.AssertFormat()
		c.UseRegexpEngine(lookaheadRegexp)
		entries, err := os.ReadDir(Dir())
		if err != nil {
			return nil, err
		}
		for _, e := range entries {
			if !strings.HasSuffix(e.Name(), ".json") {
				continue
			}
			data, err := os.ReadFile(filepath.Join(Dir(), e.Name()))
			if err != nil {
				return nil, err
			}
			doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
			if err != nil {
				return nil, err
			}
			// Register under the file URL and under the schema's own $id.
			if err := c.AddResource("file:///openwop/"+e.Name(), doc); err != nil {
				return nil, err
			}
			if m, ok := doc.(map[string]any); ok {
				if id, ok := m["$id"].(string); ok && id != "" {
					_ = c.AddResource(id, doc)
				}
			}
		}
		compiler = c
	}
	s, err := compiler.Compile("file:///openwop/" + ref)
	if err != nil {
		return nil, err
	}
	cache[ref] = s
	return s, nil
}

// Check validates v against ref and returns the validation error, if any.
// ref is a schema file name, optionally followed by a JSON pointer fragment.
func Check(ref string, v any) error {
	s, err := schemaFor(ref)
	if err != nil {
		return err
	}
	var raw []byte
	switch x := v.(type) {
	case json.RawMessage:
		raw = x
	case []byte:
		raw = x
	default:
		raw, err = json.Marshal(v)
		if err != nil {
			return err
		}
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return err
	}
	return s.Validate(inst)
}

// Validate fails t if v does not validate against ref.
func Validate(t testing.TB, ref string, v any) {
	t.Helper()
	if err := Check(ref, v); err != nil {
		raw, _ := json.Marshal(v)
		if r, ok := v.(json.RawMessage); ok {
			raw = r
		}
		t.Fatalf("%s: %s does not validate: %v", ref, raw, err)
	}
}

// lookaheadRegexp compiles an ECMA-262 pattern with Go's regexp, plus the
// one extension the OpenWOP schemas need (run-event.schema.json's vendor
// event type pattern starts with a negative lookahead, which Go's RE2 syntax
// lacks): a pattern "^(?!X)Y" matches s when "^(?:X)" does not match s
// and "^(?:Y)" does.
func lookaheadRegexp(p string) (jsonschema.Regexp, error) {
	if !strings.HasPrefix(p, "^(?!") {
		return regexp.Compile(p)
	}
	depth, end := 1, -1
	for i := len("^(?!"); i < len(p) && end < 0; i++ {
		switch p[i] {
		case '\\':
			i++
		case '(':
			depth++
		case ')':
			if depth--; depth == 0 {
				end = i
			}
		}
	}
	if end < 0 {
		return regexp.Compile(p) // reports the syntax error
	}
	not, err := regexp.Compile("^(?:" + p[len("^(?!"):end] + ")")
	if err != nil {
		return nil, err
	}
	yes, err := regexp.Compile("^(?:" + p[end+1:] + ")")
	if err != nil {
		return nil, err
	}
	return negLookahead{src: p, not: not, yes: yes}, nil
}

type negLookahead struct {
	src      string
	not, yes *regexp.Regexp
}

func (r negLookahead) MatchString(s string) bool {
	return !r.not.MatchString(s) && r.yes.MatchString(s)
}
func (r negLookahead) String() string { return r.src }

package catalog

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"
	"strings"

	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/internal/canonjson"
)

// Tool-definition pinning (issue 17 §3): a tool's definition as an upstream
// (or an HTTP tool's config, or a native tool's descriptor) declares it is
// reduced to the six fields that change what a model is told and what the
// tool may do, with the MCP ToolAnnotations defaults filled in, and hashed.
// Two definitions pin alike iff their digests are equal.

// Definition is the pinned part of a tool definition: the fields of an MCP
// Tool (MCP spec 2025-11-25, "Tool") that a rug pull would change. Schemas
// and annotations are raw JSON (nil or "null" when absent); every
// transport fills it in the same way, so that DefinitionDigest is
// comparable across them.
type Definition struct {
	Name         string          `json:"name"`
	Title        string          `json:"title"`
	Description  string          `json:"description"`
	InputSchema  json.RawMessage `json:"inputSchema"`
	OutputSchema json.RawMessage `json:"outputSchema"`
	// Annotations is the MCP ToolAnnotations object; absent hints are
	// their spec defaults (see NormalizeDefinition).
	Annotations json.RawMessage `json:"annotations"`
}

// DefinitionFields are the field names ChangedFields reports, in the order
// it reports them. An annotation is reported as "annotations.<key>".
var DefinitionFields = []string{"name", "title", "description", "inputSchema", "outputSchema", "annotations"}

// annotationDefaults are the MCP 2025-11-25 ToolAnnotations defaults: a
// hint that is absent means exactly this value, so it must pin alike.
var annotationDefaults = map[string]any{
	"title":           "",
	"readOnlyHint":    false,
	"destructiveHint": true,
	"idempotentHint":  false,
	"openWorldHint":   true,
}

// NormalizeDefinition returns the RFC 8785 canonical JSON of d as an
// object {name, title, description, inputSchema, outputSchema,
// annotations}: an absent schema is null, and annotations is an object
// with every ToolAnnotations hint present (an absent one, or a JSON null,
// as its default: readOnlyHint false, destructiveHint true,
// idempotentHint false, openWorldHint true, title ""); keys the spec does
// not define are kept as given. Errors: InvalidArgument when a schema or
// the annotations are not JSON (or annotations not an object). Pure; safe
// for concurrent use.
func NormalizeDefinition(d Definition) ([]byte, error) {
	obj := map[string]json.RawMessage{}
	str := func(s string) json.RawMessage { b, _ := json.Marshal(s); return b }
	obj["name"], obj["title"], obj["description"] = str(d.Name), str(d.Title), str(d.Description)
	for _, f := range []struct {
		name string
		raw  json.RawMessage
	}{{"inputSchema", d.InputSchema}, {"outputSchema", d.OutputSchema}} {
		raw := bytes.TrimSpace(f.raw)
		if len(raw) == 0 {
			raw = json.RawMessage("null")
		}
		if !json.Valid(raw) {
			return nil, errcode.Errorf(errcode.InvalidArgument, "tool definition %q: %s is not JSON", d.Name, f.name)
		}
		obj[f.name] = raw
	}
	ann := map[string]json.RawMessage{}
	if raw := bytes.TrimSpace(d.Annotations); len(raw) > 0 && !bytes.Equal(raw, []byte("null")) {
		if err := json.Unmarshal(raw, &ann); err != nil {
			return nil, errcode.Errorf(errcode.InvalidArgument, "tool definition %q: annotations are not a JSON object", d.Name)
		}
	}
	for k, v := range annotationDefaults {
		if cur, ok := ann[k]; !ok || bytes.Equal(bytes.TrimSpace(cur), []byte("null")) {
			ann[k], _ = json.Marshal(v)
		}
	}
	a, err := json.Marshal(ann)
	if err != nil {
		return nil, errcode.Errorf(errcode.InvalidArgument, "tool definition %q: annotations: %v", d.Name, err)
	}
	obj["annotations"] = a
	b, err := json.Marshal(obj)
	if err != nil {
		return nil, errcode.Errorf(errcode.InvalidArgument, "tool definition %q: %v", d.Name, err)
	}
	out, err := canonjson.Canonicalize(b)
	if err != nil {
		return nil, errcode.Wrap(errcode.InvalidArgument, err, "tool definition "+d.Name)
	}
	return out, nil
}

// DefinitionDigest is "sha256:" and the lowercase hex SHA-256 of
// NormalizeDefinition(d). Errors: those of NormalizeDefinition. Pure;
// safe for concurrent use.
func DefinitionDigest(d Definition) (string, error) {
	c, err := NormalizeDefinition(d)
	if err != nil {
		return "", err
	}
	return DigestOf(c), nil
}

// DigestOf is the definition digest of an already normalized definition
// (NormalizeDefinition's output): "sha256:<hex>".
func DigestOf(normalized []byte) string {
	sum := sha256.Sum256(normalized)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// FieldChange is one field of a definition diff: the field name (as in
// ChangedFields) and its old and new JSON values (null when absent).
type FieldChange struct {
	Field string          `json:"field"`
	Old   json.RawMessage `json:"old"`
	New   json.RawMessage `json:"new"`
}

// DiffDefinitions compares two normalized definitions (NormalizeDefinition
// output; nil old for a tool never pinned, which differs in each of the
// six DefinitionFields, annotations as one) field by field, in DefinitionFields order, annotations key by key
// ("annotations.destructiveHint"). Errors: InvalidArgument when either is
// not a normalized definition. Pure; safe for concurrent use.
func DiffDefinitions(old, new []byte) ([]FieldChange, error) {
	// Re-canonicalized: a store may have re-encoded them (encoding/json
	// escapes '<' as \u003c), and the comparison is of canonical bytes.
	var o, n map[string]json.RawMessage
	if len(old) > 0 {
		c, err := canonjson.Canonicalize(old)
		if err != nil {
			return nil, errcode.Errorf(errcode.InvalidArgument, "old definition: %v", err)
		}
		if err := json.Unmarshal(c, &o); err != nil {
			return nil, errcode.Errorf(errcode.InvalidArgument, "old definition: %v", err)
		}
	}
	cn, err := canonjson.Canonicalize(new)
	if err != nil {
		return nil, errcode.Errorf(errcode.InvalidArgument, "new definition: %v", err)
	}
	if err := json.Unmarshal(cn, &n); err != nil {
		return nil, errcode.Errorf(errcode.InvalidArgument, "new definition: %v", err)
	}
	null := json.RawMessage("null")
	val := func(m map[string]json.RawMessage, k string) json.RawMessage {
		if v, ok := m[k]; ok {
			return v
		}
		return null
	}
	var out []FieldChange
	if o == nil { // a tool never pinned: every field is new
		for _, f := range DefinitionFields {
			out = append(out, FieldChange{Field: f, Old: null, New: val(n, f)})
		}
		return out, nil
	}
	for _, f := range DefinitionFields {
		ov, nv := val(o, f), val(n, f)
		if f != "annotations" {
			if !bytes.Equal(ov, nv) {
				out = append(out, FieldChange{Field: f, Old: ov, New: nv})
			}
			continue
		}
		var oa, na map[string]json.RawMessage
		_ = json.Unmarshal(ov, &oa)
		_ = json.Unmarshal(nv, &na)
		var keys []string
		for k := range oa {
			keys = append(keys, k)
		}
		for k := range na {
			if _, ok := oa[k]; !ok {
				keys = append(keys, k)
			}
		}
		slices.Sort(keys)
		for _, k := range keys {
			a, b := val(oa, k), val(na, k)
			if !bytes.Equal(a, b) {
				out = append(out, FieldChange{Field: "annotations." + k, Old: a, New: b})
			}
		}
	}
	return out, nil
}

// ChangedFields is the field names of DiffDefinitions(old, new), or nil
// when either cannot be read.
func ChangedFields(old, new []byte) []string {
	d, err := DiffDefinitions(old, new)
	if err != nil {
		return nil
	}
	out := make([]string, 0, len(d))
	for _, c := range d {
		out = append(out, c.Field)
	}
	return out
}

// DescriptorDefinition is the Definition a descriptor declares, for tools
// whose definition is the descriptor itself (native tools, HTTP tools):
// name is the part of the toolId after its scope prefix ("native:", "http:"),
// and the annotations are those the descriptor implies (Annotations).
// Pure; safe for concurrent use.
func DescriptorDefinition(d *ToolDescriptor) Definition {
	name := d.ToolID
	if i := strings.IndexByte(name, ':'); i >= 0 {
		name = name[i+1:]
	}
	ann, _ := json.Marshal(d.Annotations())
	return Definition{Name: name, Title: d.Title, Description: d.Description,
		InputSchema: d.InputSchema, OutputSchema: d.OutputSchema, Annotations: ann}
}

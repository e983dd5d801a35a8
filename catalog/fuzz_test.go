package catalog

import (
	"encoding/json"
	"testing"

	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/internal/schematest"
)

// FuzzResolve feeds Resolve untrusted client names. It must never panic;
// it either returns a tool whose canonical toolId resolves (and looks up)
// to that same tool, or an *errcode.Error with code not_found,
// ambiguous_tool or invalid_argument. Seeds: f.Add below and
// testdata/fuzz/FuzzResolve.
func FuzzResolve(f *testing.F) {
	for _, seed := range []string{
		"mcp:fs.read_file", "fs.read_file", "fs__read_file", "read_file", "create_issue",
		"mcp%3Afs.read_file", "fs%2Edir.list", "%", "x-host-acme-foo",
	} {
		f.Add(seed)
	}
	s := fixture(f)
	f.Fuzz(func(t *testing.T, name string) {
		got, err := s.Resolve(name)
		if err != nil {
			if got != nil {
				t.Fatalf("Resolve(%q) returned both a tool and %v", name, err)
			}
			e := errcode.As(err)
			if e == nil {
				t.Fatalf("Resolve(%q) error %v is not an *errcode.Error", name, err)
			}
			switch e.Code {
			case errcode.NotFound, errcode.AmbiguousTool, errcode.InvalidArgument:
			default:
				t.Fatalf("Resolve(%q) code %q", name, e.Code)
			}
			return
		}
		if got == nil {
			t.Fatalf("Resolve(%q) returned neither a tool nor an error", name)
		}
		id := got.Descriptor.ToolID
		again, err := s.Resolve(id)
		if err != nil || again != got {
			t.Fatalf("Resolve(%q) = %q, but Resolve(%q) = %v, %v", name, id, id, again, err)
		}
		if l, ok := s.Lookup(id); !ok || l != got {
			t.Fatalf("Lookup(%q) disagrees with Resolve(%q)", id, name)
		}
	})
}

// FuzzDescriptorSchema checks the agreement invariant on arbitrary field
// values: whatever Validate accepts marshals to a document the OpenWOP v1
// ToolDescriptor schema accepts.
func FuzzDescriptorSchema(f *testing.F) {
	f.Add("mcp:fs.read_file", "mcp", "read", "none", "fs:read", "fs:write", `{"type":"object"}`, "t")
	f.Add("x-host-acme-sh", "host-extension", "exec", "", "a", "a", `{}`, "")
	f.Add("native:x", "node-pack", "pure", "safe-fetch", "\xff", "\xfe", `[]`, "\xff")
	f.Fuzz(func(t *testing.T, id, source, tier, egress, scope1, scope2, schema, title string) {
		d := ToolDescriptor{
			ToolID: id, Source: Source(source), SafetyTier: SafetyTier(tier), Egress: Egress(egress),
			Auth: &Auth{Scopes: []string{scope1, scope2}}, InputSchema: []byte(schema), Title: title,
		}
		if d.Validate() != nil {
			return
		}
		raw, err := json.Marshal(d)
		if err != nil {
			t.Fatalf("valid descriptor does not marshal: %v", err)
		}
		if err := schematest.Check(descriptorSchema, json.RawMessage(raw)); err != nil {
			t.Fatalf("Validate accepts %s, the schema rejects it: %v", raw, err)
		}
	})
}

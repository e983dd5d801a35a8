package catalog

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/internal/schematest"
)

const descriptorSchema = "tool-descriptor.schema.json"

// maximal is a descriptor with every field set.
func maximal() ToolDescriptor {
	return ToolDescriptor{
		ToolID:       MCPToolID("fs", "read_file"),
		Source:       SourceMCP,
		Title:        "Read file",
		Description:  "Reads a file under the served root.",
		InputSchema:  json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"},"token":{"type":"string"}}}`),
		OutputSchema: json.RawMessage(` {"type":"object"}`),
		Auth:         &Auth{Scopes: []string{"fs:read", "tools:fs:read"}, CredentialRef: true},
		Egress:       EgressNone,
		Approval:     ApprovalNever,
		ReplayPolicy: ReplayIdempotent,
		SafetyTier:   TierRead,
		CostHint:     HintLow,
		LatencyHint:  HintMedium,
	}
}

// wire marshals d and removes the given top-level keys, to build documents
// with a field truly absent rather than empty.
func wire(t *testing.T, d ToolDescriptor, drop ...string) json.RawMessage {
	t.Helper()
	raw, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	if len(drop) == 0 {
		return raw
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range drop {
		delete(m, k)
	}
	raw, err = json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// TestValidateAgreesWithSchema checks both directions on one table: whatever
// Validate accepts the OpenWOP schema accepts, and whatever the schema
// rejects Validate rejects. Rows with schema=true, ok=false are toolgate's
// deliberately stricter identity and scope rules.
func TestValidateAgreesWithSchema(t *testing.T) {
	base := func(mut func(*ToolDescriptor)) ToolDescriptor {
		d := ToolDescriptor{ToolID: MCPToolID("fs", "read_file"), Source: SourceMCP, SafetyTier: TierRead}
		if mut != nil {
			mut(&d)
		}
		return d
	}
	cases := []struct {
		name   string
		d      ToolDescriptor
		drop   []string // keys removed from the wire form before schema validation
		ok     bool     // Validate accepts
		schema bool     // the OpenWOP schema accepts
		issue  string   // substring of Validate's message when !ok
	}{
		{name: "minimal", d: base(nil), ok: true, schema: true},
		{name: "maximal", d: maximal(), ok: true, schema: true},
		{name: "exec host-extension", d: ToolDescriptor{ToolID: "x-host-acme-shell", Source: SourceHostExtension, SafetyTier: TierExec}, ok: true, schema: true},
		{name: "native pure", d: ToolDescriptor{ToolID: NativeToolID("clock.now"), Source: SourceNodePack, SafetyTier: TierPure}, ok: true, schema: true},
		{name: "exec mcp", d: base(func(d *ToolDescriptor) { d.SafetyTier = TierExec }), schema: false, issue: "exec requires source"},
		{name: "exec node-pack", d: ToolDescriptor{ToolID: "native:sh", Source: SourceNodePack, SafetyTier: TierExec}, schema: false, issue: "exec requires source"},
		{name: "missing safetyTier", d: base(func(d *ToolDescriptor) { d.SafetyTier = "" }), drop: []string{"safetyTier"}, schema: false, issue: "safetyTier: required"},
		{name: "empty safetyTier", d: base(func(d *ToolDescriptor) { d.SafetyTier = "" }), schema: false, issue: "safetyTier: required"},
		{name: "missing source", d: ToolDescriptor{ToolID: "native:x", SafetyTier: TierRead}, drop: []string{"source"}, schema: false, issue: "source: required"},
		{name: "missing toolId", d: base(func(d *ToolDescriptor) { d.ToolID = "" }), drop: []string{"toolId"}, schema: false, issue: "toolId: required"},
		{name: "empty toolId", d: base(func(d *ToolDescriptor) { d.ToolID = "" }), schema: false, issue: "toolId: required"},
		{name: "bad source", d: base(func(d *ToolDescriptor) { d.Source = "lambda" }), schema: false, issue: `source: "lambda"`},
		{name: "bad safetyTier", d: base(func(d *ToolDescriptor) { d.SafetyTier = "admin" }), schema: false, issue: `safetyTier: "admin"`},
		{name: "bad egress", d: base(func(d *ToolDescriptor) { d.Egress = "internet" }), schema: false, issue: "egress"},
		{name: "bad approval", d: base(func(d *ToolDescriptor) { d.Approval = "sometimes" }), schema: false, issue: "approval"},
		{name: "bad replayPolicy", d: base(func(d *ToolDescriptor) { d.ReplayPolicy = "nondeterministic" }), schema: false, issue: "replayPolicy"},
		{name: "bad costHint", d: base(func(d *ToolDescriptor) { d.CostHint = "huge" }), schema: false, issue: "costHint"},
		{name: "bad latencyHint", d: base(func(d *ToolDescriptor) { d.LatencyHint = "slow" }), schema: false, issue: "latencyHint"},
		{name: "duplicate scopes", d: base(func(d *ToolDescriptor) { d.Auth = &Auth{Scopes: []string{"a", "b", "a"}} }), schema: false, issue: "duplicate scope"},
		{name: "inputSchema array", d: base(func(d *ToolDescriptor) { d.InputSchema = json.RawMessage(`[]`) }), schema: false, issue: "inputSchema"},
		{name: "outputSchema string", d: base(func(d *ToolDescriptor) { d.OutputSchema = json.RawMessage(`"x"`) }), schema: false, issue: "outputSchema"},
		// Stricter than the schema (schema accepts, Validate refuses).
		{name: "empty scope", d: base(func(d *ToolDescriptor) { d.Auth = &Auth{Scopes: []string{""}} }), schema: true, issue: "empty scope"},
		{name: "scopes invalid UTF-8", d: base(func(d *ToolDescriptor) { d.Auth = &Auth{Scopes: []string{"\xff", "\xfe"}} }), schema: false, issue: "not valid UTF-8"},
		{name: "scope with space", d: base(func(d *ToolDescriptor) { d.Auth = &Auth{Scopes: []string{"fs read"}} }), schema: true, issue: "whitespace"},
		{name: "toolId without scope", d: ToolDescriptor{ToolID: "read_file", Source: SourceNodePack, SafetyTier: TierRead}, schema: true, issue: "toolId"},
		{name: "mcp toolId without server", d: base(func(d *ToolDescriptor) { d.ToolID = "mcp:read" }), schema: true, issue: "mcp:<server>.<tool>"},
		{name: "mcp source non-mcp id", d: base(func(d *ToolDescriptor) { d.ToolID = "native:read" }), schema: true, issue: "needs a toolId of the form mcp:"},
		{name: "mcp id non-mcp source", d: base(func(d *ToolDescriptor) { d.Source = SourceConnector }), schema: true, issue: "needs source"},
		{name: "x-host id not host-extension", d: ToolDescriptor{ToolID: "x-host-acme-foo", Source: SourceConnector, SafetyTier: TierRead}, schema: true, issue: "host-extension"},
		{name: "toolId with space", d: ToolDescriptor{ToolID: "native:a b", Source: SourceNodePack, SafetyTier: TierRead}, schema: true, issue: "toolId"},
		{name: "toolId too long", d: ToolDescriptor{ToolID: "native:" + strings.Repeat("a", MaxNameLen), Source: SourceNodePack, SafetyTier: TierRead}, schema: true, issue: "longer than"},
		{name: "inputSchema null", d: base(func(d *ToolDescriptor) { d.InputSchema = json.RawMessage(`null`) }), schema: false, issue: "inputSchema"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.d.Validate()
			if (err == nil) != c.ok {
				t.Fatalf("Validate() = %v, want ok=%v", err, c.ok)
			}
			if err != nil {
				if !errors.Is(err, &errcode.Error{Code: errcode.InvalidArgument}) {
					t.Errorf("Validate() code = %q, want invalid_argument", errcode.CodeOf(err))
				}
				if !strings.Contains(err.Error(), c.issue) {
					t.Errorf("Validate() = %q, want it to mention %q", err, c.issue)
				}
			}
			raw := wire(t, c.d, c.drop...)
			serr := schematest.Check(descriptorSchema, raw)
			if (serr == nil) != c.schema {
				t.Fatalf("schema on %s = %v, want valid=%v", raw, serr, c.schema)
			}
			if c.ok && !c.schema {
				t.Fatal("table row breaks the invariant: Validate accepts what the schema rejects")
			}
		})
	}
}

func TestValidateReportsEveryIssue(t *testing.T) {
	d := ToolDescriptor{ToolID: "bad id", Source: "lambda", SafetyTier: "admin", Egress: "internet",
		Auth: &Auth{Scopes: []string{"", "a", "a"}}, InputSchema: json.RawMessage(`1`)}
	err := d.Validate()
	e := errcode.As(err)
	if e == nil || e.Code != errcode.InvalidArgument {
		t.Fatalf("Validate() = %v, want *errcode.Error invalid_argument", err)
	}
	issues, _ := e.Details["issues"].([]string)
	for _, want := range []string{"toolId", "source", "safetyTier", "egress", "empty scope", "duplicate scope", "inputSchema"} {
		found := false
		for _, is := range issues {
			found = found || strings.Contains(is, want)
		}
		if !found {
			t.Errorf("issues %q lack %q", issues, want)
		}
	}
	if len(issues) != 7 {
		t.Errorf("got %d issues, want 7: %q", len(issues), issues)
	}
	if e.Details["toolId"] != "bad id" {
		t.Errorf("details toolId = %v", e.Details["toolId"])
	}
}

func TestToolIDSyntax(t *testing.T) {
	for _, c := range []struct {
		id     string
		source Source
		ok     bool
	}{
		{"mcp:fs.read_file", SourceMCP, true},
		{"mcp:fs.dir.list", SourceMCP, true},
		{"mcp:my-srv_2.a/b", SourceMCP, true},
		{"mcp:.x", SourceMCP, false},
		{"mcp:fs.", SourceMCP, false},
		{"mcp:-fs.x", SourceMCP, false},
		{"mcp:" + strings.Repeat("s", 33) + ".x", SourceMCP, false},
		{"native:clock.now", SourceNodePack, true},
		{"http:weather", SourceConnector, true},
		{"openwop:core.noop", SourceWorkflow, true},
		{"acme.example:deploy", SourceHostExtension, true},
		{"x-host-acme:deploy", SourceHostExtension, true},
		{"x-host-acme-foo", SourceHostExtension, true},
		{"x-host-acme-foo-bar", SourceHostExtension, true},
		{"x-host-acme", SourceHostExtension, false},
		{"x-host--foo", SourceHostExtension, false},
		{"x-host-ACME-foo", SourceHostExtension, false},
		{"Native:x", SourceNodePack, false},
		{":x", SourceNodePack, false},
		{"native:", SourceNodePack, false},
		{"native:a:b", SourceNodePack, false},
		{"native:a%2Eb", SourceNodePack, false},
		{"native:a*", SourceNodePack, false},
		{"acme..example:x", SourceHostExtension, false},
	} {
		d := ToolDescriptor{ToolID: c.id, Source: c.source, SafetyTier: TierRead}
		if err := d.Validate(); (err == nil) != c.ok {
			t.Errorf("Validate(%q) = %v, want ok=%v", c.id, err, c.ok)
		}
		if c.ok {
			schematest.Validate(t, descriptorSchema, d)
		}
	}
}

func TestValidServerName(t *testing.T) {
	for _, c := range []struct {
		s  string
		ok bool
	}{
		{"fs", true}, {"a", true}, {"0", true}, {"my-srv_2", true}, {strings.Repeat("a", 32), true},
		{"", false}, {strings.Repeat("a", 33), false}, {"-fs", false}, {"_fs", false},
		{"f.s", false}, {"f:s", false}, {"f s", false}, {"f%s", false}, {"fé", false},
	} {
		err := ValidServerName(c.s)
		if (err == nil) != c.ok {
			t.Errorf("ValidServerName(%q) = %v, want ok=%v", c.s, err, c.ok)
		}
		if err != nil && !errors.Is(err, &errcode.Error{Code: errcode.InvalidArgument}) {
			t.Errorf("ValidServerName(%q) code = %q", c.s, errcode.CodeOf(err))
		}
	}
}

func TestIDConstructors(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{MCPToolID("fs", "read_file"), "mcp:fs.read_file"},
		{MCPToolID("fs", "dir.list"), "mcp:fs.dir.list"},
		{NativeToolID("clock.now"), "native:clock.now"},
		{HTTPToolID("weather"), "http:weather"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}

// TestProducedDescriptorsValidate: every descriptor this package produces
// (the maximal one, and Classify outputs for every source × tier, with and
// without rules) passes Validate and the OpenWOP schema.
func TestProducedDescriptorsValidate(t *testing.T) {
	schematest.Validate(t, descriptorSchema, maximal())
	ids := map[Source]string{
		SourceNodePack:      NativeToolID("pack.step"),
		SourceWorkflow:      "openwop:workflow.sub",
		SourceMCP:           MCPToolID("fs", "read_file"),
		SourceConnector:     HTTPToolID("crm.lookup"),
		SourceHostExtension: "x-host-acme-deploy",
	}
	for src, id := range ids {
		// No rules: an MCP tool becomes write; others keep the tier they were registered with.
		d := ToolDescriptor{ToolID: id, Source: src, SafetyTier: TierRead}
		Classify(&d, nil)
		if err := d.Validate(); err != nil {
			t.Errorf("%s unclassified: %v", src, err)
		}
		schematest.Validate(t, descriptorSchema, d)
		for _, tier := range []SafetyTier{TierPure, TierRead, TierWrite, TierExec} {
			if tier == TierExec && src != SourceHostExtension {
				continue
			}
			d := ToolDescriptor{ToolID: id, Source: src}
			Classify(&d, []Classification{
				{Match: "*", SafetyTier: tier, Scopes: []string{"s:1"}, Egress: EgressSafeFetch},
				{Match: id, ReplayPolicy: ReplayNonDeterministic, Approval: ApprovalConditional,
					CostHint: HintHigh, LatencyHint: HintLow, Title: "T", Description: "D"},
			})
			if d.SafetyTier != tier {
				t.Errorf("%s/%s: tier %q", src, tier, d.SafetyTier)
			}
			if err := d.Validate(); err != nil {
				t.Errorf("%s/%s: %v", src, tier, err)
			}
			schematest.Validate(t, descriptorSchema, d)
		}
	}
}

func TestAnnotations(t *testing.T) {
	for _, c := range []struct {
		tier   SafetyTier
		replay ReplayPolicy
		egress Egress
		want   Annotations
	}{
		{TierPure, ReplayDeterministic, EgressNone, Annotations{ReadOnlyHint: true, IdempotentHint: true}},
		{TierRead, ReplayIdempotent, EgressSafeFetch, Annotations{ReadOnlyHint: true, IdempotentHint: true, OpenWorldHint: true}},
		{TierRead, ReplayNonDeterministic, "", Annotations{ReadOnlyHint: true, OpenWorldHint: true}},
		{TierWrite, "", EgressNone, Annotations{DestructiveHint: true}},
		{TierWrite, ReplayIdempotent, EgressHostMediated, Annotations{DestructiveHint: true, IdempotentHint: true, OpenWorldHint: true}},
		{TierExec, ReplayNonDeterministic, EgressHostOwned, Annotations{DestructiveHint: true, OpenWorldHint: true}},
		{TierExec, ReplayDeterministic, "", Annotations{DestructiveHint: true, IdempotentHint: true, OpenWorldHint: true}},
		// Invalid tiers are treated as write.
		{"", "", "", Annotations{DestructiveHint: true, OpenWorldHint: true}},
		{"admin", "", EgressNone, Annotations{DestructiveHint: true}},
	} {
		d := ToolDescriptor{SafetyTier: c.tier, ReplayPolicy: c.replay, Egress: c.egress}
		if got := d.Annotations(); got != c.want {
			t.Errorf("Annotations(%q,%q,%q) = %+v, want %+v", c.tier, c.replay, c.egress, got, c.want)
		}
	}
	raw, err := json.Marshal(Annotations{})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"readOnlyHint":false,"destructiveHint":false,"idempotentHint":false,"openWorldHint":false}`; string(raw) != want {
		t.Errorf("Annotations JSON = %s, want all four hints present", raw)
	}
}

func TestDescriptorMarshalOmitsEmpty(t *testing.T) {
	d := ToolDescriptor{ToolID: "native:x", Source: SourceNodePack, SafetyTier: TierPure, Auth: &Auth{}}
	raw, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"toolId":"native:x","source":"node-pack","auth":{},"safetyTier":"pure"}`; string(raw) != want {
		t.Errorf("got %s, want %s", raw, want)
	}
	schematest.Validate(t, descriptorSchema, d)
}

func TestDescriptorCloneIsDeep(t *testing.T) {
	d := maximal()
	c := d.Clone()
	c.Auth.Scopes[0] = "changed"
	c.Auth.CredentialRef = false
	c.InputSchema[1] = 'X'
	c.OutputSchema[1] = 'X'
	if d.Auth.Scopes[0] != "fs:read" || !d.Auth.CredentialRef || d.InputSchema[1] != '"' || d.OutputSchema[1] != '{' {
		t.Fatalf("mutating the clone changed the original: %+v", d)
	}
}

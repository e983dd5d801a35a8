package policy

import (
	"errors"
	"flag"
	"os"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/toolgate/toolgate/errcode"
)

var update = flag.Bool("update", false, "rewrite golden files in testdata")

// TestLoadGolden checks that a document with many mistakes yields all of
// them, each at its exact file:line:col, sorted by position.
func TestLoadGolden(t *testing.T) {
	data, err := os.ReadFile("testdata/invalid.yaml")
	if err != nil {
		t.Fatal(err)
	}
	prg, err := Load("testdata/invalid.yaml", data, Options{})
	if prg != nil || err == nil {
		t.Fatalf("Load = %v, %v; want issues", prg, err)
	}
	if !errors.Is(err, &errcode.Error{Code: errcode.InvalidConfig}) {
		t.Errorf("errors.Is(err, InvalidConfig) = false")
	}
	if e := errcode.As(err); e == nil || e.Code != errcode.InvalidConfig {
		t.Errorf("errcode.As(err) = %v", e)
	}
	got := err.Error() + "\n"
	const golden = "testdata/invalid.golden"
	if *update {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Errorf("issues differ from %s (rerun with -update to accept):\n--- got\n%s--- want\n%s", golden, got, want)
	}
}

func compileErr(t *testing.T, spec Spec, opts Options) string {
	t.Helper()
	prg, err := Compile(spec, opts)
	if err == nil {
		t.Fatalf("Compile succeeded (%v), want issues", prg.Version())
	}
	var is Issues
	if !errors.As(err, &is) {
		t.Fatalf("Compile error %T %v, want Issues", err, err)
	}
	return err.Error()
}

func TestCompileIssues(t *testing.T) {
	rule := func(when string) RuleSpec {
		return RuleSpec{ID: "r", Effect: EffectAllow, Tools: []string{"*"}, When: when, Pos: Pos{"f", 3, 5}, WhenPos: Pos{"f", 3, 20}}
	}
	cases := []struct {
		name string
		spec Spec
		opts Options
		want string
	}{
		{"missing id", Spec{Rules: []RuleSpec{{Effect: EffectAllow, Tools: []string{"native:x"}, Pos: Pos{"f", 2, 5}}}}, Options{},
			"f:2:5: rule #1: id is required"},
		{"bad default", Spec{Default: "maybe", Pos: Pos{"f", 1, 1}}, Options{},
			`f:1:1: default must be "deny" or "allow", got "maybe"`},
		{"missing effect", Spec{Rules: []RuleSpec{{ID: "a", Tools: []string{"native:x"}, Pos: Pos{"f", 2, 5}}}}, Options{},
			`f:2:5: rule "a": effect is required (allow, deny or require_approval)`},
		{"empty tools", Spec{Rules: []RuleSpec{{ID: "a", Effect: EffectDeny, Pos: Pos{"f", 2, 5}}}}, Options{},
			`f:2:5: rule "a": tools must list at least one toolId glob`},
		{"unknown tool", Spec{Rules: []RuleSpec{{ID: "a", Effect: EffectDeny, Tools: []string{"mcp:fz.*"}, Pos: Pos{"f", 2, 5}}}},
			Options{KnownTools: []string{"mcp:fs.read", "mcp:fs.write"}},
			`f:2:5: rule "a": tools mcp:fz.* match none of the 2 known tools`},
		{"type error", Spec{Rules: []RuleSpec{rule(`principal.id + 1 == 2`)}}, Options{},
			// No column map for a Spec built in Go: the issue is at WhenPos.
			`f:3:20: rule "r": when: found no matching overload for '_+_' applied to '(string, int)' (at line 1, column 14 of the expression)`},
		{"typo in a typed field", Spec{Rules: []RuleSpec{rule(`call.runID == "x"`)}}, Options{},
			`f:3:20: rule "r": when: undefined field 'runID' (at line 1, column 5 of the expression)`},
		{"unknown variable", Spec{Rules: []RuleSpec{rule(`nope.path == "x"`)}}, Options{},
			`f:3:20: rule "r": when: undeclared reference to 'nope' (at line 1, column 1 of the expression)`},
		{"not bool", Spec{Rules: []RuleSpec{rule(`1 + 1`)}}, Options{},
			`f:3:20: rule "r": when must be a bool expression, got int`},
		{"always false", Spec{Rules: []RuleSpec{rule(`principal.id == "a" && 1 == 2`)}}, Options{},
			`f:3:20: rule "r": when is always false, so the rule never applies`},
		{"always fails", Spec{Rules: []RuleSpec{rule(`1 / 0 == 1`)}}, Options{},
			`f:3:20: rule "r": when can never be decided: it fails for every input: division by zero`},
		{"decidable despite a failing part", Spec{Rules: []RuleSpec{rule(`principal.id == "a" || 1 / 0 == 1`)}}, Options{},
			""}, // true for principal "a", fails for the others
		{"constant conversion error", Spec{Rules: []RuleSpec{rule(`principal.id == "a" || int("x") == 1`)}}, Options{},
			`f:3:20: rule "r": when: type conversion error from 'string' to 'int'`},
		{"dyn result", Spec{Rules: []RuleSpec{rule(`dyn(1)`)}}, Options{},
			`f:3:20: rule "r": when must be a bool expression, got dyn; compare the value, e.g. args.flag == true`},
		{"scopes on a deny rule", Spec{Rules: []RuleSpec{{ID: "a", Effect: EffectDeny, Tools: []string{"native:x"}, Scopes: []string{"s"}, Pos: Pos{"f", 2, 5}}}}, Options{},
			`f:2:5: rule "a": scopes apply to allow rules only; a deny rule denies whatever the scopes`},
		{"scopes on a require_approval rule", Spec{Rules: []RuleSpec{{ID: "a", Effect: EffectRequireApproval, Tools: []string{"native:x"}, Scopes: []string{"s"}, Pos: Pos{"f", 2, 5}}}}, Options{},
			`f:2:5: rule "a": scopes apply to allow rules only; a require_approval rule only restricts what an allow rule grants, so put the scopes on that allow rule`},
		{"bad rate", Spec{RateLimits: []RateLimitSpec{{Tools: []string{"*"}, Rate: "ten/s", Burst: 1, Pos: Pos{"f", 4, 5}}}}, Options{},
			`f:4:5: ratelimit: rate "ten/s": "ten" is not a positive number`},
		{"burst < 1", Spec{RateLimits: []RateLimitSpec{{Tools: []string{"*"}, Rate: "1/s", Burst: -1, Pos: Pos{"f", 4, 5}}}}, Options{},
			`f:4:5: ratelimit: burst must be at least 1, got -1`},
		{"unknown per", Spec{RateLimits: []RateLimitSpec{{Tools: []string{"*"}, Per: "tenant", Rate: "1/s", Burst: 1, Pos: Pos{"f", 4, 5}}}}, Options{},
			`f:4:5: ratelimit: per must be one of principal_tool, tenant_tool, tool, principal, got "tenant"`},
		{"no rate", Spec{RateLimits: []RateLimitSpec{{Tools: []string{"*"}, Burst: 1, Pos: Pos{"f", 4, 5}}}}, Options{},
			`f:4:5: ratelimit: rate is required (N/s, N/m or N/h)`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.want == "" {
				if _, err := Compile(c.spec, c.opts); err != nil {
					t.Fatalf("Compile: %v", err)
				}
				return
			}
			if got := compileErr(t, c.spec, c.opts); got != c.want {
				t.Errorf("got:\n%s\nwant:\n%s", got, c.want)
			}
		})
	}
}

// TestCELColumns checks that CEL errors point at the offending token in the
// file for each one-line scalar style.
func TestCELColumns(t *testing.T) {
	for _, line := range []string{
		`  - {id: a, effect: deny, tools: ["*"], when: principal.id + 1 == 2}`,
		`  - {id: a, effect: deny, tools: ["*"], when: 'principal.tenant == ''x'' || principal.id + 1 == 2'}`,
		`  - {id: a, effect: deny, tools: ["*"], when: "principal.tenant == \"x\\\\\" || principal.id + 1 == 2"}`,
		`  - {id: a, effect: deny, tools: ["*"], when: "principal.tenant == \u0022é\x41\" || principal.id + 1 == 2"}`,
	} {
		_, err := Load("f.yaml", []byte("rules:\n"+line+"\n"), Options{})
		col := len([]rune(line[:strings.Index(line, "+")])) + 1
		want := "f.yaml:2:" + strconv.Itoa(col) + `: rule "a": when: found no matching overload for '_+_' applied to '(string, int)'`
		if got := errString(err); got != want {
			t.Errorf("%s\ngot:  %s\nwant: %s", line, got, want)
		}
	}
}

func TestVersion(t *testing.T) {
	a, err := Load("a.yaml", []byte("rules:\n  - {id: r, effect: allow, tools: [native:x]}\n"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	// Same meaning, different layout and positions: same version.
	b, err := Load("b.yaml", []byte("# comment\ndefault: deny\nrules:\n  - id: r\n    tools: [native:x]\n    effect: allow\n"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := Load("c.yaml", []byte("rules:\n  - {id: r, effect: allow, tools: [native:y]}\n"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if a.Version() != b.Version() || a.Version() == c.Version() {
		t.Errorf("versions a=%s b=%s c=%s", a.Version(), b.Version(), c.Version())
	}
	if v := a.Version(); !strings.HasPrefix(v, "sha256:") || len(v) != len("sha256:")+12 {
		t.Errorf("version %q", v)
	}
	d, err := Compile(Spec{}, Options{Version: "v42"})
	if err != nil || d.Version() != "v42" {
		t.Errorf("explicit version: %v %v", d, err)
	}
	if (*Program)(nil).Version() != "" {
		t.Error("nil Program has a version")
	}
}

// TestCompileDoesNotRetainSpec: mutating the spec after Compile does not
// change the Program.
func TestCompileDoesNotRetainSpec(t *testing.T) {
	spec := Spec{Rules: []RuleSpec{{ID: "r", Effect: EffectAllow, Tools: []string{"mcp:fs.read"}, Scopes: []string{"fs:read"}}}}
	p := mustCompile(t, spec, Options{})
	spec.Rules[0].Tools[0] = "nothing"
	spec.Rules[0].Scopes[0] = "other"
	spec.Rules[0].Effect = EffectDeny
	d := p.Decide(t.Context(), &Input{Principal: Principal{Scopes: []string{"fs:read"}}, Tool: Tool{ID: "mcp:fs.read"}, ArgsKnown: true})
	if d.Effect != EffectAllow || d.RuleID != "r" {
		t.Errorf("decision %+v", d)
	}
}

func TestIssuesError(t *testing.T) {
	is := Issues{
		{Pos{"b", 1, 1}, "third"},
		{Pos{"a", 2, 1}, "second"},
		{Pos{"a", 1, 9}, "first"},
	}
	if got, want := is.Error(), "a:1:9: first\na:2:1: second\nb:1:1: third"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if is[0].Message != "third" {
		t.Error("Error() sorted the receiver")
	}
	var err error = is
	if !errors.Is(err, &errcode.Error{Code: errcode.InvalidConfig}) || errors.Is(err, &errcode.Error{Code: errcode.Internal}) {
		t.Error("errors.Is by code")
	}
	if (Pos{}).String() != "" || (Pos{Line: 3, Col: 4}).String() != "3:4" || (Pos{File: "f"}).String() != "f" {
		t.Error("Pos.String")
	}
}

// TestCELColumnsWithoutSource: ParseNode has no source text; one-line
// scalars are still mapped (shortest escapes assumed), block scalars are
// reported at the scalar with the expression's own position, and
// ParseNodeSource maps block scalars exactly.
func TestCELColumnsWithoutSource(t *testing.T) {
	src := "rules:\n" +
		"  - {id: a, effect: deny, tools: [\"*\"], when: 'principal.tenant == ''x'' || principal.id + 1 == 2'}\n" +
		"  - {id: b, effect: deny, tools: [\"*\"], when: \"principal.tenant == \\\"x\\\" || principal.id + 1 == 2\"}\n" +
		"  - id: c\n    effect: deny\n    tools: [\"*\"]\n    when: |\n      principal.tenant == \"x\" ||\n        principal.id + 1 == 2\n"
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(src), &doc); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(src, "\n")
	plus := func(line int) string { return strconv.Itoa(strings.Index(lines[line-1], "+") + 1) }
	const msg = ": when: found no matching overload for '_+_' applied to '(string, int)'"
	spec, issues := ParseNode("f.yaml", doc.Content[0])
	if len(issues) > 0 {
		t.Fatal(issues)
	}
	_, err := Compile(spec, Options{})
	want := "f.yaml:2:" + plus(2) + `: rule "a"` + msg + "\n" +
		"f.yaml:3:" + plus(3) + `: rule "b"` + msg + "\n" +
		`f.yaml:7:11: rule "c"` + msg + " (at line 2, column 16 of the expression)"
	if got := errString(err); got != want {
		t.Errorf("ParseNode:\n%s\nwant:\n%s", got, want)
	}
	spec, _ = ParseNodeSource("f.yaml", []byte(src), doc.Content[0])
	_, err = Compile(spec, Options{})
	want = "f.yaml:2:" + plus(2) + `: rule "a"` + msg + "\n" +
		"f.yaml:3:" + plus(3) + `: rule "b"` + msg + "\n" +
		"f.yaml:9:" + plus(9) + `: rule "c"` + msg
	if got := errString(err); got != want {
		t.Errorf("ParseNodeSource:\n%s\nwant:\n%s", got, want)
	}
}

// TestTypedTool: tool is a typed object (issue 13.9): a field the
// descriptor does not have is a load issue at its file:line:col, in a
// comparison (formerly a dead rule) and under has() (formerly failing
// open); a condition that is not statically bool is one too.
func TestTypedTool(t *testing.T) {
	src := `rules:
  - {id: dead, effect: deny, tools: ["*"], when: 'tool.arguments.a == 1'}
  - {id: open, effect: deny, tools: ["*"], when: '!has(tool.arguments) || args.x == 1'}
  - {id: nested, effect: deny, tools: ["*"], when: 'tool.auth.scope == "x"'}
  - {id: str, effect: deny, tools: ["*"], when: 'tool.title'}
  - {id: dyn, effect: deny, tools: ["*"], when: 'args.flag'}
  - {id: call, effect: deny, tools: ["*"], when: 'call.transport == "mcp" && call.method == "x"'}
  - {id: ok, effect: allow, tools: ["*"], when: 'tool.safetyTier == "read" && has(tool.auth) && "a" in tool.auth.scopes'}
`
	_, err := Load("p.yaml", []byte(src), Options{})
	want := strings.Join([]string{
		`p.yaml:2:55: rule "dead": when: undefined field 'arguments'`,
		`p.yaml:3:55: rule "open": when: undefined field 'arguments'`,
		`p.yaml:4:62: rule "nested": when: undefined field 'scope'`,
		`p.yaml:5:49: rule "str": when must be a bool expression, got string`,
		`p.yaml:6:49: rule "dyn": when must be a bool expression, got dyn; compare the value, e.g. args.flag == true`,
		`p.yaml:7:82: rule "call": when: undefined field 'method'`,
	}, "\n")
	if err == nil || err.Error() != want {
		t.Fatalf("Load: got\n%v\nwant\n%s", err, want)
	}
}

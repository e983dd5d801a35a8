package policy

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/toolgate/toolgate/errcode"
)

func TestParseDesignExample(t *testing.T) {
	data, err := os.ReadFile("testdata/design.yaml")
	if err != nil {
		t.Fatal(err)
	}
	spec, err := Parse("design.yaml", data)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if spec.Default != EffectDeny || len(spec.Rules) != 3 || len(spec.RateLimits) != 1 {
		t.Fatalf("spec = %+v", spec)
	}
	r := spec.Rules[1]
	if r.ID != "no-etc" || r.Effect != EffectDeny || r.When != `has(args.path) && args.path.startsWith("/etc")` {
		t.Errorf("rule 1 = %+v", r)
	}
	if got, want := r.Pos.String(), "design.yaml:4:5"; got != want {
		t.Errorf("rule pos = %s, want %s", got, want)
	}
	if got, want := r.WhenPos.String(), "design.yaml:4:59"; got != want {
		t.Errorf("when pos = %s, want %s", got, want)
	}
	if got := spec.Rules[0]; got.Reason != "readers may read" || len(got.Scopes) != 1 || got.Scopes[0] != "fs:read" {
		t.Errorf("rule 0 = %+v", got)
	}
	rl := spec.RateLimits[0]
	if rl.Per != PerPrincipalTool || rl.Rate != "10/s" || rl.Burst != 20 || rl.Tools[0] != "*" || rl.Pos.String() != "design.yaml:7:5" {
		t.Errorf("ratelimit = %+v", rl)
	}
	if _, err := Compile(spec, Options{}); err != nil {
		t.Fatalf("Compile: %v", err)
	}
}

func TestParseIssues(t *testing.T) {
	cases := []struct {
		name, src string
		want      []string // each issue, in position order
	}{
		{"unknown top-level key", "default: deny\nrulez: []\n",
			[]string{`p.yaml:2:1: policy: unknown key "rulez" (did you mean "rules"?)`}},
		{"unknown key without suggestion", "bogus: 1\n",
			[]string{`p.yaml:1:1: policy: unknown key "bogus"; want one of default, rules, ratelimits, mode`}},
		{"duplicate key", "default: deny\ndefault: allow\n",
			[]string{`p.yaml:2:1: policy: duplicate key "default" (first at 1:1)`}},
		{"policy not a mapping", "- a\n",
			[]string{`p.yaml:1:1: policy must be a mapping with keys default, rules, ratelimits, mode, got a list`}},
		{"rules not a list", "rules: {id: a}\n",
			[]string{`p.yaml:1:8: rules must be a list, got a mapping`}},
		{"rule not a mapping", "rules:\n  - readers\n",
			[]string{`p.yaml:2:5: rule must be a mapping with keys id, effect, tools, scopes, when, reason, mode, approver, got a string`}},
		{"tools not a list", "rules:\n  - {id: a, effect: allow, tools: mcp:fs.read}\n",
			[]string{`p.yaml:2:35: tools must be a list of strings, got a string`}},
		{"tool item not a string", "rules:\n  - {id: a, effect: allow, tools: [1, [x]]}\n",
			[]string{`p.yaml:2:36: tools item must be a string, got an integer (1)`, `p.yaml:2:39: tools item must be a string, got a list`}},
		{"unknown and duplicate rule keys", "rules:\n  - id: a\n    effect: allow\n    tools: [x]\n    whn: 'true'\n    id: b\n",
			[]string{`p.yaml:5:5: rule: unknown key "whn" (did you mean "when"?)`, `p.yaml:6:5: rule: duplicate key "id" (first at 2:5)`}},
		{"id not a string", "rules:\n  - {id: 12, effect: allow, tools: [x]}\n",
			[]string{`p.yaml:2:10: id must be a string, got an integer (12)`}},
		{"empty when", "rules:\n  - {id: a, effect: allow, tools: [x], when: ''}\n",
			[]string{`p.yaml:2:46: when must not be empty; omit it for an unconditional rule`}},
		{"when not a string", "rules:\n  - {id: a, effect: allow, tools: [x], when: true}\n",
			[]string{`p.yaml:2:46: when must be a string, got a boolean (true)`}},
		{"burst not an int", "ratelimits:\n  - {tools: [x], rate: 1/s, burst: many}\n",
			[]string{`p.yaml:2:36: burst must be an integer, got a string`}},
		{"burst float", "ratelimits:\n  - {tools: [x], rate: 1/s, burst: 1.5}\n",
			[]string{`p.yaml:2:36: burst must be an integer, got a number (1.5)`}},
		{"burst too large", "ratelimits:\n  - {tools: [x], rate: 1/s, burst: 99999999999}\n",
			[]string{`p.yaml:2:36: burst must be an integer between -2147483648 and 2147483647, got 99999999999`}},
		{"bare rate", "ratelimits:\n  - {tools: [x], rate: 10, burst: 1}\n",
			[]string{`p.yaml:2:24: rate must be written N/s, N/m or N/h (for example "10/s"), got a bare number`}},
		{"unknown ratelimit key", "ratelimits:\n  - {tools: [x], rate: 1/s, burst: 1, key: ip}\n",
			[]string{`p.yaml:2:39: ratelimits entry: unknown key "key"; want one of tools, per, rate, burst`}},
		{"default not a string", "default: [deny]\n",
			[]string{`p.yaml:1:10: default must be a string, got a list`}},
		{"merge key is unknown", "base: &b {id: a}\nrules:\n  - <<: *b\n    effect: allow\n",
			[]string{`p.yaml:1:1: policy: unknown key "base"; want one of default, rules, ratelimits, mode`, `p.yaml:3:5: rule: unknown key "<<"; want one of id, effect, tools, scopes, when, reason, mode, approver`}},
		{"syntax error", "rules: [\n",
			[]string{`p.yaml:1:1: invalid YAML: did not find expected node content`}},
		{"two documents", "default: deny\n---\ndefault: allow\n",
			[]string{`p.yaml:2:1: more than one YAML document; a policy is one document`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse("p.yaml", []byte(c.src))
			var is Issues
			if !errors.As(err, &is) {
				t.Fatalf("Parse error = %v (%T), want Issues", err, err)
			}
			var got []string
			for _, i := range is {
				got = append(got, i.String())
			}
			if strings.Join(got, "\n") != strings.Join(c.want, "\n") {
				t.Errorf("issues:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(c.want, "\n"))
			}
			if !errors.Is(err, &errcode.Error{Code: errcode.InvalidConfig}) {
				t.Errorf("errors.Is(err, InvalidConfig) = false")
			}
		})
	}
}

func TestParseCollectsAllIssues(t *testing.T) {
	src := "default: maybe\nrules:\n  - {id: a, effect: allow, tools: x, scopes: y}\n  - {id: b, effect: deny, tools: [z], extra: 1}\nratelimits: 5\n"
	_, err := Parse("p.yaml", []byte(src))
	var is Issues
	if !errors.As(err, &is) || len(is) != 4 {
		t.Fatalf("want 4 issues, got %v", err)
	}
}

func TestParseEmptyAndNull(t *testing.T) {
	for _, src := range []string{"", "~\n", "# only a comment\n", "rules: ~\nratelimits: []\n"} {
		spec, err := Parse("p.yaml", []byte(src))
		if err != nil {
			t.Errorf("Parse(%q): %v", src, err)
			continue
		}
		if spec.Default != EffectDeny || len(spec.Rules) != 0 {
			t.Errorf("Parse(%q) = %+v", src, spec)
		}
	}
}

func TestParseAliases(t *testing.T) {
	// An alias resolves to its anchor.
	src := "rules:\n  - {id: a, effect: allow, tools: &fs [\"mcp:fs.*\"]}\n  - {id: b, effect: deny, tools: *fs}\n"
	spec, err := Parse("p.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if got := spec.Rules[1].Tools; len(got) != 1 || got[0] != "mcp:fs.*" {
		t.Errorf("aliased tools = %v", got)
	}
}

// TestParseNodeInConfig parses the policy block of a larger configuration
// document: positions are those of the whole file.
func TestParseNodeInConfig(t *testing.T) {
	src := `listen: 127.0.0.1:7070
policy:
  default: allow
  rules:
    - id: no-etc
      effect: deny
      tools: ["mcp:fs.*"]
      when: args.path.startsWith("/etc") || principal.id + 1 == 2
`
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(src), &doc); err != nil {
		t.Fatal(err)
	}
	root := doc.Content[0]
	var policyNode *yaml.Node
	for i := 0; i < len(root.Content); i += 2 {
		if root.Content[i].Value == "policy" {
			policyNode = root.Content[i+1]
		}
	}
	spec, issues := ParseNode("toolgate.yaml", policyNode)
	if len(issues) != 0 {
		t.Fatalf("ParseNode: %v", issues)
	}
	if spec.Default != EffectAllow || spec.Pos.String() != "toolgate.yaml:3:3" || spec.Rules[0].WhenPos.String() != "toolgate.yaml:8:13" {
		t.Fatalf("spec = %+v", spec)
	}
	_, err := Compile(spec, Options{})
	line8 := strings.Split(src, "\n")[7]
	col := strings.Index(line8, "+") + 1
	want := fmt.Sprintf("toolgate.yaml:8:%d: rule \"no-etc\": when: found no matching overload for '_+_' applied to '(string, int)'", col)
	if got := errString(err); got != want {
		t.Errorf("Compile error:\n%s\nwant:\n%s", got, want)
	}
}

func TestParseNodeNil(t *testing.T) {
	spec, issues := ParseNode("x.yaml", nil)
	if len(issues) != 0 || spec.Default != EffectDeny {
		t.Fatalf("ParseNode(nil) = %+v, %v", spec, issues)
	}
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

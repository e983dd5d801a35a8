package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"

	"github.com/toolgate/toolgate/catalog"
	"github.com/toolgate/toolgate/internal/config"
	"github.com/toolgate/toolgate/internal/pipeline"
	"github.com/toolgate/toolgate/policy"
)

// Limits of a policy test file (untrusted input: a test file may come from
// a pull request).
const (
	maxTestFileSize = 4 << 20 // bytes
	maxTestCases    = 10000   // cases per file
)

// wantHidden is the test-file outcome "the tool is not shown in tools/list"
// (at call time: denied and answered as an unknown tool).
const wantHidden = "hidden"

// policyCase is one case of a policy test file, as parsed.
type policyCase struct {
	Pos       policy.Pos // the case's mapping in its file
	Name      string
	Principal policy.Principal
	// PrincipalRef is the API key principal id the case names ("" for an
	// inline principal); PrincipalPos locates it.
	PrincipalRef string
	PrincipalPos policy.Pos
	Tool         string
	ToolPos      policy.Pos
	Args         map[string]any // nil: {}
	Call         bool           // true (default): call time; false: list time
	Want         string         // allow, deny, require_approval or hidden
	Rule         string         // "" when the case does not check the rule
	HasRule      bool
}

// parsePolicyTests parses a policy test file strictly:
//
//	cases:
//	  - name: alice reads inside /srv/data     # optional
//	    principal: alice                       # an auth.api_keys id, or {id, tenant, scopes, attributes}
//	    tool: mcp:fs.read_text_file            # the spellings `policy explain` accepts
//	    args: {path: /srv/data/a.txt}          # optional; call time only
//	    call: true                             # optional; false: list time (tools/list)
//	    want: allow                            # allow | deny | require_approval | hidden
//	    rule: readers                          # optional: the deciding rule ("" for none)
//
// Unknown or duplicate keys, wrong types, a want outside the enum, args or
// rule on a list-time case, and want deny or require_approval at list time
// are errors. The error is policy.Issues, each located file:line:col.
func parsePolicyTests(file string, data []byte) ([]policyCase, error) {
	var issues policy.Issues
	at := func(n *yaml.Node) policy.Pos {
		if n == nil {
			return policy.Pos{File: file, Line: 1, Col: 1}
		}
		return policy.Pos{File: file, Line: n.Line, Col: n.Column}
	}
	add := func(n *yaml.Node, format string, args ...any) {
		issues = append(issues, policy.Issue{Pos: at(n), Message: fmt.Sprintf(format, args...)})
	}
	if len(data) > maxTestFileSize {
		return nil, policy.Issues{{Pos: at(nil), Message: fmt.Sprintf("the test file is larger than %d MiB", maxTestFileSize>>20)}}
	}
	var root yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&root); err != nil {
		if err == io.EOF {
			return nil, policy.Issues{{Pos: at(nil), Message: "the test file is empty (want a mapping with cases:)"}}
		}
		return nil, policy.Issues{{Pos: at(nil), Message: "YAML: " + err.Error()}}
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err != io.EOF {
		return nil, policy.Issues{{Pos: at(&extra), Message: "the file holds more than one YAML document; a test file is exactly one"}}
	}
	doc := &root
	if doc.Kind == yaml.DocumentNode && len(doc.Content) == 1 {
		doc = doc.Content[0]
	}
	if doc.Kind != yaml.MappingNode {
		return nil, policy.Issues{{Pos: at(doc), Message: "a test file is a mapping with one key, cases: (a list of cases)"}}
	}
	var casesNode *yaml.Node
	eachKey(doc, add, func(k, v *yaml.Node) {
		switch k.Value {
		case "cases":
			casesNode = v
		default:
			add(k, "unknown key %q (a test file has only cases:)", k.Value)
		}
	})
	if casesNode == nil {
		if len(issues) == 0 {
			add(doc, "missing cases: (a list of cases)")
		}
		return nil, issues
	}
	if casesNode.Kind != yaml.SequenceNode {
		add(casesNode, "cases must be a list of cases")
		return nil, issues
	}
	if len(casesNode.Content) == 0 {
		add(casesNode, "cases is empty: a test file needs at least one case")
	}
	if len(casesNode.Content) > maxTestCases {
		add(casesNode, "more than %d cases in one file", maxTestCases)
		return nil, issues
	}
	var out []policyCase
	for _, cn := range casesNode.Content {
		if c, ok := parseCase(cn, at, add); ok {
			out = append(out, c)
		}
	}
	if len(issues) > 0 {
		return nil, issues.Sorted()
	}
	return out, nil
}

// eachKey calls fn for each key of mapping n, reporting duplicate keys and
// keys that are not plain strings.
func eachKey(n *yaml.Node, add func(*yaml.Node, string, ...any), fn func(k, v *yaml.Node)) {
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode || k.Tag == "!!merge" {
			add(k, "keys must be plain strings")
			continue
		}
		if seen[k.Value] {
			add(k, "duplicate key %q", k.Value)
			continue
		}
		seen[k.Value] = true
		fn(k, v)
	}
}

// scalarString decodes a string scalar (a YAML string, not a number, bool
// or null written bare).
func scalarString(n *yaml.Node, key string, add func(*yaml.Node, string, ...any)) (string, bool) {
	if n.Kind != yaml.ScalarNode || n.Tag != "!!str" {
		add(n, "%s must be a string", key)
		return "", false
	}
	return n.Value, true
}

func stringList(n *yaml.Node, key string, add func(*yaml.Node, string, ...any)) ([]string, bool) {
	if n.Kind != yaml.SequenceNode {
		add(n, "%s must be a list of strings", key)
		return nil, false
	}
	out := []string{}
	ok := true
	for _, e := range n.Content {
		s, good := scalarString(e, key+" entries", add)
		ok = ok && good
		out = append(out, s)
	}
	return out, ok
}

func parseCase(n *yaml.Node, at func(*yaml.Node) policy.Pos, add func(*yaml.Node, string, ...any)) (policyCase, bool) {
	c := policyCase{Pos: at(n), Call: true}
	if n.Kind != yaml.MappingNode {
		add(n, "a case must be a mapping {name?, principal, tool, args?, call?, want, rule?}")
		return c, false
	}
	ok := true
	var principalNode, toolNode, wantNode, argsNode, ruleNode, callNode *yaml.Node
	eachKey(n, func(x *yaml.Node, f string, a ...any) { ok = false; add(x, f, a...) }, func(k, v *yaml.Node) {
		switch k.Value {
		case "name":
			c.Name, _ = scalarString(v, "name", add)
		case "principal":
			principalNode = v
		case "tool":
			toolNode = v
		case "args":
			argsNode = v
		case "call":
			callNode = v
		case "want":
			wantNode = v
		case "rule":
			ruleNode = v
		default:
			ok = false
			add(k, "unknown key %q in a case (want name, principal, tool, args, call, want, rule)", k.Value)
		}
	})
	fail := func(x *yaml.Node, f string, a ...any) { ok = false; add(x, f, a...) }
	if principalNode == nil {
		fail(n, "the case has no principal")
	} else {
		c.PrincipalPos = at(principalNode)
		switch principalNode.Kind {
		case yaml.ScalarNode:
			if s, good := scalarString(principalNode, "principal", fail); good {
				if strings.TrimSpace(s) == "" {
					fail(principalNode, "principal must not be empty")
				}
				c.PrincipalRef = s
			}
		case yaml.MappingNode:
			c.Principal = parseInlinePrincipal(principalNode, fail)
		default:
			fail(principalNode, "principal must be an API key principal id or a mapping {id, tenant, scopes, attributes}")
		}
	}
	if toolNode == nil {
		fail(n, "the case has no tool")
	} else if s, good := scalarString(toolNode, "tool", fail); good {
		c.Tool, c.ToolPos = s, at(toolNode)
		if s == "" {
			fail(toolNode, "tool must not be empty")
		}
	}
	if callNode != nil {
		if callNode.Kind != yaml.ScalarNode || callNode.Tag != "!!bool" {
			fail(callNode, "call must be true (decide a call, the default) or false (decide tools/list)")
		} else {
			c.Call = callNode.Value == "true" || callNode.Value == "True" || callNode.Value == "TRUE"
		}
	}
	if argsNode != nil {
		switch {
		case !c.Call:
			fail(argsNode, "args on a list-time case (call: false): tools/list has no arguments")
		case argsNode.Kind != yaml.MappingNode:
			fail(argsNode, "args must be a mapping (the call's JSON object)")
		default:
			m, err := yamlToJSONObject(argsNode)
			if err != nil {
				fail(argsNode, "args: %v", err)
			}
			c.Args = m
		}
	}
	if wantNode == nil {
		fail(n, "the case has no want (allow, deny, require_approval or hidden)")
	} else if s, good := scalarString(wantNode, "want", fail); good {
		c.Want = s
		switch {
		case !slices.Contains([]string{string(policy.EffectAllow), string(policy.EffectDeny), string(policy.EffectRequireApproval), wantHidden}, s):
			fail(wantNode, "want %q: want allow, deny, require_approval or hidden", s)
		case !c.Call && s != string(policy.EffectAllow) && s != wantHidden:
			fail(wantNode, "want %q on a list-time case (call: false): want allow (shown in tools/list) or hidden", s)
		}
	}
	if ruleNode != nil {
		if !c.Call {
			fail(ruleNode, "rule on a list-time case (call: false): only a call's decision names a rule")
		} else if s, good := scalarString(ruleNode, "rule", fail); good {
			c.Rule, c.HasRule = s, true
		}
	}
	return c, ok
}

func parseInlinePrincipal(n *yaml.Node, fail func(*yaml.Node, string, ...any)) policy.Principal {
	var p policy.Principal
	hasID := false
	eachKey(n, fail, func(k, v *yaml.Node) {
		switch k.Value {
		case "id":
			p.ID, _ = scalarString(v, "principal.id", fail)
			hasID = true
			if strings.TrimSpace(p.ID) == "" {
				fail(v, "principal.id must not be empty")
			}
		case "tenant":
			p.Tenant, _ = scalarString(v, "principal.tenant", fail)
		case "scopes":
			p.Scopes, _ = stringList(v, "principal.scopes", fail)
		case "attributes":
			if v.Kind != yaml.MappingNode {
				fail(v, "principal.attributes must be a mapping of strings")
				return
			}
			p.Attributes = map[string]string{}
			eachKey(v, fail, func(ak, av *yaml.Node) {
				if s, ok := scalarString(av, "principal.attributes."+ak.Value, fail); ok {
					p.Attributes[ak.Value] = s
				}
			})
		default:
			fail(k, "unknown key %q in an inline principal (want id, tenant, scopes, attributes)", k.Value)
		}
	})
	if !hasID {
		fail(n, "an inline principal needs an id")
	}
	return p
}

// yamlToJSONObject converts a YAML mapping to the decoded JSON object the
// gate would see, validated as the gate validates call arguments.
func yamlToJSONObject(n *yaml.Node) (map[string]any, error) {
	var v any
	if err := n.Decode(&v); err != nil {
		return nil, err
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("not representable as JSON (%v)", err)
	}
	return parseArgs(string(raw))
}

// testOutcome is what one case got.
type testOutcome struct {
	label    string // allow, deny, require_approval, hidden
	decision policy.Decision
	shown    bool
	trace    policy.Explanation
}

// runPolicyCase decides c with the configured (compiled) policy exactly as
// serve does: Decide with the arguments for a call, Disclose for tools/list.
func runPolicyCase(ctx context.Context, prog *policy.Program, p policy.Principal, d *catalog.ToolDescriptor, c *policyCase) testOutcome {
	in := policy.Input{Principal: p, Tool: pipeline.PolicyTool(d), Args: c.Args, ArgsKnown: c.Call,
		Call: policy.Call{Transport: transportOf(d.ToolID)}}
	var o testOutcome
	o.trace = prog.Explain(ctx, &in)
	o.decision = o.trace.Decision
	list := in
	list.Args, list.ArgsKnown = nil, false
	o.shown = prog.Disclose(ctx, &list)
	switch {
	case !c.Call && o.shown:
		o.label = string(policy.EffectAllow)
	case !c.Call:
		o.label = wantHidden
	case o.decision.Effect == policy.EffectDeny && !o.shown:
		o.label = wantHidden
	default:
		o.label = string(o.decision.Effect)
	}
	return o
}

// transportOf is the transport the gate carries toolID's calls on.
func transportOf(toolID string) string {
	switch {
	case strings.HasPrefix(toolID, "http:"):
		return "http"
	case strings.HasPrefix(toolID, "native:"):
		return "native"
	}
	return "mcp"
}

// passes reports whether o satisfies c: want deny accepts a hidden tool
// (a hidden tool's call is denied), hidden needs the tool not shown.
func (c *policyCase) passes(o testOutcome) bool {
	okWant := c.Want == o.label || (c.Want == string(policy.EffectDeny) && o.label == wantHidden)
	return okWant && (!c.HasRule || c.Rule == o.decision.RuleID)
}

// resolvePrincipal returns the case's principal: inline, or the configured
// API key principal it names (as internal/auth builds it).
func resolvePrincipal(cfg *config.Config, c *policyCase) (policy.Principal, error) {
	if c.PrincipalRef == "" {
		return c.Principal, nil
	}
	for _, k := range cfg.Auth.APIKeys {
		if k.ID == c.PrincipalRef {
			return policy.Principal{ID: k.ID, Tenant: k.Tenant, Scopes: k.Scopes, Attributes: k.Attrs}, nil
		}
	}
	return policy.Principal{}, fmt.Errorf("%s: principal %q is not an API key principal of %s (auth.api_keys); name a configured id or write an inline principal {id, tenant, scopes, attributes}",
		c.PrincipalPos, c.PrincipalRef, cfg.File)
}

func newPolicyTestCmd() *cobra.Command {
	var file string
	cmd := &cobra.Command{
		Use:   "test --config FILE TESTS...",
		Short: "Run policy test files against the configured policy",
		Long: `Run YAML policy test files against the configuration's policy, compiled exactly as serve compiles
it and decided by the same functions (Decide for a call, Disclose for tools/list). A test file is

  cases:
    - name: alice reads inside the data directory   # optional
      principal: alice          # an auth.api_keys id, or inline {id, tenant, scopes, attributes}
      tool: mcp:fs.read_text_file
      args: {path: /srv/data/a.txt}                  # optional, call-time cases only
      call: true                # default; false decides tools/list instead of a call
      want: allow               # allow | deny | require_approval | hidden
      rule: readers             # optional: the deciding rule ("" for the default posture)

At call time, hidden means denied and not shown in tools/list (the gate answers as for an unknown
tool); want deny also accepts a hidden tool. At list time (call: false) want is allow (shown) or
hidden. Each failing case is printed with its file:line, what it got, and the deciding rule with its
file:line. Then the rule coverage: the rules no case exercised (none decided a case and none's
condition held in one). Exit 0 when every case passes, 1 when one fails, 2 for a usage or parse
error (bad YAML, an unknown key, an unknown principal or tool), located file:line:col.`,
		Example: `  toolgate policy test --config examples/readme-policy.yaml examples/readme-policy_test.yaml`,
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, files []string) error {
			cfg, err := loadConfig(file)
			if err != nil {
				return err
			}
			return runPolicyTests(cmd.Context(), cmd.OutOrStdout(), cfg, files)
		},
	}
	cmd.Flags().StringVarP(&file, "config", "c", "", "configuration file (required)")
	_ = cmd.MarkFlagRequired("config")
	return cmd
}

// runPolicyTests parses every file first (any parse error, unknown
// principal or unknown tool is a usage error before a case runs), then runs
// the cases and prints failures and the coverage.
func runPolicyTests(ctx context.Context, w io.Writer, cfg *config.Config, files []string) error {
	type prepared struct {
		c *policyCase
		p policy.Principal
		d catalog.ToolDescriptor
	}
	var all []prepared
	var problems []string
	for _, f := range files {
		data, err := readTestFile(f)
		if err != nil {
			return usage("reading test file: %v", err)
		}
		cases, err := parsePolicyTests(f, data)
		if err != nil {
			problems = append(problems, err.Error())
			continue
		}
		for i := range cases {
			c := &cases[i]
			p, err := resolvePrincipal(cfg, c)
			if err != nil {
				problems = append(problems, err.Error())
				continue
			}
			d, err := descriptorFor(cfg, c.Tool)
			if err != nil {
				problems = append(problems, fmt.Sprintf("%s: %s", c.ToolPos, strings.Replace(err.Error(), "--tool ", "tool ", 1)))
				continue
			}
			all = append(all, prepared{c, p, d})
		}
	}
	if len(problems) > 0 {
		return usage("%s", strings.Join(problems, "\n"))
	}
	rules := cfg.Policy.Rules()
	posOf := map[string]string{}
	for _, r := range rules {
		posOf[r.ID] = r.Pos.String()
	}
	covered := map[string]bool{}
	failed := 0
	for _, pr := range all {
		o := runPolicyCase(ctx, cfg.Policy, pr.p, &pr.d, pr.c)
		for _, rt := range o.trace.Rules {
			if rt.Decided || rt.Condition == policy.ConditionTrue {
				covered[rt.RuleID] = true
			}
		}
		if o.decision.RuleID != "" {
			covered[o.decision.RuleID] = true
		}
		if pr.c.passes(o) {
			continue
		}
		failed++
		fmt.Fprintf(w, "FAIL %s%s\n", pr.c.Pos, caseTitle(pr.c))
		fmt.Fprintf(w, "     %s\n", caseWhat(pr.c, pr.p, pr.d.ToolID))
		if pr.c.Want != o.label && !(pr.c.Want == string(policy.EffectDeny) && o.label == wantHidden) {
			fmt.Fprintf(w, "     want %s, got %s\n", pr.c.Want, o.label)
		} else {
			fmt.Fprintf(w, "     want rule %s, got rule %s\n", ruleName(pr.c.Rule), ruleName(o.decision.RuleID))
		}
		fmt.Fprintf(w, "     decided by %s\n", decidedBy(o.decision, posOf, cfg))
	}
	passed := len(all) - failed
	fmt.Fprintf(w, "%d case(s): %d passed, %d failed\n", len(all), passed, failed)
	var never []string
	for _, r := range rules {
		if !covered[r.ID] {
			never = append(never, fmt.Sprintf("  %s (%s %s)", r.ID, r.Effect, r.Pos))
		}
	}
	fmt.Fprintf(w, "coverage: %d of %d rule(s) exercised\n", len(rules)-len(never), len(rules))
	if len(never) > 0 {
		fmt.Fprintf(w, "never exercised:\n%s\n", strings.Join(never, "\n"))
	}
	if failed > 0 {
		return failure("%d of %d policy test case(s) failed", failed, len(all))
	}
	return nil
}

func caseTitle(c *policyCase) string {
	if c.Name == "" {
		return ""
	}
	return fmt.Sprintf(" %q", c.Name)
}

func caseWhat(c *policyCase, p policy.Principal, toolID string) string {
	when := "call"
	if !c.Call {
		when = "tools/list"
	}
	s := fmt.Sprintf("principal %s (tenant %q, scopes [%s]), %s of %s", p.ID, p.Tenant, strings.Join(p.Scopes, ", "), when, toolID)
	if c.Call {
		raw, _ := json.Marshal(c.Args)
		if c.Args == nil {
			raw = []byte("{}")
		}
		s += " with args " + string(raw)
	}
	return s
}

func ruleName(id string) string {
	if id == "" {
		return "(none: the default posture or the scopes)"
	}
	return id
}

// decidedBy names the deciding rule with its file:line:col, or the layer.
func decidedBy(d policy.Decision, posOf map[string]string, cfg *config.Config) string {
	var s string
	switch {
	case d.RuleID != "":
		s = fmt.Sprintf("rule %s (%s)", d.RuleID, posOf[d.RuleID])
	case d.Layer == policy.LayerDefault:
		s = fmt.Sprintf("the default posture (%s)", cfg.Policy.Default())
	default:
		s = "layer " + d.Layer
	}
	return fmt.Sprintf("%s, layer %s: %s", s, d.Layer, d.Reason)
}

// readTestFile reads at most maxTestFileSize+1 bytes of a test file (the
// parser refuses a longer one).
func readTestFile(name string) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.IsDir() {
		return nil, fmt.Errorf("%s is a directory", name)
	}
	return io.ReadAll(io.LimitReader(f, maxTestFileSize+1))
}

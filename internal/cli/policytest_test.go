package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// repoRoot changes into the repository root for the test (the examples'
// relative paths are from there).
func repoRoot(t *testing.T) {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	t.Chdir(root)
}

// lineOf returns the 1-based line of the first line of file containing s.
func lineOf(t *testing.T, file, s string) int {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	for i, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, s) {
			return i + 1
		}
	}
	t.Fatalf("%s has no line with %q", file, s)
	return 0
}

// The README's policy examples ship with their tests (issue 18 point 6):
// the README's "## Policy" block is examples/readme-policy.yaml's policy,
// verbatim, and every examples/*_test.yaml passes `toolgate policy test`
// against the example configuration it sits next to, exercising every
// rule.
func TestPolicyTestExamples(t *testing.T) {
	repoRoot(t)
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	sec := string(readme)[strings.Index(string(readme), "\n## Policy\n"):]
	_, block, _ := strings.Cut(sec, "```yaml\n")
	block, _, _ = strings.Cut(block, "```")
	ex, err := os.ReadFile("examples/readme-policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(block, "policy:") || !strings.HasSuffix(string(ex), block) {
		t.Errorf("examples/readme-policy.yaml does not end with the README's policy block:\n%s", block)
	}
	// The README's resource and prompt rules are examples/readme-resources.yaml's.
	_, rest, _ := strings.Cut(string(readme)[strings.Index(string(readme), "- **Resources and prompts**"):], "```yaml\n")
	rest, _, _ = strings.Cut(rest, "```")
	res, err := os.ReadFile("examples/readme-resources.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var snippet, example []string
	for _, l := range strings.Split(rest, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			snippet = append(snippet, l)
		}
	}
	for _, l := range strings.Split(string(res), "\n") {
		example = append(example, strings.TrimSpace(l))
	}
	if len(snippet) < 2 || !strings.Contains(strings.Join(example, "\n"), strings.Join(snippet, "\n")) {
		t.Errorf("examples/readme-resources.yaml lacks the README's resource rules:\n%s", strings.Join(snippet, "\n"))
	}

	// The README's test-file example passes against the README's policy,
	// and the run it shows is the real one.
	sec = string(readme)[strings.Index(string(readme), "\n## Testing policies\n"):]
	_, cases, _ := strings.Cut(sec, "```yaml\n")
	cases, _, _ = strings.Cut(cases, "```")
	f := writeFile(t, "readme_test.yaml", cases)
	if code, out, errOut := run(t, "", "policy", "test", "--config", "examples/readme-policy.yaml", f); code != ExitOK || !strings.Contains(out, "2 case(s): 2 passed, 0 failed") {
		t.Errorf("the README's test-file example: exit %d\n%s%s", code, out, errOut)
	}
	_, shown, _ := strings.Cut(sec, "$ go run ./cmd/toolgate policy test --config examples/readme-policy.yaml examples/readme-policy_test.yaml\n")
	shown, _, _ = strings.Cut(shown, "```")
	if _, out, _ := run(t, "", "policy", "test", "--config", "examples/readme-policy.yaml", "examples/readme-policy_test.yaml"); out != shown {
		t.Errorf("the README shows the run as\n%s\nit prints\n%s", shown, out)
	}

	tests, err := filepath.Glob("examples/*_test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"examples/readme-policy_test.yaml": false, "examples/readme-resources_test.yaml": false, "examples/quickstart_test.yaml": false, "examples/stdio-two-principals_test.yaml": false}
	for _, f := range tests {
		want[f] = true
		cfg := strings.TrimSuffix(f, "_test.yaml") + ".yaml"
		code, out, errOut := run(t, "", "policy", "test", "--config", cfg, f)
		if code != ExitOK || !strings.Contains(out, " 0 failed\n") || strings.Contains(out, "never exercised") {
			t.Errorf("policy test --config %s %s: exit %d\n%s%s", cfg, f, code, out, errOut)
		}
	}
	for f, seen := range want {
		if !seen {
			t.Errorf("%s is missing", f)
		}
	}
}

// A wrong case fails with exit 1, naming the case's file:line:col, what
// it wanted and got, and the deciding rule with its file:line:col in the
// configuration; the coverage lists the rules no case exercised.
func TestPolicyTestFailure(t *testing.T) {
	repoRoot(t)
	tests := writeFile(t, "wrong_test.yaml", `cases:
  - name: a reader may write (wrong)
    principal: carol
    tool: mcp:fs.write_file
    args: {path: /srv/data/x, content: hi}
    want: allow
  - name: right effect, wrong rule
    principal: alice
    tool: mcp:fs.read_text_file
    args: {path: /etc/passwd}
    want: deny
    rule: readers
  - name: passes
    principal: alice
    tool: mcp:fs.read_text_file
    args: {path: /srv/data/a}
    want: allow
`)
	code, out, errOut := run(t, "", "policy", "test", "--config", "examples/readme-policy.yaml", tests)
	if code != ExitFailure || !strings.Contains(errOut, "2 of 3 policy test case(s) failed") {
		t.Fatalf("exit %d, stderr %q, stdout:\n%s", code, errOut, out)
	}
	writers := fmt.Sprintf("examples/readme-policy.yaml:%d:", lineOf(t, "examples/readme-policy.yaml", "id: writers"))
	dataOnly := fmt.Sprintf("examples/readme-policy.yaml:%d:", lineOf(t, "examples/readme-policy.yaml", "id: data-only"))
	bigWrites := fmt.Sprintf("examples/readme-policy.yaml:%d:", lineOf(t, "examples/readme-policy.yaml", "id: big-writes"))
	for _, w := range []string{
		"FAIL " + tests + `:2:5 "a reader may write (wrong)"`,
		"want allow, got hidden",
		"decided by rule writers (" + writers,
		"missing scopes: fs:write",
		"FAIL " + tests + `:7:5 "right effect, wrong rule"`,
		"want rule readers, got rule data-only",
		"decided by rule data-only (" + dataOnly,
		"3 case(s): 1 passed, 2 failed",
		"coverage: 3 of 4 rule(s) exercised",
		"big-writes (require_approval " + bigWrites,
	} {
		if !strings.Contains(out, w) {
			t.Errorf("output lacks %q:\n%s", w, out)
		}
	}
	if strings.Contains(out, `"passes"`) {
		t.Errorf("a passing case is reported:\n%s", out)
	}
}

// Usage and parse errors exit 2 with the file:line:col of the problem and
// run no case.
func TestPolicyTestUsageErrors(t *testing.T) {
	repoRoot(t)
	for _, tc := range []struct{ name, body, want string }{
		{"unknown principal", "cases:\n  - {principal: mallory, tool: mcp:fs.read_text_file, want: deny}\n",
			`:2:17: principal "mallory" is not an API key principal of examples/readme-policy.yaml`},
		{"unknown server", "cases:\n  - {principal: alice, tool: mcp:nosuch.read, want: deny}\n",
			`:2:30: tool "mcp:nosuch.read": server "nosuch" is not configured`},
		{"unknown key", "cases:\n  - principal: alice\n    tool: mcp:fs.read_text_file\n    wnat: deny\n",
			`:4:5: unknown key "wnat" in a case`},
		{"bad want", "cases:\n  - {principal: alice, tool: mcp:fs.x, want: permit}\n", `:2:46: want "permit": want allow, deny, require_approval or hidden`},
		{"args at list time", "cases:\n  - {principal: alice, tool: mcp:fs.x, call: false, args: {a: 1}, want: hidden}\n", `args on a list-time case`},
		{"deny at list time", "cases:\n  - {principal: alice, tool: mcp:fs.x, call: false, want: deny}\n", `want "deny" on a list-time case`},
		{"bad YAML", "cases:\n  - {principal: alice\n", "YAML: "},
		{"top-level list", "- {principal: alice}\n", ":1:1: a test file is a mapping"},
		{"unknown top key", "cases: []\nconfig: x\n", `:2:1: unknown key "config"`},
		{"inline principal key", "cases:\n  - {principal: {id: x, scope: [a]}, tool: mcp:fs.x, want: deny}\n", `unknown key "scope" in an inline principal`},
		{"duplicate key", "cases:\n  - {principal: alice, principal: bob, tool: mcp:fs.x, want: deny}\n", `duplicate key "principal"`},
		{"too large", "cases:\n" + strings.Repeat("#", 4<<20), "larger than 4 MiB"},
		{"args not JSON", "cases:\n  - {principal: alice, tool: mcp:fs.x, args: {n: .nan}, want: deny}\n", "args: not representable as JSON"},
	} {
		f := writeFile(t, "t_test.yaml", tc.body)
		code, out, errOut := run(t, "", "policy", "test", "--config", "examples/readme-policy.yaml", f)
		if code != ExitUsage || !strings.Contains(errOut, tc.want) || out != "" {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want exit 2 and %q", tc.name, code, out, errOut, tc.want)
		}
	}
}

// FuzzPolicyTestFile: the test-file parser never panics or hangs on any
// input, and what it accepts is well-formed (every case has a principal,
// a tool and a valid want; a list-time case has no args and no rule).
func FuzzPolicyTestFile(f *testing.F) {
	for _, s := range []string{
		"cases:\n  - {principal: alice, tool: mcp:fs.read_text_file, args: {path: /a}, want: allow, rule: readers}\n",
		"cases:\n  - {principal: {id: x, tenant: t, scopes: [a], attributes: {k: v}}, tool: native:t, call: false, want: hidden}\n",
		"cases: [{principal: a, tool: b, want: deny, name: n}]\n",
		"a: &a [*a]\n",
	} {
		f.Add([]byte(s))
	}
	wants := regexp.MustCompile(`^(allow|deny|require_approval|hidden)$`)
	f.Fuzz(func(t *testing.T, data []byte) {
		cases, err := parsePolicyTests("f.yaml", data)
		if err != nil {
			return
		}
		if len(cases) == 0 {
			t.Fatal("accepted a file without cases")
		}
		for _, c := range cases {
			if c.Tool == "" || !wants.MatchString(c.Want) || (c.PrincipalRef == "" && c.Principal.ID == "") {
				t.Fatalf("accepted an ill-formed case %+v", c)
			}
			if !c.Call && (c.Args != nil || c.HasRule) {
				t.Fatalf("accepted a list-time case with args or rule %+v", c)
			}
		}
	})
}

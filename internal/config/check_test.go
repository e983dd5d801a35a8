package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/policy"
)

// issuesOf parses doc and returns its issues rendered as "line:col: msg".
func issuesOf(t *testing.T, doc string) []string {
	t.Helper()
	_, err := Parse("c.yaml", []byte(doc))
	if err == nil {
		return nil
	}
	var is policy.Issues
	if !errors.As(err, &is) {
		t.Fatalf("Parse: %v", err)
	}
	var out []string
	for _, i := range is {
		out = append(out, fmt.Sprintf("%d:%d: %s", i.Pos.Line, i.Pos.Col, i.Message))
	}
	return out
}

// Issue 13.18: a YAML syntax error is reported where it is, not at 1:1
// (or at the line of the enclosing construct, as yaml.v3 names it).
func TestSyntaxErrorsAreLocated(t *testing.T) {
	for _, c := range []struct{ doc, want string }{
		{"listen: 127.0.0.1:1\nservers:\n  - {name: fs, url: \"http://x}\n", "3:21: YAML syntax: found unexpected end of stream"},
		{"listen: @a\n", "1:9: YAML syntax: found character that cannot start any token"},
		{"listen: 127.0.0.1:1\npolicy:\n  rules:\n    - {id: x, effect: allow, tools: [a, b}\n", "4:42: YAML syntax: did not find expected ',' or ']'"},
		{"listen: 127.0.0.1:1\nnaming: prefix: auto\n", "2:9: YAML syntax: mapping values are not allowed in this context"},
		{"listen: 127.0.0.1:1\nservers:\n\t- name: x\n", "3:1: YAML syntax: found character that cannot start any token"},
	} {
		got := issuesOf(t, c.doc)
		if len(got) != 1 || got[0] != c.want {
			t.Errorf("%q: issues %q, want [%q]", c.doc, got, c.want)
		}
	}
}

// Issue 13.18: an unknown key in any section gets a "did you mean" hint
// (or the keys the section accepts), as policy keys already did.
func TestUnknownKeyHintsInEverySection(t *testing.T) {
	got := strings.Join(issuesOf(t, `
servrs: []
listen: 127.0.0.1:1
store: {drivr: sqlite}
auth: {api_keys: [{id: a, key_sha256: "2bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b", tennant: acme}]}
servers:
  - {name: fs, comand: [x]}
tools:
  - {match: "mcp:fs.*", safty_tier: read}
hooks:
  - {name: h, mode: observe, url: "http://127.0.0.1:1", secret: "{{credential:s}}", zzz: 1}
credentials: {s: {env: S, fil: x}}
`), "\n")
	for _, want := range []string{
		`2:1: unknown key "servrs" (did you mean "servers"?)`,
		`4:9: unknown key "drivr" (did you mean "driver"?)`,
		`5:107: unknown key "tennant" (did you mean "tenant"?)`,
		`7:16: unknown key "comand" (did you mean "command"?)`,
		`9:25: unknown key "safty_tier" (did you mean "safety_tier"?)`,
		`11:85: unknown key "zzz"; want one of name, mode, url, timeout, mutating, content, secret`,
		`12:27: unknown key "fil" (did you mean "file"?)`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in:\n%s", want, got)
		}
	}
}

// Issue 13.18: a rule, a rate limit or a classification naming a server
// that is not configured can never apply: ServerRefIssues (validate)
// reports it at the pattern, with a hint. Patterns whose server part is a
// wildcard are not checked.
func TestPatternNamingUnconfiguredServer(t *testing.T) {
	cfg, err := Parse("c.yaml", []byte(`
listen: 127.0.0.1:1
servers: [{name: fs, url: "http://127.0.0.1:9/mcp"}]
tools:
  - {match: "mcp:gh.*", safety_tier: read}
policy:
  rules:
    - {id: ok, effect: allow, tools: ["mcp:fs.*", "mcp:*", "mcp:f*.x", "*", "native:x"]}
    - {id: typo, effect: allow, tools: ["mcp:fz.read", "mcp:nosuch/file:///x", "mcp:nosuch#p"]}
  ratelimits:
    - {tools: ["mcp:nosuch.*"], per: principal_tool, rate: 1/s, burst: 1}
`))
	if err != nil {
		t.Fatalf("a pattern naming an unconfigured server is not a load error: %v", err)
	}
	var got []string
	for _, i := range cfg.ServerRefIssues() {
		got = append(got, fmt.Sprintf("%d:%d: %s", i.Pos.Line, i.Pos.Col, i.Message))
	}
	want := []string{
		`5:13: tools[0].match "mcp:gh.*" names server "gh", which is not configured in servers; configured: fs`,
		`9:41: rule "typo": tool pattern "mcp:fz.read" names server "fz", which is not configured in servers (did you mean "fs"?)`,
		`9:56: rule "typo": tool pattern "mcp:nosuch/file:///x" names server "nosuch", which is not configured in servers; configured: fs`,
		`9:80: rule "typo": tool pattern "mcp:nosuch#p" names server "nosuch", which is not configured in servers; configured: fs`,
		`11:16: ratelimits[0]: tool pattern "mcp:nosuch.*" names server "nosuch", which is not configured in servers; configured: fs`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("issues:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// Issue 13.18: CommandIssues finds a stdio command serve could not start,
// at the command, without starting anything.
func TestCommandIssues(t *testing.T) {
	dir := t.TempDir()
	marker := filepath.Join(dir, "ran")
	exe := filepath.Join(dir, "server.sh")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\ntouch "+marker+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	plain := filepath.Join(dir, "plain.sh")
	if err := os.WriteFile(plain, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	doc := fmt.Sprintf(`listen: 127.0.0.1:1
servers:
  - {name: a, command: [%q]}
  - {name: b, command: [toolgate-no-such-command-xyz, arg]}
  - {name: c, command: [%q]}
  - {name: d, command: [%q]}
  - {name: e, command: [./server.sh], cwd: %q}
  - {name: f, command: [./server.sh]}
  - {name: g, command: [sh, -c, "exit 0"]}
`, exe, plain, dir, dir)
	cfg, err := Parse("c.yaml", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, i := range cfg.CommandIssues() {
		got = append(got, fmt.Sprintf("%d:%d: %s", i.Pos.Line, i.Pos.Col, i.Message))
	}
	want := []string{
		`4:25: servers[1] (b): command "toolgate-no-such-command-xyz" is not found on PATH or is not executable`,
		fmt.Sprintf(`5:25: servers[2] (c): command %q is not executable (%s)`, plain, plain),
		fmt.Sprintf(`6:25: servers[3] (d): command %q is not a regular file (%s)`, dir, dir),
		`8:25: servers[5] (f): command "./server.sh" does not exist (./server.sh)`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("CommandIssues:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("CommandIssues started a command")
	}
}

package mcpgw

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolgate/toolgate/internal/auth"
)

// readmeBlock returns the first ```yaml block of the README section whose
// heading is heading.
func readmeBlock(t *testing.T, heading string) string {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	i := strings.Index(s, "\n"+heading+"\n")
	if i < 0 {
		t.Fatalf("README.md has no section %q", heading)
	}
	s = s[i:]
	if j := strings.Index(s[1:], "\n## "); j >= 0 {
		s = s[:j+1]
	}
	_, block, ok := strings.Cut(s, "```yaml\n")
	if !ok {
		t.Fatalf("README.md section %q has no yaml block", heading)
	}
	block, _, ok = strings.Cut(block, "```")
	if !ok {
		t.Fatalf("README.md section %q: unterminated yaml block", heading)
	}
	return block
}

// gateError is the code of a gateway-made error result, from
// _meta["toolgate/error"] or structuredContent.error.
func gateError(res *mcp.CallToolResult) string {
	if m, ok := res.Meta["toolgate/error"].(map[string]any); ok {
		if c, ok := m["code"].(string); ok {
			return c
		}
	}
	return errorCode(res)
}

// TestREADMEPolicy runs the README's policy example, as written, in front
// of server-filesystem (acceptance 2 of issue 13; points 7 and 8). The
// example's "/srv/data" is replaced by a real directory; server-filesystem
// serves its parent, so only the policy keeps calls inside it:
//   - a principal with no scopes sees no tool and cannot call write_file,
//     even with a big content (require_approval grants nothing);
//   - a reader reads inside the directory, but "<dir>/../secret.txt",
//     which startsWith the directory, is refused by data-only and the
//     upstream never answers it, and neither does a relative path
//     (the upstream resolves it against its own root);
//   - a big write by a writer needs approval; a small one runs.
func TestREADMEPolicy(t *testing.T) {
	npm := npmDeps(t)
	base, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(base, "data")
	if err := os.Mkdir(data, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string]string{filepath.Join(data, "a.txt"): "inside", filepath.Join(base, "secret.txt"): "outside-secret"} {
		if err := os.WriteFile(name, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	pol := readmeBlock(t, "## Policy")
	if !strings.Contains(pol, `"/srv/data"`) || !strings.Contains(pol, "require_approval") {
		t.Fatalf("the README policy example changed; update this test:\n%s", pol)
	}
	pol = strings.ReplaceAll(pol, "/srv/data", data)
	cfg := `auth:
  api_keys:
    - {id: alice, key_sha256: ` + yamlQuote(auth.HashKey(keyAlice)) + `, tenant: ` + tenant + `, scopes: [fs:read, fs:write]}
    - {id: bob, key_sha256: ` + yamlQuote(auth.HashKey(keyBob)) + `, tenant: ` + tenant + `}
servers:
  - {name: fs, command: [` + yamlQuote(npm.node) + `, ` + yamlQuote(npm.filesystem) + `, ` + yamlQuote(base) + `]}
` + pol
	e := startGateway(t, cfg)

	alice := e.connect(t, keyAlice)
	names := toolNames(t, alice)
	surface := func(tool string) string {
		for _, n := range names {
			if n == tool || strings.HasSuffix(n, "__"+tool) {
				return n
			}
		}
		t.Fatalf("alice does not see %s: %v", tool, names)
		return ""
	}
	read, write := surface("read_text_file"), surface("write_file")
	surface("list_directory")
	if len(names) != 3 {
		t.Errorf("alice sees %v, want read_text_file, list_directory and write_file", names)
	}

	// 13.7: big-writes grants bob nothing.
	bob := e.connect(t, keyBob)
	if got := toolNames(t, bob); len(got) != 0 {
		t.Errorf("bob (no scopes) sees %v", got)
	}
	big := strings.Repeat("x", 10001)
	if res, err := tryCall(t, bob, write, map[string]any{"path": filepath.Join(data, "bob.txt"), "content": big}); err == nil {
		raw, _ := json.Marshal(res)
		t.Errorf("bob's big write was not refused as an unknown tool: %s", raw)
	}

	// 13.8: ".." does not escape data-only.
	mustOK(t, read, callTool(t, alice, read, map[string]any{"path": filepath.Join(data, "a.txt")}))
	res := callTool(t, alice, read, map[string]any{"path": data + "/../secret.txt"})
	if !res.IsError || gateError(res) != "forbidden" || strings.Contains(resultText(res), "outside-secret") || !strings.Contains(resultText(res), "data-only") {
		raw, _ := json.Marshal(res)
		t.Errorf("read of %s/../secret.txt: %s", data, raw)
	}

	// A relative path is resolved by server-filesystem against the
	// directory it serves, not against the rule's dir: the two-argument
	// path.isUnder cannot know that root, so it refuses relative paths.
	for _, rel := range []string{"secret.txt", "data/../secret.txt", "a.txt"} {
		res := callTool(t, alice, read, map[string]any{"path": rel})
		if !res.IsError || gateError(res) != "forbidden" || strings.Contains(resultText(res), "outside-secret") {
			raw, _ := json.Marshal(res)
			t.Errorf("read of relative %q: %s", rel, raw)
		}
	}

	// Approval restricts what writers grants.
	res = callTool(t, alice, write, map[string]any{"path": filepath.Join(data, "big.txt"), "content": big})
	if !res.IsError || gateError(res) != "approval_required" {
		raw, _ := json.Marshal(res)
		t.Errorf("alice's big write: %s", raw)
	}
	if _, err := os.Stat(filepath.Join(data, "big.txt")); !os.IsNotExist(err) {
		t.Errorf("the big write ran: %v", err)
	}
	mustOK(t, write, callTool(t, alice, write, map[string]any{"path": filepath.Join(data, "small.txt"), "content": "hi"}))
	if b, err := os.ReadFile(filepath.Join(data, "small.txt")); err != nil || string(b) != "hi" {
		t.Errorf("small write: %q %v", b, err)
	}
}

package mcpgw

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/auth"
)

// tsCallLine is one line of testdata/npm/ts-client.mjs's output.
type tsCallLine struct {
	Name   string `json:"name"`
	Result *struct {
		IsError           bool              `json:"isError"`
		Content           []json.RawMessage `json:"content"`
		StructuredContent json.RawMessage   `json:"structuredContent"`
		Meta              map[string]any    `json:"_meta"`
	} `json:"result"`
	Thrown *struct {
		Code    any    `json:"code"`
		Message string `json:"message"`
	} `json:"thrown"`
}

// runTSClient runs the TypeScript SDK test agent against the gateway at url
// with key and returns its line per call.
func runTSClient(t *testing.T, npm npmPaths, url, key string, calls []map[string]any) []tsCallLine {
	t.Helper()
	script, err := filepath.Abs(filepath.Join("..", "..", "testdata", "npm", "ts-client.mjs"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(script), "node_modules", "@modelcontextprotocol", "sdk", "package.json")); err != nil {
		t.Fatalf("the TypeScript SDK is missing (%v): run `bash scripts/npm-setup.sh` from the repository root", err)
	}
	arg, _ := json.Marshal(calls)
	ctx, cancel := context.WithTimeout(t.Context(), e2eWait)
	defer cancel()
	cmd := exec.CommandContext(ctx, npm.node, script, url, key, string(arg))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("ts-client: %v\nstderr: %s\nstdout: %s", err, stderr.String(), out)
	}
	var lines []tsCallLine
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var c tsCallLine
		if err := json.Unmarshal([]byte(l), &c); err != nil {
			t.Fatalf("ts-client line %q: %v", l, err)
		}
		lines = append(lines, c)
	}
	if len(lines) != len(calls) {
		t.Fatalf("ts-client printed %d lines for %d calls:\n%s\nstderr: %s", len(lines), len(calls), out, stderr.String())
	}
	return lines
}

// The official TypeScript SDK client validates the structuredContent of a
// tool with an outputSchema (every server-filesystem tool has one) and
// throws -32602 when it does not match. A refusal the gateway makes —
// forbidden by an argument condition, rate_limited, approval_required —
// must reach that client as an isError result with the code readable from
// _meta["toolgate/error"] and the reason in the text, not as an exception.
func TestTypeScriptClientReadsRefusals(t *testing.T) {
	npm := npmDeps(t)
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	allowed := filepath.Join(root, "allowed")
	if err := os.Mkdir(allowed, 0o755); err != nil {
		t.Fatal(err)
	}
	hello := filepath.Join(allowed, "hello.txt")
	if err := os.WriteFile(hello, []byte("hello from disk"), 0o644); err != nil {
		t.Fatal(err)
	}
	outside := filepath.Join(root, "outside.txt")
	if err := os.WriteFile(outside, []byte("not for agents"), 0o644); err != nil {
		t.Fatal(err)
	}
	inAllowed := "has(args.path) && args.path.startsWith(" + strconv.Quote(allowed+"/") + ")"
	cfg := fmt.Sprintf(`auth:
  api_keys:
    - {id: alice, key_sha256: %q, tenant: %s}
naming: {prefix: always}
servers:
  - {name: fs, command: [%s, %s, %s]}
policy:
  default: deny
  rules:
    - {id: fs-all, effect: allow, tools: ["mcp:fs.*"]}
    - {id: reads-confined, effect: deny, tools: ["mcp:fs.read_text_file"], when: %s, reason: reads are confined to the allowed directory}
    - {id: info-needs-a-human, effect: require_approval, tools: ["mcp:fs.get_file_info"], reason: file info needs a human}
  ratelimits:
    - {tools: ["mcp:fs.list_allowed_directories"], per: principal_tool, rate: 1/h, burst: 1}
`, auth.HashKey(keyAlice), tenant, yamlQuote(npm.node), yamlQuote(npm.filesystem), yamlQuote(root), yamlQuote("!("+inAllowed+")"))
	gw := startGateway(t, cfg)

	lines := runTSClient(t, npm, gw.url, keyAlice, []map[string]any{
		{"name": "fs__read_text_file", "arguments": map[string]any{"path": hello}},
		{"name": "fs__read_text_file", "arguments": map[string]any{"path": outside}},
		{"name": "fs__list_allowed_directories"},
		{"name": "fs__list_allowed_directories"},
		{"name": "fs__get_file_info", "arguments": map[string]any{"path": hello}},
	})
	wantCodes := []string{"", "forbidden", "", "rate_limited", "approval_required"}
	wantText := []string{"hello from disk", "reads are confined to the allowed directory", "", "rate_limited", "file info needs a human"}
	for i, l := range lines {
		raw, _ := json.Marshal(l)
		if l.Thrown != nil {
			t.Errorf("call %d (%s): the TypeScript client threw %v: %s", i, l.Name, l.Thrown.Code, l.Thrown.Message)
			continue
		}
		if l.Result == nil {
			t.Errorf("call %d (%s): no result: %s", i, l.Name, raw)
			continue
		}
		text := string(raw)
		if !strings.Contains(text, wantText[i]) {
			t.Errorf("call %d (%s): result lacks %q: %s", i, l.Name, wantText[i], raw)
		}
		if wantCodes[i] == "" {
			if l.Result.IsError || l.Result.Meta["toolgate/error"] != nil {
				t.Errorf("call %d (%s): want success, got %s", i, l.Name, raw)
			}
			continue
		}
		e, _ := l.Result.Meta["toolgate/error"].(map[string]any)
		if !l.Result.IsError || e["code"] != wantCodes[i] || e["message"] == "" || l.Result.StructuredContent != nil {
			t.Errorf("call %d (%s): want isError with _meta[%q].code %q and no structuredContent, got %s", i, l.Name, "toolgate/error", wantCodes[i], raw)
		}
	}
}

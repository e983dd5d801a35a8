package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/toolgate/toolgate"
	"github.com/toolgate/toolgate/catalog"
	"github.com/toolgate/toolgate/hook"
	"github.com/toolgate/toolgate/internal/canonjson"
	"github.com/toolgate/toolgate/internal/config"
	"github.com/toolgate/toolgate/receipt"
)

// run executes the CLI in-process and returns exit code, stdout, stderr.
func run(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := Main(context.Background(), args, strings.NewReader(stdin), &out, &errb)
	return code, out.String(), errb.String()
}

func TestHash(t *testing.T) {
	const golden = "9458af8c77ede919beb4dd201de70ea7909225488c9e925190a9b4e585cb9d6f"
	code, out, errOut := run(t, "", "hash", `{"q":"openwop"}`)
	if code != ExitOK || strings.TrimSpace(out) != golden {
		t.Fatalf("hash arg: code %d out %q err %q", code, out, errOut)
	}
	code, out, _ = run(t, "{ \"q\" : \"openwop\" }\n", "hash")
	if code != ExitOK || strings.TrimSpace(out) != golden {
		t.Fatalf("hash stdin: code %d out %q", code, out)
	}
	code, out, _ = run(t, "", "hash", `{"apiKey":"sk-canary-rfc0064-do-not-leak-xyz789","q":"openwop"}`)
	if code != ExitOK || strings.TrimSpace(out) != "4523bd8dca6136d5d21a419163f6e56d13f99f0889fd5b9da834390b15121e48" {
		t.Fatalf("hash redacted: code %d out %q", code, out)
	}
	for _, bad := range []string{`{"a":1,"a":2}`, `{"a":`, `"\ud800"`, `{} trailing`} {
		code, out, errOut = run(t, "", "hash", bad)
		if code != ExitFailure || out != "" || !strings.Contains(errOut, "invalid") {
			t.Errorf("hash %s: code %d out %q err %q", bad, code, out, errOut)
		}
	}
}

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{{"hash", "a", "b"}, {"validate"}, {"nope"}, {"hash", "--bogus"}, {"receipts", "verify", "f"}} {
		code, _, errOut := run(t, "", args...)
		if code != ExitUsage || errOut == "" {
			t.Errorf("%v: code %d stderr %q", args, code, errOut)
		}
	}
	code, out, _ := run(t, "", "--help")
	if code != ExitOK || !strings.Contains(out, "validate") || !strings.Contains(out, "receipts") {
		t.Errorf("--help: %d %q", code, out)
	}
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestValidate(t *testing.T) {
	good := writeFile(t, "good.yaml", string(demoConfig))
	code, out, errOut := run(t, "", "validate", "--config", good)
	if code != ExitOK || !strings.Contains(out, "OK") {
		t.Fatalf("good config: %d %q %q", code, out, errOut)
	}
	bad, err := os.ReadFile("testdata/bad.yaml")
	if err != nil {
		t.Fatal(err)
	}
	path := writeFile(t, "bad.yaml", string(bad))
	code, out, errOut = run(t, "", "validate", "--config", path)
	if code != ExitFailure || out != "" {
		t.Fatalf("bad config: code %d out %q", code, out)
	}
	got := strings.ReplaceAll(errOut, path, "bad.yaml")
	want, err := os.ReadFile("testdata/bad.golden")
	if err != nil || *update {
		os.WriteFile("testdata/bad.golden", []byte(got), 0o644)
		want = []byte(got)
	}
	if got != string(want) {
		t.Fatalf("validate output differs from testdata/bad.golden:\n--- got\n%s--- want\n%s", got, want)
	}
	// Every issue is located.
	for _, line := range strings.Split(strings.TrimSpace(got), "\n")[1:] {
		if !regexp.MustCompile(`^bad\.yaml:\d+(:\d+)?: `).MatchString(line) {
			t.Errorf("issue without file:line: %q", line)
		}
	}
	// A credential this environment cannot read is a warning, not an issue
	// (serve reads its own environment).
	credCfg := writeFile(t, "cred.yaml", string(demoConfig)+"\ncredentials: {hs: {env: TOOLGATE_TEST_UNSET_VAR}}\n")
	code, out, errOut = run(t, "", "validate", "--config", credCfg)
	if code != ExitOK || !strings.Contains(out, "OK") || !strings.Contains(errOut, "warning: credential hs: environment variable TOOLGATE_TEST_UNSET_VAR is not set") {
		t.Errorf("unset credential: %d %q %q", code, out, errOut)
	}
	// A backend the config format names but serve does not have is not OK.
	for _, c := range []struct{ section, want string }{
		{"store: {driver: memory}", `store.driver "memory": serve supports sqlite and postgres`},
		{"store: {driver: postgres, dsn: 'postgres://127.0.0.1/test'}\naudit: {retention: 720h}", `audit.retention: serve prunes the sqlite store only`},
	} {
		p := writeFile(t, "backend.yaml", string(demoConfig)+"\n"+c.section+"\n")
		code, out, errOut := run(t, "", "validate", "--config", p)
		if code != ExitFailure || out != "" || !strings.Contains(errOut, c.want) || !strings.Contains(errOut, "not built yet") {
			t.Errorf("%s: code %d out %q err %q", c.section, code, out, errOut)
		}
	}
	code, _, errOut = run(t, "", "validate", "--config", filepath.Join(t.TempDir(), "missing.yaml"))
	if code != ExitFailure || !strings.Contains(errOut, "no such file") {
		t.Errorf("missing file: %d %q", code, errOut)
	}
}

func TestPolicyExplain(t *testing.T) {
	cfg := writeFile(t, "c.yaml", `
servers:
  - {name: fs, command: [fs-server]}
tools:
  - {match: "mcp:fs.read_*", safety_tier: read, scopes: [fs:read]}
policy:
  rules:
    - {id: readers, effect: allow, tools: ["mcp:fs.*"]}
    - {id: no-etc, effect: deny, tools: ["mcp:fs.*"], when: 'has(args.path) && args.path.startsWith("/etc")', reason: "no system files"}
`)
	explain := func(scopes, args string) map[string]any {
		t.Helper()
		code, out, errOut := run(t, "", "policy", "explain", "--config", cfg, "--principal", "alice", "--scopes", scopes, "--tool", "mcp:fs.read_file", "--args", args)
		if code != ExitOK {
			t.Fatalf("explain: %d %q", code, errOut)
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(out), &m); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		return m
	}
	m := explain("fs:read", `{"path":"/tmp/x"}`)
	d := m["decision"].(map[string]any)
	if d["effect"] != "allow" || d["ruleId"] != "readers" || m["disclosed"] != true {
		t.Errorf("allow case: %v", m)
	}
	m = explain("fs:read", `{"path":"/etc/passwd"}`)
	d = m["decision"].(map[string]any)
	if d["effect"] != "deny" || d["ruleId"] != "no-etc" || d["reason"] != "no system files" || m["disclosed"] != true {
		t.Errorf("deny case: %v", m)
	}
	m = explain("", `{}`)
	d = m["decision"].(map[string]any)
	if d["effect"] != "deny" || fmt.Sprint(d["missingScopes"]) != "[fs:read]" {
		t.Errorf("missing scope case: %v", m)
	}
	code, _, errOut := run(t, "", "policy", "explain", "--config", cfg, "--principal", "a", "--tool", "mcp:other.x")
	if code != ExitUsage || !strings.Contains(errOut, "not configured") {
		t.Errorf("unknown server: %d %q", code, errOut)
	}
	// Resources and prompts are explained under their gate ids, with the
	// request params as args.
	resCfg := writeFile(t, "r.yaml", `
servers:
  - {name: fs, command: [fs-server]}
policy:
  rules:
    - {id: docs, effect: allow, tools: ["mcp:fs/resource"], when: 'args.uri.startsWith("file:///docs/")'}
    - {id: prompts, effect: allow, tools: ["mcp:fs#*"]}
`)
	for _, c := range []struct{ tool, args, effect, id string }{
		{"mcp:fs/resource", `{"uri":"file:///docs/a"}`, "allow", "mcp:fs/resource"},
		{"mcp:fs/resource", `{"uri":"file:///etc/passwd"}`, "deny", "mcp:fs/resource"},
		{"mcp:fs#summarize", `{"name":"summarize"}`, "allow", "mcp:fs#summarize"},
	} {
		code, out, errOut := run(t, "", "policy", "explain", "--config", resCfg, "--principal", "a", "--tool", c.tool, "--args", c.args)
		var m map[string]any
		if code != ExitOK || json.Unmarshal([]byte(out), &m) != nil {
			t.Fatalf("explain %s: %d %q %q", c.tool, code, out, errOut)
		}
		if d := m["decision"].(map[string]any); d["effect"] != c.effect || m["toolId"] != c.id {
			t.Errorf("explain %s %s: %v", c.tool, c.args, m)
		}
	}
	if code, _, errOut := run(t, "", "policy", "explain", "--config", resCfg, "--principal", "a", "--tool", "mcp:other/resource"); code != ExitUsage || !strings.Contains(errOut, "not configured") {
		t.Errorf("resources of an unknown server: %d %q", code, errOut)
	}
	code, _, errOut = run(t, "", "policy", "explain", "--config", cfg, "--principal", "a", "--tool", "mcp:fs.x", "--args", "[1]")
	if code != ExitUsage || !strings.Contains(errOut, "JSON object") {
		t.Errorf("bad args: %d %q", code, errOut)
	}
}

func TestDemo(t *testing.T) {
	code, out, errOut := run(t, "", "demo")
	if code != ExitOK {
		t.Fatalf("demo: %d %s %s", code, out, errOut)
	}
	for _, want := range []string{"chain verified", "no-dotfiles", "rate_limited", "approval_required", "not_found"} {
		if !strings.Contains(out, want) {
			t.Errorf("demo output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "sk-live-0123456789abcdef") {
		t.Errorf("demo output leaks a secret:\n%s", out)
	}
}

// receiptsFixture runs a variety of calls through a gateway (ok, tool error,
// forbidden, rate limited, a mutated call and a nested call) and writes the
// receipts file and the public key.
func receiptsFixture(t *testing.T) (file, pubFile string) {
	t.Helper()
	cfg, err := config.Parse("fixture.yaml", []byte(`
policy:
  rules:
    - {id: all, effect: allow, tools: ["native:*"]}
    - {id: no-secret, effect: deny, tools: ["native:*"], when: 'has(args.secret)'}
  ratelimits:
    - {tools: ["native:lim.*"], per: principal_tool, rate: 1/h, burst: 1}
`))
	if err != nil {
		t.Fatal(err)
	}
	rewrite := hook.Registration{Name: "normalize", Mode: hook.Enforce, Mutating: true, Hook: hook.Funcs{
		BeforeFunc: func(_ context.Context, c *hook.Call) (hook.Verdict, error) {
			if strings.Contains(string(c.Args), "UPPER") {
				return hook.Verdict{Args: json.RawMessage(`{"q":"upper"}`)}, nil
			}
			return hook.Verdict{}, nil
		}}}
	gw, err := toolgate.New(toolgate.Options{Policy: cfg.Policy, Hooks: []hook.Registration{rewrite}})
	if err != nil {
		t.Fatal(err)
	}
	ok := func(context.Context, json.RawMessage) (any, error) { return map[string]int{"n": 1}, nil }
	fail := func(context.Context, json.RawMessage) (any, error) { return nil, errors.New("boom") }
	for id, fn := range map[string]toolgate.NativeFunc{"native:a.ok": ok, "native:a.fail": fail, "native:lim.x": ok} {
		if err := gw.RegisterNative(catalog.ToolDescriptor{ToolID: id, Source: catalog.SourceHostExtension, SafetyTier: catalog.TierRead}, fn); err != nil {
			t.Fatal(err)
		}
	}
	p := toolgate.Principal{ID: "alice", Tenant: "acme"}
	ctx := context.Background()
	calls := []toolgate.Call{
		{Tool: "native:a.ok", Args: json.RawMessage(`{"q":"x"}`), CallID: "root"},
		{Tool: "native:a.fail", ParentCallID: "root"},
		{Tool: "native:a.ok", Args: json.RawMessage(`{"secret":"s"}`)},
		{Tool: "native:lim.x"},
		{Tool: "native:lim.x"},
		{Tool: "native:a.ok", Args: json.RawMessage(`{"q":"UPPER"}`), ParentCallID: "root"},
	}
	for _, c := range calls {
		c.Principal, c.RunID = p, "run-1"
		if _, err := gw.Call(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	var buf bytes.Buffer
	if err := gw.WriteReceipts(&buf); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	file = filepath.Join(dir, "receipts.jsonl")
	pubFile = filepath.Join(dir, "toolgate.pub")
	os.WriteFile(file, buf.Bytes(), 0o600)
	os.WriteFile(pubFile, receipt.EncodePublicKey(gw.PublicKey()), 0o600)
	return file, pubFile
}

// leaf is one scalar field of a JSON line, by path.
type leaf struct {
	path []string
	val  any
}

func leaves(prefix []string, v any, out *[]leaf) {
	switch x := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			leaves(append(append([]string(nil), prefix...), k), x[k], out)
		}
	default:
		*out = append(*out, leaf{path: prefix, val: v})
	}
}

// flip changes one character of a scalar so the JSON stays valid.
func flip(v any) any {
	switch x := v.(type) {
	case string:
		b := []byte(x)
		i := len(b) / 2
		switch c := b[i]; {
		case c >= '0' && c <= '8', c >= 'a' && c <= 'e', c >= 'A' && c <= 'Y':
			b[i] = c + 1
		case c == '9':
			b[i] = '0'
		case c == 'f':
			b[i] = 'a'
		default:
			b[i] = 'x'
			if c == 'x' {
				b[i] = 'y'
			}
		}
		return string(b)
	case float64:
		return float64(int64(x) ^ 1)
	case bool:
		return !x
	}
	return v
}

func setPath(m map[string]any, path []string, v any) {
	for _, k := range path[:len(path)-1] {
		m = m[k].(map[string]any)
	}
	m[path[len(path)-1]] = v
}

// TestReceiptsVerifyDetectsEveryTamperedField is acceptance point 5: one
// byte changed in each field of each line makes `toolgate receipts verify`
// fail, naming the seq.
func TestReceiptsVerifyDetectsEveryTamperedField(t *testing.T) {
	file, pub := receiptsFixture(t)
	code, out, errOut := run(t, "", "receipts", "verify", file, "--pubkey", pub)
	if code != ExitOK || !strings.Contains(out, "OK: 6 receipts") {
		t.Fatalf("untampered: %d %q %q", code, out, errOut)
	}
	orig, _ := os.ReadFile(file)
	lines := strings.Split(strings.TrimSuffix(string(orig), "\n"), "\n")
	seqRe := regexp.MustCompile(`seq (\d+)`)
	tampered := 0
	for li, line := range lines {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatal(err)
		}
		var ls []leaf
		leaves(nil, m, &ls)
		wantSeq := fmt.Sprint(m["seq"])
		if cp, ok := m["checkpoint"].(map[string]any); ok {
			wantSeq = fmt.Sprint(cp["seq"])
		}
		for _, lf := range ls {
			var mm map[string]any
			json.Unmarshal([]byte(line), &mm)
			setPath(mm, lf.path, flip(lf.val))
			raw, _ := json.Marshal(mm)
			canon, err := canonjson.Canonicalize(raw)
			if err != nil {
				t.Fatal(err)
			}
			if string(canon) == line {
				t.Fatalf("flip of %v did not change line %d", lf.path, li)
			}
			cp := append([]string(nil), lines...)
			cp[li] = string(canon)
			bad := filepath.Join(t.TempDir(), "tampered.jsonl")
			os.WriteFile(bad, []byte(strings.Join(cp, "\n")+"\n"), 0o600)
			code, out, errOut := run(t, "", "receipts", "verify", bad, "--pubkey", pub)
			tampered++
			if code != ExitFailure || out != "" || !strings.Contains(errOut, "FAILED") {
				t.Errorf("line %d field %v: code %d out %q err %q", li, lf.path, code, out, errOut)
				continue
			}
			sm := seqRe.FindStringSubmatch(errOut)
			if sm == nil || sm[1] != wantSeq {
				t.Errorf("line %d field %v: error %q does not name seq %s", li, lf.path, strings.TrimSpace(errOut), wantSeq)
			}
		}
	}
	if tampered < 100 {
		t.Fatalf("only %d tamperings tried", tampered)
	}
	t.Logf("%d single-field tamperings, all detected", tampered)
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("no space left on device") }

func TestOutputWriteErrorFails(t *testing.T) {
	var errb bytes.Buffer
	code := Main(context.Background(), []string{"hash", "{}"}, strings.NewReader(""), failWriter{}, &errb)
	if code != ExitFailure || !strings.Contains(errb.String(), "no space left") {
		t.Fatalf("code %d stderr %q", code, errb.String())
	}
}

func TestInterruptedReturns130(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var out, errb bytes.Buffer
	// stdin never ends: without the interrupt, hash would wait forever.
	r, w, _ := os.Pipe()
	defer w.Close()
	defer r.Close()
	if code := Main(ctx, []string{"hash"}, r, &out, &errb); code != ExitInterrupted {
		t.Fatalf("code %d", code)
	}
}

func TestGroupsWithoutSubcommandAreUsageErrors(t *testing.T) {
	for _, args := range [][]string{{"policy"}, {"receipts"}, {"policy", "bogus"}} {
		if code, _, errOut := run(t, "", args...); code != ExitUsage || errOut == "" {
			t.Errorf("%v: code %d stderr %q", args, code, errOut)
		}
	}
}

func TestReceiptsVerifyRefusesEmptyAndReportsRange(t *testing.T) {
	file, pub := receiptsFixture(t)
	empty := writeFile(t, "empty.jsonl", "")
	if code, _, errOut := run(t, "", "receipts", "verify", empty, "--pubkey", pub); code != ExitFailure || !strings.Contains(errOut, "no receipts") {
		t.Errorf("empty file: %d %q", code, errOut)
	}
	code, out, _ := run(t, "", "receipts", "verify", file, "--pubkey", pub)
	if code != ExitOK || !strings.Contains(out, "seq 0..5") {
		t.Errorf("range not reported: %d %q", code, out)
	}
}

func TestPolicyExplainAcceptsGateSpellings(t *testing.T) {
	cfg := writeFile(t, "c.yaml", `
servers: [{name: fs, command: [fs-server]}]
policy: {rules: [{id: readers, effect: allow, tools: ["mcp:fs.*"]}]}
`)
	for _, name := range []string{"mcp:fs.read_file", "fs.read_file", "fs__read_file", "mcp%3Afs.read_file"} {
		code, out, errOut := run(t, "", "policy", "explain", "--config", cfg, "--principal", "a", "--tool", name)
		if code != ExitOK || !strings.Contains(out, `"toolId": "mcp:fs.read_file"`) {
			t.Errorf("%s: %d %q %q", name, code, out, errOut)
		}
	}
	for _, tc := range []struct{ args, want string }{
		{`{"a":1,"a":2}`, "duplicate key"},
		{`null`, "JSON object"},
		{`"\ud800"`, "surrogate"},
	} {
		code, _, errOut := run(t, "", "policy", "explain", "--config", cfg, "--principal", "a", "--tool", "fs.x", "--args", tc.args)
		if code != ExitUsage || !strings.Contains(errOut, tc.want) {
			t.Errorf("args %s: %d %q", tc.args, code, errOut)
		}
	}
	if code, _, errOut := run(t, "", "policy", "explain", "--config", cfg, "--principal", "", "--tool", "fs.x"); code != ExitUsage || !strings.Contains(errOut, "principal") {
		t.Errorf("empty principal: %d %q", code, errOut)
	}
}

func TestDemoWritesVerifiableReceipts(t *testing.T) {
	dir := t.TempDir()
	rf, kf := filepath.Join(dir, "demo.jsonl"), filepath.Join(dir, "demo.pub")
	if code, _, errOut := run(t, "", "demo", "--receipts", rf, "--pubkey", kf); code != ExitOK {
		t.Fatalf("demo: %d %s", code, errOut)
	}
	if code, out, errOut := run(t, "", "receipts", "verify", rf, "--pubkey", kf); code != ExitOK || !strings.Contains(out, "OK: 9 receipts") {
		t.Fatalf("verify: %d %q %q", code, out, errOut)
	}
	if code, _, _ := run(t, "", "demo", "--receipts", rf); code != ExitUsage {
		t.Fatalf("--receipts without --pubkey: %d", code)
	}
}

// A SIGHUP reload to a file that serve would refuse at its next start
// (a backend this build lacks) is rejected before anything is swapped: the
// gateway and auth (nil here) are never touched, and the log says why.
func TestReloadRefusesUnservableConfig(t *testing.T) {
	p := writeFile(t, "reload.yaml", string(demoConfig)+"\nstore: {driver: memory}\n")
	var logs strings.Builder
	reload(context.Background(), p, nil, nil, slog.New(slog.NewTextHandler(&logs, nil)))
	if !strings.Contains(logs.String(), "reload failed; keeping the running configuration") || !strings.Contains(logs.String(), "not built yet") {
		t.Fatalf("log: %s", logs.String())
	}
}

// serve listens before it creates anything: a busy address leaves the
// working directory as it was (no key, store or files dir).
func TestServeBusyAddressCreatesNothing(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	dir := t.TempDir()
	t.Chdir(dir)
	code, _, errOut := run(t, "", "serve", "--listen", busy.Addr().String())
	if code != ExitFailure || !strings.Contains(errOut, "listen "+busy.Addr().String()) {
		t.Fatalf("serve on a busy address: %d %q", code, errOut)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("serve on a busy address left %v", entries)
	}
}

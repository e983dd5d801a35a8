package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolgate/toolgate/internal/auth"
	"github.com/toolgate/toolgate/internal/config"
)

// diffGateway is a real `toolgate serve` (in this process) on a SQLite
// store in front of an upstream with tools file and ok, under the policy
// no-etc (deny file reads under /etc) / files / ok, with API keys
// caller-one and caller-two of tenant t1 and other of tenant t2.
type diffGateway struct {
	dir, cfgFile, base string
	storeYAML          string // the store: line
	extra              string // appended to the configuration
	keys               map[string]string
	keyLines           map[string]string
}

const diffPolicy = `policy:
  default: deny
  rules:
    - {id: no-etc, effect: deny, tools: ["mcp:up.file"], when: 'has(args.path) && args.path.startsWith("/etc")'}
    - {id: files, effect: allow, tools: ["mcp:up.file"]}
    - {id: ok, effect: allow, tools: ["mcp:up.ok"]}
`

func startDiffGateway(t *testing.T, content string) *diffGateway {
	return startDiffGatewayOn(t, content, "")
}

// startDiffGatewayOn is startDiffGateway on the store storeYAML ("" for
// a SQLite file in the gateway's directory).
func startDiffGatewayOn(t *testing.T, content, storeYAML string) *diffGateway {
	return startDiffGatewayExtra(t, content, storeYAML, "")
}

// startDiffGatewayExtra is startDiffGatewayOn with extra appended to the
// configuration (top-level keys).
func startDiffGatewayExtra(t *testing.T, content, storeYAML, extra string) *diffGateway {
	t.Helper()
	s := mcp.NewServer(&mcp.Implementation{Name: "up", Version: "1"}, nil)
	for _, name := range []string{"file", "ok"} {
		mcp.AddTool(s, &mcp.Tool{Name: name}, func(context.Context, *mcp.CallToolRequest, map[string]any) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "done"}}}, nil, nil
		})
	}
	up := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil))
	t.Cleanup(up.Close)
	g := &diffGateway{dir: t.TempDir(), keys: map[string]string{}, keyLines: map[string]string{}, storeYAML: storeYAML, extra: extra}
	if g.storeYAML == "" {
		g.storeYAML = fmt.Sprintf("{driver: sqlite, dsn: %s}", filepath.Join(g.dir, "toolgate.db"))
	}
	for _, k := range []struct{ id, tenant string }{{"caller-one", "t1"}, {"caller-two", "t1"}, {"other", "t2"}} {
		key, err := auth.NewKey()
		if err != nil {
			t.Fatal(err)
		}
		g.keys[k.id] = key
		g.keyLines[k.id] = fmt.Sprintf("    - {id: %s, key_sha256: \"%s\", tenant: %s}\n", k.id, auth.HashKey(key), k.tenant)
	}
	g.cfgFile = g.config(t, "toolgate.yaml", content, up.URL, "caller-one", "caller-two", "other")
	g.base, _ = startServeInProcess(t, g.cfgFile)
	return g
}

// config writes a configuration of the gateway's store with the given
// keys and returns its path.
func (g *diffGateway) config(t *testing.T, name, content, upURL string, keys ...string) string {
	t.Helper()
	var kl strings.Builder
	for _, k := range keys {
		kl.WriteString(g.keyLines[k])
	}
	cfg := fmt.Sprintf(`listen: 127.0.0.1:0
store: %s
signing: {key_file: %s}
audit: {content: %s}
auth:
  api_keys:
%sservers:
  - {name: up, url: "%s", sessions: shared}
%s%s`, g.storeYAML, filepath.Join(g.dir, "toolgate.key"), content, kl.String(), upURL, diffPolicy, g.extra)
	f := filepath.Join(g.dir, name)
	if err := os.WriteFile(f, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// call makes one POST /v1/calls and returns the callId and status.
func (g *diffGateway) call(t *testing.T, keyID, tool, args string) (string, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, g.base+"/v1/calls", strings.NewReader(fmt.Sprintf(`{"toolId":%q,"args":%s}`, tool, args)))
	req.Header.Set("Authorization", "Bearer "+g.keys[keyID])
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var m struct {
		CallID, Status, Error string
		Details               struct{ CallID string }
	}
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("POST /v1/calls %s as %s: %d %s", tool, keyID, resp.StatusCode, b)
	}
	if m.CallID == "" && m.Details.CallID != "" { // a refusal's error envelope
		m.CallID, m.Status = m.Details.CallID, m.Error
	}
	if m.CallID == "" {
		t.Fatalf("POST /v1/calls %s as %s: %d %s", tool, keyID, resp.StatusCode, b)
	}
	return m.CallID, m.Status
}

func diffJSON(t *testing.T, args ...string) diffReport {
	t.Helper()
	code, out, errOut := run(t, "", append([]string{"policy", "diff", "--json"}, args...)...)
	if code != ExitOK {
		t.Fatalf("policy diff %v: exit %d\n%s%s", args, code, out, errOut)
	}
	var rep diffReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("policy diff --json: %v\n%s", err, out)
	}
	return rep
}

func groupCalls(g diffGroup) []string {
	var ids []string
	for _, c := range g.Calls {
		ids = append(ids, c.CallID)
	}
	slices.Sort(ids)
	return ids
}

// TestPolicyDiff (issue 18 point 7): calls made through a real gateway
// (SQLite store, arguments recorded in the events with audit.content:
// full) are decided again under a candidate that tightens one rule
// (no-etc becomes only-srv: deny every path outside /srv). The diff lists
// exactly the tenant's calls the candidate would refuse, grouped (files →
// only-srv, mcp:up.file, allow → deny), and nothing else: not the call
// already denied, not the calls inside /srv, not the other tool's, not
// tenant t2's. A principal missing from the configuration (as a JWT
// principal is) is listed as not evaluated; the candidate identical to
// the policy changes nothing; nothing is executed.
func TestPolicyDiff(t *testing.T) {
	g := startDiffGateway(t, "full")
	inside, _ := g.call(t, "caller-one", "mcp:up.file", `{"path":"/srv/a"}`)
	home, st := g.call(t, "caller-one", "mcp:up.file", `{"path":"/home/b"}`)
	tmp, _ := g.call(t, "caller-two", "mcp:up.file", `{"path":"/tmp/c"}`)
	etc, etcStatus := g.call(t, "caller-one", "mcp:up.file", `{"path":"/etc/passwd"}`)
	g.call(t, "caller-one", "mcp:up.ok", `{"path":"/home/b"}`)
	g.call(t, "caller-two", "mcp:up.ok", `{}`)
	g.call(t, "other", "mcp:up.file", `{"path":"/home/t2"}`) // tenant t2
	if st != "ok" || etcStatus != "forbidden" {
		t.Fatalf("calls: /home/b %s, /etc/passwd %s", st, etcStatus)
	}
	_ = inside

	cand := writeFile(t, "candidate.yaml", `default: deny
rules:
  - {id: only-srv, effect: deny, tools: ["mcp:up.file"], when: 'has(args.path) && !args.path.startsWith("/srv/")'}
  - {id: files, effect: allow, tools: ["mcp:up.file"]}
  - {id: ok, effect: allow, tools: ["mcp:up.ok"]}
`)
	rep := diffJSON(t, "--config", g.cfgFile, "--candidate", cand, "--tenant", "t1")
	if rep.Calls != 6 || rep.WouldChange != 2 || rep.MayChange != 0 || rep.NotEvaluated != 0 || len(rep.Groups) != 1 {
		t.Fatalf("report: %+v", rep)
	}
	gr := rep.Groups[0]
	want := []string{home, tmp}
	slices.Sort(want)
	if gr.Kind != diffChange || gr.ToolID != "mcp:up.file" || gr.OldRule != "files" || gr.NewRule != "only-srv" ||
		gr.OldEffect != "allow" || gr.NewEffect != "deny" || gr.Count != 2 || !slices.Equal(groupCalls(gr), want) {
		t.Errorf("group %+v, want files → only-srv on mcp:up.file, allow → deny, calls %v", gr, want)
	}
	if slices.Contains(groupCalls(gr), etc) {
		t.Errorf("the already denied call %s is listed", etc)
	}

	// The text report lists the same group and its calls.
	code, out, errOut := run(t, "", "policy", "diff", "--config", g.cfgFile, "--candidate", cand, "--tenant", "t1")
	for _, w := range []string{"policy diff: 6 call(s) of tenant \"t1\"", "would change: 2; may change: 0; not evaluated: 0",
		"files → only-srv  mcp:up.file  allow → deny  2 call(s)", "call " + home, "call " + tmp} {
		if code != ExitOK || !strings.Contains(out, w) {
			t.Errorf("text report (exit %d) lacks %q:\n%s%s", code, w, out, errOut)
		}
	}

	// Tenant t2 sees only its own call, which the candidate refuses.
	rep2 := diffJSON(t, "--config", g.cfgFile, "--candidate", cand, "--tenant", "t2")
	if rep2.Calls != 1 || rep2.WouldChange != 1 || rep2.Groups[0].Calls[0].Principal != "other" {
		t.Errorf("tenant t2: %+v", rep2)
	}

	// A principal the configuration does not know (a JWT principal, a
	// removed key) cannot be decided again: its calls are not evaluated.
	noTwo := g.config(t, "no-two.yaml", "full", "http://127.0.0.1:1/mcp", "caller-one", "other")
	rep3 := diffJSON(t, "--config", noTwo, "--candidate", cand, "--tenant", "t1")
	if rep3.WouldChange != 1 || rep3.NotEvaluated != 2 || !slices.Equal(groupCalls(rep3.Groups[0]), []string{home}) {
		t.Errorf("without caller-two: %+v", rep3)
	}
	for _, gr := range rep3.Groups[1:] {
		if gr.Kind != diffNotEvaluated || !strings.Contains(gr.Reason, `unknown principal "caller-two"`) || !strings.Contains(gr.Reason, "JWT") {
			t.Errorf("not-evaluated group %+v", gr)
		}
	}

	// The current policy as the candidate changes nothing.
	same := writeFile(t, "same.yaml", strings.ReplaceAll(strings.TrimPrefix(diffPolicy, "policy:"), "\n  ", "\n")[1:])
	if rep := diffJSON(t, "--config", g.cfgFile, "--candidate", same, "--tenant", "t1"); rep.Calls != 6 || len(rep.Groups) != 0 {
		t.Errorf("identical candidate: %+v", rep)
	}
}

// Without recorded arguments (audit.content: hash), a call whose candidate
// decision depends on them "may change"; one whose decision does not
// (the other tool) is decided exactly; a tool whose rules the candidate
// leaves as they are does not show up.
func TestPolicyDiffArgsUnknown(t *testing.T) {
	g := startDiffGateway(t, "hash")
	a, _ := g.call(t, "caller-one", "mcp:up.file", `{"path":"/srv/a"}`)
	b, _ := g.call(t, "caller-one", "mcp:up.file", `{"path":"/home/b"}`)
	okCall, _ := g.call(t, "caller-one", "mcp:up.ok", `{}`)

	cand := writeFile(t, "candidate.yaml", `default: deny
rules:
  - {id: only-srv, effect: deny, tools: ["mcp:up.file"], when: 'has(args.path) && !args.path.startsWith("/srv/")'}
  - {id: files, effect: allow, tools: ["mcp:up.file"]}
`)
	rep := diffJSON(t, "--config", g.cfgFile, "--candidate", cand, "--tenant", "t1")
	if rep.Calls != 3 || rep.WouldChange != 1 || rep.MayChange != 2 || len(rep.Groups) != 2 {
		t.Fatalf("report: %+v", rep)
	}
	ch, may := rep.Groups[0], rep.Groups[1]
	if ch.Kind != diffChange || ch.ToolID != "mcp:up.ok" || ch.OldRule != "ok" || ch.NewRule != "(no rule)" || ch.NewEffect != "deny" || !slices.Equal(groupCalls(ch), []string{okCall}) {
		t.Errorf("would-change group %+v", ch)
	}
	want := []string{a, b}
	slices.Sort(want)
	if may.Kind != diffMayChange || may.ToolID != "mcp:up.file" || may.OldRule != "files" || !slices.Equal(groupCalls(may), want) {
		t.Errorf("may-change group %+v", may)
	}

	// With a call recording (the store's, issue 18 point 1), a recorded
	// call is decided exactly: b (/home/b) would change, a stays "may
	// change" (not recorded here).
	cfg, err := config.Load(g.cfgFile)
	if err != nil {
		t.Fatal(err)
	}
	c, err := loadCandidate(cand, cfg)
	if err != nil {
		t.Fatal(err)
	}
	st, err := openStore(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	rec := fakeRecording{"t1/" + b: `{"path":"/home/b"}`}
	rep, err = policyDiff(t.Context(), st, rec, cfg, c, "t1", time.Now().Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if rep.WouldChange != 2 || rep.MayChange != 1 {
		t.Fatalf("with a recording: %+v", rep)
	}
	for _, gr := range rep.Groups {
		if gr.ToolID == "mcp:up.file" && gr.Kind == diffChange && !slices.Equal(groupCalls(gr), []string{b}) ||
			gr.ToolID == "mcp:up.file" && gr.Kind == diffMayChange && !slices.Equal(groupCalls(gr), []string{a}) {
			t.Errorf("with a recording: group %+v", gr)
		}
	}

	// A candidate that changes only mcp:up.ok's rule leaves the file
	// calls out, though their decision depends on their arguments.
	cand2 := writeFile(t, "candidate2.yaml", `default: deny
rules:
  - {id: no-etc, effect: deny, tools: ["mcp:up.file"], when: 'has(args.path) && args.path.startsWith("/etc")'}
  - {id: files, effect: allow, tools: ["mcp:up.file"]}
`)
	rep = diffJSON(t, "--config", g.cfgFile, "--candidate", cand2, "--tenant", "t1")
	if rep.WouldChange != 1 || rep.MayChange != 0 || len(rep.Groups) != 1 || rep.Groups[0].ToolID != "mcp:up.ok" {
		t.Errorf("candidate changing only ok: %+v", rep)
	}
}

// Calls the store recorded (tools[].record, issue 18 point 1) are decided
// again on their recorded arguments, though the events carry none
// (audit.content: hash): a candidate that tightens one rule lists exactly
// the recorded calls it would refuse, and none "may change".
func TestPolicyDiffRecordedCalls(t *testing.T) {
	g := startDiffGatewayExtra(t, "hash", "", "tools:\n  - {match: \"mcp:up.file\", record: true}\n")
	g.call(t, "caller-one", "mcp:up.file", `{"path":"/srv/a"}`)
	b, _ := g.call(t, "caller-one", "mcp:up.file", `{"path":"/home/b"}`)
	c, _ := g.call(t, "caller-two", "mcp:up.file", `{"path":"/tmp/c"}`)
	g.call(t, "caller-one", "mcp:up.file", `{"path":"/etc/passwd"}`) // denied now and then
	g.call(t, "other", "mcp:up.file", `{"path":"/home/t2"}`)         // another tenant

	cand := writeFile(t, "candidate.yaml", `default: deny
rules:
  - {id: only-srv, effect: deny, tools: ["mcp:up.file"], when: 'has(args.path) && !args.path.startsWith("/srv/")'}
  - {id: files, effect: allow, tools: ["mcp:up.file"]}
  - {id: ok, effect: allow, tools: ["mcp:up.ok"]}
`)
	rep := diffJSON(t, "--config", g.cfgFile, "--candidate", cand, "--tenant", "t1")
	if rep.Calls != 4 || rep.WouldChange != 2 || rep.MayChange != 0 || len(rep.Groups) != 1 {
		t.Fatalf("report: %+v", rep)
	}
	want := []string{b, c}
	slices.Sort(want)
	if gr := rep.Groups[0]; gr.Kind != diffChange || gr.OldRule != "files" || gr.NewRule != "only-srv" || !slices.Equal(groupCalls(gr), want) {
		t.Errorf("group %+v, want %v refused by only-srv", gr, want)
	}
}

// Usage errors exit 2: a missing --tenant, a bad --since, a candidate that
// does not compile.
func TestPolicyDiffUsage(t *testing.T) {
	cfg := writeFile(t, "c.yaml", "store: {dsn: x.db}\n"+diffPolicy)
	bad := writeFile(t, "bad.yaml", "default: deny\nrules:\n  - {id: x, effect: allow, tools: [\"*\"], when: 'args.n +'}\n")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--config", cfg, "--candidate", bad}, `"tenant" not set`},
		{[]string{"--config", cfg, "--candidate", bad, "--tenant", "t", "--since", "soon"}, "--since"},
		{[]string{"--config", cfg, "--candidate", bad, "--tenant", "t"}, "bad.yaml:3:"},
		{[]string{"--config", cfg, "--candidate", bad, "--tenant", ""}, "--tenant: empty"},
		{[]string{"--config", cfg, "--candidate", bad, "--tenant", " "}, "--tenant: empty"},
		{[]string{"--config", cfg, "--candidate", writeFile(t, "empty.yaml", ""), "--tenant", "t"}, "empty.yaml: the file is empty"},
		{[]string{"--config", cfg, "--candidate", writeFile(t, "comment.yaml", "# nothing yet\n"), "--tenant", "t"}, "the file is empty"},
		{[]string{"--config", cfg, "--candidate", writeFile(t, "braces.yaml", "{}\n"), "--tenant", "t"}, "the file is empty"},
	} {
		code, _, errOut := run(t, "", append([]string{"policy", "diff"}, tc.args...)...)
		if code != ExitUsage || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", tc.args, code, errOut, tc.want)
		}
	}
}

// fakeRecording is a call recording keyed "tenant/callId".
type fakeRecording map[string]string

func (f fakeRecording) RecordedArgs(_ context.Context, tenant, callID string) (json.RawMessage, bool, error) {
	a, ok := f[tenant+"/"+callID]
	return json.RawMessage(a), ok, nil
}

// TestPolicyDiffPostgres: the same diff reads a PostgreSQL store (events
// and every replica's receipt chain), tenant-scoped.
func TestPolicyDiffPostgres(t *testing.T) {
	g := startDiffGatewayOn(t, "full", fmt.Sprintf("{driver: postgres, dsn: %q}", postgresSchema(t)))
	home, _ := g.call(t, "caller-one", "mcp:up.file", `{"path":"/home/b"}`)
	g.call(t, "caller-one", "mcp:up.file", `{"path":"/srv/a"}`)
	g.call(t, "caller-one", "mcp:up.file", `{"path":"/etc/passwd"}`)
	g.call(t, "other", "mcp:up.file", `{"path":"/home/t2"}`)
	cand := writeFile(t, "candidate.yaml", `default: deny
rules:
  - {id: only-srv, effect: deny, tools: ["mcp:up.file"], when: 'has(args.path) && !args.path.startsWith("/srv/")'}
  - {id: files, effect: allow, tools: ["mcp:up.file"]}
  - {id: ok, effect: allow, tools: ["mcp:up.ok"]}
`)
	rep := diffJSON(t, "--config", g.cfgFile, "--candidate", cand, "--tenant", "t1")
	if rep.Calls != 3 || rep.WouldChange != 1 || len(rep.Groups) != 1 || rep.Groups[0].OldRule != "files" ||
		rep.Groups[0].NewRule != "only-srv" || !slices.Equal(groupCalls(rep.Groups[0]), []string{home}) {
		t.Errorf("report: %+v", rep)
	}
}

// TestPolicyDiffNotEvaluatedText: calls of an unknown principal on one
// tool decided by different old rules are separate groups, and the text
// report tells them apart by their old rule and effect (not the same
// tool-and-reason line twice).
func TestPolicyDiffNotEvaluatedText(t *testing.T) {
	g := startDiffGateway(t, "full")
	allowed, _ := g.call(t, "caller-two", "mcp:up.file", `{"path":"/tmp/c"}`)
	denied, st := g.call(t, "caller-two", "mcp:up.file", `{"path":"/etc/x"}`)
	if st != "forbidden" {
		t.Fatalf("/etc/x: %s", st)
	}
	cand := writeFile(t, "candidate.yaml", "default: deny\nrules:\n  - {id: ok, effect: allow, tools: [\"mcp:up.ok\"]}\n")
	noTwo := g.config(t, "no-two.yaml", "full", "http://127.0.0.1:1/mcp", "caller-one", "other")
	code, out, errOut := run(t, "", "policy", "diff", "--config", noTwo, "--candidate", cand, "--tenant", "t1")
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, w := range []string{"files → ?  mcp:up.file  allow → ?  1 call(s)", "no-etc → ?  mcp:up.file  deny → ?  1 call(s)",
		`(unknown principal "caller-two"`, "call " + allowed, "call " + denied} {
		if !strings.Contains(out, w) {
			t.Errorf("text report lacks %q:\n%s", w, out)
		}
	}
	seen := map[string]bool{}
	for line := range strings.SplitSeq(out, "\n") {
		if strings.HasPrefix(line, "  ") && !strings.HasPrefix(line, "    ") {
			if seen[line] {
				t.Errorf("group line repeated: %q\n%s", line, out)
			}
			seen[line] = true
		}
	}
}

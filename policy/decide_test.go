package policy

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolgate/toolgate/errcode"
)

func load(t testing.TB, src string, opts Options) *Program {
	t.Helper()
	p, err := Load("test.yaml", []byte(src), opts)
	if err != nil {
		t.Fatalf("Load:\n%v", err)
	}
	return p
}

func call(principal Principal, toolID string, toolScopes []string, args map[string]any) *Input {
	return &Input{Principal: principal, Tool: Tool{ID: toolID, Scopes: toolScopes}, Args: args, ArgsKnown: true}
}

type want struct {
	effect  Effect
	rule    string
	layer   string
	missing []string
	reason  string // substring; "" = don't care
	err     bool
}

func check(t *testing.T, d Decision, w want) {
	t.Helper()
	if d.Effect != w.effect || d.RuleID != w.rule || d.Layer != w.layer ||
		!slices.Equal(d.MissingScopes, w.missing) || (d.Err != nil) != w.err ||
		!strings.Contains(d.Reason, w.reason) {
		t.Errorf("decision %+v (err %v)\nwant %+v", d, d.Err, w)
	}
}

var alice = Principal{ID: "alice", Tenant: "acme", Scopes: []string{"fs:read", "fs:write"}, Attributes: map[string]string{"team": "infra"}}

const designPolicy = `default: deny
rules:
  - {id: readers, effect: allow, tools: ["mcp:fs.*"], scopes: [fs:read], reason: "readers may read"}
  - {id: no-etc, effect: deny, tools: ["mcp:fs.*"], when: 'has(args.path) && args.path.startsWith("/etc")'}
  - {id: big-writes, effect: require_approval, tools: ["mcp:fs.write_file"], when: 'size(args.content) > 10000'}
ratelimits:
  - {tools: ["mcp:fs.write_*"], per: principal_tool, rate: 1/s, burst: 2}
  - {tools: ["*"], per: principal_tool, rate: 10/s, burst: 20}
`

func TestDecideDesignPolicy(t *testing.T) {
	p := load(t, designPolicy, Options{})
	ctx := t.Context()
	big := strings.Repeat("x", 10001)
	cases := []struct {
		name string
		in   *Input
		want want
	}{
		{"reader reads", call(alice, "mcp:fs.read_file", nil, map[string]any{"path": "/home/a"}),
			want{effect: EffectAllow, rule: "readers", layer: LayerRule, reason: "readers may read"}},
		{"deny overrides allow", call(alice, "mcp:fs.read_file", nil, map[string]any{"path": "/etc/passwd"}),
			want{effect: EffectDeny, rule: "no-etc", layer: LayerRule, reason: `denied by rule "no-etc"`}},
		{"deny overrides approval", call(alice, "mcp:fs.write_file", nil, map[string]any{"path": "/etc/x", "content": big}),
			want{effect: EffectDeny, rule: "no-etc", layer: LayerRule}},
		{"approval overrides allow", call(alice, "mcp:fs.write_file", nil, map[string]any{"path": "/tmp/x", "content": big}),
			want{effect: EffectRequireApproval, rule: "big-writes", layer: LayerRule, reason: `rule "big-writes" requires approval`}},
		{"small write allowed", call(alice, "mcp:fs.write_file", nil, map[string]any{"path": "/tmp/x", "content": "hi"}),
			want{effect: EffectAllow, rule: "readers", layer: LayerRule}},
		{"default deny", call(alice, "mcp:gh.create_issue", nil, nil),
			want{effect: EffectDeny, layer: LayerDefault, reason: "default posture is deny"}},
		{"rule scopes missing", call(Principal{ID: "bob"}, "mcp:fs.read_file", nil, map[string]any{}),
			want{effect: EffectDeny, rule: "readers", layer: LayerScopes, missing: []string{"fs:read"}, reason: "missing scopes: fs:read"}},
		{"descriptor scopes missing", call(Principal{ID: "carol", Scopes: []string{"fs:read"}}, "mcp:fs.write_file", []string{"fs:write", "fs:admin"}, map[string]any{"content": ""}),
			want{effect: EffectDeny, rule: "readers", layer: LayerScopes, missing: []string{"fs:admin", "fs:write"}, reason: "missing scopes: fs:admin, fs:write"}},
		{"runtime error in approval rule fails closed", call(alice, "mcp:fs.write_file", nil, map[string]any{"path": "/tmp/x", "content": 12}),
			want{effect: EffectDeny, rule: "big-writes", layer: LayerError, err: true, reason: "fail closed"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := p.Decide(ctx, c.in)
			check(t, d, c.want)
			if d.PolicyVersion != p.Version() {
				t.Errorf("PolicyVersion %q, want %q", d.PolicyVersion, p.Version())
			}
		})
	}
	d := p.Decide(ctx, call(alice, "mcp:fs.read_file", []string{"fs:x"}, map[string]any{}))
	if d.Effect != EffectDeny || !slices.Equal(d.RequiredScopes, []string{"fs:read", "fs:x"}) {
		t.Errorf("RequiredScopes = %v (%+v)", d.RequiredScopes, d)
	}
	alice2 := alice
	alice2.Scopes = append([]string{"fs:x"}, alice.Scopes...)
	d = p.Decide(ctx, call(alice2, "mcp:fs.read_file", []string{"fs:x", "fs:read"}, map[string]any{}))
	if d.Effect != EffectAllow || !slices.Equal(d.RequiredScopes, []string{"fs:read", "fs:x"}) {
		t.Errorf("RequiredScopes = %v (%+v)", d.RequiredScopes, d)
	}
	// The returned slices are the caller's: changing them changes nothing.
	d.RequiredScopes[0] = "zzz"
	if d2 := p.Decide(ctx, call(alice2, "mcp:fs.read_file", []string{"fs:x", "fs:read"}, map[string]any{})); d2.RequiredScopes[0] != "fs:read" {
		t.Errorf("RequiredScopes aliased: %v", d2.RequiredScopes)
	}
}

func TestDefaultAllow(t *testing.T) {
	p := load(t, `default: allow
rules:
  - {id: no-shell, effect: deny, tools: ["native:shell.*"]}
  - {id: admins, effect: allow, tools: ["mcp:db.*"], scopes: [db:admin]}
`, Options{})
	ctx := t.Context()
	check(t, p.Decide(ctx, call(alice, "mcp:fs.read", []string{"fs:read"}, nil)),
		want{effect: EffectAllow, layer: LayerDefault, reason: "default posture is allow"})
	check(t, p.Decide(ctx, call(alice, "native:shell.exec", nil, nil)),
		want{effect: EffectDeny, rule: "no-shell", layer: LayerRule})
	// Descriptor scopes are required under default allow too.
	check(t, p.Decide(ctx, call(alice, "mcp:gh.merge", []string{"gh:write"}, nil)),
		want{effect: EffectDeny, layer: LayerScopes, missing: []string{"gh:write"}, reason: "missing scopes: gh:write"})
	// A matching rule the principal lacks scopes for denies, even under
	// default allow.
	check(t, p.Decide(ctx, call(alice, "mcp:db.query", nil, nil)),
		want{effect: EffectDeny, rule: "admins", layer: LayerScopes, missing: []string{"db:admin"}})
}

func TestDenyOverridesOrder(t *testing.T) {
	// The outcome does not depend on the order of the rules.
	rules := []string{
		`{id: a, effect: allow, tools: ["*"]}`,
		`{id: q, effect: require_approval, tools: ["*"], when: 'args.amount > 100'}`,
		`{id: d, effect: deny, tools: ["*"], when: 'args.amount > 1000'}`,
	}
	perms := [][]int{{0, 1, 2}, {0, 2, 1}, {1, 0, 2}, {1, 2, 0}, {2, 0, 1}, {2, 1, 0}}
	for _, perm := range perms {
		src := "rules:\n"
		for _, i := range perm {
			src += "  - " + rules[i] + "\n"
		}
		p := load(t, src, Options{})
		for amount, w := range map[float64]want{
			5:    {effect: EffectAllow, rule: "a", layer: LayerRule},
			500:  {effect: EffectRequireApproval, rule: "q", layer: LayerRule},
			5000: {effect: EffectDeny, rule: "d", layer: LayerRule},
		} {
			check(t, p.Decide(t.Context(), call(alice, "http:pay", nil, map[string]any{"amount": amount})), w)
		}
	}
}

func TestFailClosed(t *testing.T) {
	p := load(t, `rules:
  - {id: a1, effect: allow, tools: ["t:a"], when: 'args.count > 3'}
  - {id: a2, effect: allow, tools: ["t:a"], when: 'true'}
  - {id: d1, effect: deny, tools: ["t:d"], when: 'args.count > 3'}
  - {id: d2, effect: deny, tools: ["t:d"], when: 'args.stop == true'}
  - {id: a3, effect: allow, tools: ["t:d", "t:q"]}
  - {id: q1, effect: require_approval, tools: ["t:q"], when: 'principal.attributes.level == "high"'}
`, Options{})
	ctx := t.Context()
	// An erroring allow rule does not matter when another allow rule grants.
	check(t, p.Decide(ctx, call(alice, "t:a", nil, map[string]any{"count": "many"})),
		want{effect: EffectAllow, rule: "a2", layer: LayerRule})
	// An erroring deny rule denies with the error...
	d := p.Decide(ctx, call(alice, "t:d", nil, map[string]any{"count": "many"}))
	check(t, d, want{effect: EffectDeny, rule: "d1", layer: LayerError, err: true})
	var e *errcode.Error
	if !errors.As(d.Err, &e) || e.Code != errcode.Forbidden || e.Details["cause"] != "evaluation_error" || e.Details["ruleId"] != "d1" {
		t.Errorf("Err = %#v", d.Err)
	}
	if !strings.Contains(d.Err.Error(), "no such overload") {
		t.Errorf("Err = %v", d.Err)
	}
	// ...unless another deny rule matches, which decides.
	check(t, p.Decide(ctx, call(alice, "t:d", nil, map[string]any{"count": "many", "stop": true})),
		want{effect: EffectDeny, rule: "d2", layer: LayerRule})
	// A missing key is an error too (args.stop absent).
	check(t, p.Decide(ctx, call(alice, "t:d", nil, map[string]any{"count": 1})),
		want{effect: EffectDeny, rule: "d2", layer: LayerError, err: true})
	check(t, p.Decide(ctx, call(alice, "t:d", nil, map[string]any{"count": 1, "stop": false})),
		want{effect: EffectAllow, rule: "a3", layer: LayerRule})
	// A failing approval rule blocks allow rules: it could have required
	// approval.
	check(t, p.Decide(ctx, call(Principal{ID: "x"}, "t:q", nil, nil)),
		want{effect: EffectDeny, rule: "q1", layer: LayerError, err: true})
}

func TestCostLimit(t *testing.T) {
	src := `rules:
  - {id: scan, effect: deny, tools: ["*"], when: 'args.items.exists(i, i == "forbidden")'}
  - {id: all, effect: allow, tools: ["*"]}
`
	items := make([]any, 5000)
	for i := range items {
		items[i] = "ok"
	}
	in := call(alice, "t:x", nil, map[string]any{"items": items})
	small := load(t, src, Options{CostLimit: 100})
	d := small.Decide(t.Context(), in)
	check(t, d, want{effect: EffectDeny, rule: "scan", layer: LayerError, err: true})
	if e := errcode.As(d.Err); e == nil || e.Details["cause"] != "cost_limit" {
		t.Errorf("Err = %#v", d.Err)
	}
	// The default limit (10000) is enough for a list of 5 items, not 5000.
	def := load(t, src, Options{})
	check(t, def.Decide(t.Context(), call(alice, "t:x", nil, map[string]any{"items": items[:5]})),
		want{effect: EffectAllow, rule: "all", layer: LayerRule})
	check(t, def.Decide(t.Context(), in), want{effect: EffectDeny, rule: "scan", layer: LayerError, err: true})
	big := load(t, src, Options{CostLimit: 1 << 40})
	check(t, big.Decide(t.Context(), in), want{effect: EffectAllow, rule: "all", layer: LayerRule})
}

// doneAfter is a context that reports itself done (with deadline exceeded)
// from the n-th call of Err on; its Done channel is always closed, so a
// running comprehension is interrupted at its next check.
type doneAfter struct {
	context.Context
	n    int
	done chan struct{}
}

func (c *doneAfter) Done() <-chan struct{} { return c.done }
func (c *doneAfter) Err() error {
	if c.n--; c.n < 0 {
		return context.DeadlineExceeded
	}
	return nil
}

func TestContextDone(t *testing.T) {
	p := load(t, `rules:
  - {id: scan, effect: deny, tools: ["*"], when: 'args.items.exists(i, i == "forbidden")'}
  - {id: all, effect: allow, tools: ["*"]}
`, Options{CostLimit: 1 << 40})
	in := call(alice, "t:x", nil, map[string]any{"items": make([]any, 100000)})
	// Already expired.
	ctx, cancel := context.WithDeadline(t.Context(), time.Unix(0, 0))
	defer cancel()
	d := p.Decide(ctx, in)
	check(t, d, want{effect: EffectDeny, layer: LayerError, err: true})
	if !errors.Is(d.Err, context.DeadlineExceeded) || errcode.CodeOf(d.Err) != errcode.Timeout {
		t.Errorf("Err = %v (%s)", d.Err, errcode.CodeOf(d.Err))
	}
	// Cancelled.
	ctx, cancel = context.WithCancel(t.Context())
	cancel()
	if d := p.Decide(ctx, in); errcode.CodeOf(d.Err) != errcode.Cancelled || d.Effect != EffectDeny {
		t.Errorf("cancelled: %+v", d)
	}
	// Deadline reached while the comprehension runs: interrupted.
	done := make(chan struct{})
	close(done)
	d = p.Decide(&doneAfter{Context: t.Context(), n: 2, done: done}, in)
	check(t, d, want{effect: EffectDeny, rule: "scan", layer: LayerError, err: true})
	if !errors.Is(d.Err, context.DeadlineExceeded) || errcode.CodeOf(d.Err) != errcode.Timeout {
		t.Errorf("Err = %v", d.Err)
	}
	if p.Disclose(ctx, in) {
		t.Error("Disclose with a done context")
	}
}

func TestNilProgramAndInput(t *testing.T) {
	var p *Program
	d := p.Decide(t.Context(), call(alice, "x", nil, nil))
	check(t, d, want{effect: EffectDeny, layer: LayerNoPolicy})
	if p.Disclose(t.Context(), call(alice, "x", nil, nil)) {
		t.Error("nil Program discloses")
	}
	if _, _, ok := p.RateLimit("x"); ok {
		t.Error("nil Program has a rate limit")
	}
	if x := p.Explain(t.Context(), call(alice, "x", nil, nil)); x.Decision.Layer != LayerNoPolicy {
		t.Errorf("Explain: %+v", x)
	}
	q := load(t, "default: allow\n", Options{})
	check(t, q.Decide(t.Context(), nil), want{effect: EffectDeny, layer: LayerError, err: true})
	//nolint:staticcheck // a nil context must not panic either
	check(t, q.Decide(nil, call(alice, "x", nil, nil)), want{effect: EffectAllow, layer: LayerDefault})
	if q.Disclose(t.Context(), nil) {
		t.Error("nil input disclosed")
	}
}

func TestArgsUnknownAtCallTime(t *testing.T) {
	p := load(t, `rules:
  - {id: big, effect: deny, tools: ["*"], when: 'size(args) > 3'}
  - {id: acme, effect: allow, tools: ["*"], when: 'principal.tenant == "acme"'}
`, Options{})
	in := call(alice, "x", nil, nil)
	in.ArgsKnown = false
	d := p.Decide(t.Context(), in)
	check(t, d, want{effect: EffectDeny, rule: "big", layer: LayerError, err: true})
	if e := errcode.As(d.Err); e == nil || e.Details["cause"] != "args_unknown" {
		t.Errorf("Err = %#v", d.Err)
	}
	in.ArgsKnown = true // nil Args with ArgsKnown is {}
	check(t, p.Decide(t.Context(), in), want{effect: EffectAllow, rule: "acme", layer: LayerRule})
}

func TestVariables(t *testing.T) {
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	in := &Input{
		Principal: Principal{ID: "bot-7", Tenant: "acme", Scopes: []string{"b", "fs:read"}, Attributes: map[string]string{"team": "infra"}},
		Tool: Tool{ID: "mcp:fs.read", Source: "mcp", SafetyTier: "read", Scopes: []string{"fs:read"},
			Fields: map[string]any{"approval": "never", "egress": "none", "safetyTier": "ignored", "title": "Read",
				"auth": map[string]any{"scopes": []any{"fs:read"}}, "inputSchema": map[string]any{"type": "object", "required": []any{"path"}}}},
		Args:      map[string]any{"n": float64(3), "tags": []any{"x", "y"}, "opts": map[string]any{"deep": true}},
		ArgsKnown: true,
		Call:      Call{Transport: "mcp", CallID: "c1", RunID: "r1", AgentID: "ag", ParentCallID: "p0"},
		Now:       now,
	}
	conds := []string{
		`principal.id.startsWith("bot-") && principal.tenant == "acme"`,
		`"b" in principal.scopes && size(principal.scopes) == 2 && principal.scopes[1] == "fs:read"`,
		`principal.attributes.team == "infra" && !("x" in principal.attributes)`,
		`has(principal.tenant) && !has(principal.attributes.x)`,
		`principal == principal`,
		`tool.id == "mcp:fs.read" && tool.source == "mcp" && tool.safetyTier == "read"`,
		`"fs:read" in tool.scopes && tool.approval == "never" && tool.egress == "none"`,
		`tool.toolId == tool.id && tool.title == "Read" && !has(tool.description) && tool.description == "" && tool.costHint == ""`,
		`has(tool.auth) && tool.auth.scopes == ["fs:read"] && has(tool.inputSchema) && "path" in tool.inputSchema.required && !has(tool.outputSchema)`,
		`type(tool) == toolgate.Tool && has(tool.scopes)`,
		`args.n == 3 && args.n > 2 && args.tags[1] == "y" && args.opts.deep`,
		`args.tags.all(t, t.size() == 1)`,
		`call.transport == "mcp" && call.callId == "c1" && call.runId == "r1" && call.agentId == "ag" && call.parentCallId == "p0"`,
		`has(call.runId) && now == timestamp("2026-05-01T12:00:00Z") && now.getHours() == 12`,
		`type(principal) == toolgate.Principal`,
	}
	for _, c := range conds {
		p := load(t, "rules:\n  - {id: r, effect: allow, tools: [\"*\"], when: '"+strings.ReplaceAll(c, "'", "''")+"'}\n", Options{})
		if d := p.Decide(t.Context(), in); d.Effect != EffectAllow {
			t.Errorf("%s: %+v (%v)", c, d, d.Err)
		}
	}
}

func TestRateLimit(t *testing.T) {
	p := load(t, designPolicy, Options{})
	for id, w := range map[string]struct {
		rate  float64
		burst int
	}{
		"mcp:fs.write_file": {1, 2},
		"mcp:fs.read_file":  {10, 20},
	} {
		rate, burst, ok := p.RateLimit(id)
		if !ok || rate != w.rate || burst != w.burst {
			t.Errorf("RateLimit(%s) = %v %v %v", id, rate, burst, ok)
		}
	}
	q := load(t, "ratelimits:\n  - {tools: [\"mcp:*\"], rate: 30/m, burst: 1}\n", Options{})
	if rate, _, ok := q.RateLimit("mcp:a.b"); !ok || rate != 0.5 {
		t.Errorf("30/m = %v %v", rate, ok)
	}
	if _, _, ok := q.RateLimit("http:x"); ok {
		t.Error("unmatched tool has a rate limit")
	}
}

func TestExplain(t *testing.T) {
	p := load(t, designPolicy, Options{Version: "v1"})
	in := call(Principal{ID: "bob", Scopes: []string{"fs:read", "fs:write"}}, "mcp:fs.write_file", nil, map[string]any{"path": "/tmp/x", "content": 5})
	x := p.Explain(t.Context(), in)
	b, err := json.MarshalIndent(x, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	const wantJSON = `{
  "toolId": "mcp:fs.write_file",
  "argsKnown": true,
  "rules": [
    {
      "ruleId": "readers",
      "effect": "allow",
      "pos": "test.yaml:3:5",
      "condition": "true",
      "scopesOk": true,
      "decided": false
    },
    {
      "ruleId": "no-etc",
      "effect": "deny",
      "pos": "test.yaml:4:5",
      "when": "has(args.path) \u0026\u0026 args.path.startsWith(\"/etc\")",
      "condition": "false",
      "scopesOk": true,
      "decided": false
    },
    {
      "ruleId": "big-writes",
      "effect": "require_approval",
      "pos": "test.yaml:5:5",
      "when": "size(args.content) \u003e 10000",
      "condition": "error",
      "error": "no such overload: size",
      "scopesOk": true,
      "decided": true
    }
  ],
  "decision": {
    "effect": "deny",
    "ruleId": "big-writes",
    "reason": "policy evaluation failed (fail closed): rule \"big-writes\" could not be evaluated: no such overload: size",
    "policyVersion": "v1",
    "layer": "error"
  },
  "error": "forbidden: rule \"big-writes\" could not be evaluated: no such overload: size",
  "disclosed": true
}`
	if string(b) != wantJSON {
		t.Errorf("Explain JSON:\n%s\nwant:\n%s", b, wantJSON)
	}
	if d := p.Decide(t.Context(), in); d.Effect != x.Decision.Effect || d.RuleID != x.Decision.RuleID {
		t.Errorf("Explain decision %+v differs from Decide %+v", x.Decision, d)
	}
	// With args unknown, conditions on args are unknown, and Decide fails
	// closed on the first one that could decide.
	in.ArgsKnown = false
	x = p.Explain(t.Context(), in)
	var conds []string
	for _, r := range x.Rules {
		conds = append(conds, r.Condition)
	}
	if strings.Join(conds, ",") != "true,unknown,unknown" || x.Decision.RuleID != "no-etc" || x.Decision.Layer != LayerError || !x.Disclosed {
		t.Errorf("Explain with args unknown: %v %+v", conds, x)
	}
}

// TestConcurrentDecide runs decisions with different inputs from many
// goroutines (run with -race): pooled state must not leak between them.
func TestConcurrentDecide(t *testing.T) {
	p := load(t, designPolicy, Options{})
	type tc struct {
		in   *Input
		want Effect
	}
	var cases []tc
	for i := range 16 {
		path := "/home/x"
		if i%3 == 0 {
			path = "/etc/x"
		}
		pr := alice
		pr.ID = "p" + string(rune('a'+i))
		in := call(pr, "mcp:fs.read_file", nil, map[string]any{"path": path})
		cases = append(cases, tc{in, p.Decide(t.Context(), in).Effect})
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 500 {
				c := cases[(i+g)%len(cases)]
				if d := p.Decide(t.Context(), c.in); d.Effect != c.want {
					t.Errorf("concurrent decision %s, want %s", d.Effect, c.want)
					return
				}
				p.Disclose(t.Context(), c.in)
				p.RateLimit("mcp:tool" + string(rune('a'+i%20)))
			}
		})
	}
	wg.Wait()
}

func TestIndexCacheBounded(t *testing.T) {
	p := load(t, designPolicy, Options{})
	for i := range maxIndexedTools + 10 {
		p.lookup("tool:" + strings.Repeat("x", i%7) + string(rune(i)))
	}
	n := 0
	p.index.Range(func(any, any) bool { n++; return true })
	if n > maxIndexedTools || int64(n) != p.indexed.Load() {
		t.Errorf("index has %d entries (counted %d), want at most %d", n, p.indexed.Load(), maxIndexedTools)
	}
	check(t, p.Decide(t.Context(), call(alice, "mcp:fs.read_file", nil, map[string]any{})),
		want{effect: EffectAllow, rule: "readers", layer: LayerRule})
}

// TestRateLimitsPerKinds: the first matching entry of each per kind applies,
// in document order, so kinds stack and a specific entry overrides a later
// catch-all of its kind.
func TestRateLimitsPerKinds(t *testing.T) {
	p := load(t, `ratelimits:
  - {tools: ["mcp:fs.write_*"], rate: 1/s, burst: 2}
  - {tools: ["*"], per: principal_tool, rate: 10/s, burst: 20}
  - {tools: ["mcp:fs.*"], per: tenant_tool, rate: 100/m, burst: 50}
  - {tools: ["mcp:*"], per: tool, rate: 5/s, burst: 5}
  - {tools: ["*"], per: principal, rate: 1000/h, burst: 100}
  - {tools: ["*"], per: tool, rate: 1/s, burst: 1}
`, Options{})
	got := p.RateLimits("mcp:fs.write_file")
	want := []RateLimitRule{
		{Index: 0, Per: PerPrincipalTool, Rate: 1, Burst: 2},
		{Index: 2, Per: PerTenantTool, Rate: 100.0 / 60, Burst: 50},
		{Index: 3, Per: PerTool, Rate: 5, Burst: 5},
		{Index: 4, Per: PerPrincipal, Rate: 1000.0 / 3600, Burst: 100},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("RateLimits = %+v, want %+v", got, want)
	}
	if l := got[1].Label(); l != "ratelimits[2]" {
		t.Errorf("Label %q", l)
	}
	got = p.RateLimits("http:x")
	if len(got) != 3 || got[0].Index != 1 || got[1].Index != 4 || got[2].Index != 5 {
		t.Errorf("RateLimits(http:x) = %+v", got)
	}
	if rate, burst, ok := p.RateLimit("mcp:fs.write_file"); !ok || rate != 1 || burst != 2 {
		t.Errorf("RateLimit = %v %v %v", rate, burst, ok)
	}
	if (*Program)(nil).RateLimits("x") != nil {
		t.Error("nil Program has rate limits")
	}
}

package policy

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

func TestDisclose(t *testing.T) {
	p := load(t, `rules:
  - {id: readers, effect: allow, tools: ["mcp:fs.*"], scopes: [fs:read]}
  - {id: no-etc, effect: deny, tools: ["mcp:fs.*"], when: 'has(args.path) && args.path.startsWith("/etc")'}
  - {id: no-evil, effect: deny, tools: ["*"], when: 'principal.tenant == "evil" || args.force == true'}
  - {id: interns, effect: deny, tools: ["mcp:fs.write*"], when: 'principal.attributes.team == "interns"'}
  - {id: pay, effect: require_approval, tools: ["http:pay"], when: 'args.amount > 100'}
  - {id: broken, effect: allow, tools: ["native:broken"], when: 'principal.attributes.missing == "x"'}
`, Options{})
	ctx := t.Context()
	list := func(pr Principal, id string, toolScopes ...string) bool {
		return p.Disclose(ctx, &Input{Principal: pr, Tool: Tool{ID: id, Scopes: toolScopes}, Args: map[string]any{"path": "/etc/x"}})
	}
	evil := Principal{ID: "e", Tenant: "evil", Scopes: []string{"fs:read"}}
	intern := Principal{ID: "i", Tenant: "acme", Scopes: []string{"fs:read"}, Attributes: map[string]string{"team": "interns"}}
	cases := []struct {
		name string
		got  bool
		want bool
	}{
		// A deny rule that depends on args does not hide (in.Args is ignored).
		{"args-dependent deny", list(alice, "mcp:fs.read_file"), true},
		// A deny rule that holds whatever the args hides.
		{"principal-only deny", list(evil, "mcp:fs.read_file"), false},
		{"attribute deny", list(intern, "mcp:fs.write_file"), false},
		{"attribute deny elsewhere", list(intern, "mcp:fs.read_file"), true},
		// A granting rule needs its scopes and the descriptor's.
		{"missing rule scope", list(Principal{ID: "n"}, "mcp:fs.read_file"), false},
		{"missing descriptor scope", list(alice, "mcp:fs.read_file", "fs:admin"), false},
		// No granting rule: default deny hides.
		{"no rule", list(alice, "mcp:gh.issue"), false},
		// A granting rule that fails for this principal at list time hides.
		{"failing grant", list(alice, "native:broken"), false},
	}
	for _, c := range cases {
		if c.got != c.want {
			t.Errorf("%s: Disclose = %v, want %v", c.name, c.got, c.want)
		}
	}
}

// TestDiscloseInvariant is the property of DESIGN.md decision 4 over random
// policies, principals, tools and arguments: disclosure is never narrower
// than enforcement. If Decide(args) is not deny, Disclose was true; so if
// Disclose is false, Decide denies for every args tried.
func TestDiscloseInvariant(t *testing.T) {
	rng := rand.New(rand.NewPCG(20260501, 64))
	const policies, perPolicy, argsPerCase = 400, 5, 12
	var cases, hidden, shown, nonDeny, errs, skipped int
	for range policies {
		src := randomPolicy(rng)
		p, err := Load("random.yaml", []byte(src), Options{})
		if err != nil {
			skipped++ // for example a condition that is always false
			continue
		}
		for range perPolicy {
			cases++
			in := &Input{Principal: randomPrincipal(rng), Tool: randomTool(rng)}
			disclosed := p.Disclose(t.Context(), in)
			if disclosed {
				shown++
			} else {
				hidden++
			}
			for i := range argsPerCase {
				in.Args, in.ArgsKnown = randomArgs(rng, i), true
				d := p.Decide(t.Context(), in)
				if d.Err != nil {
					errs++
				}
				if d.Effect == EffectDeny {
					continue
				}
				nonDeny++
				if !disclosed {
					t.Fatalf("Decide is %s (rule %q) but Disclose was false\npolicy:\n%s\nprincipal: %+v\ntool: %+v\nargs: %#v\nexplain: %+v",
						d.Effect, d.RuleID, src, in.Principal, in.Tool, in.Args, p.Explain(t.Context(), in))
				}
			}
		}
	}
	t.Logf("%d cases (%d policies skipped): %d shown, %d hidden; %d non-deny decisions, %d evaluation errors",
		cases, skipped, shown, hidden, nonDeny, errs)
	// The generator must exercise every branch, or the property is vacuous.
	if cases < 1500 || hidden < cases/10 || shown < cases/10 || nonDeny < cases || errs == 0 {
		t.Errorf("weak generator: %d cases, %d hidden, %d shown, %d non-deny, %d errors", cases, hidden, shown, nonDeny, errs)
	}
}

var (
	propTools  = []string{"mcp:fs.read", "mcp:fs.write", "mcp:gh.issue", "http:pay", "native:clock"}
	propGlobs  = []string{"*", "mcp:*", "mcp:fs.*", "*.write", "mcp:fs.read", "http:pay", "native:*"}
	propScopes = []string{"a", "b", "c"}
	argAtoms   = []string{
		`args.n > 5`, `args.n == 3`, `has(args.path) && args.path.startsWith("/etc")`,
		`args.flag == true`, `size(args) > 1`, `"x" in args.tags`, `args.s.size() > 2`,
		`has(args.n)`, `args.path == "/tmp"`, `args.tags.exists(t, t == "y")`,
	}
	otherAtoms = []string{
		`principal.tenant == "acme"`, `principal.attributes.level == "high"`, `has(principal.attributes.level)`,
		`"a" in principal.scopes`, `tool.safetyTier == "write"`, `tool.safetyTier in ["read", "write"]`,
		`principal.id.startsWith("bot")`, `tool.id.endsWith("read")`,
	}
)

func randomCond(rng *rand.Rand, depth int) string {
	atom := func() string {
		if rng.IntN(2) == 0 {
			return argAtoms[rng.IntN(len(argAtoms))]
		}
		return otherAtoms[rng.IntN(len(otherAtoms))]
	}
	if depth <= 0 {
		return atom()
	}
	switch rng.IntN(6) {
	case 0:
		return "(" + randomCond(rng, depth-1) + ") && (" + randomCond(rng, depth-1) + ")"
	case 1:
		return "(" + randomCond(rng, depth-1) + ") || (" + randomCond(rng, depth-1) + ")"
	case 2:
		return "!(" + randomCond(rng, depth-1) + ")"
	case 3:
		return "(" + atom() + ") ? (" + randomCond(rng, depth-1) + ") : (" + randomCond(rng, depth-1) + ")"
	default:
		return atom()
	}
}

func pickSome(rng *rand.Rand, from []string, maxN int) []string {
	var out []string
	for range rng.IntN(maxN + 1) {
		out = append(out, from[rng.IntN(len(from))])
	}
	return out
}

func quoteList(xs []string) string {
	q := make([]string, len(xs))
	for i, x := range xs {
		q[i] = fmt.Sprintf("%q", x)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

func randomPolicy(rng *rand.Rand) string {
	var b strings.Builder
	if rng.IntN(3) == 0 {
		b.WriteString("default: allow\n")
	}
	b.WriteString("rules:\n")
	effects := []Effect{EffectAllow, EffectAllow, EffectDeny, EffectRequireApproval}
	for i := range 1 + rng.IntN(5) {
		effect := effects[rng.IntN(len(effects))]
		fmt.Fprintf(&b, "  - id: r%d\n    effect: %s\n", i, effect)
		tools := pickSome(rng, propGlobs, 2)
		if len(tools) == 0 {
			tools = []string{"*"}
		}
		fmt.Fprintf(&b, "    tools: %s\n", quoteList(tools))
		if s := pickSome(rng, propScopes, 1); len(s) > 0 && effect == EffectAllow {
			fmt.Fprintf(&b, "    scopes: %s\n", quoteList(s))
		}
		if rng.IntN(5) > 0 {
			fmt.Fprintf(&b, "    when: '%s'\n", strings.ReplaceAll(randomCond(rng, 2), "'", "''"))
		}
	}
	return b.String()
}

func randomPrincipal(rng *rand.Rand) Principal {
	p := Principal{
		ID:     []string{"alice", "bot-1", ""}[rng.IntN(3)],
		Tenant: []string{"acme", "evil", ""}[rng.IntN(3)],
		Scopes: pickSome(rng, propScopes, 3),
	}
	if rng.IntN(3) > 0 {
		p.Attributes = map[string]string{"level": []string{"low", "high"}[rng.IntN(2)]}
	}
	return p
}

func randomTool(rng *rand.Rand) Tool {
	return Tool{
		ID:         propTools[rng.IntN(len(propTools))],
		SafetyTier: []string{"read", "write", ""}[rng.IntN(3)],
		Scopes:     pickSome(rng, propScopes, 1),
	}
}

// randomArgs returns argument maps of varied shapes and types; the first
// is empty.
func randomArgs(rng *rand.Rand, i int) map[string]any {
	if i == 0 {
		return map[string]any{}
	}
	values := map[string][]any{
		"n":    {float64(3), float64(9), "9", true},
		"path": {"/etc/passwd", "/tmp", 7.0},
		"flag": {true, false, "true"},
		"tags": {[]any{"x"}, []any{"y", "z"}, []any{}, "x"},
		"s":    {"abcd", "a", 1.0},
	}
	m := map[string]any{}
	for k, vs := range values {
		if rng.IntN(2) == 0 {
			m[k] = vs[rng.IntN(len(vs))]
		}
	}
	return m
}

// DiscloseArgs decides with the arguments known (a resource URI at
// resources/list time) and only call unknown: a rule conditioned on args
// filters per value, one on call still discloses, a deny on args hides.
func TestDiscloseArgs(t *testing.T) {
	p := load(t, `rules:
  - {id: docs, effect: allow, tools: ["mcp:srv/resource"], when: 'args.uri.startsWith("docs://")'}
  - {id: no-secret, effect: deny, tools: ["mcp:srv/resource"], when: 'args.uri.contains("secret")'}
  - {id: by-transport, effect: allow, tools: ["mcp:other/resource"], when: 'call.transport == "mcp" && args.uri != ""'}
  - {id: broken, effect: allow, tools: ["mcp:broken/resource"], when: 'args.missing == "x"'}
`, Options{})
	ctx := t.Context()
	show := func(id, uri string) bool {
		return p.DiscloseArgs(ctx, &Input{Principal: alice, Tool: Tool{ID: id}, Args: map[string]any{"uri": uri}})
	}
	cases := []struct {
		name string
		got  bool
		want bool
	}{
		{"granted uri", show("mcp:srv/resource", "docs://a"), true},
		{"other uri", show("mcp:srv/resource", "file:///etc/passwd"), false},
		{"denied uri", show("mcp:srv/resource", "docs://secret"), false},
		{"call unknown", show("mcp:other/resource", "x://y"), true},
		{"call unknown, args decide", show("mcp:other/resource", ""), false},
		{"failing condition", show("mcp:broken/resource", "x://y"), false},
		{"no rule", show("mcp:none/resource", "docs://a"), false},
	}
	for _, c := range cases {
		if c.got != c.want {
			t.Errorf("%s: DiscloseArgs = %v, want %v", c.name, c.got, c.want)
		}
	}
	// Name level (args unknown), the URI-conditioned resource is disclosed.
	if !p.Disclose(ctx, &Input{Principal: alice, Tool: Tool{ID: "mcp:srv/resource"}}) {
		t.Error("Disclose(mcp:srv/resource) = false, want true (some URI may be read)")
	}
	if p.DiscloseArgs(ctx, nil) || (*Program)(nil).DiscloseArgs(ctx, &Input{}) {
		t.Error("DiscloseArgs of a nil Input or Program = true")
	}
}

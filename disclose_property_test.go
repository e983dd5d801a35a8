package toolgate_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/toolgate/toolgate"
	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/catalog"
	"github.com/toolgate/toolgate/internal/glob"
	"github.com/toolgate/toolgate/policy"
)

// A condition from a small menu whose truth the oracle below can compute on
// its own: argDependent conditions are unknown at list time.
type cond struct {
	cel          string
	argDependent bool
	eval         func(p policy.Principal, tier string, args map[string]any) bool
	// atList, for an argDependent condition, is its list-time value:
	// known=false means it depends on the (unknown) arguments.
	atList func(p policy.Principal) (value, known bool)
}

func unknownAtList(policy.Principal) (bool, bool) { return false, false }

// holdsAtList is the condition's three-valued list-time result.
func (c cond) holdsAtList(p policy.Principal, tier string) (value, known bool) {
	if c.argDependent {
		return c.atList(p)
	}
	return c.eval(p, tier, nil), true
}

var conds = []cond{
	{cel: "", eval: func(policy.Principal, string, map[string]any) bool { return true }},
	{cel: `principal.tenant == "acme"`, eval: func(p policy.Principal, _ string, _ map[string]any) bool { return p.Tenant == "acme" }},
	{cel: `"admin" in principal.scopes`, eval: func(p policy.Principal, _ string, _ map[string]any) bool { return slices.Contains(p.Scopes, "admin") }},
	{cel: `tool.safetyTier == "read"`, eval: func(_ policy.Principal, tier string, _ map[string]any) bool { return tier == "read" }},
	{cel: `has(args.n) && args.n > 5`, argDependent: true, atList: unknownAtList, eval: func(_ policy.Principal, _ string, a map[string]any) bool {
		n, ok := a["n"].(float64)
		return ok && n > 5
	}},
	{cel: `has(args.path) && args.path.startsWith("/etc")`, argDependent: true, atList: unknownAtList, eval: func(_ policy.Principal, _ string, a map[string]any) bool {
		s, ok := a["path"].(string)
		return ok && strings.HasPrefix(s, "/etc")
	}},
	// call is unknown at list time too (the calls below are native, by core.system)
	{cel: `call.transport == "native"`, argDependent: true, atList: unknownAtList, eval: func(policy.Principal, string, map[string]any) bool { return true }},
	{cel: `call.agentId == "agent-1"`, argDependent: true, atList: unknownAtList, eval: func(policy.Principal, string, map[string]any) bool { return false }},
	{cel: `principal.tenant == "acme" && has(args.n)`, argDependent: true, atList: func(p policy.Principal) (bool, bool) {
		if p.Tenant != "acme" {
			return false, true // false && unknown is false
		}
		return false, false
	}, eval: func(p policy.Principal, _ string, a map[string]any) bool {
		_, ok := a["n"]
		return p.Tenant == "acme" && ok
	}},
}

type genRule struct {
	id     string
	effect policy.Effect
	tools  []string
	scopes []string
	cond   cond
}

type genTool struct {
	id     string
	tier   string
	scopes []string
}

var (
	toolNames  = []string{"native:fs.read", "native:fs.write", "native:fs.delete", "native:web.search", "native:web.fetch", "native:db.query", "native:db.drop", "native:clock.now"}
	globChoice = []string{"*", "native:fs.*", "native:web.*", "native:db.*", "native:*.read", "native:fs.read", "native:db.drop", "native:clock.now", "native:*e*"}
	scopeNames = []string{"fs:read", "fs:write", "web", "db", "admin"}
	argChoices = []string{`{}`, `{"n":3}`, `{"n":9}`, `{"path":"/etc/passwd"}`, `{"path":"/tmp/x","n":7}`, `{"n":"str"}`}
)

func pick[T any](r *rand.Rand, xs []T, max int) []T {
	n := r.IntN(max + 1)
	var out []T
	for i := 0; i < n; i++ {
		x := xs[r.IntN(len(xs))]
		if !slices.ContainsFunc(out, func(y T) bool { return fmt.Sprint(x) == fmt.Sprint(y) }) {
			out = append(out, x)
		}
	}
	return out
}

// nameLevelDeny is the oracle: would a call of tool by p be denied on the
// name alone, whatever its arguments? Conditions that depend on the
// arguments are unknown at list time; the oracle tries every true/false
// assignment of them and reports deny only if every assignment denies.
// Per assignment (deny-overrides): a matching deny rule denies; missing
// descriptor scopes deny; a matching allow rule whose scopes p holds
// grants; matching allow rules that all lack scopes deny; otherwise the
// default posture applies. require_approval rules never grant and never
// deny on the name alone.
func nameLevelDeny(rules []genRule, def policy.Effect, p policy.Principal, t genTool) bool {
	has := func(ss []string) bool {
		for _, s := range ss {
			if !slices.Contains(p.Scopes, s) {
				return false
			}
		}
		return true
	}
	var unknown []int // indexes of matching rules whose condition is unknown
	for i, r := range rules {
		if _, known := r.cond.holdsAtList(p, t.tier); matchAny(r.tools, t.id) && !known {
			unknown = append(unknown, i)
		}
	}
	for mask := 0; mask < 1<<len(unknown); mask++ {
		holds := func(i int) bool {
			if j := slices.Index(unknown, i); j >= 0 {
				return mask&(1<<j) != 0
			}
			v, _ := rules[i].cond.holdsAtList(p, t.tier)
			return v
		}
		if !decideOracle(rules, def, t, has, holds) {
			return false
		}
	}
	return true
}

// decideOracle reports whether one assignment of condition values denies.
func decideOracle(rules []genRule, def policy.Effect, t genTool, has func([]string) bool, holds func(int) bool) bool {
	for i, r := range rules {
		if r.effect == policy.EffectDeny && matchAny(r.tools, t.id) && holds(i) {
			return true
		}
	}
	if !has(t.scopes) {
		return true
	}
	granting := false
	for i, r := range rules {
		// Only allow rules grant (issue 13.7): a require_approval rule
		// turns a grant into require_approval, which is not deny.
		if r.effect != policy.EffectAllow || !matchAny(r.tools, t.id) || !holds(i) {
			continue
		}
		if has(r.scopes) {
			return false
		}
		granting = true
	}
	if granting {
		return true
	}
	return def != policy.EffectAllow
}

func matchAny(globs []string, id string) bool {
	for _, g := range globs {
		if glob.Match(g, id) {
			return true
		}
	}
	return false
}

func quoteList(xs []string) string {
	q := make([]string, len(xs))
	for i, x := range xs {
		q[i] = fmt.Sprintf("%q", x)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// TestDisclosureMatchesEnforcement is the property of acceptance point 3:
// over random policies, principals and tools, Disclose(p) is exactly the set
// of tools not denied on name alone, and Call never invokes a tool that
// Disclose did not show.
func TestDisclosureMatchesEnforcement(t *testing.T) {
	r := rand.New(rand.NewPCG(2026, 11))
	const cases = 300
	for c := 0; c < cases; c++ {
		// random tools
		var tools []genTool
		for _, id := range toolNames {
			if r.IntN(4) == 0 {
				continue
			}
			tools = append(tools, genTool{id: id, tier: []string{"pure", "read", "write"}[r.IntN(3)], scopes: pick(r, scopeNames[:4], 1)})
		}
		// random policy
		def := policy.EffectDeny
		if r.IntN(5) == 0 {
			def = policy.EffectAllow
		}
		var rules []genRule
		nRules := 1 + r.IntN(6)
		for i := 0; i < nRules; i++ {
			rules = append(rules, randomRule(r, fmt.Sprintf("r%d", i), []policy.Effect{policy.EffectAllow, policy.EffectAllow, policy.EffectDeny, policy.EffectRequireApproval}))
		}
		src := policySource(def, rules)
		gw, invoked := propGateway(t, fmt.Sprintf("case%d.yaml", c), src, tools)
		for pi := 0; pi < 3; pi++ {
			p := policy.Principal{ID: fmt.Sprintf("p%d", pi), Tenant: []string{"acme", "globex"}[r.IntN(2)], Scopes: pick(r, scopeNames, 3)}
			var disclosed []string
			for _, d := range gw.Disclose(context.Background(), p) {
				disclosed = append(disclosed, d.ToolID)
			}
			var want []string
			for _, tl := range tools {
				if !nameLevelDeny(rules, def, p, tl) {
					want = append(want, tl.id)
				}
			}
			slices.Sort(want)
			if !slices.Equal(disclosed, want) {
				t.Fatalf("case %d principal %+v: Disclose = %v, oracle = %v\npolicy:\n%s", c, p, disclosed, want, src)
			}
			for _, tl := range tools {
				for _, a := range argChoices {
					before := invoked.n(tl.id)
					res, err := gw.Call(context.Background(), toolgate.Call{Tool: tl.id, Args: json.RawMessage(a), Principal: p})
					if err != nil {
						t.Fatalf("case %d: call %s: %v", c, tl.id, err)
					}
					ran := invoked.n(tl.id) > before
					if !slices.Contains(disclosed, tl.id) {
						if ran || res.Status != audit.StatusForbidden || !res.Hidden {
							t.Fatalf("case %d: undisclosed %s with %s: ran=%v result %+v\npolicy:\n%s", c, tl.id, a, ran, res, src)
						}
					}
					if ran != (res.Status == audit.StatusOK) {
						t.Fatalf("case %d: %s ran=%v but status %s", c, tl.id, ran, res.Status)
					}
				}
			}
		}
		gw.Close()
	}
}

// randomTools picks a random subset of toolNames with random tiers and
// descriptor scopes.
func randomTools(r *rand.Rand) []genTool {
	var tools []genTool
	for _, id := range toolNames {
		if r.IntN(4) == 0 {
			continue
		}
		tools = append(tools, genTool{id: id, tier: []string{"pure", "read", "write"}[r.IntN(3)], scopes: pick(r, scopeNames[:4], 1)})
	}
	return tools
}

// randomRule is a rule with one of effects, random tools globs and a
// condition from the menu; only an allow rule gets scopes (they qualify a
// grant, and only allow rules grant).
func randomRule(r *rand.Rand, id string, effects []policy.Effect) genRule {
	gr := genRule{
		id:     id,
		effect: effects[r.IntN(len(effects))],
		tools:  append(pick(r, globChoice, 1), globChoice[r.IntN(len(globChoice))]),
		scopes: pick(r, scopeNames, 1),
		cond:   conds[r.IntN(len(conds))],
	}
	if gr.effect != policy.EffectAllow {
		gr.scopes = nil
	}
	return gr
}

// policySource renders a policy document.
func policySource(def policy.Effect, rules []genRule) string {
	var src strings.Builder
	fmt.Fprintf(&src, "default: %s\nrules:\n", def)
	for _, gr := range rules {
		fmt.Fprintf(&src, "  - id: %s\n    effect: %s\n    tools: %s\n", gr.id, gr.effect, quoteList(gr.tools))
		if len(gr.scopes) > 0 {
			fmt.Fprintf(&src, "    scopes: %s\n", quoteList(gr.scopes))
		}
		if gr.cond.cel != "" {
			fmt.Fprintf(&src, "    when: '%s'\n", gr.cond.cel)
		}
	}
	return src.String()
}

// invocations counts the runs of each native tool; safe for concurrent use.
type invocations struct {
	mu sync.Mutex
	m  map[string]int
}

func (iv *invocations) n(id string) int {
	iv.mu.Lock()
	defer iv.mu.Unlock()
	return iv.m[id]
}

// propGateway is an embedded gateway under the policy src with tools
// registered as counting native tools.
func propGateway(t *testing.T, file, src string, tools []genTool) (*toolgate.Gateway, *invocations) {
	t.Helper()
	spec, err := policy.Parse(file, []byte(src))
	if err != nil {
		t.Fatalf("%s: %v\n%s", file, err, src)
	}
	prog, err := policy.Compile(spec, policy.Options{})
	if err != nil {
		t.Fatalf("%s: %v\n%s", file, err, src)
	}
	gw, err := toolgate.New(toolgate.Options{Policy: prog})
	if err != nil {
		t.Fatal(err)
	}
	iv := &invocations{m: map[string]int{}}
	for _, tl := range tools {
		id := tl.id
		d := catalog.ToolDescriptor{ToolID: id, Source: catalog.SourceHostExtension, SafetyTier: catalog.SafetyTier(tl.tier)}
		if len(tl.scopes) > 0 {
			d.Auth = &catalog.Auth{Scopes: tl.scopes}
		}
		if err := gw.RegisterNative(d, func(context.Context, json.RawMessage) (any, error) {
			iv.mu.Lock()
			iv.m[id]++
			iv.mu.Unlock()
			return "ok", nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	return gw, iv
}

// strictness orders effects: allow < require_approval < deny.
func strictness(e policy.Effect) int {
	switch e {
	case policy.EffectAllow:
		return 0
	case policy.EffectRequireApproval:
		return 1
	}
	return 2
}

// TestNonAllowRuleNeverWidens is the monotonicity property of issue 13.7:
// over random policies, adding one random deny or require_approval rule
// (any tools, any condition, anywhere in the list) never widens access.
// For every principal, tool and arguments the decision through the gateway
// is at least as strict as before (allow < require_approval < deny), a
// tool that did not run before does not run now, and the tools disclosed
// are a subset of those disclosed before.
func TestNonAllowRuleNeverWidens(t *testing.T) {
	r := rand.New(rand.NewPCG(2026, 13))
	const cases = 60
	var widened, narrowed, approvals int
	for c := 0; c < cases; c++ {
		tools := randomTools(r)
		def := policy.EffectDeny
		if r.IntN(4) == 0 {
			def = policy.EffectAllow
		}
		var rules []genRule
		for i := range r.IntN(5) {
			rules = append(rules, randomRule(r, fmt.Sprintf("r%d", i), []policy.Effect{policy.EffectAllow, policy.EffectAllow, policy.EffectDeny, policy.EffectRequireApproval}))
		}
		extra := randomRule(r, "extra", []policy.Effect{policy.EffectDeny, policy.EffectRequireApproval})
		at := r.IntN(len(rules) + 1)
		more := slices.Insert(slices.Clone(rules), at, extra)
		before, after := policySource(def, rules), policySource(def, more)
		gwBefore, ivBefore := propGateway(t, fmt.Sprintf("before%d.yaml", c), before, tools)
		gwAfter, ivAfter := propGateway(t, fmt.Sprintf("after%d.yaml", c), after, tools)
		for pi := 0; pi < 3; pi++ {
			p := policy.Principal{ID: fmt.Sprintf("p%d", pi), Tenant: []string{"acme", "globex"}[r.IntN(2)], Scopes: pick(r, scopeNames, 3)}
			var shownBefore []string
			for _, d := range gwBefore.Disclose(context.Background(), p) {
				shownBefore = append(shownBefore, d.ToolID)
			}
			for _, d := range gwAfter.Disclose(context.Background(), p) {
				if !slices.Contains(shownBefore, d.ToolID) {
					t.Fatalf("case %d principal %+v: adding\n%s\nshows %s, hidden before\npolicy before:\n%s", c, p, policySource(def, []genRule{extra}), d.ToolID, before)
				}
			}
			for _, tl := range tools {
				for _, a := range argChoices {
					nb, na := ivBefore.n(tl.id), ivAfter.n(tl.id)
					rb, err := gwBefore.Call(context.Background(), toolgate.Call{Tool: tl.id, Args: json.RawMessage(a), Principal: p})
					if err != nil {
						t.Fatal(err)
					}
					ra, err := gwAfter.Call(context.Background(), toolgate.Call{Tool: tl.id, Args: json.RawMessage(a), Principal: p})
					if err != nil {
						t.Fatal(err)
					}
					ranBefore, ranAfter := ivBefore.n(tl.id) > nb, ivAfter.n(tl.id) > na
					eb, ea := rb.Decision.Effect, ra.Decision.Effect
					if strictness(ea) < strictness(eb) || (ranAfter && !ranBefore) {
						widened++
						t.Fatalf("case %d principal %+v tool %s args %s: adding\n%s\nwidens %s (ran %v) to %s (ran %v, rule %q)\npolicy before:\n%s",
							c, p, tl.id, a, policySource(def, []genRule{extra}), eb, ranBefore, ea, ranAfter, ra.Decision.RuleID, before)
					}
					if strictness(ea) > strictness(eb) {
						narrowed++
					}
					if ea == policy.EffectRequireApproval {
						approvals++
					}
				}
			}
		}
		gwBefore.Close()
		gwAfter.Close()
	}
	// The generator must make the added rule matter, or the property is
	// vacuous.
	if narrowed < cases || approvals < cases/2 {
		t.Errorf("weak generator: %d narrowed decisions, %d require_approval decisions over %d cases", narrowed, approvals, cases)
	}
	t.Logf("%d cases: %d decisions narrowed, %d require_approval", cases, narrowed, approvals)
}

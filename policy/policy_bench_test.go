package policy

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// benchTools are ~20 toolIds over five servers.
var benchTools = []string{
	"mcp:fs.read_file", "mcp:fs.write_file", "mcp:fs.list_dir", "mcp:fs.delete_file", "mcp:fs.move_file",
	"mcp:gh.create_issue", "mcp:gh.list_issues", "mcp:gh.merge_pr", "mcp:gh.comment",
	"mcp:web.fetch", "mcp:web.search",
	"mcp:db.query", "mcp:db.exec", "mcp:db.schema",
	"http:weather", "http:translate", "http:payments",
	"native:clock.now", "native:shell.exec", "native:mail.send",
}

// benchConditions are templates of conditions on args and principal; %02d
// is the rule number, so every rule's condition text is distinct (no two
// rules share an evaluation). None holds for benchInput, so every
// conditional deny and approval rule of the tool is evaluated.
var benchConditions = []string{
	`has(args.path) && args.path.startsWith("/etc/%02d")`,
	`principal.tenant == "evil-%02d"`,
	`has(args.content) && size(args.content) > 10000 + %d`,
	`principal.attributes.team == "interns-%02d"`,
	`has(args.mode) && args.mode > 511 + %d`,
	`"banned-%02d" in principal.scopes`,
	`has(args.path) && args.path.contains("../%02d")`,
	`principal.id.startsWith("bot-%02d") && principal.tenant != "acme"`,
	`has(args.recursive) && args.recursive == true && %d > 0`,
	`has(args.url) && !args.url.startsWith("https://%02d")`,
}

// benchSpec is a 50-rule policy over benchTools: 15 deny, 10
// require_approval and 25 allow rules; 30 rules have a CEL condition
// (distinct texts); a third of the rules also match by a wider glob.
func benchSpec() Spec {
	globs := []string{"mcp:fs.*", "mcp:gh.*", "mcp:web.*", "mcp:db.*", "http:*", "native:*", "*", "mcp:*.write_*", "mcp:fs.read_*"}
	var rules []RuleSpec
	for i := range 50 {
		var effect Effect
		switch i % 10 {
		case 0, 3, 6:
			effect = EffectDeny
		case 1, 8:
			effect = EffectRequireApproval
		default:
			effect = EffectAllow
		}
		tools := []string{benchTools[i%len(benchTools)]}
		if i%3 == 0 {
			tools = append(tools, globs[i%len(globs)])
		}
		r := RuleSpec{ID: fmt.Sprintf("r%02d", i), Effect: effect, Tools: tools}
		if i%5 == 0 || i%5 == 1 || i%5 == 3 {
			r.When = fmt.Sprintf(benchConditions[i%len(benchConditions)], i)
		}
		if effect == EffectAllow && i%4 == 0 {
			r.Scopes = []string{"fs:write"}
		}
		rules = append(rules, r)
	}
	return Spec{Default: EffectDeny, Rules: rules}
}

func benchInput() *Input {
	return &Input{
		Principal: Principal{ID: "alice", Tenant: "acme", Scopes: []string{"fs:read", "fs:write"}, Attributes: map[string]string{"team": "infra"}},
		Tool:      Tool{ID: "mcp:fs.write_file", Source: "mcp", SafetyTier: "write", Scopes: []string{"fs:write"}},
		Args:      map[string]any{"path": "/home/alice/notes.txt", "content": "hello world", "mode": float64(420)},
		ArgsKnown: true,
		Call:      Call{Transport: "mcp", CallID: "c1"},
	}
}

func mustCompile(tb testing.TB, spec Spec, opts Options) *Program {
	tb.Helper()
	p, err := Compile(spec, opts)
	if err != nil {
		tb.Fatalf("Compile: %v", err)
	}
	return p
}

func BenchmarkDecide50Rules(b *testing.B) {
	p := mustCompile(b, benchSpec(), Options{})
	in := benchInput()
	ctx := context.Background()
	ti := p.lookup(in.Tool.ID)
	conds := 0
	for _, r := range ti.all {
		if r.full != nil {
			conds++
		}
	}
	d := p.Decide(ctx, in)
	if d.Err != nil || d.Effect == "" {
		b.Fatalf("unexpected decision %+v", d)
	}
	b.Logf("policy: %d rules, %d shared conditions; tool %s: %d matching rules (%d deny, %d approval, %d allow, %d conditional); decision %s by %q",
		len(p.rules), p.shared, in.Tool.ID, len(ti.all), len(ti.deny), len(ti.approval), len(ti.allow), conds, d.Effect, d.RuleID)
	b.ReportAllocs()
	c0, n := processCPU(), 0
	for b.Loop() {
		p.Decide(ctx, in)
		n++
	}
	reportCPU(b, c0, n)
}

// reportCPU adds the process CPU time per operation since c0 (user +
// system, GC included) as "cpu-ns/op".
func reportCPU(b *testing.B, c0 time.Duration, n int) {
	if c := processCPU() - c0; c0 > 0 && c > 0 && n > 0 {
		b.ReportMetric(float64(c.Nanoseconds())/float64(n), "cpu-ns/op")
	}
}

// BenchmarkDecide50RulesAllTools decides once for each of the 20 tools per
// iteration (ns/op covers 20 decisions; see ns/decision).
func BenchmarkDecide50RulesAllTools(b *testing.B) {
	p := mustCompile(b, benchSpec(), Options{})
	ctx := context.Background()
	ins := make([]*Input, len(benchTools))
	for i, id := range benchTools {
		ins[i] = benchInput()
		ins[i].Tool.ID = id
	}
	b.ReportAllocs()
	start, n := time.Now(), 0
	for b.Loop() {
		for _, in := range ins {
			p.Decide(ctx, in)
		}
		n++
	}
	b.ReportMetric(float64(time.Since(start).Nanoseconds())/float64(n*len(ins)), "ns/decision")
}

func BenchmarkDecide50RulesParallel(b *testing.B) {
	p := mustCompile(b, benchSpec(), Options{})
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		in := benchInput()
		for pb.Next() {
			p.Decide(ctx, in)
		}
	})
}

func BenchmarkDisclose(b *testing.B) {
	p := mustCompile(b, benchSpec(), Options{})
	in := benchInput()
	in.Args, in.ArgsKnown = nil, false
	ctx := context.Background()
	if !p.Disclose(ctx, in) {
		b.Fatal("tool not disclosed")
	}
	b.ReportAllocs()
	c0, n := processCPU(), 0
	for b.Loop() {
		p.Disclose(ctx, in)
		n++
	}
	reportCPU(b, c0, n)
}

// BenchmarkDiscloseAll lists the 20 tools for one principal.
func BenchmarkDiscloseAll(b *testing.B) {
	p := mustCompile(b, benchSpec(), Options{KnownTools: benchTools})
	in := benchInput()
	in.Args, in.ArgsKnown = nil, false
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		for _, id := range benchTools {
			in.Tool.ID = id
			p.Disclose(ctx, in)
		}
	}
}

func BenchmarkCompile50Rules(b *testing.B) {
	spec := benchSpec()
	b.ReportAllocs()
	for b.Loop() {
		mustCompile(b, spec, Options{})
	}
}

package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/policy"
)

const whoCanConfig = `
auth:
  api_keys:
    - {id: reader, key_sha256: "%s", tenant: acme, scopes: [fs:read]}
    - {id: writer, key_sha256: "%s", tenant: acme, scopes: [fs:read, fs:write]}
    - {id: nobody, key_sha256: "%s", tenant: acme}
    - {id: auditor, key_sha256: "%s", tenant: acme, scopes: [audit:read]}
  jwt: {issuer: "https://issuer.example", audience: toolgate, jwks_url: "https://issuer.example/jwks", scopes_claim: scp}
servers:
  - {name: fs, url: "http://127.0.0.1:9/mcp"}
tools:
  - {match: "mcp:fs.write_file", safety_tier: write, scopes: [fs:write]}
  - {match: "mcp:fs.read_file", safety_tier: read}
policy:
  default: deny
  rules:
    - {id: readers, effect: allow, tools: ["mcp:fs.read_file", "mcp:fs.list"], scopes: [fs:read]}
    - {id: writers, effect: allow, tools: ["mcp:fs.write_file"]}
    - {id: audit-log, effect: allow, tools: ["mcp:fs.read_file"], scopes: [audit:read], when: 'has(args.path) && args.path.startsWith("/var/log/")'}
    - {id: no-etc, effect: deny, tools: ["mcp:fs.*"], when: 'has(args.path) && args.path.startsWith("/etc/")'}
    - {id: no-list, effect: deny, tools: ["mcp:fs.list"]}
    - {id: clock, effect: allow, tools: ["native:clock.now"]}
    - {id: big-writes, effect: require_approval, tools: ["mcp:fs.write_file"], when: 'has(args.content) && size(args.content) > 10'}
`

func writeWhoCanConfig(t *testing.T) string {
	t.Helper()
	h := strings.Repeat("a", 64)
	body := strings.Replace(whoCanConfig, "%s", h, 1)
	body = strings.Replace(body, "%s", strings.Repeat("b", 64), 1)
	body = strings.Replace(body, "%s", strings.Repeat("c", 64), 1)
	body = strings.Replace(body, "%s", strings.Repeat("d", 64), 1)
	f := filepath.Join(t.TempDir(), "toolgate.yaml")
	if err := os.WriteFile(f, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

func whoCan(t *testing.T, args ...string) whoCanTool {
	t.Helper()
	code, out, errOut := run(t, "", append([]string{"policy", "who-can"}, args...)...)
	if code != ExitOK {
		t.Fatalf("who-can %v: exit %d: %s", args, code, errOut)
	}
	var w whoCanTool
	if err := json.Unmarshal([]byte(out), &w); err != nil {
		t.Fatalf("who-can output: %v\n%s", err, out)
	}
	return w
}

func explainCLI(t *testing.T, file, principal string, scopes []string, tool, args string) explainOutput {
	t.Helper()
	a := []string{"policy", "explain", "--config", file, "--principal", principal, "--tenant", "acme", "--tool", tool}
	if len(scopes) > 0 {
		a = append(a, "--scopes", strings.Join(scopes, ","))
	}
	if args != "" {
		a = append(a, "--args", args)
	}
	code, out, errOut := run(t, "", a...)
	if code != ExitOK {
		t.Fatalf("explain: exit %d: %s", code, errOut)
	}
	var x explainOutput
	if err := json.Unmarshal([]byte(out), &x); err != nil {
		t.Fatal(err)
	}
	return x
}

// who-can agrees with policy explain for every (principal, tool) pair and
// every argument sample; without --args a decision that depends on the
// arguments is "conditional", and every other one is what explain gives
// for each sample.
func TestWhoCanAgreesWithExplain(t *testing.T) {
	file := writeWhoCanConfig(t)
	scopes := map[string][]string{"reader": {"fs:read"}, "writer": {"fs:read", "fs:write"}, "nobody": nil, "auditor": {"audit:read"}}
	tools := []string{"mcp:fs.read_file", "mcp:fs.write_file", "mcp:fs.list", "mcp:fs.delete", "native:clock.now"}
	samples := []string{`{}`, `{"path":"/etc/passwd"}`, `{"path":"/var/log/syslog"}`, `{"path":"/srv/a","content":"0123456789abc"}`, `{"path":"/srv/a","content":"hi"}`}
	seen := map[policy.Effect]bool{}
	for _, tool := range tools {
		unknown := whoCan(t, "--config", file, "--tool", tool)
		if len(unknown.Access) != 4 {
			t.Fatalf("%s: %d principals, want the 4 configured", tool, len(unknown.Access))
		}
		byArgs := map[string]whoCanTool{}
		for _, a := range samples {
			byArgs[a] = whoCan(t, "--config", file, "--tool", tool, "--args", a)
		}
		for i, acc := range unknown.Access {
			effects := map[policy.Effect]bool{}
			for _, a := range samples {
				x := explainCLI(t, file, acc.Principal, scopes[acc.Principal], tool, a)
				got := byArgs[a].Access[i]
				if got.Principal != acc.Principal || got.Effect != x.Decision.Effect || got.RuleID != x.Decision.RuleID || got.Shown != x.Disclosed {
					t.Errorf("%s %s %s: who-can %s/%s shown=%v, explain %s/%s disclosed=%v", acc.Principal, tool, a,
						got.Effect, got.RuleID, got.Shown, x.Decision.Effect, x.Decision.RuleID, x.Disclosed)
				}
				if got.RuleID != "" && !strings.Contains(got.Pos, "toolgate.yaml:") {
					t.Errorf("%s %s: rule %s without file:line (%q)", acc.Principal, tool, got.RuleID, got.Pos)
				}
				if acc.Shown != x.Disclosed {
					t.Errorf("%s %s: shown %v without args, explain disclosed %v", acc.Principal, tool, acc.Shown, x.Disclosed)
				}
				effects[x.Decision.Effect] = true
			}
			seen[acc.Effect] = true
			switch acc.Effect {
			case policy.EffectConditional:
				if len(effects) < 2 || len(acc.Conditions) == 0 || !acc.Shown {
					t.Errorf("%s %s: conditional, but the samples gave %v (conditions %v)", acc.Principal, tool, effects, acc.Conditions)
				}
			default:
				if len(effects) != 1 || !effects[acc.Effect] {
					t.Errorf("%s %s: %s without args, but the samples gave %v", acc.Principal, tool, acc.Effect, effects)
				}
			}
		}
	}
	for _, e := range []policy.Effect{policy.EffectAllow, policy.EffectDeny, policy.EffectConditional} {
		if !seen[e] {
			t.Errorf("no (principal, tool) pair was %s: the policy does not exercise it", e)
		}
	}
	// Approval with known args.
	w := whoCan(t, "--config", file, "--tool", "mcp:fs.write_file", "--args", `{"path":"/srv/a","content":"0123456789abc"}`)
	if a := w.Access[1]; a.Principal != "writer" || a.Effect != policy.EffectRequireApproval || a.RuleID != "big-writes" {
		t.Errorf("writer big write = %+v, want require_approval by big-writes", a)
	}
}

func TestWhoCanCases(t *testing.T) {
	file := writeWhoCanConfig(t)
	w := whoCan(t, "--config", file, "--tool", "mcp:fs.read_file")
	want := map[string]string{"reader": "conditional", "writer": "conditional", "nobody": "deny", "auditor": "conditional"}
	for _, a := range w.Access {
		if string(a.Effect) != want[a.Principal] {
			t.Errorf("%s: %s, want %s (%+v)", a.Principal, a.Effect, want[a.Principal], a)
		}
	}
	if a := w.Access[2]; a.Shown || a.Layer != policy.LayerScopes || a.RuleID != "readers" || a.MissingScopes[0] != "fs:read" {
		t.Errorf("nobody = %+v; want hidden, scopes, rule readers, missing fs:read", a)
	}
	// mcp:fs.list is denied to everyone by an unconditional rule.
	for _, a := range whoCan(t, "--config", file, "--tool", "mcp:fs.list").Access {
		if a.Effect != policy.EffectDeny || a.Shown || a.RuleID != "no-list" {
			t.Errorf("list %s = %+v; want deny by no-list", a.Principal, a)
		}
	}
	// JWT principals: the grant over claims.
	if j := w.JWT; j == nil || j.ScopesClaim != "scp" || len(j.Grants) != 2 || j.Grants[0].RuleID != "readers" ||
		strings.Join(j.Grants[0].Scopes, ",") != "fs:read" || j.Grants[1].RuleID != "audit-log" || j.Grants[1].When == "" ||
		len(j.Restrictions) != 1 || j.Restrictions[0].RuleID != "no-etc" {
		t.Errorf("jwt grant = %+v", w.JWT)
	}
	ww := whoCan(t, "--config", file, "--tool", "mcp:fs.write_file")
	if g := ww.JWT.Grants; len(g) != 1 || strings.Join(g[0].Scopes, ",") != "fs:write" {
		t.Errorf("write_file grants = %+v; want the descriptor scope fs:write", g)
	}

	// Inverse: what writer may call.
	code, out, errOut := run(t, "", "policy", "who-can", "--config", file, "--principal", "writer")
	if code != ExitOK {
		t.Fatalf("--principal: exit %d %s", code, errOut)
	}
	var inv whoCanPrincipal
	if err := json.Unmarshal([]byte(out), &inv); err != nil {
		t.Fatal(err)
	}
	got := map[string]policy.Effect{}
	for _, r := range inv.Tools {
		got[r.ToolID] = r.Effect
	}
	if got["mcp:fs.read_file"] != policy.EffectConditional || got["mcp:fs.write_file"] != policy.EffectConditional ||
		got["mcp:fs.list"] != policy.EffectDeny || got["native:clock.now"] != policy.EffectAllow || len(inv.Unlisted) != 1 || inv.Unlisted[0] != "mcp:fs.*" {
		t.Errorf("writer's tools = %v, unlisted %v", got, inv.Unlisted)
	}

	for _, bad := range [][]string{{}, {"--tool", "mcp:fs.x", "--principal", "writer"}, {"--principal", "ghost"}, {"--tool", "mcp:nope.x"}, {"--tool", "mcp:fs.x", "--args", "[1]"}} {
		if code, _, errOut := run(t, "", append([]string{"policy", "who-can", "--config", file}, bad...)...); code != ExitUsage || errOut == "" {
			t.Errorf("who-can %v: exit %d, stderr %q; want usage error", bad, code, errOut)
		}
	}
}

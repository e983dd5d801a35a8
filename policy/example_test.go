package policy_test

import (
	"context"
	"fmt"

	"github.com/toolgate/toolgate/policy"
)

func Example() {
	src := []byte(`default: deny
rules:
  - {id: readers, effect: allow, tools: ["mcp:fs.*"], scopes: [fs:read], reason: "readers may read"}
  - {id: no-etc, effect: deny, tools: ["mcp:fs.*"], when: 'has(args.path) && args.path.startsWith("/etc")'}
  - {id: big-writes, effect: require_approval, tools: ["mcp:fs.write_file"], when: 'size(args.content) > 10000'}
ratelimits:
  - {tools: ["*"], per: principal_tool, rate: 10/s, burst: 20}
`)
	prg, err := policy.Load("policy.yaml", src, policy.Options{Version: "v1"})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := context.Background()
	alice := policy.Principal{ID: "alice", Tenant: "acme", Scopes: []string{"fs:read"}}
	tool := policy.Tool{ID: "mcp:fs.read_file", SafetyTier: "read", Scopes: []string{"fs:read"}}

	// tools/list: the arguments are not known yet.
	fmt.Println("disclosed:", prg.Disclose(ctx, &policy.Input{Principal: alice, Tool: tool}))

	for _, path := range []string{"/home/alice/notes.txt", "/etc/shadow"} {
		d := prg.Decide(ctx, &policy.Input{Principal: alice, Tool: tool, Args: map[string]any{"path": path}, ArgsKnown: true})
		fmt.Printf("%s: %s by %q (%s layer): %s\n", path, d.Effect, d.RuleID, d.Layer, d.Reason)
	}
	rate, burst, _ := prg.RateLimit(tool.ID)
	fmt.Printf("rate limit: %g/s, burst %d\n", rate, burst)

	_, err = policy.Load("policy.yaml", []byte(`rules:
  - {id: typo, effect: allow, tools: ["*"], when: 'principal.tennant == "acme"'}
`), policy.Options{})
	fmt.Println(err)
	// Output:
	// disclosed: true
	// /home/alice/notes.txt: allow by "readers" (rule layer): readers may read
	// /etc/shadow: deny by "no-etc" (rule layer): denied by rule "no-etc"
	// rate limit: 10/s, burst 20
	// policy.yaml:2:61: rule "typo": when: undefined field 'tennant'
}

package toolgate_test

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/toolgate/toolgate"
	"github.com/toolgate/toolgate/catalog"
	"github.com/toolgate/toolgate/policy"
)

// Embed the gate: compile a policy, register a native tool, then ask what a
// principal may see and call it.
func Example() {
	prog, err := policy.Load("policy.yaml", []byte(`
default: deny
rules:
  - {id: readers, effect: allow, tools: ["native:notes.*"], scopes: [notes:read]}
  - {id: no-private, effect: deny, tools: ["native:notes.*"], when: 'has(args.id) && args.id.startsWith("private/")'}
`), policy.Options{})
	if err != nil {
		panic(err)
	}
	gw, err := toolgate.New(toolgate.Options{Policy: prog})
	if err != nil {
		panic(err)
	}
	defer gw.Close()
	err = gw.RegisterNative(catalog.ToolDescriptor{ToolID: "native:notes.get", Source: catalog.SourceHostExtension, SafetyTier: catalog.TierRead},
		func(ctx context.Context, args json.RawMessage) (any, error) {
			var in struct{ ID string }
			json.Unmarshal(args, &in)
			return map[string]string{"id": in.ID, "text": "buy milk"}, nil
		})
	if err != nil {
		panic(err)
	}

	ctx := context.Background()
	alice := toolgate.Principal{ID: "alice", Tenant: "acme", Scopes: []string{"notes:read"}}
	bob := toolgate.Principal{ID: "bob", Tenant: "acme"}
	fmt.Println("alice sees", len(gw.Disclose(ctx, alice)), "tool(s); bob sees", len(gw.Disclose(ctx, bob)))

	for _, c := range []toolgate.Call{
		{Tool: "notes.get", Args: json.RawMessage(`{"id":"shopping"}`), Principal: alice},
		{Tool: "notes.get", Args: json.RawMessage(`{"id":"private/diary"}`), Principal: alice},
		{Tool: "notes.get", Args: json.RawMessage(`{"id":"shopping"}`), Principal: bob},
	} {
		res, err := gw.Call(ctx, c)
		if err != nil {
			panic(err)
		}
		if res.Err != nil {
			fmt.Printf("%s: %s %s (rule %s, hidden %v)\n", c.Principal.ID, res.Status, res.Err.Code, res.Decision.RuleID, res.Hidden)
			continue
		}
		fmt.Printf("%s: %s %s\n", c.Principal.ID, res.Status, res.Output)
	}
	// Output:
	// alice sees 1 tool(s); bob sees 0
	// alice: ok {"id":"shopping","text":"buy milk"}
	// alice: forbidden forbidden (rule no-private, hidden false)
	// bob: forbidden forbidden (rule readers, hidden true)
}

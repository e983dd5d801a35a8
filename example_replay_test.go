package toolgate_test

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/toolgate/toolgate"
	"github.com/toolgate/toolgate/catalog"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/store/memstore"
)

// Record a run and replay it: the non-deterministic tool is answered from
// the recording (it runs once, not twice), and a replay with other
// arguments diverges.
func Example_recordAndReplay() {
	prog, err := policy.Load("policy.yaml", []byte(`
default: deny
rules:
  - {id: all, effect: allow, tools: ["native:dice.*"]}
`), policy.Options{})
	if err != nil {
		panic(err)
	}
	st, err := memstore.New(memstore.Options{})
	if err != nil {
		panic(err)
	}
	defer st.Close()
	gw, err := toolgate.New(toolgate.Options{Policy: prog, Recordings: st, RecordScope: "toolgate:record"})
	if err != nil {
		panic(err)
	}
	defer gw.Close()
	rolls := 0
	err = gw.RegisterNative(catalog.ToolDescriptor{ToolID: "native:dice.roll", Source: catalog.SourceHostExtension,
		SafetyTier: catalog.TierRead, ReplayPolicy: catalog.ReplayNonDeterministic},
		func(context.Context, json.RawMessage) (any, error) {
			rolls++
			return map[string]int{"face": 1 + rolls*3%6}, nil
		})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	alice := toolgate.Principal{ID: "alice", Tenant: "acme", Scopes: []string{"toolgate:record"}}
	rec, _ := gw.Call(ctx, toolgate.Call{Tool: "dice.roll", Args: json.RawMessage(`{"sides":6}`), Principal: alice, RunID: "run-1", Record: true})
	rep, _ := gw.Call(ctx, toolgate.Call{Tool: "dice.roll", Args: json.RawMessage(`{"sides":6}`), Principal: alice, RunID: "run-2", ReplayOf: "run-1"})
	div, _ := gw.Call(ctx, toolgate.Call{Tool: "dice.roll", Args: json.RawMessage(`{"sides":20}`), Principal: alice, RunID: "run-3", ReplayOf: "run-1"})
	fmt.Println("recorded", string(rec.Output), "replayed", string(rep.Output), "rolls", rolls)
	fmt.Println("other arguments:", div.Err.Code, div.Err.Details["differs"])
	// Output:
	// recorded {"face":4} replayed {"face":4} rolls 1
	// other arguments: replay_divergence argsHash
}

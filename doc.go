// Package toolgate puts one auditable, least-privilege gate in front of every
// tool call an AI agent makes: MCP servers, HTTP tools and native Go
// functions.
//
// Every call runs one pipeline: resolve the tool to its canonical toolId →
// decide (scopes, allow/deny rules, CEL argument conditions, approval) →
// rate limit → hooks → invoke → content-free OpenWOP audit events
// (agent.toolCalled / agent.toolReturned with argsHash) → a signed,
// hash-chained receipt. The same decision filters what each principal is
// shown (Disclose), so disclosure and enforcement cannot disagree.
//
// # Quick start
//
//	prog, _ := policy.Compile(spec, policy.Options{})          // YAML rules + CEL, compiled once
//	gw, _ := toolgate.New(toolgate.Options{Policy: prog})
//	defer gw.Close()
//	gw.RegisterNative(catalog.ToolDescriptor{ToolID: "native:clock.now", Source: catalog.SourceHostExtension,
//		SafetyTier: catalog.TierRead}, func(ctx context.Context, args json.RawMessage) (any, error) {
//		return map[string]any{"now": time.Now().UTC()}, nil
//	})
//	p := toolgate.Principal{ID: "alice", Tenant: "acme", Scopes: []string{"clock:read"}}
//	tools := gw.Disclose(ctx, p)                               // what alice may see
//	res, err := gw.Call(ctx, toolgate.Call{Tool: "clock.now", Principal: p})
//
// Failures are fail-closed (DESIGN.md decision 1): no policy, a policy error,
// a failing enforce hook or an unavailable limiter denies, and the denial is
// still recorded as agent.toolReturned{status: forbidden} plus a receipt.
package toolgate

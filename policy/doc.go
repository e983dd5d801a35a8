// Package policy compiles toolgate's policy rules (the `policy:` block of the
// configuration, DESIGN.md "Configuration") into an immutable Program that
// decides every tool call and every disclosure (DESIGN.md decisions 1, 2
// and 4).
//
// # Quick start
//
//	prg, err := policy.Load("policy.yaml", data, policy.Options{})
//	if err != nil { return err }                  // Issues: every problem, file:line:col
//	d := prg.Decide(ctx, &policy.Input{Principal: p, Tool: t, Args: args, ArgsKnown: true})
//	if d.Effect != policy.EffectAllow { … }       // deny or require_approval
//	shown := prg.Disclose(ctx, &policy.Input{Principal: p, Tool: t}) // tools/list
//
// The configuration loader, which decodes the whole file into a yaml.Node,
// calls ParseNode (or ParseNodeSource, for exact columns in escaped and
// block conditions) on the `policy:` value and then Compile.
//
// # Document
//
//	default: deny            # or allow; default deny
//	rules:
//	  - {id: readers, effect: allow, tools: ["mcp:fs.read_text_file"], scopes: [fs:read], reason: "readers may read"}
//	  - {id: writers, effect: allow, tools: ["mcp:fs.write_file"], scopes: [fs:write]}
//	  - {id: data-only, effect: deny, tools: ["mcp:fs.*"], when: 'has(args.path) && !path.isUnder(args.path, "/srv/data")'}
//	  - {id: big-writes, effect: require_approval, tools: ["mcp:fs.write_file"], when: 'has(args.content) && size(args.content) > 10000'}
//	ratelimits:
//	  - {tools: ["*"], per: principal_tool, rate: 10/s, burst: 20}
//
// Parsing is strict (unknown or duplicate keys and wrong types are issues)
// and Compile reports every semantic problem at once, located; a rule whose
// condition is always false or fails for every input is a configuration
// error.
//
// # Conditions
//
// `when` is a CEL expression of type bool over:
//
//   - principal: object toolgate.Principal {id, tenant string; scopes
//     list(string); attributes map(string, string)}. Unknown fields
//     (principal.idd) and ill-typed uses (principal.id + 1) are compile
//     errors. has(principal.f) is true when f is non-empty.
//   - tool: object toolgate.Tool, the descriptor (see Tool): id, toolId,
//     source, title, description, egress, approval, replayPolicy,
//     safetyTier, costHint, latencyHint string; scopes list(string); auth
//     toolgate.ToolAuth {scopes list(string)}; inputSchema, outputSchema
//     dyn. A field the descriptor does not have (tool.arguments) is a load
//     issue, also under has(). has(tool.f) is true when f is set.
//   - args: map(string, dyn): the call's decoded JSON arguments. Unknown at
//     list time.
//   - call: object toolgate.Call {transport, callId, runId, agentId,
//     parentCallId string}. Unknown at list time.
//   - now: google.protobuf.Timestamp (Input.Now, or the wall clock).
//
// Conditions may also look at URLs and addresses: url.host(s),
// url.scheme(s), url.port(s) (int) and url.path(s) parse an absolute URL;
// net.ip(s) and net.cidr(s) make net.IP and net.CIDR values, with
// `ip in cidr`, cidr.contains(ip), string(v), == and the predicates
// ip.isLoopback(), isLinkLocal(), isPrivate(), isCGNAT(), isUnspecified(),
// isMulticast(), isPublic() and ip.class() (internal/netclass's rule
// name, or "public"). Input that does not parse is an evaluation error
// (the rule fails closed); a literal that cannot parse is a load issue.
//
// Besides the CEL standard library, conditions may call path.clean(p) and
// path.isUnder(p, dir) / path.isUnder(p, dir, root): lexical POSIX path
// functions (Go's path.Clean; "." and ".." resolved) that never touch the
// file system, so symbolic links are the upstream's to resolve. A relative
// p is never under dir in the two-argument form (the upstream's base for
// relative paths is unknown, so it fails closed); with a root it is
// resolved against root (a relative dir too). dir without a root, and
// root, must be absolute, else the call fails closed (a load issue for a
// literal). Compile warns (Program.Warnings)
// about startsWith on an argument named like a path.
//
// A condition must be statically bool: one of another type (tool.title) or
// of type dyn (args.flag; write args.flag == true) is a load issue.
//
// A missing map key (args.path when the call has no path,
// principal.attributes.team when the principal has no team) is an
// evaluation error, hence a denial; guard optional keys with has(). JSON
// numbers are doubles, which CEL compares with ints (args.n > 3).
//
// Conditions are bounded: the context is checked before each condition and,
// in conditions with comprehensions, every 32 iterations; those conditions
// are also held to Options.CostLimit (cel-go runtime cost). A condition
// without comprehensions costs at most linear time in its arguments.
//
// # Decision
//
// Only the rules whose tools globs match the toolId count (internal/glob;
// the per-toolId rule list is computed once and cached). Then, with
// deny-overrides (DESIGN.md decision 2):
//
//  1. Deny rules are evaluated first. If one matches (condition true), the
//     decision is deny by that rule (Layer "rule"). Deny rules never need
//     scopes.
//  2. Else allow rules grant: a matching allow rule grants only if the
//     principal holds every scope it requires: the descriptor's
//     auth.scopes (always required) ∪ the rule's scopes. The first
//     granting allow rule decides.
//  3. A matching allow rule that cannot grant for lack of scopes does not
//     decide; if nothing grants, the decision is deny, Layer "scopes",
//     naming the first such rule, with MissingScopes and Reason "missing
//     scopes: a, b". This holds under default allow too.
//  4. If no allow rule matches, the default posture decides (Layer
//     "default", RuleID ""). Under default allow the descriptor scopes are
//     still required (missing → deny, Layer "scopes").
//  5. Only a granted call (steps 2 and 4) meets the require_approval rules:
//     the first matching one turns the grant into require_approval by that
//     rule (Layer "rule"). A require_approval rule never grants (issue
//     13.7): like a deny rule it only restricts what is otherwise allowed,
//     so adding any rule that is not allow can never widen access. Scopes
//     on a require_approval or deny rule are a load issue.
//
// Fail closed (DESIGN.md decision 1): if a condition fails (CEL runtime
// error such as comparing a string with an int, a missing key, cost limit,
// done context, or a condition on args when Input.ArgsKnown is false), the
// decision is deny, Layer "error", RuleID the failing rule, Err set
// (*errcode.Error: Timeout or Cancelled for the context, Forbidden
// otherwise), whenever the failing rule could have changed the outcome:
// any failing deny rule (unless another deny rule matches, which then
// decides), a failing allow rule unless another allow rule grants, and any
// failing require_approval rule of a granted call (even when another one
// matches). A done context denies before any rule is looked at. A nil
// Program denies with Layer "no-policy".
//
// RequiredScopes in every decision is the descriptor's scopes ∪ the
// granting allow rule's scopes, sorted.
//
// # Disclosure
//
// Disclose answers tools/list and GET /v1/tools with the same rules and
// args unknown (cel-go partial evaluation): it is true iff Decide could be
// non-deny for some arguments. A deny rule that holds whatever the
// arguments (condition true) hides the tool; one that depends on args does
// not. A condition that fails without depending on args fails for every
// argument value, so it hides the tool exactly where Decide would deny every
// call. The invariant, tested by property: if Decide(args) is not deny then
// Disclose is true; if Disclose is false, Decide denies for all args. Only
// resource limits can break it, and then towards hiding: a cost-limit or
// context failure at list time hides the tool.
//
// DiscloseArgs is the same question with the arguments known and only call
// unknown: the MCP gateway shows each resource of resources/list iff a read
// of its URI (args {uri}) could be non-deny.
//
// # Who can call a tool
//
// WhoCan answers `toolgate policy who-can` and GET
// /v1/admin/tools/{toolId}/principals: Explain (hence Decide and Disclose)
// run once per principal, with "conditional" for a decision that depends on
// unknown arguments. Grants expresses the same rules over a token's claims
// (scope sets and conditions) for principals that cannot be enumerated.
//
// # Concurrency
//
// Compile is safe for concurrent use. A *Program is immutable after
// Compile: Decide, Disclose, Explain, WhoCan, Grants, RateLimit and Version are safe for
// concurrent use, never panic, and only read their Input. Replace a policy
// by compiling a new Program and swapping the pointer (STYLE.md §39).
package policy

package pipeline

import "github.com/toolgate/toolgate/policy"

// The decision engine's types as the pipeline hands them to its clients.
// They are aliases (the very same types), so the transports
// (internal/mcpgw, internal/httpapi) and the console can hold a compiled
// policy, show an explanation or list the rules without importing package
// policy: only the pipeline decides, and the import graph shows it
// (identity's TestOnlyPipelineImportsPolicy).
type (
	// Policy is the compiled, immutable decision program State.Policy
	// runs (a *policy.Program; nil denies every call). Safe for
	// concurrent use.
	Policy = policy.Program
	// Effect is a decision's effect: allow, deny or require_approval.
	Effect = policy.Effect
	// Explanation is Explain's answer: the decision and every matching
	// rule's trace.
	Explanation = policy.Explanation
	// RuleTrace is one rule's part in an Explanation.
	RuleTrace = policy.RuleTrace
	// RuleSummary is one loaded rule as Policy.Rules lists it (id, effect,
	// tools, scopes, condition, file position).
	RuleSummary = policy.RuleSummary
	// Access is what one principal may do with one tool (Pipeline.WhoCan).
	Access = policy.Access
)

// SeamPolicy compiles the policy of the OpenWOP conformance seams' own
// pipelines (/v1/host/sample/..., served only when openwop.test_seams is
// on): deny when the tool requires scopes and the principal carries the
// attribute unevaluableAttr (the request had no grantedScopes: fail
// closed), else allow to principals holding the tool's scopes (descriptor
// scopes are always required), with a 10/s token bucket (burst 60) on
// every tool. unevaluableAttr must be a CEL identifier. Errors: what
// policy.Compile returns (*errcode.Error invalid_config).
func SeamPolicy(unevaluableAttr string) (*Policy, error) {
	return policy.Compile(policy.Spec{
		Default: policy.EffectDeny,
		Rules: []policy.RuleSpec{
			{ID: "seam-unevaluable", Effect: policy.EffectDeny, Tools: []string{"*"},
				When:   `size(tool.scopes) > 0 && has(principal.attributes.` + unevaluableAttr + `)`,
				Reason: "authorization cannot be evaluated: the request has no grantedScopes (fail closed)"},
			{ID: "seam-allow", Effect: policy.EffectAllow, Tools: []string{"*"},
				Reason: "the seam tool is allowed to principals holding its requiredScopes"},
		},
		RateLimits: []policy.RateLimitSpec{{Tools: []string{"*"}, Rate: "10/s", Burst: 60}},
	}, policy.Options{Version: "openwop-seam"})
}

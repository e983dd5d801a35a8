package policy

import "slices"

// Keys reports the YAML keys a policy document accepts (any other key is a
// load error): those of the policy mapping itself (default, rules,
// ratelimits, mode), of each rules entry and of each ratelimits entry.
// The slices are fresh copies. docs/CONFIG.md is tested against them.
func Keys() (document, rule, rateLimit []string) {
	return slices.Clone(policyKeys), slices.Clone(ruleKeys), slices.Clone(rateLimitKeys)
}

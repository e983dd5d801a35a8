package cli

import (
	"encoding/json"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/toolgate/toolgate/internal/config"
	"github.com/toolgate/toolgate/internal/pipeline"
	"github.com/toolgate/toolgate/policy"
)

// whoCanTool is `who-can --tool`'s answer.
type whoCanTool struct {
	ToolID    string          `json:"toolId"`
	ArgsKnown bool            `json:"argsKnown"`
	Access    []policy.Access `json:"principals"`
	// JWT is the grant over token claims (JWT principals are not
	// enumerable); present when auth.jwt is configured.
	JWT *jwtGrant `json:"jwt,omitempty"`
}

// jwtGrant expresses the policy for one tool over a JWT's claims.
type jwtGrant struct {
	ScopesClaim  string               `json:"scopesClaim"`
	TenantClaim  string               `json:"tenantClaim,omitempty"`
	Grants       []policy.Grant       `json:"grants"`
	Restrictions []policy.Restriction `json:"restrictions"`
}

// whoCanPrincipal is `who-can --principal`'s answer.
type whoCanPrincipal struct {
	Principal string          `json:"principal"`
	Tools     []whoCanToolRow `json:"tools"`
	// Unlisted are the tools globs of the configuration that name no
	// single tool: a tool they match is not listed (toolgate cannot know
	// an upstream server's tools without connecting to it).
	Unlisted []string `json:"unlisted,omitempty"`
}

type whoCanToolRow struct {
	ToolID string `json:"toolId"`
	policy.Access
}

func newPolicyWhoCanCmd() *cobra.Command {
	var file, tool, args, principal string
	cmd := &cobra.Command{
		Use:   "who-can --config FILE (--tool TOOLID [--args JSON] | --principal ID)",
		Short: "List who may call a tool (or what a principal may call), with the deciding rule",
		Long: `With --tool: for every configured principal (auth.api_keys), the effect the policy gives it
for the tool (allow, require_approval, deny, or "conditional" when, without --args, the decision
depends on the arguments), whether the tool is shown in its tools/list, and the deciding rule with its
file:line. With --args the decision is exactly what 'policy explain' and 'serve' give for those
arguments. When auth.jwt is configured, the grant is also expressed over token claims: the scope
sets and conditions of each allow rule, and the deny and require_approval rules that restrict them.
With --principal: the same for every tool the configuration names literally (rule tools and tools:
matches without wildcards); globs are listed as "unlisted". The answer is the policy's only: a tool
pinning holds in a running gateway (see 'toolgate tools pending') is refused whatever it says; GET
/v1/admin/tools/{toolId}/principals answers for the running catalog, held tools included. Output is JSON. Exits 0 whatever the
decisions; 1 on a bad config; 2 on bad flags.`,
		Example: `  toolgate policy who-can --config toolgate.yaml --tool mcp:fs.write_file
  toolgate policy who-can --config toolgate.yaml --tool mcp:fs.read_file --args '{"path":"/etc/passwd"}'
  toolgate policy who-can --config toolgate.yaml --principal alice`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if (tool == "") == (principal == "") {
				return usage("give exactly one of --tool and --principal")
			}
			if principal != "" && args != "" {
				return usage("--args goes with --tool")
			}
			cfg, err := loadConfig(file)
			if err != nil {
				return err
			}
			prs := configuredPrincipals(cfg)
			ctx := cmd.Context()
			enc := json.NewEncoder(cmd.OutOrStdout())
			enc.SetIndent("", "  ")
			enc.SetEscapeHTML(false)
			if tool != "" {
				d, err := descriptorFor(cfg, tool)
				if err != nil {
					return usage("%v", err)
				}
				argMap, err := parseArgs(args)
				if err != nil {
					return usage("%v", err)
				}
				pt := pipeline.PolicyTool(&d)
				out := whoCanTool{ToolID: d.ToolID, ArgsKnown: args != "",
					Access: cfg.Policy.WhoCan(ctx, pt, prs, argMap, args != "")}
				if j := cfg.Auth.JWT; j != nil {
					g, r := cfg.Policy.Grants(pt)
					out.JWT = &jwtGrant{ScopesClaim: orDefault(j.ScopesClaim, "scope"), TenantClaim: j.TenantClaim,
						Grants: nonNilSlice(g), Restrictions: nonNilSlice(r)}
				}
				return enc.Encode(out)
			}
			i := slices.IndexFunc(prs, func(p policy.Principal) bool { return p.ID == principal })
			if i < 0 {
				return usage("--principal %q is not a configured API key principal (auth.api_keys)", principal)
			}
			out := whoCanPrincipal{Principal: principal, Tools: []whoCanToolRow{}}
			ids, globs := namedTools(cfg)
			out.Unlisted = globs
			for _, id := range ids {
				d, err := descriptorFor(cfg, id)
				if err != nil {
					continue // e.g. a rule naming a server that is not configured (validate reports it)
				}
				a := cfg.Policy.WhoCan(ctx, pipeline.PolicyTool(&d), prs[i:i+1], nil, false)
				out.Tools = append(out.Tools, whoCanToolRow{ToolID: d.ToolID, Access: a[0]})
			}
			return enc.Encode(out)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&file, "config", "c", "", "configuration file (required)")
	f.StringVar(&tool, "tool", "", "toolId, e.g. mcp:fs.write_file")
	f.StringVar(&args, "args", "", "call arguments as a JSON object (default: unknown, conditions on args are \"conditional\")")
	f.StringVar(&principal, "principal", "", "a configured API key principal id: list its tools instead")
	_ = cmd.MarkFlagRequired("config")
	return cmd
}

// configuredPrincipals are the principals of auth.api_keys, in order.
func configuredPrincipals(cfg *config.Config) []policy.Principal {
	out := make([]policy.Principal, 0, len(cfg.Auth.APIKeys))
	for _, k := range cfg.Auth.APIKeys {
		out = append(out, policy.Principal{ID: k.ID, Tenant: k.Tenant, Scopes: k.Scopes, Attributes: k.Attrs})
	}
	return out
}

// namedTools are the toolIds the configuration names without wildcards
// (policy rules' tools, tools: matches), sorted, and the globs, sorted.
func namedTools(cfg *config.Config) (ids, globs []string) {
	var all []string
	for _, r := range cfg.Policy.Rules() {
		all = append(all, r.Tools...)
	}
	for _, c := range cfg.Tools {
		all = append(all, c.Match)
	}
	for _, s := range all {
		if strings.ContainsAny(s, "*?[") {
			globs = append(globs, s)
		} else if s != "" {
			ids = append(ids, s)
		}
	}
	slices.Sort(ids)
	slices.Sort(globs)
	return slices.Compact(ids), slices.Compact(globs)
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func nonNilSlice[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

package cli

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/toolgate/toolgate/catalog"
	"github.com/toolgate/toolgate/internal/config"
	"github.com/toolgate/toolgate/internal/pipeline"
	"github.com/toolgate/toolgate/policy"
)

func newPolicyCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "policy",
		Short: "Inspect the policy",
	}
	cmd.AddCommand(newPolicyExplainCmd())
	return cmd
}

// explainOutput is what `policy explain` prints.
type explainOutput struct {
	ToolID      string                 `json:"toolId"`
	Principal   policy.Principal       `json:"principal"`
	Disclosed   bool                   `json:"disclosed"`
	Decision    decisionJSON           `json:"decision"`
	Descriptor  catalog.ToolDescriptor `json:"descriptor"`
	Explanation policy.Explanation     `json:"explanation"`
}

type decisionJSON struct {
	Effect         policy.Effect `json:"effect"`
	RuleID         string        `json:"ruleId"`
	Reason         string        `json:"reason"`
	Layer          string        `json:"layer"`
	PolicyVersion  string        `json:"policyVersion"`
	RequiredScopes []string      `json:"requiredScopes"`
	MissingScopes  []string      `json:"missingScopes"`
	Error          string        `json:"error,omitempty"`
}

func newPolicyExplainCmd() *cobra.Command {
	var (
		file, principal, tenant, tool, args string
		scopes                              []string
	)
	cmd := &cobra.Command{
		Use:   "explain --config FILE --principal ID --tool TOOLID [--scopes a,b] [--tenant T] [--args JSON]",
		Short: "Print the decision for (principal, tool, args) as JSON",
		Long: `Evaluate the configured policy for one principal, tool and set of arguments, and print the
decision (effect, deciding rule, reason, layer, policy version, required and missing scopes), whether
the tool would be disclosed in tools/list, the tool's descriptor after classification, and a per-rule
trace. The tool is named by its canonical toolId (mcp:<server>.<tool>, native:<name>) or as
<server>.<tool>; it needs no running upstream. Exits 0 whatever the decision; 1 on a bad config.`,
		Example: `  toolgate policy explain --config toolgate.yaml --principal alice --scopes fs:read \
      --tool mcp:fs.read_file --args '{"path":"/etc/passwd"}'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadConfig(file)
			if err != nil {
				return err
			}
			d, err := descriptorFor(cfg, tool)
			if err != nil {
				return usage("%v", err)
			}
			var argMap map[string]any
			if args == "" {
				argMap = map[string]any{}
			} else if err := json.Unmarshal([]byte(args), &argMap); err != nil || argMap == nil {
				return usage("--args must be a JSON object: %v", err)
			}
			p := policy.Principal{ID: principal, Tenant: tenant, Scopes: scopes}
			in := policy.Input{Principal: p, Tool: pipeline.PolicyTool(&d), Args: argMap, ArgsKnown: true, Call: policy.Call{Transport: "native"}}
			ctx := cmd.Context()
			out := explainOutput{ToolID: d.ToolID, Principal: p, Descriptor: d}
			if cfg.Policy == nil {
				out.Decision = decisionJSON{Effect: policy.EffectDeny, Layer: "no-policy", Reason: "the configuration has no policy: every call is denied"}
			} else {
				out.Explanation = cfg.Policy.Explain(ctx, &in)
				dec := out.Explanation.Decision
				out.Decision = decisionJSON{Effect: dec.Effect, RuleID: dec.RuleID, Reason: dec.Reason, Layer: dec.Layer,
					PolicyVersion: dec.PolicyVersion, RequiredScopes: nonNil(dec.RequiredScopes), MissingScopes: nonNil(dec.MissingScopes)}
				if dec.Err != nil {
					out.Decision.Error = dec.Err.Error()
				}
				out.Disclosed = cfg.Policy.Disclose(ctx, &in)
			}
			enc := json.NewEncoder(cmd.OutOrStdout())
			enc.SetIndent("", "  ")
			enc.SetEscapeHTML(false)
			return enc.Encode(out)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&file, "config", "c", "", "configuration file (required)")
	f.StringVar(&principal, "principal", "", "principal id (required)")
	f.StringVar(&tenant, "tenant", "", "principal tenant")
	f.StringSliceVar(&scopes, "scopes", nil, "principal scopes, comma-separated")
	f.StringVar(&tool, "tool", "", "toolId, e.g. mcp:fs.read_file (required)")
	f.StringVar(&args, "args", "", "call arguments as a JSON object (default {})")
	for _, r := range []string{"config", "principal", "tool"} {
		_ = cmd.MarkFlagRequired(r)
	}
	return cmd
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// descriptorFor builds the classified descriptor of a tool named on the
// command line, without connecting to any upstream: mcp:<server>.<tool> (the
// server must be configured), <server>.<tool>, or native:<name>.
func descriptorFor(cfg *config.Config, name string) (catalog.ToolDescriptor, error) {
	var d catalog.ToolDescriptor
	switch {
	case strings.HasPrefix(name, "native:"):
		d = catalog.ToolDescriptor{ToolID: name, Source: catalog.SourceHostExtension, SafetyTier: catalog.TierRead}
	default:
		id := name
		if !strings.HasPrefix(id, "mcp:") {
			id = "mcp:" + id
		}
		server, tool, ok := strings.Cut(strings.TrimPrefix(id, "mcp:"), ".")
		if !ok || server == "" || tool == "" {
			return d, fmt.Errorf("--tool %q: want mcp:<server>.<tool>, <server>.<tool> or native:<name>", name)
		}
		known := false
		for _, s := range cfg.Servers {
			known = known || s.Name == server
		}
		if !known {
			return d, fmt.Errorf("--tool %q: server %q is not configured", name, server)
		}
		d = catalog.ToolDescriptor{ToolID: id, Source: catalog.SourceMCP}
	}
	catalog.Classify(&d, cfg.Classifications())
	if err := d.Validate(); err != nil {
		return d, err
	}
	return d, nil
}

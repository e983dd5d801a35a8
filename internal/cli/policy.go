package cli

import (
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/catalog"
	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/internal/config"
	"github.com/toolgate/toolgate/internal/pipeline"
	"github.com/toolgate/toolgate/policy"
)

func newPolicyCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "policy",
		Short: "Inspect the policy",
	}
	cmd.AddCommand(newPolicyExplainCmd(), newPolicyTestCmd(), newPolicyDiffCmd(), newPolicyWhoCanCmd())
	return cmd
}

// explainOutput is what `policy explain` prints.
type explainOutput struct {
	ToolID      string                 `json:"toolId"`
	Principal   policy.Principal       `json:"principal"`
	Disclosed   bool                   `json:"disclosed"`
	Decision    decisionJSON           `json:"decision"`
	Descriptor  catalog.ToolDescriptor `json:"descriptor"`
	Explanation *policy.Explanation    `json:"explanation,omitempty"`
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
<server>.<tool>; a server's resources as mcp:<server>/resource (args {"uri": ...}) and a prompt as
mcp:<server>#<prompt> (args {"name": ..., "arguments": {...}}); it needs no running upstream. Exits 0 whatever the decision; 1 on a bad config.`,
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
			argMap, err := parseArgs(args)
			if err != nil {
				return usage("%v", err)
			}
			if strings.TrimSpace(principal) == "" {
				return usage("--principal must not be empty (a call without a principal is refused as unauthenticated)")
			}
			p := policy.Principal{ID: principal, Tenant: tenant, Scopes: nonEmpty(scopes)}
			in := policy.Input{Principal: p, Tool: pipeline.PolicyTool(&d), Args: argMap, ArgsKnown: true, Call: policy.Call{Transport: "native"}}
			ctx := cmd.Context()
			out := explainOutput{ToolID: d.ToolID, Principal: p, Descriptor: d}
			if cfg.Policy == nil {
				out.Decision = decisionJSON{Effect: policy.EffectDeny, Layer: "no-policy", Reason: "the configuration has no policy: every call is denied",
					RequiredScopes: []string{}, MissingScopes: []string{}}
			} else {
				ex := cfg.Policy.Explain(ctx, &in)
				out.Explanation = &ex
				dec := ex.Decision
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

// nonEmpty drops empty entries ("--scopes a,,b").
func nonEmpty(s []string) []string {
	var out []string
	for _, x := range s {
		if x = strings.TrimSpace(x); x != "" {
			out = append(out, x)
		}
	}
	return out
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// descriptorFor builds the classified descriptor of a tool named on the
// command line, without connecting to any upstream. It accepts the spellings
// the gate accepts for a tool it cannot list: the canonical toolId
// (mcp:<server>.<tool>, native:<name>, http:<name>), <server>.<tool>,
// <server><separator><tool>, each optionally percent-encoded once. The MCP
// server must be configured. A bare tool name needs the server's tool list,
// so it is refused with a hint.
func descriptorFor(cfg *config.Config, name string) (catalog.ToolDescriptor, error) {
	var d catalog.ToolDescriptor
	if strings.Contains(name, "%") {
		dec, err := url.PathUnescape(name)
		if err != nil {
			return d, fmt.Errorf("--tool %q: bad percent-encoding: %v", name, err)
		}
		name = dec
	}
	if d, ok, err := targetDescriptor(cfg, name); ok {
		return d, err
	}
	switch {
	case strings.HasPrefix(name, "native:"):
		d = catalog.ToolDescriptor{ToolID: name, Source: catalog.SourceHostExtension, SafetyTier: catalog.TierRead}
	case strings.HasPrefix(name, "http:"):
		d = catalog.ToolDescriptor{ToolID: name, Source: catalog.SourceConnector, SafetyTier: catalog.TierRead}
	default:
		rest := strings.TrimPrefix(name, "mcp:")
		server, tool, ok := strings.Cut(rest, ".")
		if s2, t2, ok2 := strings.Cut(rest, cfg.Naming.Separator); ok2 && (!ok || len(s2) < len(server)) {
			server, tool, ok = s2, t2, true
		}
		if !ok || server == "" || tool == "" {
			return d, fmt.Errorf("--tool %q: want mcp:<server>.<tool>, <server>.<tool>, <server>%s<tool> or native:<name> (a bare tool name needs the server's tool list)", name, cfg.Naming.Separator)
		}
		known := false
		for _, s := range cfg.Servers {
			known = known || s.Name == server
		}
		if !known {
			return d, fmt.Errorf("--tool %q: server %q is not configured", name, server)
		}
		d = catalog.ToolDescriptor{ToolID: catalog.MCPToolID(server, tool), Source: catalog.SourceMCP}
	}
	catalog.Classify(&d, cfg.Classifications())
	if err := d.Validate(); err != nil {
		return d, err
	}
	return d, nil
}

// targetDescriptor is the classified descriptor of a resource or prompt
// target id (mcp:<server>/resource, mcp:<server>#<prompt>: the gate's ids
// of resources/read and prompts/get, whose args are the request params);
// ok is false when name is not one. Errors: a server that is not
// configured, an empty prompt name.
func targetDescriptor(cfg *config.Config, name string) (d catalog.ToolDescriptor, ok bool, err error) {
	server, prompt, kind := catalog.ParseTargetID(name)
	var id string
	switch kind {
	case "prompt":
		if prompt == "" {
			return d, true, fmt.Errorf("--tool %q: want mcp:<server>#<prompt> with a prompt name", name)
		}
		id = catalog.MCPPromptID(server, prompt)
	case "resource":
		id = catalog.MCPResourceID(server)
	default:
		return d, false, nil
	}
	if !slices.ContainsFunc(cfg.Servers, func(s config.Server) bool { return s.Name == server }) {
		return d, true, fmt.Errorf("--tool %q: server %q is not configured", name, server)
	}
	d = catalog.ToolDescriptor{ToolID: id, Source: catalog.SourceMCP}
	catalog.Classify(&d, cfg.Classifications())
	return d, true, nil
}

// parseArgs validates call arguments exactly as the gate does (strict
// RFC 8259: no duplicate keys or lone surrogates; a JSON object) and decodes
// them for the policy.
func parseArgs(args string) (map[string]any, error) {
	if args == "" {
		return map[string]any{}, nil
	}
	if _, err := audit.ArgsHash([]byte(args)); err != nil {
		return nil, fmt.Errorf("--args: %s", errcode.As(err).Message)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(args), &m); err != nil || m == nil {
		return nil, fmt.Errorf("--args must be a JSON object, got %s", strings.TrimSpace(args))
	}
	return m, nil
}

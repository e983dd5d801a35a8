package cli

import (
	"encoding/json"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/toolgate/toolgate/approval"
	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/internal/config"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/store"
)

func newApprovalsCmd() *cobra.Command {
	var file, tenant, as, reason string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "approvals",
		Short: "List, approve and deny pending approvals in the configured store",
		Long: `Work the approval inbox of the configured store (SQLite or PostgreSQL, per store.driver):
calls whose decision is require_approval wait (approvals.wait) for one of these commands, or for POST /v1/approvals/{id}/approve|deny.
A waiting call in a running gateway resumes within a fraction of a second of the decision; a call
that gave up (approval_required) succeeds when retried with the same arguments, once.`,
	}
	pf := cmd.PersistentFlags()
	pf.StringVarP(&file, "config", "c", "", "configuration file (required)")
	pf.StringVar(&tenant, "tenant", "", "the tenant whose approvals to work on")
	_ = cmd.MarkPersistentFlagRequired("config")

	manager := func(cmd *cobra.Command) (*approval.Manager, *config.Config, func(), error) {
		cfg, err := loadConfig(file)
		if err != nil {
			return nil, nil, nil, err
		}
		st, err := openStore(cmd.Context(), cfg)
		if err != nil {
			return nil, nil, nil, err
		}
		ttl, _ := config.ParseDuration(cfg.Approvals.TTL)
		m, err := approval.New(approval.Options{Store: st, Events: store.EventLog(st), TTL: ttl,
			ApproversScope: cfg.Approvals.ApproversScope, AllowSelfApproval: cfg.Approvals.AllowSelfApproval,
			Redactor: credentialRedactor(cfg)})
		if err != nil {
			st.Close()
			return nil, nil, nil, failure("%v", err)
		}
		return m, cfg, func() { st.Close() }, nil
	}
	list := &cobra.Command{
		Use:   "list [--tenant T] [--json]",
		Short: "List pending approvals, oldest first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			m, _, closeFn, err := manager(cmd)
			if err != nil {
				return err
			}
			defer closeFn()
			as, err := m.List(cmd.Context(), tenant, store.ApprovalPending)
			if err != nil {
				return failure("%v", err)
			}
			if len(as) == 0 && !cmd.Flags().Changed("tenant") {
				fmt.Fprintln(cmd.ErrOrStderr(), "no pending approvals for the empty tenant; approvals are kept per tenant: pass --tenant T")
			}
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				for _, a := range as {
					if err := enc.Encode(a); err != nil {
						return err
					}
				}
				return nil
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tPRINCIPAL\tTOOL\tARGS HASH\tEXPIRES\tARGUMENTS (redacted)")
			for _, a := range as {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s…\t%s\t%s\n", a.ID, a.Principal, a.ToolID, a.ArgsHash[:12], a.ExpiresAt.UTC().Format(time.RFC3339), oneLine(a.ArgsSummary))
			}
			return tw.Flush()
		},
	}
	list.Flags().BoolVar(&asJSON, "json", false, "one JSON object per approval")
	resolve := func(approve bool) *cobra.Command {
		verb := "deny"
		if approve {
			verb = "approve"
		}
		c := &cobra.Command{
			Use:   verb + " ID [--as NAME] [--reason TEXT]",
			Short: map[bool]string{true: "Approve a pending call", false: "Deny a pending call"}[approve],
			Args:  cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				m, cfg, closeFn, err := manager(cmd)
				if err != nil {
					return err
				}
				defer closeFn()
				who := policy.Principal{ID: as, Tenant: tenant, Scopes: []string{cfg.Approvals.ApproversScope}}
				a, err := m.Resolve(cmd.Context(), who, args[0], approve, reason)
				if err != nil {
					return failure("%s %s: %v", verb, args[0], err)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s %s (%s by %s)\n", a.Status, a.ID, a.ToolID, a.Principal)
				return nil
			},
		}
		c.Flags().StringVar(&as, "as", "operator", "the approver recorded in the store and the event")
		c.Flags().StringVar(&reason, "reason", "", "why (recorded; shown to the caller on a denial)")
		return c
	}
	cmd.AddCommand(list, resolve(true), resolve(false))
	return cmd
}

// oneLine is s with line breaks and tabs shown as spaces, for a table
// cell ("-" when empty).
func oneLine(s string) string {
	if s == "" {
		return "-"
	}
	return strings.Map(func(r rune) rune {
		if r == '\n' || r == '\r' || r == '\t' {
			return ' '
		}
		return r
	}, s)
}

// credentialRedactor returns a redactor with every credential of cfg this
// environment can resolve registered (SR-1), so that what a command writes
// to the store (an approver's reason) is scrubbed of them as the gateway
// would scrub it; credentials it cannot read are skipped.
func credentialRedactor(cfg *config.Config) *audit.Redactor {
	r := audit.NewRedactor()
	for name, cr := range cfg.Credentials {
		if v, err := cr.Resolve(name); err == nil {
			r.AddSecret(name, v)
		}
	}
	return r
}

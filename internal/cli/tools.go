package cli

import (
	"encoding/json"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/toolgate/toolgate/internal/httpapi"
	"github.com/toolgate/toolgate/internal/mcpgw"
	"github.com/toolgate/toolgate/store"
)

// newToolsCmd is `toolgate tools pending|diff|approve`: the operator side
// of tool-definition pinning (config pinning), on the configured store.
// Pins are the deployment's, not a tenant's, so there is no --tenant: who
// holds the configuration file and the store is the operator.
func newToolsCmd() *cobra.Command {
	var file, tool, digest, as string
	var all, asJSON bool
	cmd := &cobra.Command{
		Use:   "tools",
		Short: "Review and approve changed tool definitions (pinning)",
		Long: `Work the tool-definition pins of the configured store (SQLite or PostgreSQL, per store.driver).
A tool whose definition (name, title, description, schemas, annotations) changed since it was pinned
is pending; under pinning.mode enforce it is held (not listed, a call answers tool_changed) until
approved here or with POST /v1/admin/tools/pending/{toolId}/approve. A running gateway releases an
approved tool within about a second; every approval is recorded as a toolgate.tool.approved event.`,
	}
	pf := cmd.PersistentFlags()
	pf.StringVarP(&file, "config", "c", "", "configuration file (required)")
	_ = cmd.MarkPersistentFlagRequired("config")

	open := func(cmd *cobra.Command) (store.Store, string, error) {
		cfg, err := loadConfig(file)
		if err != nil {
			return nil, "", err
		}
		st, err := openStore(cmd.Context(), cfg)
		if err != nil {
			return nil, "", err
		}
		return st, cfg.Pinning.Mode, nil
	}
	pending := &cobra.Command{
		Use:   "pending [--all] [--json]",
		Short: "List the tools with a pending definition change (--all: every pin)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, mode, err := open(cmd)
			if err != nil {
				return err
			}
			defer st.Close()
			pins, err := st.ListPins(cmd.Context())
			if err != nil {
				return failure("%v", err)
			}
			var views []httpapi.PinView
			for _, p := range pins {
				if all || p.Pending() {
					views = append(views, httpapi.NewPinView(p, mode, false))
				}
			}
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				for _, v := range views {
					if err := enc.Encode(v); err != nil {
						return err
					}
				}
				return nil
			}
			if len(views) == 0 {
				fmt.Fprintln(cmd.ErrOrStderr(), "no pending tool definition changes")
				return nil
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "TOOL\tHELD\tAPPROVED\tPENDING\tCHANGED\tFIRST SEEN")
			for _, v := range views {
				seen := "-"
				if !v.FirstSeen.IsZero() {
					seen = v.FirstSeen.Format(time.RFC3339)
				}
				fmt.Fprintf(tw, "%s\t%v\t%s\t%s\t%v\t%s\n", v.ToolID, v.Held, short(v.Digest), short(v.PendingDigest), v.ChangedFields, seen)
			}
			return tw.Flush()
		},
	}
	pending.Flags().BoolVar(&all, "all", false, "every pin, also those without a pending change")
	pending.Flags().BoolVar(&asJSON, "json", false, "one JSON object per pin")

	diff := &cobra.Command{
		Use:   "diff --tool ID [--json]",
		Short: "Show a pending definition change field by field",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if tool == "" {
				return usage("tools diff: --tool ID is required")
			}
			st, mode, err := open(cmd)
			if err != nil {
				return err
			}
			defer st.Close()
			p, err := st.GetPin(cmd.Context(), tool)
			if err != nil {
				return failure("%s: %v", tool, err)
			}
			if !p.Pending() {
				return failure("%s has no pending definition change", tool)
			}
			v := httpapi.NewPinView(*p, mode, true)
			if asJSON {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(v)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s  %s -> %s  held=%v\n", v.ToolID, short(v.Digest), short(v.PendingDigest), v.Held)
			for _, c := range v.Diff {
				fmt.Fprintf(cmd.OutOrStdout(), "%s:\n  - %s\n  + %s\n", c.Field, c.Old, c.New)
			}
			return nil
		},
	}
	diff.Flags().StringVar(&tool, "tool", "", "the toolId (mcp:<server>.<tool>)")
	diff.Flags().BoolVar(&asJSON, "json", false, "the change as one JSON object")

	approve := &cobra.Command{
		Use:   "approve (--tool ID [--digest D] | --all) [--as NAME]",
		Short: "Approve pending definition changes",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if (tool == "") == !all {
				return usage("tools approve: give exactly one of --tool ID or --all")
			}
			if all && digest != "" {
				return usage("tools approve: --digest goes with --tool")
			}
			st, mode, err := open(cmd)
			if err != nil {
				return err
			}
			defer st.Close()
			if mode == "off" {
				return failure("pinning.mode is off: nothing to approve")
			}
			ids := []string{tool}
			if all {
				ids = nil
				pins, err := st.ListPins(cmd.Context())
				if err != nil {
					return failure("%v", err)
				}
				for _, p := range pins {
					if p.Pending() {
						ids = append(ids, p.ToolID)
					}
				}
			}
			for _, id := range ids {
				before, err := st.GetPin(cmd.Context(), id)
				if err != nil {
					return failure("approve %s: %v", id, err)
				}
				p, err := st.ApprovePin(cmd.Context(), id, digest, as, time.Now())
				if err != nil {
					return failure("approve %s: %v", id, err)
				}
				if err := mcpgw.AppendPinEvent(cmd.Context(), store.EventLog(st), mcpgw.TypeToolApproved,
					mcpgw.ToolApproved{Server: p.Server, ToolID: p.ToolID, OldDigest: before.Digest, Digest: p.Digest, ApprovedBy: as}); err != nil {
					return failure("approve %s: recording the event: %v", id, err)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "approved %s %s\n", p.ToolID, p.Digest)
			}
			if len(ids) == 0 {
				fmt.Fprintln(cmd.ErrOrStderr(), "no pending tool definition changes")
			}
			return nil
		},
	}
	approve.Flags().StringVar(&tool, "tool", "", "the toolId to approve")
	approve.Flags().StringVar(&digest, "digest", "", "the pending digest reviewed (refused if another is pending now)")
	approve.Flags().BoolVar(&all, "all", false, "approve every pending change")
	approve.Flags().StringVar(&as, "as", "operator", "the approver recorded in the store and the event")
	cmd.AddCommand(pending, diff, approve)
	return cmd
}

// short is a digest cut for a table ("-" when empty).
func short(d string) string {
	if d == "" {
		return "-"
	}
	if len(d) > 19 {
		return d[:19] + "…"
	}
	return d
}

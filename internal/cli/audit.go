package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/internal/config"
	"github.com/toolgate/toolgate/store"
	"github.com/toolgate/toolgate/store/sqlite"
)

func newAuditCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "audit", Short: "Read the durable audit log"}
	cmd.AddCommand(newAuditTailCmd(), newAuditPruneCmd())
	return cmd
}

func newAuditPruneCmd() *cobra.Command {
	var file, olderThan string
	var dryRun bool
	cmd := &cobra.Command{
		Use:   "prune --config FILE [--older-than 90d] [--dry-run]",
		Short: "Delete events and receipts older than the retention period, keeping the chain verifiable",
		Long: `Delete from the configured SQLite store the events and receipts older than --older-than (default: the
config's audit.retention). Receipt verification is never broken: the signed checkpoint at the end of the
pruned range is kept, exports start with it and 'toolgate receipts verify' continues from it. The head
receipt is always kept. A running gateway with audit.retention set prunes by itself every hour; this
command is for a one-off prune. Prints what was removed as one JSON object.

With --dry-run nothing is deleted: it prints what would be removed (the number of events, receipts and
checkpoints, the events' time range, the receipts' seq and startedAt range) and the anchor checkpoint
that would be kept, as one JSON object with "dryRun": true.`,
		Example: `  toolgate audit prune --config toolgate.yaml
  toolgate audit prune --config toolgate.yaml --older-than 30d --dry-run
  toolgate audit prune --config toolgate.yaml --older-than 30d`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadConfig(file)
			if err != nil {
				return err
			}
			if olderThan == "" {
				olderThan = cfg.Audit.Retention
			}
			if olderThan == "" {
				return usage("no retention: pass --older-than (e.g. 90d) or set audit.retention in %s", file)
			}
			age, err := config.ParseDuration(olderThan)
			if err != nil {
				return usage("--older-than: %v", err)
			}
			ctx := cmd.Context()
			st, err := openStore(ctx, cfg)
			if err != nil {
				return err
			}
			defer st.Close()
			sq, ok := st.(*sqlite.Store)
			if !ok {
				return failure("store.driver %s: audit prune is built for the sqlite store only (retention on PostgreSQL is not built yet)", cfg.Store.Driver)
			}
			enc := json.NewEncoder(cmd.OutOrStdout())
			enc.SetEscapeHTML(false)
			before := time.Now().Add(-age)
			if dryRun {
				plan, err := sq.PlanPrune(ctx, before)
				if err != nil {
					return failure("prune --dry-run: %v", err)
				}
				return enc.Encode(struct {
					DryRun bool `json:"dryRun"`
					sqlite.PrunePlan
				}{true, plan})
			}
			res, err := sq.Prune(ctx, before)
			if err != nil {
				return failure("prune: %v (what was pruned before the error stays pruned; the store is consistent)", err)
			}
			return enc.Encode(res)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&file, "config", "c", "", "configuration file (required)")
	f.StringVar(&olderThan, "older-than", "", "prune what is older than this (e.g. 90d, 720h); default audit.retention")
	f.BoolVar(&dryRun, "dry-run", false, "delete nothing; print what would be removed and the anchor that would be kept")
	_ = cmd.MarkFlagRequired("config")
	return cmd
}

func newAuditTailCmd() *cobra.Command {
	var file, run, tenant string
	var follow bool
	cmd := &cobra.Command{
		Use:   "tail --config FILE --tenant T [--run ID] [--follow]",
		Short: "Print a tenant's audit events as JSON lines",
		Long: `Print the OpenWOP run events stored in the configured store (SQLite or PostgreSQL, per
store.driver), one JSON object per line:
one run's events in sequence order (--run), or all of the tenant's events in commit order. With
--follow, keep printing new events as they are committed, by this or any other process (a running
gateway), until interrupted; the SQLite store is polled, so an event shows within 200 ms. On
PostgreSQL, --follow prints what every replica commits, in commit order, woken by LISTEN/NOTIFY.
When the store cannot be read (a lost connection, a server restart), --follow says so on stderr
and resumes after the last printed event once it can, printing none twice.`,
		Example: `  toolgate audit tail --config toolgate.yaml --tenant acme --run run-42
  toolgate audit tail --config toolgate.yaml --tenant acme --follow`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadConfig(file)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			st, err := openStore(ctx, cfg)
			if err != nil {
				return err
			}
			defer st.Close()
			enc := json.NewEncoder(cmd.OutOrStdout())
			enc.SetEscapeHTML(false)
			emit := func(e audit.Event) error { return enc.Encode(e) }
			if follow {
				return followEvents(ctx, st, tenant, run, emit, cmd.ErrOrStderr(), time.Second)
			}
			if run != "" {
				for after := int64(-1); ; {
					evs, err := st.EventsByRun(ctx, tenant, run, after, store.MaxLimit)
					if err != nil {
						return err
					}
					if len(evs) == 0 {
						return nil
					}
					for _, e := range evs {
						if err := emit(e); err != nil {
							return err
						}
						after = e.Sequence
					}
				}
			}
			cursor := ""
			for {
				evs, next, err := st.EventsByTime(ctx, tenant, time.Time{}, time.Time{}, cursor, store.MaxLimit)
				if err != nil {
					return err
				}
				for _, e := range evs {
					if err := emit(e); err != nil {
						return err
					}
				}
				if next == "" || len(evs) == 0 {
					return nil
				}
				cursor = next
			}
		},
	}
	f := cmd.Flags()
	f.StringVarP(&file, "config", "c", "", "configuration file (required)")
	f.StringVar(&tenant, "tenant", "", "tenant whose events to read (required)")
	f.StringVar(&run, "run", "", "only this run's events, in sequence order")
	f.BoolVar(&follow, "follow", false, "keep printing events as they are committed")
	_ = cmd.MarkFlagRequired("config")
	_ = cmd.MarkFlagRequired("tenant")
	return cmd
}

// followEvents prints tenant's events (only run's when run is set) from
// the start of the log as they are committed, until ctx ends. A feed that
// ends before ctx does (Events.Follow closes its channel when the store
// cannot be read) is followed again from the last printed event's cursor,
// after retry, with a note on warn; so is a Follow refused as unavailable.
// Other Follow errors (an invalid cursor, a tenant refused) end it.
func followEvents(ctx context.Context, st store.Events, tenant, run string, emit func(audit.Event) error, warn io.Writer, retry time.Duration) error {
	cursor := store.FromStart
	for {
		ch, err := st.Follow(ctx, tenant, cursor)
		if err == nil {
			for f := range ch {
				cursor = f.Cursor
				if run != "" && f.Event.RunID != run {
					continue
				}
				if err := emit(f.Event); err != nil {
					return err
				}
			}
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		switch errcode.CodeOf(err) {
		case "", errcode.AuditUnavailable:
		default:
			return err
		}
		if err != nil {
			fmt.Fprintf(warn, "toolgate: audit tail: the store cannot be read (%v); retrying in %s\n", err, retry)
		} else {
			fmt.Fprintf(warn, "toolgate: audit tail: the feed was interrupted; resuming after the last printed event in %s\n", retry)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(retry):
		}
	}
}

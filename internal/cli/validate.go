package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"

	"github.com/spf13/cobra"

	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/internal/config"
	"github.com/toolgate/toolgate/internal/httptool"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/store/postgres"
)

func newValidateCmd() *cobra.Command {
	var file string
	var offline bool
	cmd := &cobra.Command{
		Use:   "validate --config FILE",
		Short: "Check a configuration file and report every issue with file:line",
		Long: `Decode the configuration strictly (an unknown key is an error, with a "did you mean" hint),
validate every section and compile the policy (CEL conditions type-checked). All issues of every
section are reported at once, one per line as file:line:col: message. What serve would hit with the
file here is an issue too: a backend the config format names but this build's serve lacks
(store.driver memory, audit.retention on postgres), a stdio command not found on PATH or not
executable, a rule naming a server that is not configured, and a shared backend (store.driver
postgres, ratelimit.backend redis) that does not answer within 5s (--offline skips that check;
the DSN is named without its password). Nothing is started, no schema is changed, and nothing
but those backends is connected to.
Credentials that this environment cannot read are warnings (serve reads its own environment), and
so is a policy rule that applies startsWith to an argument named like a path (use path.isUnder).
Exits 0 when the file is valid, 1 otherwise.`,
		Example: `  toolgate validate --config toolgate.yaml`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, issues, err := config.LoadAll(file)
			if err != nil {
				return failure("%v", err)
			}
			// Every issue of every section at once: the file's own, then
			// what serve would hit with it here (a backend it lacks, a
			// stdio command it cannot start, a rule for a server it does
			// not have). Nothing is started or connected.
			if cfg != nil {
				issues = append(issues, backendIssues(cfg)...)
				issues = append(issues, cfg.CommandIssues()...)
				issues = append(issues, cfg.ServerRefIssues()...)
				if len(issues) == 0 {
					issues = append(issues, httpToolIssues(cmd.Context(), cfg, offline)...)
				}
				if !offline && len(issues) == 0 {
					issues = append(issues, reachIssues(cmd.Context(), cfg)...)
				}
			}
			// Suspicious but valid policy (startsWith on a path argument):
			// warnings, located like issues, printed with them too.
			if cfg != nil {
				for _, w := range cfg.Policy.Warnings() {
					fmt.Fprintf(cmd.ErrOrStderr(), "warning: %s\n", w)
				}
				if cfg.Store.Driver == "postgres" && cfg.Approvals.BindingSecret == "" {
					fmt.Fprintf(cmd.ErrOrStderr(), "warning: %s: approvals.binding_secret is not set: on a shared store each replica binds approvals with its own signing key, so a retry through another replica asks for a new approval; give every replica the same binding_secret\n", cfg.PosOf("store", "driver"))
				}
			}
			if len(issues) > 0 {
				issues = issues.Sorted()
				return failure("%s has %d issue(s):\n%s", file, len(issues), issues.Error())
			}
			// Credentials are read from serve's own environment and files
			// (hook secrets at start, upstream credentials at connect), which
			// may not be this one: what cannot be read here is a warning.
			names := make([]string, 0, len(cfg.Credentials))
			for name := range cfg.Credentials {
				names = append(names, name)
			}
			sort.Strings(names)
			for _, name := range names {
				if _, err := cfg.Credentials[name].Resolve(name); err != nil {
					fmt.Fprintf(cmd.ErrOrStderr(), "warning: %v (not readable here; serve needs it in its own environment)\n", err)
				}
			}
			pol := "no policy: every call is denied"
			if cfg.Policy != nil {
				pol = "policy " + cfg.Policy.Version()
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: OK (%d servers, %d tool classifications, %s)\n",
				cfg.File, len(cfg.Servers), len(cfg.Tools), pol)
			return nil
		},
	}
	cmd.Flags().StringVarP(&file, "config", "c", "", "configuration file (required)")
	cmd.Flags().BoolVar(&offline, "offline", false, "do not check that shared backends (PostgreSQL, Redis) answer")
	_ = cmd.MarkFlagRequired("config")
	return cmd
}

// servable reports a valid configuration that this build's serve cannot
// run: the config format already names backends (store.driver memory,
// retention on postgres) that serve does not have yet, and
// validate must not call such a file OK.
func servable(cfg *config.Config) error {
	if is := backendIssues(cfg); len(is) > 0 {
		return failure("%s", is.Error())
	}
	return nil
}

// backendIssues are servable's refusals, located.
func backendIssues(cfg *config.Config) policy.Issues {
	var is policy.Issues
	if cfg.Store.Driver == "memory" {
		is = append(is, policy.Issue{Pos: cfg.PosOf("store", "driver"),
			Message: fmt.Sprintf("store.driver %q: serve supports sqlite and postgres (memory is not built yet)", cfg.Store.Driver)})
	}
	if cfg.Store.Driver == "postgres" && cfg.Audit.Retention != "" {
		is = append(is, policy.Issue{Pos: cfg.PosOf("audit", "retention"),
			Message: "audit.retention: serve prunes the sqlite store only (retention on postgres is not built yet)"})
	}
	return is
}

func oneOf(v string, allowed ...string) bool {
	for _, a := range allowed {
		if v == a {
			return true
		}
	}
	return false
}

// loadConfig loads file and turns located issues into one failure listing
// them all.
func loadConfig(file string) (*config.Config, error) {
	cfg, err := config.Load(file)
	if err == nil {
		return cfg, nil
	}
	var issues policy.Issues
	if errors.As(err, &issues) {
		return nil, failure("%s has %d issue(s):\n%s", file, len(issues), issues.Error())
	}
	return nil, failure("%v", err)
}

// reachIssues reports a shared backend of cfg that does not answer within
// backendConnectTimeout: store.driver postgres (a connection and a ping,
// no schema change; located at store.dsn, the DSN named without its
// password) and ratelimit.backend redis (located at ratelimit.url).
func reachIssues(ctx context.Context, cfg *config.Config) policy.Issues {
	if ctx == nil {
		ctx = context.Background()
	}
	var is policy.Issues
	if cfg.Store.Driver == "postgres" {
		pctx, cancel := context.WithTimeout(ctx, backendConnectTimeout)
		err := postgres.Ping(pctx, cfg.Store.DSN)
		cancel()
		if err != nil {
			why := fmt.Sprintf("PostgreSQL cannot be reached or refused the connection: %v", err)
			switch {
			case errcode.CodeOf(err) == errcode.Timeout || errors.Is(err, context.DeadlineExceeded):
				why = fmt.Sprintf("PostgreSQL did not answer within %s", backendConnectTimeout)
			case errcode.CodeOf(err) == errcode.InvalidConfig:
				why = errcode.As(err).Message
			}
			is = append(is, policy.Issue{Pos: cfg.PosOf("store", "dsn"),
				Message: fmt.Sprintf("store %s: %s", redactDSN(cfg.Store.DSN), why)})
		}

	}
	if cfg.RateLimit.Backend == "redis" {
		_, closeLimiter, err := buildLimiter(ctx, cfg, slog.New(slog.DiscardHandler))
		if err != nil {
			is = append(is, policy.Issue{Pos: cfg.PosOf("ratelimit", "url"), Message: err.Error()})
		} else {
			closeLimiter()
		}
	}
	return is
}

// httpToolIssues builds the HTTP tools as serve would: every openapi file
// is read and validated, and (unless offline) every openapi url fetched.
func httpToolIssues(ctx context.Context, cfg *config.Config, offline bool) policy.Issues {
	_, err := httptool.Build(ctx, cfg, httptool.Options{SkipURLs: offline})
	var is policy.Issues
	if errors.As(err, &is) {
		return is
	}
	if err != nil {
		return policy.Issues{{Pos: cfg.PosOf("openapi"), Message: err.Error()}}
	}
	return nil
}

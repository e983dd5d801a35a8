// Package cli implements the toolgate command line, one file per
// subcommand. Commands write to injected writers and return errors; only
// cmd/toolgate calls os.Exit.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"
)

// Exit codes.
const (
	ExitOK          = 0   // success
	ExitFailure     = 1   // the command ran and found a problem (invalid config, failed verification, write error)
	ExitUsage       = 2   // bad flags or arguments
	ExitInterrupted = 130 // SIGINT or SIGTERM arrived before the command finished
)

// exitError carries an exit code with an already-printed message.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }

func failure(format string, args ...any) error {
	return &exitError{code: ExitFailure, err: fmt.Errorf(format, args...)}
}

func usage(format string, args ...any) error {
	return &exitError{code: ExitUsage, err: fmt.Errorf(format, args...)}
}

// errWriter remembers the first write error (a full disk, a closed pipe),
// so a command whose output was lost does not exit 0.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.w.Write(p)
	if err != nil {
		e.err = err
	}
	return n, err
}

// Main runs the command line with args (without the program name) and
// returns the process exit code. When ctx is cancelled (SIGINT/SIGTERM in
// cmd/toolgate) before the command finishes, Main returns
// ExitInterrupted at once and the command's goroutine is abandoned, except
// for a command annotated graceful (serve), which Main waits for: it
// finishes in-flight work and returns by itself.
func Main(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	out := &errWriter{w: stdout}
	root := newRoot(stdin, out, stderr)
	root.SetArgs(args)
	graceful := false
	if c, _, ferr := root.Find(args); ferr == nil && c.Annotations[annotationGraceful] == "true" {
		graceful = true
	}
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()
	var err error
	select {
	case err = <-done:
	case <-ctx.Done():
		if !graceful {
			fmt.Fprintln(stderr, "toolgate: interrupted")
			return ExitInterrupted
		}
		// The command shuts down by itself (in-flight work, flushing).
		err = <-done
	}
	if err == nil && out.err != nil {
		err = failure("writing output: %v", out.err)
	}
	if err == nil {
		return ExitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.err.Error() != "" {
			fmt.Fprintln(stderr, "toolgate:", ee.err)
		}
		return ee.code
	}
	// cobra's own errors are usage errors (unknown flag, bad args).
	fmt.Fprintln(stderr, "toolgate:", err)
	fmt.Fprintln(stderr, "Run 'toolgate --help' for usage.")
	return ExitUsage
}

func newRoot(stdin io.Reader, stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:   "toolgate",
		Short: "One auditable, least-privilege gate in front of every AI-agent tool call",
		Long: `toolgate resolves every tool call to a canonical toolId, decides it against a policy
(scopes, allow/deny rules, CEL argument conditions), rate limits it, runs hooks, invokes the tool,
emits content-free OpenWOP audit events and appends a signed, hash-chained receipt.

Exit codes: 0 success, 1 the command found a problem, 2 usage error.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error { return usage("%v (see '%s --help')", err, c.CommandPath()) })
	root.AddCommand(newServeCmd(), newClientCmd(), newApprovalsCmd(), newDemoCmd(), newHashCmd(), newKeyCmd(), newAuditCmd(), newValidateCmd(), newPolicyCmd(), newReceiptsCmd(), newReplayCmd(), newToolsCmd(), newVersionCmd(), newHealthcheckCmd())
	finish(root)
	return root
}

// finish makes every command's errors exit codes: an error a command returns
// that is not already an exitError is a failure (exit 1), and a command group
// run without a subcommand is a usage error.
func finish(c *cobra.Command) {
	if c.RunE != nil {
		run := c.RunE
		c.RunE = func(cmd *cobra.Command, args []string) error {
			err := run(cmd, args)
			var ee *exitError
			if err != nil && !errors.As(err, &ee) {
				return failure("%v", err)
			}
			return err
		}
	} else if c.HasSubCommands() && c.Parent() != nil {
		c.Args = cobra.ArbitraryArgs
		c.RunE = func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usage("unknown command %q for %q (see '%s --help')", args[0], cmd.CommandPath(), cmd.CommandPath())
			}
			return usage("%s needs a subcommand (see '%s --help')", cmd.CommandPath(), cmd.CommandPath())
		}
	}
	for _, sub := range c.Commands() {
		finish(sub)
	}
}

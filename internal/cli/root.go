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
	ExitOK      = 0 // success
	ExitFailure = 1 // the command ran and found a problem (invalid config, failed verification, denied)
	ExitUsage   = 2 // bad flags or arguments
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

// Main runs the command line with args (without the program name) and
// returns the process exit code.
func Main(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	root := newRoot(stdin, stdout, stderr)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
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
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error { return usage("%v (see 'toolgate %s --help')", err, c.Name()) })
	root.AddCommand(newDemoCmd(), newHashCmd(), newValidateCmd(), newPolicyCmd(), newReceiptsCmd(), newVersionCmd())
	return root
}

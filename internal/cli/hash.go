package cli

import (
	"bytes"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/toolgate/toolgate/audit"
)

// maxHashInput bounds what `hash` reads from standard input (bytes).
const maxHashInput = 64 << 20

func newHashCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "hash [JSON]",
		Short: "Print the argsHash of tool arguments (SR-1 redaction, RFC 8785, SHA-256)",
		Long: `Print the OpenWOP argsHash of a JSON value: secrets redacted by key name and shape
(SR-1), canonicalized per RFC 8785, hashed with SHA-256, as 64 lowercase hex characters.
The JSON is read from the argument, or from standard input when there is none (at most
64 MiB). Empty input hashes as {} (absent arguments, CONTRACT.md §2.3) and says so on stderr.`,
		Example: `  toolgate hash '{"q":"openwop"}'
  echo '{"q":"openwop"}' | toolgate hash`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var data []byte
			if len(args) == 1 {
				data = []byte(args[0])
			} else {
				b, err := io.ReadAll(io.LimitReader(cmd.InOrStdin(), maxHashInput+1))
				if err != nil {
					return failure("reading standard input: %v", err)
				}
				if len(b) > maxHashInput {
					return failure("input too large: the limit is %d MiB", maxHashInput>>20)
				}
				data = b
			}
			if len(bytes.TrimSpace(data)) == 0 {
				fmt.Fprintln(cmd.ErrOrStderr(), "toolgate: note: empty input, hashing absent arguments as {}")
			}
			h, err := audit.ArgsHash(data)
			if err != nil {
				return failure("%v", err)
			}
			fmt.Fprintln(cmd.OutOrStdout(), h)
			return nil
		},
	}
}

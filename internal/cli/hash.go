package cli

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/toolgate/toolgate/audit"
)

func newHashCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "hash [JSON]",
		Short: "Print the argsHash of tool arguments (SR-1 redaction, RFC 8785, SHA-256)",
		Long: `Print the OpenWOP argsHash of a JSON value: secrets redacted by key name and shape
(SR-1), canonicalized per RFC 8785, hashed with SHA-256, as 64 lowercase hex characters.
The JSON is read from the argument, or from standard input when there is none.`,
		Example: `  toolgate hash '{"q":"openwop"}'
  echo '{"q":"openwop"}' | toolgate hash`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var data []byte
			if len(args) == 1 {
				data = []byte(args[0])
			} else {
				b, err := io.ReadAll(io.LimitReader(cmd.InOrStdin(), 64<<20))
				if err != nil {
					return failure("reading standard input: %v", err)
				}
				data = b
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

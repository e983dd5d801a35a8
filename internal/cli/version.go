package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/toolgate/toolgate/internal/version"
)

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the toolgate version",
		Long: `Print the toolgate version: the one the gateway also reports in MCP initialize (serverInfo.version)
and in the OpenWOP discovery document (implementation.version). Release builds set it with
-ldflags "-X github.com/toolgate/toolgate/internal/version.Version=v1.2.3" (scripts/release.sh).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprintln(cmd.OutOrStdout(), "toolgate", version.String())
			return nil
		},
	}
}

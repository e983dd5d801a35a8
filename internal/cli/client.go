package cli

import (
	"context"
	"encoding/json"
	"net/http"
	"os"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"

	"github.com/toolgate/toolgate/internal/version"
)

func newClientCmd() *cobra.Command {
	var url, key string
	cmd := &cobra.Command{
		Use:   "client",
		Short: "A minimal MCP client (the Go SDK's) for trying a gateway: list and call tools",
		Long: `Connect to an MCP server over Streamable HTTP (a toolgate gateway's /mcp) with an API key or a
bearer token (--key, or $TOOLGATE_KEY) and list its tools or call one. Results print as JSON.`,
	}
	pf := cmd.PersistentFlags()
	pf.StringVar(&url, "url", "http://127.0.0.1:7070/mcp", "the MCP endpoint")
	pf.StringVar(&key, "key", "", "API key or bearer token (default $TOOLGATE_KEY)")
	connect := func(ctx context.Context) (*mcp.ClientSession, error) {
		if key == "" {
			key = os.Getenv("TOOLGATE_KEY")
		}
		hc := &http.Client{Transport: bearerTransport{key: key}}
		c := mcp.NewClient(&mcp.Implementation{Name: "toolgate-client", Version: version.String()}, nil)
		cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: hc}, nil)
		if err != nil {
			return nil, failure("connecting to %s: %v", url, err)
		}
		return cs, nil
	}
	tools := &cobra.Command{
		Use:   "tools",
		Short: "List the tools the server shows this principal",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cs, err := connect(cmd.Context())
			if err != nil {
				return err
			}
			defer cs.Close()
			enc := json.NewEncoder(cmd.OutOrStdout())
			for t, err := range cs.Tools(cmd.Context(), nil) {
				if err != nil {
					return failure("tools/list: %v", err)
				}
				if err := enc.Encode(map[string]any{"name": t.Name, "description": t.Description, "annotations": t.Annotations}); err != nil {
					return err
				}
			}
			return nil
		},
	}
	call := &cobra.Command{
		Use:     "call TOOL [ARGS_JSON]",
		Short:   "Call a tool; exit 1 if the result is an error (isError)",
		Example: `  toolgate client call text__echo '{"text":"hi"}' --key $TOOLGATE_KEY`,
		Args:    cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			var in json.RawMessage = json.RawMessage("{}")
			if len(args) == 2 {
				if !json.Valid([]byte(args[1])) {
					return usage("ARGS_JSON is not valid JSON: %s", args[1])
				}
				in = json.RawMessage(args[1])
			}
			cs, err := connect(cmd.Context())
			if err != nil {
				return err
			}
			defer cs.Close()
			res, err := cs.CallTool(cmd.Context(), &mcp.CallToolParams{Name: args[0], Arguments: in})
			if err != nil {
				return failure("tools/call %s: %v", args[0], err)
			}
			enc := json.NewEncoder(cmd.OutOrStdout())
			enc.SetIndent("", "  ")
			if err := enc.Encode(res); err != nil {
				return err
			}
			if res.IsError {
				return failure("")
			}
			return nil
		},
	}
	cmd.AddCommand(tools, call)
	return cmd
}

// bearerTransport adds "Authorization: Bearer <key>" when key is set.
type bearerTransport struct{ key string }

func (t bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if t.key != "" {
		r = r.Clone(r.Context())
		r.Header.Set("Authorization", "Bearer "+t.key)
	}
	return http.DefaultTransport.RoundTrip(r)
}

package cli

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/toolgate/toolgate"
	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/internal/config"
	"github.com/toolgate/toolgate/receipt"
)

//go:embed demo.yaml
var demoConfig []byte

func newDemoCmd() *cobra.Command {
	var showConfig bool
	var receiptsOut, pubkeyOut string
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run the embedded gate on a demo config and show its decisions",
		Long: `Start the gate in-process with three native demo tools (native:clock.now, native:text.echo and
native:files.read, confined to a temporary directory) and the demo policy, show what two principals
are disclosed, make a series of calls through the full pipeline (policy, CEL argument rules, rate
limit, events, receipts), print each outcome, and verify the receipt chain offline.
Use --config-only to print the demo configuration, and --receipts/--pubkey to keep the receipts
and the public key for 'toolgate receipts verify'.`,
		Example: `  toolgate demo
  toolgate demo --receipts demo.jsonl --pubkey demo.pub && toolgate receipts verify demo.jsonl --pubkey demo.pub`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if showConfig {
				_, err := cmd.OutOrStdout().Write(demoConfig)
				return err
			}
			if (receiptsOut == "") != (pubkeyOut == "") {
				return usage("--receipts and --pubkey go together")
			}
			return runDemo(cmd.Context(), cmd.OutOrStdout(), receiptsOut, pubkeyOut)
		},
	}
	cmd.Flags().BoolVar(&showConfig, "config-only", false, "print the embedded demo configuration and exit")
	cmd.Flags().StringVar(&receiptsOut, "receipts", "", "also write the run's receipts (JSON Lines) to this file, for 'toolgate receipts verify'")
	cmd.Flags().StringVar(&pubkeyOut, "pubkey", "", "also write the signing public key (PEM) to this file")
	return cmd
}

func runDemo(ctx context.Context, out io.Writer, receiptsOut, pubkeyOut string) error {
	cfg, err := config.Parse("demo.yaml", demoConfig)
	if err != nil {
		return failure("demo config: %v", err)
	}
	dir, err := os.MkdirTemp("", "toolgate-demo-")
	if err != nil {
		return failure("%v", err)
	}
	defer os.RemoveAll(dir)
	_ = os.WriteFile(filepath.Join(dir, "hello.txt"), []byte("hello from toolgate\n"), 0o600)
	_ = os.WriteFile(filepath.Join(dir, ".env"), []byte("API_KEY=sk-demo-0123456789\n"), 0o600)

	log := audit.NewMemoryLog()
	gw, err := toolgate.New(toolgate.Options{Policy: cfg.Policy, Classifications: cfg.Classifications(), Events: log})
	if err != nil {
		return failure("%v", err)
	}
	defer gw.Close()
	if err := registerDemoTools(gw, dir); err != nil {
		return failure("%v", err)
	}

	alice := toolgate.Principal{ID: "alice", Tenant: "acme", Scopes: []string{"files:read"}}
	bob := toolgate.Principal{ID: "bob", Tenant: "acme"}
	fmt.Fprintf(out, "toolgate demo: policy %s, tools in %s\n\n", cfg.Policy.Version(), dir)
	for _, p := range []toolgate.Principal{alice, bob} {
		var ids []string
		for _, d := range gw.Disclose(ctx, p) {
			ids = append(ids, d.ToolID)
		}
		fmt.Fprintf(out, "disclosed to %-5s (scopes %v): %s\n", p.ID, p.Scopes, strings.Join(ids, ", "))
	}
	fmt.Fprintln(out)

	calls := []struct {
		who  toolgate.Principal
		tool string
		args string
	}{
		{alice, "files.read", `{"name":"hello.txt"}`},
		{alice, "native:files.read", `{"name":".env"}`},
		{alice, "files.read", `{"name":"/etc/passwd"}`},
		{bob, "files.read", `{"name":"hello.txt"}`},
		{bob, "text.echo", `{"text":"hi","apiKey":"sk-live-0123456789abcdef"}`},
		{bob, "text.echo", `{"text":"` + strings.Repeat("x", 80) + `"}`},
		{alice, "clock.now", `{}`},
		{alice, "clock.now", `{}`},
		{alice, "clock.now", `{}`},
		{alice, "nope.tool", `{}`},
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "PRINCIPAL\tTOOL\tARGS\tSTATUS\tRULE\tRESULT / ERROR")
	for i, c := range calls {
		res, err := gw.Call(ctx, toolgate.Call{Tool: c.tool, Args: json.RawMessage(c.args), Principal: c.who, RunID: "demo-run", AgentID: "demo-agent", CallID: fmt.Sprintf("call-%02d", i)})
		args := c.args
		if len(args) > 40 {
			args = args[:37] + "..."
		}
		switch {
		case err != nil:
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t\t%s\n", c.who.ID, c.tool, args, errcode.CodeOf(err), err.(*errcode.Error).Message)
		case res.Err != nil:
			msg := res.Err.Message
			if res.Hidden {
				msg = "(answered as an unknown tool) " + msg
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s: %s\n", c.who.ID, c.tool, args, res.Status, res.Decision.RuleID, res.Err.Code, msg)
		default:
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", c.who.ID, c.tool, args, res.Status, res.Decision.RuleID, strings.TrimSpace(string(res.Output)))
		}
	}
	tw.Flush()

	evs := log.Events("acme", "demo-run")
	fmt.Fprintf(out, "\n%d OpenWOP events recorded for run demo-run (content-free: argsHash, no inputs); the first two:\n", len(evs))
	for _, e := range evs[:min(2, len(evs))] {
		b, _ := json.Marshal(e)
		fmt.Fprintf(out, "  %s\n", b)
	}
	var buf bytes.Buffer
	if err := gw.WriteReceipts(&buf); err != nil {
		return failure("%v", err)
	}
	rep, err := receipt.Verify(bytes.NewReader(buf.Bytes()), gw.PublicKey(), receipt.VerifyOptions{})
	if err != nil {
		return failure("receipt verification failed: %v", err)
	}
	fmt.Fprintf(out, "\nreceipts: %d receipts, %d signed checkpoint(s), chain verified offline.\n", rep.Receipts, rep.Checkpoints)
	if receiptsOut != "" {
		if err := os.WriteFile(receiptsOut, buf.Bytes(), 0o644); err != nil {
			return failure("%v", err)
		}
		if err := os.WriteFile(pubkeyOut, receipt.EncodePublicKey(gw.PublicKey()), 0o644); err != nil {
			return failure("%v", err)
		}
		fmt.Fprintf(out, "wrote %s and %s: try 'toolgate receipts verify %s --pubkey %s'\n", receiptsOut, pubkeyOut, receiptsOut, pubkeyOut)
	}
	return nil
}

// registerDemoTools adds the demo's native tools; files.read is confined to dir.
func registerDemoTools(gw *toolgate.Gateway, dir string) error {
	for _, t := range demoTools(dir) {
		if err := gw.RegisterNative(t.desc, t.fn); err != nil {
			return err
		}
	}
	return nil
}

package cli

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/receipt"
)

func newReceiptsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "receipts",
		Short: "Verify signed, hash-chained receipts",
	}
	cmd.AddCommand(newReceiptsVerifyCmd(), newReceiptsExportCmd(), newReceiptsPubkeyCmd())
	return cmd
}

func newReceiptsExportCmd() *cobra.Command {
	var file string
	var from uint64
	cmd := &cobra.Command{
		Use:   "export --config FILE [--from SEQ]",
		Short: "Write the store's receipts and checkpoints as a JSON Lines file to stdout",
		Long: `Export the gateway's receipt chain from the configured SQLite store, in chain order, with the
signed checkpoints that cover it, as JSON Lines on standard output. The output verifies offline with
'toolgate receipts verify FILE --pubkey KEY'. --from starts at a seq (the file then begins with the
checkpoint that anchors it).`,
		Example: `  toolgate receipts export --config toolgate.yaml > receipts.jsonl`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadConfig(file)
			if err != nil {
				return err
			}
			st, err := openStore(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			defer st.Close()
			if err := st.ExportReceipts(cmd.Context(), cmd.OutOrStdout(), st.ChainID(), from); err != nil {
				return err
			}
			if err := st.ChainError(); err != nil {
				return failure("exported only the receipts a signed checkpoint covers: %v", err)
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&file, "config", "c", "", "configuration file (required)")
	cmd.Flags().Uint64Var(&from, "from", 0, "first receipt seq to export")
	_ = cmd.MarkFlagRequired("config")
	return cmd
}

func newReceiptsVerifyCmd() *cobra.Command {
	var pubkey, cfgFile string
	var jsonOut bool
	var from uint64
	cmd := &cobra.Command{
		Use:   "verify (FILE --pubkey KEYFILE [--from SEQ] | --config FILE)",
		Short: "Verify a receipts file offline",
		Long: `Verify a JSON Lines receipts file: every receipt's body hash, chain continuity (no gap, fork or
reorder), every checkpoint's Ed25519 signature with the given public key, that every receipt is
covered by a signature, the args-hash rule (requestedArgsHash != executedArgsHash needs a
mutationSource) and failure honesty (durationMs iff the tool ran; error iff status is not ok).
The nested call graph is rebuilt from parentCallId. The first failure is reported with its seq.
With --config, the chain in the configured store is verified in place with the gateway's key.
--from SEQ verifies a file exported with 'receipts export --from SEQ' (its first receipt's prevHash
is then trusted; a file that opens with a checkpoint, as after a prune, needs no --from).
The public key: 'toolgate receipts pubkey --config FILE'.
Exits 0 when the file verifies, 1 otherwise.`,
		Example: `  toolgate receipts verify receipts.jsonl --pubkey toolgate.pub
  toolgate receipts verify --config toolgate.yaml`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if cfgFile != "" {
				if len(args) != 0 || pubkey != "" {
					return usage("--config verifies the store in place: give no FILE and no --pubkey")
				}
				cfg, err := loadConfig(cfgFile)
				if err != nil {
					return err
				}
				st, err := openStore(cmd.Context(), cfg)
				if err != nil {
					return err
				}
				defer st.Close()
				if err := st.ChainError(); err != nil {
					return failure("%s: verification FAILED: %v", cfg.Store.DSN, err)
				}
				var buf bytes.Buffer
				if err := st.ExportReceipts(cmd.Context(), &buf, st.ChainID(), 0); err != nil {
					if e := errcode.As(err); e != nil && e.Code == errcode.Internal { // a gap or a dangling checkpoint: tampering
						return failure("%s: verification FAILED: %s", cfg.Store.DSN, e.Message)
					}
					return failure("reading receipts: %v", err)
				}
				if err := verifyReport(cmd, cfg.Store.DSN, &buf, st.PublicKey(), jsonOut, 0); err != nil || jsonOut {
					return err
				}
				// Pairing: every agent.toolCalled has its agent.toolReturned
				// (serve closes interrupted calls at start).
				open, err := st.OpenCalls(cmd.Context())
				if err != nil {
					return failure("reading open calls: %v", err)
				}
				if len(open) == 0 {
					fmt.Fprintln(cmd.OutOrStdout(), "  calls: every agent.toolCalled has its agent.toolReturned")
				} else {
					fmt.Fprintf(cmd.OutOrStdout(), "  note: %d call(s) have no agent.toolReturned yet: running now, or left by a stop that the next 'toolgate serve' closes as gateway_restarted\n", len(open))
				}
				return nil
			}
			if len(args) != 1 || pubkey == "" {
				return usage("give FILE and --pubkey, or --config (see 'toolgate receipts verify --help')")
			}
			keyData, err := os.ReadFile(pubkey)
			if err != nil {
				return failure("reading public key: %v", err)
			}
			pub, err := receipt.ParsePublicKey(keyData)
			if err != nil {
				return failure("public key %s: %v", pubkey, err)
			}
			f, err := os.Open(args[0])
			if err != nil {
				return failure("%v", err)
			}
			defer f.Close()
			return verifyReport(cmd, args[0], f, pub, jsonOut, from)
		},
	}
	cmd.Flags().Uint64Var(&from, "from", 0, "the seq the file starts at (an export made with --from)")
	cmd.Flags().StringVar(&pubkey, "pubkey", "", "Ed25519 public key file (PEM or base64) of the signing gateway")
	cmd.Flags().StringVarP(&cfgFile, "config", "c", "", "verify the configured store's chain in place instead of a file")
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print the verification report (counts, heads, call graph) as JSON")
	return cmd
}

// verifyReport verifies r and prints the outcome for name.
func verifyReport(cmd *cobra.Command, name string, r io.Reader, pub ed25519.PublicKey, jsonOut bool, from uint64) error {
	rep, err := receipt.Verify(r, pub, receipt.VerifyOptions{From: from})
	if err != nil {
		return failure("%s: verification FAILED: %v", name, err)
	}
	if rep.Receipts == 0 {
		return failure("%s: verification FAILED: the file holds no receipts", name)
	}
	if jsonOut {
		enc := json.NewEncoder(cmd.OutOrStdout())
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	fmt.Fprintf(cmd.OutOrStdout(), "%s: OK: %d receipts, %d checkpoints\n", name, rep.Receipts, rep.Checkpoints)
	for _, h := range rep.Heads {
		fmt.Fprintf(cmd.OutOrStdout(), "  chain %s: seq %d..%d (%d receipts), head %s, signed through seq %d\n",
			h.ChainID, h.First, h.Seq, h.Receipts, h.Hash, h.Signed)
		if h.First != 0 {
			fmt.Fprintf(cmd.OutOrStdout(), "  note: chain %s starts at seq %d, not 0: this file continues an earlier one, whose receipts were not checked\n", h.ChainID, h.First)
		}
	}
	return nil
}

func newReceiptsPubkeyCmd() *cobra.Command {
	var file string
	cmd := &cobra.Command{
		Use:   "pubkey --config FILE",
		Short: "Print the gateway's receipt-signing public key (PEM), for 'receipts verify --pubkey'",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadConfig(file)
			if err != nil {
				return err
			}
			key, err := receipt.LoadKey(cfg.Signing.KeyFile)
			if err != nil {
				return failure("signing key %s: %v", cfg.Signing.KeyFile, err)
			}
			_, err = cmd.OutOrStdout().Write(receipt.EncodePublicKey(key.Public().(ed25519.PublicKey)))
			return err
		},
	}
	cmd.Flags().StringVarP(&file, "config", "c", "", "configuration file (required)")
	_ = cmd.MarkFlagRequired("config")
	return cmd
}

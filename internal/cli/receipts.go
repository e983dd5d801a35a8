package cli

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/toolgate/toolgate/receipt"
)

func newReceiptsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "receipts",
		Short: "Verify signed, hash-chained receipts",
	}
	cmd.AddCommand(newReceiptsVerifyCmd())
	return cmd
}

func newReceiptsVerifyCmd() *cobra.Command {
	var pubkey string
	var jsonOut bool
	cmd := &cobra.Command{
		Use:   "verify FILE --pubkey KEYFILE",
		Short: "Verify a receipts file offline",
		Long: `Verify a JSON Lines receipts file: every receipt's body hash, chain continuity (no gap, fork or
reorder), every checkpoint's Ed25519 signature with the given public key, that every receipt is
covered by a signature, the args-hash rule (requestedArgsHash != executedArgsHash needs a
mutationSource) and failure honesty (durationMs iff the tool ran; error iff status is not ok).
The nested call graph is rebuilt from parentCallId. The first failure is reported with its seq.
Exits 0 when the file verifies, 1 otherwise.`,
		Example: `  toolgate receipts verify receipts.jsonl --pubkey toolgate.pub`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
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
			rep, err := receipt.Verify(f, pub, receipt.VerifyOptions{})
			if err != nil {
				return failure("%s: verification FAILED: %v", args[0], err)
			}
			if rep.Receipts == 0 {
				return failure("%s: verification FAILED: the file holds no receipts", args[0])
			}
			if jsonOut {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(rep)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: OK: %d receipts, %d checkpoints\n", args[0], rep.Receipts, rep.Checkpoints)
			for _, h := range rep.Heads {
				fmt.Fprintf(cmd.OutOrStdout(), "  chain %s: seq %d..%d (%d receipts), head %s, signed through seq %d\n",
					h.ChainID, h.First, h.Seq, h.Receipts, h.Hash, h.Signed)
				if h.First != 0 {
					fmt.Fprintf(cmd.OutOrStdout(), "  note: chain %s starts at seq %d, not 0: this file continues an earlier one, whose receipts were not checked\n", h.ChainID, h.First)
				}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&pubkey, "pubkey", "", "Ed25519 public key file (PEM or base64) of the signing gateway (required)")
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print the verification report (counts, heads, call graph) as JSON")
	_ = cmd.MarkFlagRequired("pubkey")
	return cmd
}

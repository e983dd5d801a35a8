package cli

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/internal/config"
	"github.com/toolgate/toolgate/receipt"
	"github.com/toolgate/toolgate/store"
	"github.com/toolgate/toolgate/store/sqlite"
)

func newReceiptsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "receipts",
		Short: "Verify signed, hash-chained receipts",
	}
	cmd.AddCommand(newReceiptsVerifyCmd(), newReceiptsExportCmd(), newReceiptsPubkeyCmd())
	return cmd
}

// storeChains lists st's chains (every backend openStore returns lists
// them).
func storeChains(ctx context.Context, st store.Store) ([]store.ChainInfo, error) {
	l, ok := st.(store.ChainLister)
	if !ok {
		return nil, failure("this store cannot list its receipt chains")
	}
	cs, err := l.Chains(ctx)
	if err != nil {
		return nil, failure("listing receipt chains: %v", err)
	}
	return cs, nil
}

func newReceiptsExportCmd() *cobra.Command {
	var file, chain string
	var from uint64
	cmd := &cobra.Command{
		Use:   "export --config FILE [--chain ID] [--from SEQ]",
		Short: "Write the store's receipts and checkpoints as a JSON Lines file to stdout",
		Long: `Export the receipt chains of the configured store (SQLite or PostgreSQL, per store.driver), each in
chain order with the signed checkpoints that cover it, as JSON Lines on standard output: every chain
(one per signing key: each replica, or each key a gateway has had), one after the other in chain id
order, or only the chain --chain names. The output verifies offline with
'toolgate receipts verify FILE --pubkey KEYS', KEYS holding the public key of every chain in it
('toolgate receipts pubkey --config FILE > KEYS' writes them). --from starts every exported chain at
that seq (the file then begins with the checkpoint that anchors it; verify it with --from SEQ).`,
		Example: `  toolgate receipts export --config toolgate.yaml > receipts.jsonl
  toolgate receipts export --config toolgate.yaml --chain ed25519:3f9a0c1d2e4b5a69 > one.jsonl`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadConfig(file)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			st, err := openStore(ctx, cfg)
			if err != nil {
				return err
			}
			defer st.Close()
			cs, err := storeChains(ctx, st)
			if err != nil {
				return err
			}
			var ids []string
			for _, c := range cs {
				if chain != "" && c.ID == chain {
					ids = append(ids, c.ID)
				} else if chain == "" && (c.Receipts > 0 || c.Checkpoint) {
					ids = append(ids, c.ID)
				}
			}
			if chain != "" && len(ids) == 0 {
				return failure("chain %s: the store %s has no such chain (see 'toolgate receipts pubkey --config %s')", chain, storeName(cfg), file)
			}
			for _, id := range ids {
				if err := st.ExportReceipts(ctx, cmd.OutOrStdout(), id, from); err != nil {
					return failure("export chain %s: %v", id, err)
				}
			}
			if sq, ok := st.(*sqlite.Store); ok && sq.ChainError() != nil && (chain == "" || chain == sq.ChainID()) {
				return failure("exported only the receipts a signed checkpoint covers: %v", sq.ChainError())
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&file, "config", "c", "", "configuration file (required)")
	cmd.Flags().StringVar(&chain, "chain", "", "export only this chain (a chain id, as 'receipts pubkey --config' lists)")
	cmd.Flags().Uint64Var(&from, "from", 0, "first receipt seq to export, in every exported chain")
	_ = cmd.MarkFlagRequired("config")
	return cmd
}

func newReceiptsVerifyCmd() *cobra.Command {
	var pubkey, keysFile, cfgFile string
	var jsonOut bool
	var from uint64
	cmd := &cobra.Command{
		Use:   "verify (FILE --pubkey KEYS [--from SEQ] | --config FILE [--keys KEYS])",
		Short: "Verify a receipts file offline, or every receipt chain of the configured store",
		Long: `Verify a JSON Lines receipts file: every receipt's body hash, chain continuity (no gap, fork or
reorder), every checkpoint's Ed25519 signature with the given public key, that every receipt is
covered by a signature, the args-hash rule (requestedArgsHash != executedArgsHash needs a
mutationSource) and failure honesty (durationMs iff the tool ran; error iff status is not ok).
The nested call graph is rebuilt from parentCallId. The first failure is reported with its seq.
A file may hold several chains (an export of several replicas): KEYS must then hold the public
key of each. --from SEQ verifies a file exported with 'receipts export --from SEQ' (its first
receipts' prevHash is then trusted; a chain that opens with a checkpoint, as after a prune, needs
no --from).

With --config, every chain of the configured store (SQLite or PostgreSQL, per store.driver) is
verified in place, one per signing key, and reported per chain: its id, the receipts verified,
its head seq, the newest checkpoint and whether it covers the head, verified or FAILED with the
reason. Each chain is checked with its public key: from --keys KEYS when the file has it, else the
config's signing key, else the key the store recorded when that replica first opened it (which
proves only what the store says: pass --keys with keys taken from the replicas to detect a
rewritten store).

KEYS is a file of public keys: PEM PUBLIC KEY blocks, or lines "CHAIN_ID KEY" as
'toolgate receipts pubkey --config FILE' prints them, or lines with a key alone (base64 or hex).
Exits 0 when everything verifies, 1 otherwise (with --config: when any chain fails).`,
		Example: `  toolgate receipts verify receipts.jsonl --pubkey toolgate.pub
  toolgate receipts verify --config toolgate.yaml
  toolgate receipts verify --config toolgate.yaml --keys replicas.keys`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var keys []ed25519.PublicKey
			for _, f := range []string{pubkey, keysFile} {
				if f == "" {
					continue
				}
				k, err := readKeys(f)
				if err != nil {
					return failure("%v", err)
				}
				keys = append(keys, k...)
			}
			if cfgFile != "" {
				if len(args) != 0 {
					return usage("--config verifies the store in place: give no FILE")
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
				return verifyStore(cmd, cfg, st, keys, jsonOut)
			}
			if len(args) != 1 || len(keys) == 0 {
				return usage("give FILE and --pubkey, or --config (see 'toolgate receipts verify --help')")
			}
			f, err := os.Open(args[0])
			if err != nil {
				return failure("%v", err)
			}
			defer f.Close()
			return verifyReport(cmd, args[0], f, keys, jsonOut, from)
		},
	}
	cmd.Flags().Uint64Var(&from, "from", 0, "the seq the file starts at (an export made with --from)")
	cmd.Flags().StringVar(&pubkey, "pubkey", "", "file of the public key(s) (PEM, base64, or 'receipts pubkey' lines) of the signing gateway(s)")
	cmd.Flags().StringVar(&keysFile, "keys", "", "file of trusted public keys, as for --pubkey (with --config: they take precedence over the store's)")
	cmd.Flags().StringVarP(&cfgFile, "config", "c", "", "verify every chain of the configured store in place instead of a file")
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print the verification report as JSON")
	return cmd
}

// verifyReport verifies r with keys and prints the outcome for name.
func verifyReport(cmd *cobra.Command, name string, r io.Reader, keys []ed25519.PublicKey, jsonOut bool, from uint64) error {
	rep, err := receipt.Verify(r, keys[0], receipt.VerifyOptions{From: from, Keys: keys[1:]})
	if err != nil {
		// The library names its option (From); this command's is --from.
		msg := strings.Replace(err.Error(), "set From", "pass --from with the file's first seq", 1)
		return failure("%s: verification FAILED: %s", name, msg)
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

// chainResult is one chain's outcome of 'receipts verify --config' (its
// --json form).
type chainResult struct {
	ChainID string `json:"chainId"`
	// KeySource is where the verifying key came from: "keys" (--keys or
	// --pubkey), "signing_key" (the config's signing.key_file), "store"
	// (recorded in the store), "" (none known).
	KeySource string `json:"keySource"`
	// StoredReceipts is the number of the chain's receipts in the store;
	// Receipts and Checkpoints are those verified (all but the receipts
	// after the newest checkpoint, of which there are none when the head
	// is covered).
	StoredReceipts int64  `json:"storedReceipts"`
	Receipts       int    `json:"receipts"`
	Checkpoints    int    `json:"checkpoints"`
	First          uint64 `json:"first"`
	HeadSeq        uint64 `json:"headSeq"`
	HeadHash       string `json:"headHash,omitempty"`
	// CheckpointSeq is the seq of the newest checkpoint (nil: none);
	// HeadCovered whether it signs the head receipt.
	CheckpointSeq *uint64 `json:"checkpointSeq,omitempty"`
	HeadCovered   bool    `json:"headCovered"`
	Verified      bool    `json:"verified"`
	Error         string  `json:"error,omitempty"`
}

// line is r as one report line (without the leading indent).
func (r *chainResult) line() string {
	var b strings.Builder
	fmt.Fprintf(&b, "chain %s: ", r.ChainID)
	if r.Verified {
		b.WriteString("verified")
	} else {
		b.WriteString("FAILED: " + r.Error)
	}
	if r.StoredReceipts == 0 && r.Receipts == 0 {
		b.WriteString("; no receipts yet")
	} else {
		fmt.Fprintf(&b, "; %d receipts", r.StoredReceipts)
		if r.Verified {
			fmt.Fprintf(&b, " (seq %d..%d verified)", r.First, r.HeadSeq)
		}
		fmt.Fprintf(&b, ", head seq %d", r.HeadSeq)
		if r.CheckpointSeq == nil {
			b.WriteString(", no checkpoint")
		} else if r.HeadCovered {
			fmt.Fprintf(&b, ", covered by the newest checkpoint (seq %d)", *r.CheckpointSeq)
		} else {
			fmt.Fprintf(&b, ", newest checkpoint seq %d does not cover it", *r.CheckpointSeq)
		}
	}
	if r.KeySource != "" {
		fmt.Fprintf(&b, "; key: %s", map[string]string{"keys": "from --keys", "signing_key": "the config's signing key", "store": "recorded in the store"}[r.KeySource])
	}
	if r.Verified && r.First != 0 {
		fmt.Fprintf(&b, "; starts at seq %d, anchored by the checkpoint kept by a prune", r.First)
	}
	return b.String()
}

// verifyStore verifies every chain of st and reports per chain.
func verifyStore(cmd *cobra.Command, cfg *config.Config, st store.Store, keys []ed25519.PublicKey, jsonOut bool) error {
	ctx := cmd.Context()
	name := storeName(cfg)
	cs, err := storeChains(ctx, st)
	if err != nil {
		return err
	}
	given := map[string]ed25519.PublicKey{}
	for _, k := range keys {
		given[receipt.KeyID(k)] = k
	}
	local := map[string]ed25519.PublicKey{}
	if pub := st.PublicKey(); pub != nil {
		local[st.ChainID()] = pub
	} else if priv, err := receipt.LoadKey(cfg.Signing.KeyFile); err == nil {
		pub := priv.Public().(ed25519.PublicKey)
		local[receipt.KeyID(pub)] = pub
	}
	sq, _ := st.(*sqlite.Store)
	var results []*chainResult
	total, failed, receipts, checkpoints := 0, 0, 0, 0
	var stored int64
	for _, c := range cs {
		r := &chainResult{ChainID: c.ID, StoredReceipts: c.Receipts, HeadSeq: c.HeadSeq}
		if c.Checkpoint {
			seq := c.CheckpointSeq
			r.CheckpointSeq = &seq
			r.HeadCovered = c.Receipts > 0 && seq == c.HeadSeq
		}
		if err := verifyChain(ctx, st, c, r, given, local); err != nil {
			return err
		}
		if sq != nil && c.ID == sq.ChainID() && sq.ChainError() != nil && (r.Verified || strings.HasPrefix(r.Error, "head receipt")) {
			// The sqlite store's own finding names the uncovered receipt.
			r.Verified, r.Error = false, sq.ChainError().Error()
		}
		if !r.Verified {
			failed++
		}
		total++
		receipts += r.Receipts
		checkpoints += r.Checkpoints
		stored += c.Receipts
		results = append(results, r)
	}
	if jsonOut {
		enc := json.NewEncoder(cmd.OutOrStdout())
		enc.SetIndent("", "  ")
		if err := enc.Encode(struct {
			Store  string         `json:"store"`
			OK     bool           `json:"ok"`
			Chains []*chainResult `json:"chains"`
		}{name, failed == 0 && stored > 0, results}); err != nil {
			return err
		}
	}
	switch {
	case failed > 0:
		var b strings.Builder
		fmt.Fprintf(&b, "%s: verification FAILED: %d of %d chain(s) failed", name, failed, total)
		for _, r := range results {
			b.WriteString("\n  " + r.line())
		}
		return failure("%s", b.String())
	case stored == 0:
		return failure("%s: verification FAILED: the store holds no receipts", name)
	case jsonOut:
		return nil
	}
	out := cmd.OutOrStdout()
	fmt.Fprintf(out, "%s: OK: %d receipts, %d checkpoints in %d chain(s), every chain verified\n", name, receipts, checkpoints, total)
	for _, r := range results {
		fmt.Fprintln(out, "  "+r.line())
	}
	if sq != nil {
		// Pairing: every agent.toolCalled has its agent.toolReturned
		// (serve closes interrupted calls at start).
		open, err := sq.OpenCalls(ctx)
		if err != nil {
			return failure("reading open calls: %v", err)
		}
		if len(open) == 0 {
			fmt.Fprintln(out, "  calls: every agent.toolCalled has its agent.toolReturned")
		} else {
			fmt.Fprintf(out, "  note: %d call(s) have no agent.toolReturned yet: running now, or left by a stop that the next 'toolgate serve' closes as gateway_restarted\n", len(open))
		}
	}
	return nil
}

// verifyChain verifies chain c of st into r: the key (given, then local,
// then the store's record), the export through the newest checkpoint
// (receipt.Verify) and the head's coverage. Only a failure to read the
// store is returned; what the chain fails is recorded in r.
func verifyChain(ctx context.Context, st store.Store, c store.ChainInfo, r *chainResult, given, local map[string]ed25519.PublicKey) error {
	var pub ed25519.PublicKey
	switch {
	case given[c.ID] != nil:
		pub, r.KeySource = given[c.ID], "keys"
	case local[c.ID] != nil:
		pub, r.KeySource = local[c.ID], "signing_key"
	case c.PublicKey != nil:
		pub, r.KeySource = c.PublicKey, "store"
	}
	if c.PublicKey != nil && receipt.KeyID(c.PublicKey) != c.ID {
		r.Error = fmt.Sprintf("the public key recorded for it has chain id %s: the store was changed outside toolgate", receipt.KeyID(c.PublicKey))
		return nil
	}
	if pub == nil {
		r.Error = "no public key is known for this chain: pass --keys FILE with it"
		return nil
	}
	if c.Receipts == 0 && !c.Checkpoint {
		r.Verified = true // a key that has signed nothing yet
		return nil
	}
	pr, pw := io.Pipe()
	exported := make(chan error, 1)
	go func() {
		err := st.ExportReceipts(ctx, pw, c.ID, 0)
		pw.CloseWithError(err)
		exported <- err
	}()
	rep, verr := receipt.Verify(pr, pub, receipt.VerifyOptions{})
	pr.CloseWithError(errors.New("verification stopped"))
	eerr := <-exported
	if eerr != nil {
		if e := errcode.As(eerr); e != nil && e.Code == errcode.Internal { // a gap or a dangling checkpoint: tampering
			r.Error = e.Message
			return nil
		}
		if verr == nil || !errors.As(verr, new(*receipt.VerifyError)) {
			return failure("reading the receipts of chain %s: %v", c.ID, eerr)
		}
	}
	if verr != nil {
		r.Error = verr.Error()
		return nil
	}
	r.Receipts, r.Checkpoints = rep.Receipts, rep.Checkpoints
	for _, h := range rep.Heads {
		if h.ChainID == c.ID {
			r.First, r.HeadHash = h.First, h.Hash
			if h.Seq > r.HeadSeq {
				r.HeadSeq = h.Seq // appended since Chains read the head
			}
		}
	}
	switch {
	case c.Receipts > 0 && !c.Checkpoint:
		r.Error = fmt.Sprintf("head receipt seq %d is not covered by a signed checkpoint: the chain has none", c.HeadSeq)
	case !r.HeadCovered:
		r.Error = fmt.Sprintf("head receipt seq %d is not covered by the newest signed checkpoint (seq %d)", c.HeadSeq, c.CheckpointSeq)
	case rep.Receipts == 0:
		r.Error = "no receipt could be exported"
	default:
		r.Verified = true
	}
	return nil
}

func newReceiptsPubkeyCmd() *cobra.Command {
	var file, keyFile string
	var local bool
	cmd := &cobra.Command{
		Use:   "pubkey (--config FILE [--local] | --key-file KEY)",
		Short: "Print the receipt-signing public keys the store knows, or the local one (PEM)",
		Long: `With --config, print the public key of every receipt chain the configured store (SQLite or
PostgreSQL) knows, one chain per line, sorted by chain id:

  CHAIN_ID PUBLIC_KEY

CHAIN_ID is the chain id (the key id, e.g. ed25519:3f9a0c1d2e4b5a69) and PUBLIC_KEY the raw 32-byte
Ed25519 public key in standard base64. Each replica records its key in the store when it first
opens it. The output is a keys file for 'receipts verify --pubkey/--keys'.

With --local (and --config), or --key-file KEY, print instead the public key of the config's
signing key (signing.key_file), or of the private key file KEY, as one PEM PUBLIC KEY block.`,
		Example: `  toolgate receipts pubkey --config toolgate.yaml > replicas.keys
  toolgate receipts pubkey --config toolgate.yaml --local > toolgate.pub
  toolgate receipts pubkey --key-file /etc/toolgate/signing.key`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case keyFile != "" && (file != "" || local):
				return usage("--key-file prints that key: give no --config and no --local")
			case keyFile == "" && file == "":
				return usage("give --config FILE (every key of the store; --local: the config's key) or --key-file KEY")
			case keyFile == "" && local:
				cfg, err := loadConfig(file)
				if err != nil {
					return err
				}
				keyFile = cfg.Signing.KeyFile
			}
			if keyFile != "" {
				key, err := receipt.LoadKey(keyFile)
				if err != nil {
					return failure("signing key %s: %v", keyFile, err)
				}
				_, err = cmd.OutOrStdout().Write(receipt.EncodePublicKey(key.Public().(ed25519.PublicKey)))
				return err
			}
			cfg, err := loadConfig(file)
			if err != nil {
				return err
			}
			st, err := openStore(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			defer st.Close()
			cs, err := storeChains(cmd.Context(), st)
			if err != nil {
				return err
			}
			n := 0
			for _, c := range cs {
				if c.PublicKey == nil {
					continue
				}
				if _, err := fmt.Fprintf(cmd.OutOrStdout(), "%s %s\n", c.ID, store.EncodeKey(c.PublicKey)); err != nil {
					return err
				}
				n++
			}
			if n == 0 {
				return failure("the store %s records no signing key yet (a gateway records its own when it opens the store)", storeName(cfg))
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&file, "config", "c", "", "configuration file")
	cmd.Flags().BoolVar(&local, "local", false, "print the config's signing key (PEM) instead of the store's keys")
	cmd.Flags().StringVar(&keyFile, "key-file", "", "print the public key of this private key file (PEM)")
	return cmd
}

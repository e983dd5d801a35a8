package sqlite_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/toolgate/toolgate/receipt"
	"github.com/toolgate/toolgate/store"
	"github.com/toolgate/toolgate/store/sqlite"
)

func Example() {
	dir, err := os.MkdirTemp("", "toolgate-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()
	signer := receipt.NewSigner(ed25519.NewKeyFromSeed(bytes.Repeat([]byte{1}, 32)))
	s, err := sqlite.Open(ctx, filepath.Join(dir, "toolgate.db"), sqlite.Options{Signer: signer})
	if err != nil {
		panic(err)
	}
	defer s.Close()

	// The pipeline writes receipts through this adapter; Append returns
	// once the receipt is linked and durable.
	log := store.ReceiptLog(s)
	for i := range 3 {
		d := int64(2)
		hash := fmt.Sprintf("%064x", i)
		r := &receipt.Receipt{
			ReceiptID: fmt.Sprint("rcpt_", i), CallID: fmt.Sprint("call_", i), RunID: "run_1", AgentID: "agent.demo",
			Principal: "alice", Tenant: "acme", ToolID: "native:text.echo", Transport: "native",
			Decision:          receipt.Decision{Effect: "allow", RuleID: "readers", PolicyVersion: "v1"},
			RequestedArgsHash: hash, ExecutedArgsHash: hash, Status: receipt.StatusOK,
			StartedAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), DurationMs: &d,
		}
		if err := log.Append(ctx, r); err != nil {
			panic(err)
		}
		fmt.Println("receipt", r.Seq, r.PrevHash == receipt.ZeroHash)
	}
	// Export the chain and verify it offline.
	var buf bytes.Buffer
	if err := s.ExportReceipts(ctx, &buf, s.ChainID(), 0); err != nil {
		panic(err)
	}
	rep, err := receipt.Verify(&buf, s.PublicKey(), receipt.VerifyOptions{})
	if err != nil {
		panic(err)
	}
	fmt.Println("verified", rep.Receipts, "receipts, signed up to seq", rep.Heads[0].Signed)
	// Output:
	// receipt 0 true
	// receipt 1 false
	// receipt 2 false
	// verified 3 receipts, signed up to seq 2
}

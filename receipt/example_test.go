package receipt_test

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/toolgate/toolgate/receipt"
)

func Example() {
	signer := receipt.NewSigner(ed25519.NewKeyFromSeed(make([]byte, 32))) // use LoadOrCreateKey in production
	clock := func() time.Time { return time.Date(2026, 11, 29, 15, 4, 6, 0, time.UTC) }
	chain := receipt.NewChain(signer, receipt.Options{Now: clock})

	var file bytes.Buffer
	w := receipt.NewWriter(&file)
	argsHash := sha256.Sum256([]byte(`{"path":"/tmp/a.txt"}`))
	took := int64(12)
	r := &receipt.Receipt{
		ReceiptID: "rcpt_1", CallID: "call_1", RunID: "run_1", AgentID: "agent.planner",
		Principal: "alice", Tenant: "acme", ToolID: "mcp:fs.read_file", Transport: "mcp",
		Decision:          receipt.Decision{Effect: "allow", RuleID: "readers", PolicyVersion: "v1"},
		RequestedArgsHash: hex.EncodeToString(argsHash[:]), ExecutedArgsHash: hex.EncodeToString(argsHash[:]),
		Status: receipt.StatusOK, StartedAt: time.Date(2026, 11, 29, 15, 4, 5, 123_000_000, time.UTC), DurationMs: &took,
	}
	if err := chain.AppendWith(r, w.WriteReceipt); err != nil { // link, then write in seq order
		fmt.Println(err)
		return
	}
	if cp, ok := chain.Checkpoint(); ok { // one signature covers every receipt so far
		_ = w.WriteCheckpoint(cp)
	}

	rep, err := receipt.Verify(bytes.NewReader(file.Bytes()), signer.PublicKey(), receipt.VerifyOptions{})
	fmt.Println(rep.Receipts, rep.Checkpoints, rep.Chains[0] == signer.KeyID(), err)

	tampered := bytes.Replace(file.Bytes(), []byte(`"durationMs":12`), []byte(`"durationMs":13`), 1)
	_, err = receipt.Verify(bytes.NewReader(tampered), signer.PublicKey(), receipt.VerifyOptions{})
	fmt.Println(err)
	// Output:
	// 1 1 true <nil>
	// receipt seq 0 (line 1): body hash mismatch
}

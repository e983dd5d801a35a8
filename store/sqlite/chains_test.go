package sqlite

import (
	"context"
	"testing"

	"github.com/toolgate/toolgate/receipt"
)

// Issue 14 point 7: every signer a store was opened with is recorded, so
// Chains lists each chain with its key, receipt count, head and newest
// checkpoint (a key rotation leaves two chains in one file).
func TestChainsAfterKeyRotation(t *testing.T) {
	ctx := context.Background()
	path := tempDB(t)
	s := openAt(t, path, Options{Signer: signerN(1)})
	for _, id := range []string{"a", "b"} {
		if err := s.AppendReceipt(ctx, rcpt(id)); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	s = openAt(t, path, Options{Signer: signerN(2)})
	cs, err := s.Chains(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) != 2 {
		t.Fatalf("chains: %+v", cs)
	}
	for _, c := range cs {
		if receipt.KeyID(c.PublicKey) != c.ID || c.FirstSeen.IsZero() {
			t.Fatalf("chain %s: key %x first seen %v", c.ID, c.PublicKey, c.FirstSeen)
		}
		switch c.ID {
		case signerN(1).KeyID():
			if c.Receipts != 2 || c.HeadSeq != 1 || !c.Checkpoint || c.CheckpointSeq != 1 {
				t.Fatalf("old chain: %+v", c)
			}
		case signerN(2).KeyID():
			if c.Receipts != 0 || c.Checkpoint {
				t.Fatalf("new chain: %+v", c)
			}
		default:
			t.Fatalf("unknown chain %+v", c)
		}
	}
}

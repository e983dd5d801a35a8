package sqlite_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"path/filepath"
	"testing"

	"github.com/toolgate/toolgate/receipt"
	"github.com/toolgate/toolgate/store"
	"github.com/toolgate/toolgate/store/sqlite"
	"github.com/toolgate/toolgate/store/storetest"
)

// testSigner is a fixed key, so that reopened stores continue one chain.
func testSigner() *receipt.Signer {
	return receipt.NewSigner(ed25519.NewKeyFromSeed(bytes.Repeat([]byte{3}, 32)))
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "toolgate.db"), sqlite.Options{Signer: testSigner()})
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

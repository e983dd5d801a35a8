package cli

import (
	"context"
	"os"
	"time"

	"github.com/toolgate/toolgate/internal/config"
	"github.com/toolgate/toolgate/receipt"
	"github.com/toolgate/toolgate/store/sqlite"
)

// followPoll bounds how long `audit tail --follow` takes to show an event
// that a gateway (another process) committed to the store.
const followPoll = 200 * time.Millisecond

// openStore opens the configured durable store with the gateway's signing
// key. The key file must exist (the gateway creates it on first start):
// reading a store with a new key would start a different chain.
func openStore(ctx context.Context, cfg *config.Config) (*sqlite.Store, error) {
	if cfg.Store.Driver != "sqlite" {
		return nil, failure("store.driver %q: this command reads the sqlite store only", cfg.Store.Driver)
	}
	if _, err := os.Stat(cfg.Signing.KeyFile); err != nil {
		return nil, failure("signing key %s: %v (the gateway creates it on first start)", cfg.Signing.KeyFile, err)
	}
	if _, err := os.Stat(cfg.Store.DSN); err != nil {
		return nil, failure("store %s: %v", cfg.Store.DSN, err)
	}
	key, _, err := receipt.LoadOrCreateKey(cfg.Signing.KeyFile)
	if err != nil {
		return nil, failure("signing key %s: %v", cfg.Signing.KeyFile, err)
	}
	st, err := sqlite.Open(ctx, cfg.Store.DSN, sqlite.Options{Synchronous: cfg.Store.Synchronous, Signer: receipt.NewSigner(key), Existing: true, FollowPoll: followPoll})
	if err != nil {
		return nil, failure("opening store %s: %v", cfg.Store.DSN, err)
	}
	return st, nil
}

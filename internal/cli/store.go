package cli

import (
	"context"
	"log/slog"
	"net/url"
	"os"
	"time"

	"github.com/toolgate/toolgate/internal/config"
	"github.com/toolgate/toolgate/receipt"
	"github.com/toolgate/toolgate/store"
	"github.com/toolgate/toolgate/store/postgres"
	"github.com/toolgate/toolgate/store/sqlite"
)

// followPoll bounds how long `audit tail --follow` takes to show an event
// that a gateway (another process) committed to the store.
const followPoll = 200 * time.Millisecond

// openStore opens the configured durable store for a command that reads
// it (audit, receipts, approvals), per store.driver:
//
//   - sqlite: the existing file, with the gateway's signing key. The key
//     file must exist (the gateway creates it on first start): reading a
//     store with a new key would start a different chain.
//   - postgres: the shared database, without a receipt chain
//     (postgres.Options.NoReceipts): the command runs beside the replicas,
//     possibly with one replica's own config, so it neither needs the key
//     nor takes the chain's lock; it writes no receipts.
//
// The result is a *sqlite.Store or a *postgres.Store. Errors are CLI
// failures naming the store without credentials.
func openStore(ctx context.Context, cfg *config.Config) (store.Store, error) {
	switch cfg.Store.Driver {
	case "postgres":
		octx, cancel := context.WithTimeout(ctx, serveStoreTimeout)
		defer cancel()
		st, err := postgres.Open(octx, cfg.Store.DSN, postgres.Options{NoReceipts: true, MaxConns: 4})
		if err != nil {
			return nil, failure("opening store %s: %v", redactDSN(cfg.Store.DSN), err)
		}
		return st, nil
	case "sqlite":
	default:
		return nil, failure("store.driver %q: this command reads the sqlite or postgres store only", cfg.Store.Driver)
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
	st, err := sqlite.Open(ctx, cfg.Store.DSN, sqlite.Options{Synchronous: cfg.Store.Synchronous, NoJournal: cfg.Store.NoJournal(), Signer: receipt.NewSigner(key), Existing: true, FollowPoll: followPoll})
	if err != nil {
		return nil, failure("opening store %s: %v", cfg.Store.DSN, err)
	}
	return st, nil
}

// storeName names cfg's store in messages: the sqlite path, or the
// postgres DSN without its password.
func storeName(cfg *config.Config) string {
	if cfg.Store.Driver == "postgres" {
		return redactDSN(cfg.Store.DSN)
	}
	return cfg.Store.DSN
}

// serveStoreTimeout bounds how long serve waits for the store at start
// (a PostgreSQL server that does not answer fails the start).
const serveStoreTimeout = 15 * time.Second

// openServeStore opens the gateway's store for serve: the sqlite file
// (exclusive, with retention) or the shared PostgreSQL database
// (store.driver postgres; audit.retention is refused for it by
// backendIssues). Errors are CLI failures naming the store without
// credentials.
func openServeStore(ctx context.Context, cfg *config.Config, signer *receipt.Signer, retention time.Duration, logger *slog.Logger) (store.Store, error) {
	if cfg.Store.Driver == "postgres" {
		octx, cancel := context.WithTimeout(ctx, serveStoreTimeout)
		defer cancel()
		st, err := postgres.Open(octx, cfg.Store.DSN, postgres.Options{Signer: signer, Logger: logger})
		if err != nil {
			return nil, failure("opening store %s: %v", redactDSN(cfg.Store.DSN), err)
		}
		return st, nil
	}
	st, err := sqlite.Open(ctx, cfg.Store.DSN, sqlite.Options{Synchronous: cfg.Store.Synchronous, NoJournal: cfg.Store.NoJournal(), Signer: signer, Exclusive: true,
		Retention: retention, Logger: logger})
	if err != nil {
		return nil, failure("opening store %s: %v", cfg.Store.DSN, err)
	}
	if err := st.ChainError(); err != nil {
		st.Close()
		return nil, failure("store %s: %v", cfg.Store.DSN, err)
	}
	return st, nil
}

// redactDSN returns a postgres DSN fit for a message: a URL with its
// password replaced, anything else as "postgres" (a key=value DSN may hold
// a password anywhere).
func redactDSN(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return "postgres"
	}
	// libpq also takes the password as a query parameter.
	if q := u.Query(); q.Has("password") {
		q.Set("password", "xxxxx")
		u.RawQuery = q.Encode()
	}
	return u.Redacted()
}

// Package postgres is toolgate's shared durable store.Store on PostgreSQL
// (github.com/jackc/pgx/v5, pgxpool), for several gateway replicas that
// share one audit log, one receipt store and one approval inbox. It passes
// store/storetest like store/sqlite and store/memstore.
//
// # Durability and group commit
//
// Every write returns only after the transaction holding it has committed
// (durable before visible, DESIGN.md decision 7; PostgreSQL's
// synchronous_commit decides what a commit survives, "on" by default). As
// on SQLite, one writer goroutine per Store takes the appends (events,
// receipts, outcomes) of every caller of this process through a bounded
// queue (Options.QueueSize; callers block, honouring ctx, while it is
// full) and applies all it can take without waiting, up to
// Options.MaxBatch items, in one transaction: concurrent calls of one
// replica share a commit. A batch is first sent as one pipeline of three
// statements (run heads and events, receipts, checkpoint: one row set per
// table for the whole batch) committed as one implicit transaction, in a
// single round trip. If the database refuses any of it, the batch is
// applied again request by request, each under its own savepoint, so a
// request refused on its own (a Conflict, an idempotent re-append, an
// invalid value) fails or succeeds alone and the rest of the batch
// commits. Once a request is queued its caller
// waits for the outcome whatever its ctx says, so an error always means
// nothing was stored; a request whose ctx ended before the writer reached
// it is skipped with Cancelled or Timeout.
//
// A storage failure (connection lost, server down, a failed COMMIT) rolls
// the batch back and fails every request in it with AuditUnavailable; the
// writer then resumes its receipt chain from the last committed receipt
// (until that read succeeds, every batch fails the same way), so the
// chain never has a gap or a fork, and the next batch tries again: the
// store recovers by itself when the server is back. A batch aborted by
// a deadlock or serialization failure (two replicas locking the same run
// heads in different orders) is retried whole, a few times, before it
// fails.
//
// # Sequences across replicas
//
// A run's sequence numbers are taken, inside the transaction that inserts
// the events, from the run's row in run_heads (INSERT … ON CONFLICT DO
// UPDATE … RETURNING): never from a replica's memory. The row lock orders
// concurrent writers of any replica, and a transaction that rolls back
// gives its numbers back, so every run's sequence is gap-free from 0 even
// when several replicas write events of one run.
//
// # Receipts
//
// The writer links receipts through the store's receipt.Chain inside the
// transaction, and a batch that linked receipts stores a signed checkpoint
// over the new head in the same transaction. On Open the chain resumes
// after the last stored receipt of the signer's chain; a head that no
// stored checkpoint covers cannot come from toolgate (receipts or
// checkpoints were changed by something else), and Open then fails with
// AuditUnavailable rather than sign it (store/sqlite refuses writes).
//
// Each replica signs its own chain with its own key (chainId = the key id),
// and never continues another's. Open enforces it: it takes a
// session-level advisory lock on (schema, chain id),
// pg_try_advisory_lock(hashtext('toolgate.chain.' || current_schema()),
// hashtext(chainId)), on a dedicated connection that it holds until Close,
// before it reads the chain's head. A second Store with the same key on the
// same schema (a second replica configured with the first one's key file)
// fails to open with InvalidConfig (details "chainId") instead of forking
// the chain. The lock lives as long as its connection, so the Store
// guards it (chainGuard): a goroutine checks the connection every second,
// and every writing transaction starts with a fence (fenceStmt) that fails
// unless that connection holds the lock. A Store whose lock connection
// dropped therefore writes nothing (AuditUnavailable, and Ping fails)
// while another Store with its key may hold the lock; it takes the lock
// again on a new connection as soon as it is free, and resumes its chain
// from the stored head. A replica that exits, even by kill -9, releases its lock with its
// connection at once; one cut off by a network partition keeps it until
// the server notices the dead session (its TCP keepalive settings), and a
// restart with that key is refused until then. Open also records the signer's public key in chain_keys (Chains),
// so every replica's chain can be verified from the store.
//
// Options.NoReceipts opens a Store that writes no receipts (the CLI's
// store commands, which run beside the replicas and may share one's
// config): it takes no lock, records no key and may have no Signer.
//
// # Follow: a commit-ordered feed across replicas
//
// events.pos (a bigserial) is assigned at insert, not at commit, so a
// reader following it would skip rows that commit late. Instead every
// writer transaction that inserts events takes, as its last statement
// before COMMIT, the next feed number from the one-row feed_head table and
// records it in feed with its transaction id (events.xid, the column's
// default pg_current_xact_id()). feed_head's row lock is held until the
// commit, so feed numbers commit in increasing order and without gaps (a
// rolled-back transaction gives its number back): a reader that sees
// number N sees every batch before it. Follow delivers a tenant's events
// in (feed number, pos) order, which is commit order, by reading batches
// up to the last committed number; nothing committing later can land
// behind a follower. The cost is that the commits of all replicas
// serialise on that row for the span of their last statement and COMMIT;
// group commit amortises it.
//
// Cursors keep their format (store.Cursor, the event's pos): Follow
// resumes after the event a cursor names, looking up its feed number, so
// a reconnect with the last delivered cursor (Last-Event-ID, audit tail
// --follow) has no gap and no duplicate whichever replica serves it.
//
// Followers are woken by LISTEN/NOTIFY: the writing transaction sends
// pg_notify on a channel per schema (payload: the feed number), delivered
// on commit. Each Store has one dedicated listening connection (outside
// the pool) for its events and approvals channels; when it drops, the
// Store reconnects with backoff and wakes every follower and approval
// watcher. A follower also re-reads the feed every Options.FollowPoll
// (2 s by default) as a safety net, and this Store's own commits wake its
// followers directly. LISTEN needs a session of its own: through a
// transaction-pooling proxy (PgBouncer's transaction mode) notifications
// are lost and followers only see other replicas' commits at the safety
// poll. Only events inserted by a Store are in the feed (a row inserted
// by hand has no feed number and is never followed). EventsByRun and
// EventsByTime read every replica's committed events.
//
// # Approvals across replicas
//
// ResolveApproval notifies, on commit, the approvals channel with the
// approval's id; WatchApproval lets the approval manager wake a waiting
// call the moment another replica resolves it. ConsumeApproval is one
// conditional UPDATE (approved and unexpired → consumed), so exactly one
// caller of any replica consumes an approval.
//
// # Interrupted calls
//
// Every event records the chain id (signing key id) of the Store that
// inserted it (events.chain_id). OpenCalls returns the agent.toolCalled
// events of this Store's chain that no agent.toolReturned answers, so a
// replica restarted with its key after a crash closes the calls it left
// open, and never those of another replica, which may still run.
//
// # Schema
//
// The schema is a set of embedded, numbered migrations
// (migrations/NNNN_name.sql), applied by Open in one transaction that
// first takes a transaction-scoped advisory lock (pg_advisory_xact_lock)
// keyed by the schema's name, so replicas starting together apply them
// once; each is recorded in schema_migrations. A database recording a
// version this build does not know is refused with InvalidConfig. The
// tables live in the connection's current schema (the DSN's search_path).
package postgres

import (
	"context"
	"crypto/ed25519"
	"embed"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/receipt"
	"github.com/toolgate/toolgate/store"
)

var (
	_ store.Store       = (*Store)(nil)
	_ store.Outcomes    = (*Store)(nil)
	_ store.ChainLister = (*Store)(nil)
)

// Defaults of Options.
const (
	DefaultMaxBatch  = 512
	DefaultQueueSize = 1024
	DefaultMaxConns  = 8
	// DefaultFollowPoll is Options.FollowPoll's default.
	DefaultFollowPoll = 2 * time.Second
)

// Options configures Open. Only Signer is required.
type Options struct {
	// Signer signs this Store's receipt chain; its key id is the chain id.
	// Each replica needs its own key. Required.
	Signer *receipt.Signer
	// MaxBatch bounds the items (events and receipts) of one transaction;
	// a single request larger than MaxBatch still commits whole. 0 means
	// DefaultMaxBatch.
	MaxBatch int
	// QueueSize bounds the requests waiting for the writer; callers block
	// (honouring ctx) while it is full. 0 means DefaultQueueSize.
	QueueSize int
	// MaxConns bounds the connection pool (the writer uses one of them);
	// the listening connection (LISTEN/NOTIFY) is one more, outside it.
	// 0 means DefaultMaxConns.
	MaxConns int
	// FollowPoll is how often a follower re-reads the feed when no
	// notification woke it (a safety net: followers are woken by
	// LISTEN/NOTIFY). 0 means DefaultFollowPoll.
	FollowPoll time.Duration
	// Logger receives operator logs (failed batches); nil discards.
	Logger *slog.Logger
	// NoReceipts opens a Store that appends no receipts: Open neither takes
	// the chain lock nor records or resumes Signer's chain, and Signer may
	// be nil (ChainID is then "" and PublicKey nil). AppendReceipt and
	// AppendOutcome fail with InvalidArgument. Every other read and write
	// works. For tools that read the store, or resolve approvals, beside
	// running replicas.
	NoReceipts bool
}

// Store is the PostgreSQL backend. All methods are safe for concurrent
// use; several Stores (of one process or of several replicas) may share
// one database.
type Store struct {
	pool   *pgxpool.Pool
	signer *receipt.Signer
	log    *slog.Logger
	w      *writer
	guard  *chainGuard // holds (and watches) the chain's advisory lock; nil with NoReceipts
	noRcpt bool
	lis    *listener

	followPoll time.Duration
	followers  sync.WaitGroup
	newEvents  waker              // woken after each commit that added events (any replica)
	base       context.Context    // cancelled by Close: ends followers and the listener
	stop       context.CancelFunc // cancels base

	apprMu    sync.Mutex
	apprWatch map[string]map[chan struct{}]struct{} // approval id → watchers (WatchApproval)

	beforeFeed func() // tests: called in a writer transaction after its inserts, before it takes its feed number

	mu     sync.RWMutex // guards closed and sends on w.q
	closed bool

	closeOnce sync.Once
}

//go:embed migrations/*.sql
var migrationFS embed.FS

// Open connects to the PostgreSQL database dsn (a postgres:// URL or a
// key=value string, as pgx accepts), applies the pending schema
// migrations, resumes opts.Signer's receipt chain, opens the listening
// connection (LISTEN on the schema's events and approvals channels) and
// starts the writer. Close releases it.
//
// Errors: InvalidArgument for a missing signer or a malformed dsn;
// InvalidConfig for a database written by a newer toolgate, or when
// another Store holds the signer's chain (see "Receipts"; details
// "chainId"); AuditUnavailable when the stored head of the signer's chain
// is covered by no signed checkpoint (changed outside toolgate);
// AuditUnavailable if the server cannot be reached or a statement fails;
// Cancelled, Timeout if ctx ends first.
func Open(ctx context.Context, dsn string, opts Options) (*Store, error) {
	if opts.Signer == nil && !opts.NoReceipts {
		return nil, errcode.New(errcode.InvalidArgument, "open postgres store: a signer is required")
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, errcode.Wrap(errcode.InvalidArgument, err, "open postgres store: dsn").
			WithDetails(map[string]any{"field": "dsn"})
	}
	cfg.MaxConns = int32(DefaultMaxConns)
	if opts.MaxConns > 0 {
		cfg.MaxConns = int32(min(opts.MaxConns, 1<<16))
	}
	if cfg.MaxConns < 2 {
		cfg.MaxConns = 2
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, store.Unavailable("open postgres store", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, store.Unavailable("open postgres store: connect", err)
	}
	if _, err := migrate(ctx, pool); err != nil {
		pool.Close()
		if pe := (*pgconn.PgError)(nil); errors.As(err, &pe) && pe.Code == "3F000" {
			return nil, errNoSchema()
		}
		return nil, err
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	s := &Store{pool: pool, signer: opts.Signer, log: logger, noRcpt: opts.NoReceipts, followPoll: opts.FollowPoll,
		apprWatch: map[string]map[chan struct{}]struct{}{}}
	if s.followPoll <= 0 {
		s.followPoll = DefaultFollowPoll
	}
	var chain *receipt.Chain
	if !opts.NoReceipts {
		conn, err := lockChain(ctx, cfg.ConnConfig, opts.Signer.KeyID())
		if err != nil {
			pool.Close()
			return nil, err
		}
		s.guard = &chainGuard{cc: cfg.ConnConfig, chainID: opts.Signer.KeyID(), done: make(chan struct{}),
			log: func(msg string, args ...any) { logger.Warn(msg, args...) }}
		s.guard.setConn(conn)
		if _, err := pool.Exec(ctx, `INSERT INTO chain_keys (chain_id, public_key, first_seen) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING`,
			opts.Signer.KeyID(), store.EncodeKey(opts.Signer.PublicKey()), fmtTime(time.Now())); err != nil {
			s.unlock()
			pool.Close()
			return nil, store.Unavailable("open postgres store: record the signing key", err)
		}
		if chain, err = s.resumeChain(ctx); err != nil {
			s.unlock()
			pool.Close()
			return nil, err
		}
		if err := s.checkCovered(ctx, chain); err != nil {
			s.unlock()
			pool.Close()
			return nil, err
		}
	}
	var schema string
	if err := pool.QueryRow(ctx, `SELECT current_schema()`).Scan(&schema); err != nil {
		s.unlock()
		pool.Close()
		return nil, store.Unavailable("open postgres store: current schema", err)
	}
	s.base, s.stop = context.WithCancel(context.Background())
	s.lis = newListener(s, cfg.ConnConfig, schema)
	if err := s.lis.start(ctx); err != nil {
		s.stop()
		s.unlock()
		pool.Close()
		return nil, err
	}
	s.w = newWriter(s, chain, opts)
	go s.w.run()
	if s.guard != nil {
		s.guard.started = true
		go s.guard.run(s.base)
	}
	return s, nil
}

// checkCovered fails with AuditUnavailable when no stored checkpoint
// covers chain's resumed head. Every batch that links receipts stores its
// checkpoint in the same transaction, so such a head was written by
// something else: signing it now would vouch for it (as store/sqlite, which
// refuses every write then; here Open fails).
func (s *Store) checkCovered(ctx context.Context, chain *receipt.Chain) error {
	head, _, ok := chain.Head()
	if !ok {
		return nil
	}
	var covered *int64
	if err := s.pool.QueryRow(ctx, `SELECT MAX(seq) FROM checkpoints WHERE chain_id = $1`, chain.ID()).Scan(&covered); err != nil {
		return store.Unavailable("open postgres store: checkpoints", err)
	}
	if covered != nil && *covered >= 0 && uint64(*covered) >= head {
		return nil
	}
	highest := "none"
	if covered != nil {
		highest = fmt.Sprintf("seq %d", *covered)
	}
	return errcode.Errorf(errcode.AuditUnavailable,
		"open postgres store: receipt chain %s: the stored head (seq %d) is not covered by a signed checkpoint (highest: %s): receipts or checkpoints were changed outside toolgate; "+
			"run `toolgate receipts verify --config` and restore the database from a backup", chain.ID(), head, highest).
		WithDetails(map[string]any{"chainId": chain.ID(), "seq": head})
}

// lockChain opens a dedicated connection and takes on it the session-level
// advisory lock of chain chainID in the connection's schema (see the
// package doc, "Receipts"). The key is two 32-bit hashes, so two chain
// ids whose hashes collide (about one pair in 2^32) would also exclude
// each other. Errors: InvalidConfig when another Store holds it;
// AuditUnavailable if the connection or the query fails.
func lockChain(ctx context.Context, cc *pgx.ConnConfig, chainID string) (*pgx.Conn, error) {
	const op = "open postgres store: lock the receipt chain"
	conn, err := pgx.ConnectConfig(ctx, cc.Copy())
	if err != nil {
		return nil, store.Unavailable(op, err)
	}
	var got bool
	var schema string
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock(hashtext('toolgate.chain.' || current_schema()), hashtext($1)), current_schema()`,
		chainID).Scan(&got, &schema); err != nil {
		_ = conn.Close(context.Background())
		return nil, store.Unavailable(op, err)
	}
	if !got {
		_ = conn.Close(context.Background())
		return nil, errcode.Errorf(errcode.InvalidConfig,
			"open postgres store: receipt chain %s (schema %s) is already being written by another toolgate replica with the same signing key: each replica needs its own key (signing.key_file), or it would continue another replica's chain",
			chainID, schema).WithDetails(map[string]any{"chainId": chainID})
	}
	return conn, nil
}

// unlock releases the chain lock by closing its connection: the guard's
// goroutine closes it when s.base ends (call s.stop first), or, before the
// guard was started, unlock does.
func (s *Store) unlock() {
	switch g := s.guard; {
	case g == nil:
	case g.started:
		<-g.done
	default:
		g.closeConn()
	}
}

// resumeChain returns the signer's chain resumed after its last stored
// receipt.
func (s *Store) resumeChain(ctx context.Context) (*receipt.Chain, error) {
	const op = "resume receipt chain"
	var body []byte
	err := s.pool.QueryRow(ctx, `SELECT body FROM receipts WHERE chain_id = $1 ORDER BY seq DESC LIMIT 1`, s.signer.KeyID()).Scan(&body)
	if errors.Is(err, pgx.ErrNoRows) {
		return receipt.NewChain(s.signer, receipt.Options{}), nil
	}
	if err != nil {
		return nil, store.Unavailable(op, err)
	}
	head := new(receipt.Receipt)
	if err := head.UnmarshalJSON(body); err != nil {
		return nil, errcode.Wrap(errcode.Internal, err, op+": stored receipt")
	}
	c, err := receipt.ResumeChain(s.signer, head, receipt.Options{})
	if err != nil {
		return nil, errcode.Wrap(errcode.AuditUnavailable, err, op)
	}
	return c, nil
}

// Close stops accepting writes, waits for the writes already queued,
// closes every follower's channel, the listening connection and the
// connection pool. Later calls fail with AuditUnavailable. Idempotent;
// returns nil.
// QueueDepth is the number of appends waiting for the writer now (the
// group-commit queue, bounded by Options.QueueSize), for metrics. Safe for
// concurrent use.
func (s *Store) QueueDepth() int { return len(s.w.q) }

func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		close(s.w.q)
		s.mu.Unlock()
		<-s.w.done
		s.stop()
		s.followers.Wait()
		<-s.lis.done
		s.unlock()
		s.pool.Close()
	})
	return nil
}

// readable checks ctx and that the store is open.
func (s *Store) readable(ctx context.Context, op string) error {
	if err := store.ContextError(ctx, op); err != nil {
		return err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return store.ErrClosed(op)
	}
	return nil
}

// ChainID implements store.Receipts.ChainID ("" for a Store opened with
// NoReceipts and no Signer).
func (s *Store) ChainID() string {
	if s.signer == nil {
		return ""
	}
	return s.signer.KeyID()
}

// PublicKey implements store.Receipts.PublicKey (nil for a Store opened
// with NoReceipts and no Signer).
func (s *Store) PublicKey() ed25519.PublicKey {
	if s.signer == nil {
		return nil
	}
	return s.signer.PublicKey()
}

const timeLayout = "2006-01-02T15:04:05.000000000Z"

// fmtTime formats t for storage; the zero time is "".
func fmtTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(timeLayout)
}

// parseTime parses a stored time; "" is the zero time.
func parseTime(s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(timeLayout, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("stored time %q: %w", s, err)
	}
	return t, nil
}

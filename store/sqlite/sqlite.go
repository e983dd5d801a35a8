// Package sqlite is toolgate's embedded durable store.Store: one SQLite
// database file (pure Go, modernc.org/sqlite) in WAL mode, with group
// commit.
//
// # Durability
//
// Every write (events, receipts, approvals, sessions) returns only once it
// is durable (DESIGN.md decision 7): durable before visible.
//
// # Journal
//
// For events, receipts and checkpoints (the writes of every tool call) the
// durability point is the journal: an append-only file next to the
// database, path + JournalSuffix ("toolgate.db.tgjournal", mode 0600). Each
// group commit (see below) is one frame, length-prefixed and CRC-32C
// checksummed (journal.go has the format), appended with one write(2); its
// callers return once that write (and, under "full", its fdatasync) has
// returned. The same rows are inserted, in multi-row statements, into an
// SQLite transaction that the writer keeps open across group commits and
// commits ("applies") only every 100 ms, when it holds 16,384 items, when a
// read needs it, before an approval, session or prune write commits, and at
// Close; after each such commit the journal is truncated to zero. One
// SQLite commit then covers hundreds of calls instead of one batch.
//
// Reads see every acknowledged write: a read of events, receipts,
// checkpoints or chains (EventsByRun, EventsByTime, OpenCalls, Follow's
// catch-up, ReceiptsByChain, ReceiptByID, ExportReceipts, Checkpoints,
// Chains, Prune) first waits until the SQLite transaction holding every row
// acknowledged before the read began has committed (asking the writer to
// commit at once). Follow delivers events live as their frame is written.
// Approvals and sessions are not journaled: their writes commit to SQLite
// before they return, so their reads need no wait.
//
// At Open, a journal that is not empty (the previous owner ended, kill -9
// or power loss, before its next commit) is inserted into SQLite in one
// transaction before anything else happens, idempotently (an event whose
// id or position is stored, a receipt whose id or chain seq is stored, a
// stored checkpoint: each is left as it is, so a journal applied twice adds
// nothing), and truncated; the writer then resumes run sequences and the
// chain from SQLite as before. A last frame cut short by a crash mid-write
// (shorter than its length says, a bad checksum on the last frame, or
// zeros after the last frame) was never acknowledged: it is dropped and cut
// from the file. A bad frame followed by more data is corruption, not a
// torn write: Open fails with AuditUnavailable naming the journal and the
// offset, and changes nothing.
//
// The journal belongs to one Store: Open takes an exclusive flock(2) on
// it. A second Store on the same file (a CLI command beside a running
// gateway) finds it locked and writes without a journal, straight to
// SQLite as below; it sees the owner's rows once the owner has applied them
// (within 100 ms). Options.NoJournal, and systems without flock(2), also
// write without one.
//
// Options.Synchronous chooses what "durable" survives:
//
//   - "normal" (default): a group is written to the journal (or, without a
//     journal, committed to the WAL) before its callers return, without
//     fsync. It survives a crash or kill -9 of the process (the kernel has
//     the data), not a power loss or kernel crash (the last groups may be
//     lost; the database and the journal's whole frames stay consistent:
//     each truncation of the journal is synced, about ten per second at
//     most, so new frames never overlay old ones after a power loss).
//   - "full": the journal is fdatasynced after every group (without a
//     journal, the WAL is fsynced at every commit), and SQLite's commits
//     are synchronous too, before the journal is truncated; it survives
//     power loss.
//
// A journal write that fails (disk full, I/O error) fails the group with
// AuditUnavailable, like a failed commit (see Failures): the part written
// is cut off again, and if even that fails the store refuses every later
// write. An SQLite commit of the open transaction that fails loses no
// acknowledged row: they are still in the journal, and the next
// transaction re-inserts them from it first; reads waiting for that commit
// fail with AuditUnavailable meanwhile.
//
// # Group commit
//
// One writer goroutine owns the only write connection. Callers hand it
// requests through a bounded queue (Options.QueueSize): a caller blocks,
// honouring its ctx, while the queue is full (back-pressure: nothing is
// dropped and nothing grows without bound). The writer opens a transaction
// with the first request it takes and applies every request it can take
// without waiting. It commits when the batch holds Options.MaxBatch items
// (events or receipts; a request is never split), when Options.MaxDelay has
// passed since the batch began, or when the queue is empty. In the last
// case, if the previous batch held more requests than this one, it first
// waits for more as long as they keep arriving (each within 250 µs of the
// last), until it has as many or the deadline passes: the callers it just
// released are about to come back, and a few hundred microseconds of
// waiting buy a batch several times larger. It also waits, up to the
// deadline, while calls are running their tools (their agent.toolCalled
// committed and their outcome, AppendOutcome, not yet taken): their
// outcomes are about to arrive. A wait that times out halves that count,
// so calls that never write an outcome stop being waited for. A lone
// caller never waits.
// Events of a batch are inserted with multi-row statements.
//
// Each caller returns once the group holding its items is durable (its
// journal frame written, or its transaction committed) or has failed. Once a request is queued its caller waits for that outcome
// whatever its ctx says, so an error always means nothing was stored; a
// request whose ctx ended before the writer reached it is skipped and fails
// with Cancelled or Timeout.
//
// # Receipts and checkpoints
//
// The writer links receipts through the store's receipt.Chain
// (AppendWith) inside the transaction, so seq order is commit order and
// there are no gaps. A batch that linked receipts also signs a checkpoint
// over the new head and stores it in the same transaction: every committed
// receipt is covered by a committed checkpoint at all times, not only when
// the writer is idle. The window is zero; the price is one Ed25519
// signature per batch (tens of µs), not per receipt. On Open, the chain
// resumes after the last stored receipt of the signer's chain
// (receipt.ResumeChain). A head that no stored checkpoint covers cannot come
// from toolgate: receipts or checkpoints were changed by something else.
// Open then signs nothing (that would vouch for them) and the store refuses
// every write with AuditUnavailable, while reads still work so that the
// receipts can be exported and verified; ChainError reports it.
//
// Open records the signer's public key in chain_keys (once per key), so
// that every chain the file holds (a key rotation leaves the old one) can
// be listed with its key (Chains) and verified.
//
// AppendOutcome (store.Outcomes) is one request carrying events and a
// receipt: the writer inserts the events, then links the receipt, in the
// same transaction; if the receipt is refused (a duplicate receiptId) the
// events, the last rows inserted, are deleted again, so a run's sequence
// has no gap. The pipeline records a call's agent.toolReturned and its
// receipt this way: one commit instead of two.
//
// # Failures
//
// If anything in a batch fails at the storage level (disk full, I/O error,
// read-only file, a failed COMMIT), the transaction is rolled back and every
// caller in the batch gets *errcode.Error AuditUnavailable: nothing of the
// batch is stored. The writer then restores its in-memory state to the last
// commit: the per-run sequence cache is dropped and the chain is resumed
// from the last committed receipt, so the next receipt takes the seq the
// failed batch would have used and the chain never has a gap or a fork. The
// next batch tries again; the store recovers by itself when the cause goes
// away. Errors of one request (an invalid receipt, a duplicate id, an
// approval in the wrong state) fail that request only; the rest of the
// batch commits.
//
// # Reads
//
// Reads use a separate pool of read-only connections; in WAL mode they
// never block the writer and see only committed data. Follow is served by a
// store.Feed fed by the writer after each commit.
//
// WAL checkpoints (copying the WAL back into the database file) run on a
// third connection in their own goroutine, at most every 250 ms after
// commits, so their copying does not stall commits (and a page the writer
// rewrites at every commit is copied once per interval, not once per
// commit). Once the WAL holds 16 MiB, the writer runs one short checkpoint
// itself when it is idle, or between two batches once it holds 128 MiB
// under load that never lets it idle; that lets the WAL restart from its
// beginning, so it stays bounded.
//
// # Schema
//
// The schema is a set of embedded, numbered migrations
// (migrations/NNNN_name.sql), applied on Open in one transaction and
// recorded in the schema_migrations table; reopening applies nothing. A
// database that records a version this build does not know (written by a
// newer toolgate) is refused with InvalidConfig.
//
// One Store must own a database file: two processes (or two Stores) writing
// the same file would disagree on sequences and chain heads (their writes
// then fail with AuditUnavailable rather than corrupt anything). See
// Exclusive.
//
// # Exclusive
//
// Options.Exclusive makes that rule enforced rather than assumed: Open
// takes an exclusive, non-blocking advisory lock (flock(2)) on a lock file
// next to the database, path + ".lock" (created with mode 0600 if missing,
// never deleted), and holds it until Close. It writes its process id into
// the file once it holds the lock. If another Store holds the lock, in this
// process or another one, Open fails at once, before touching the
// database, with AuditUnavailable: "store toolgate.db is in use by another
// toolgate process (pid N)", N read from the lock file (details "pid" and
// "lock"; "is already open in this process" when N is this process: flock
// locks belong to the open file, so two Stores of one process conflict
// too). The kernel drops the lock when its holder exits, however it exits
// (kill -9 included), so a lock file left behind never blocks anyone; its
// content is only a hint for that message. The descriptor is
// close-on-exec: processes the holder starts do not inherit the lock.
//
// A long-running writer (toolgate serve) should open with Exclusive;
// short-lived tools that read or update the store while it runs (the CLI's
// read and approve commands) open without it, which neither takes nor
// checks the lock. The lock only excludes Stores that ask for it: it is
// advisory. Every name of the database counts as the same store: symbolic
// links are resolved to find the lock file, and Open also flocks the
// database file itself, which a hard link shares (a Store opened through
// another name fails with "in use ... under another name for the same
// file"; no pid is known then). SQLite's own locks are fcntl(2) locks,
// which flock does not touch. Locks on network file systems are only as
// good as the file system's flock.
//
// The lock is implemented on Linux, macOS and the BSDs (the systems with
// flock(2)). On other systems (Windows, Solaris/illumos, AIX, Plan 9,
// WebAssembly) Exclusive is accepted and takes no lock: nothing stops a
// second Store there.
package sqlite

import (
	"context"
	"crypto/ed25519"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	_ "modernc.org/sqlite" // the "sqlite" database/sql driver

	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/receipt"
	"github.com/toolgate/toolgate/store"
)

var (
	_ store.Store       = (*Store)(nil)
	_ store.ChainLister = (*Store)(nil)
)

// Defaults of Options.
const (
	DefaultMaxBatch  = 512
	DefaultMaxDelay  = 2 * time.Millisecond
	DefaultQueueSize = 1024
)

// Options configures Open. Only Signer is required.
type Options struct {
	// Synchronous is "normal" (default; survives a process crash) or "full"
	// (survives power loss); see the package doc. Case-insensitive.
	Synchronous string
	// Signer signs the receipt chain; its key id is the chain id. Required.
	Signer *receipt.Signer
	// MaxBatch bounds the items (events and receipts) of one transaction;
	// a single request larger than MaxBatch still commits whole. 0 means
	// DefaultMaxBatch.
	MaxBatch int
	// MaxDelay bounds how long a batch keeps taking (or waiting for)
	// requests after its first one, and so the added wait for durability.
	// 0 means DefaultMaxDelay.
	MaxDelay time.Duration
	// QueueSize bounds the requests waiting for the writer; callers block
	// (honouring ctx) while it is full. 0 means DefaultQueueSize.
	QueueSize int
	// FollowBuffer is each follower's live buffer in events
	// (store.FeedOptions.Buffer); 0 means 256.
	FollowBuffer int
	// FollowPoll, when positive, makes Follow read the file's commit order
	// at least every FollowPoll (store.FeedOptions.Poll), so that a
	// follower also sees events other processes commit to the file (a
	// gateway's, for a command that follows beside it), within FollowPoll.
	// 0 delivers only this Store's own commits, as they commit.
	FollowPoll time.Duration
	// ReadConns bounds the read-only connection pool; 0 means 4.
	ReadConns int
	// Logger receives operator logs (failed batches, recoveries); nil
	// discards.
	Logger *slog.Logger
	// Retention, when positive, runs Prune in the background with cutoff
	// Now() - Retention: once right after Open, then every PruneEvery
	// (config audit.retention). 0 keeps everything.
	Retention time.Duration
	// PruneEvery is the retention loop's interval; 0 means
	// DefaultPruneEvery.
	PruneEvery time.Duration
	// Now is the clock of the retention loop and of checkpoints' signedAt;
	// nil means time.Now.
	Now func() time.Time
	// Existing makes Open refuse, with InvalidArgument and without
	// changing anything, a path that does not already hold a toolgate store
	// (a missing file, an empty one, or another program's database): for
	// commands that only read or update a gateway's store, which must not
	// turn some other file into one.
	Existing bool
	// Exclusive makes Open take an exclusive advisory lock on path +
	// ".lock", held until Close, and fail with AuditUnavailable naming the
	// holder's pid if another Store (of any process) holds it: one writer
	// per database file, checked before anything is written. false takes
	// and checks no lock (readers that run beside a gateway). No effect on
	// systems without flock(2); see the package doc, "Exclusive".
	Exclusive bool
	// NoJournal makes every group commit an SQLite commit, as before the
	// journal (see the package doc, "Journal"); a journal an earlier owner
	// left is still replayed at Open (config store.journal: false). false
	// (default): the Store that owns the journal file (path +
	// JournalSuffix) makes it the durability point of events, receipts and
	// checkpoints.
	NoJournal bool
}

// Store is the SQLite backend. All methods are safe for concurrent use.
type Store struct {
	path   string
	signer *receipt.Signer
	log    *slog.Logger
	wdb    *sql.DB // one connection, owned by the writer
	rdb    *sql.DB // read-only pool
	cdb    *sql.DB // one connection, owned by the checkpointer
	ckpt   *checkpointer
	w      *writer
	feed   *store.Feed
	lock   *storeLock // the held lock (Options.Exclusive), nil if none

	chainErr error // the writer's refusal found at Open (ChainError), nil if none

	pruneStop chan struct{} // closed by Close to stop the retention loop
	pruneDone chan struct{} // closed when the retention loop has returned

	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error
}

//go:embed migrations/*.sql
var migrationFS embed.FS

// Open opens (creating it if needed) the database at path, applies the
// pending schema migrations in one transaction, resumes the receipt chain
// of opts.Signer and starts the writer. Close releases it.
//
// With opts.Exclusive it first locks path + ".lock" (see the package doc,
// "Exclusive"). A database file Open creates is mode 0600 whatever the
// umask, and so are its -wal and -shm files (SQLite gives them the
// database file's mode) and the lock file; an existing file keeps its
// mode.
//
// Errors (*errcode.Error): InvalidArgument for a nil Signer, an unknown
// Synchronous value, negative sizes, or a path containing '?';
// InvalidConfig if the database's schema is newer than this build knows;
// AuditUnavailable if the file cannot be opened, put in WAL mode or
// migrated, the stored chain head is corrupt, or (Exclusive) another
// Store holds the lock or the lock file cannot be opened.
func Open(ctx context.Context, path string, opts Options) (*Store, error) {
	syncMode, err := checkOptions(path, &opts)
	if err != nil {
		return nil, err
	}
	if opts.Existing {
		if err := checkExisting(ctx, path); err != nil {
			return nil, err
		}
	}
	s := &Store{path: path, signer: opts.Signer, log: opts.Logger}
	if !opts.Existing {
		f, err := openPrivate(path, os.O_RDONLY)
		if err != nil {
			return nil, store.Unavailable("open store "+path, err)
		}
		f.Close()
	}
	if opts.Exclusive {
		if s.lock, err = lockStore(path); err != nil {
			return nil, err
		}
	}
	ok := false
	defer func() {
		if !ok {
			s.closeDBs()
			s.unlock()
		}
	}()
	s.wdb, err = sql.Open("sqlite", path+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous("+syncMode+")"+
		"&_pragma=wal_autocheckpoint(0)&_pragma=cache_size(-32768)&_pragma=temp_store(MEMORY)")
	if err != nil {
		return nil, store.Unavailable("open store", err)
	}
	s.wdb.SetMaxOpenConns(1)
	s.wdb.SetMaxIdleConns(1)
	s.wdb.SetConnMaxLifetime(0)
	s.wdb.SetConnMaxIdleTime(0)
	conn, err := s.wdb.Conn(ctx)
	if err != nil {
		return nil, store.Unavailable("open store "+path, err)
	}
	var mode string
	if err := conn.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
		conn.Close()
		return nil, store.Unavailable("open store: journal mode", err)
	}
	if !strings.EqualFold(mode, "wal") {
		conn.Close()
		return nil, errcode.Errorf(errcode.AuditUnavailable, "open store %s: journal mode is %q, WAL is required", path, mode)
	}
	if _, err := migrate(ctx, conn, migrationFS); err != nil {
		conn.Close()
		return nil, err
	}
	if _, err := conn.ExecContext(ctx, `INSERT OR IGNORE INTO chain_keys (chain_id, public_key, first_seen) VALUES (?, ?, ?)`,
		s.signer.KeyID(), store.EncodeKey(s.signer.PublicKey()), fmtTime(time.Now())); err != nil {
		conn.Close()
		return nil, store.Unavailable("open store: record the signing key", err)
	}
	var j *journal
	// Without a journal of its own (NoJournal), a Store still replays a
	// journal left by an earlier owner that nobody holds now, so that
	// switching the journal off never drops acknowledged rows.
	if fi, serr := os.Stat(path + JournalSuffix); !opts.NoJournal || (serr == nil && fi.Size() > 0) {
		if j, err = openJournal(path, syncMode == "FULL"); err != nil {
			conn.Close()
			return nil, err
		}
		if j != nil {
			if err := replayJournal(ctx, conn, j, s.log); err != nil {
				j.close()
				conn.Close()
				return nil, err
			}
			if opts.NoJournal {
				j.close()
				j = nil
			}
		}
	}
	s.rdb, err = sql.Open("sqlite", path+"?_pragma=busy_timeout(10000)&_pragma=query_only(1)")
	if err != nil {
		conn.Close()
		return nil, store.Unavailable("open store", err)
	}
	reads := opts.ReadConns
	if reads <= 0 {
		reads = 4
	}
	s.rdb.SetMaxOpenConns(reads)
	s.rdb.SetMaxIdleConns(reads)
	s.cdb, err = sql.Open("sqlite", path+"?_pragma=busy_timeout(10000)&_pragma=synchronous("+syncMode+")")
	if err != nil {
		conn.Close()
		return nil, store.Unavailable("open store", err)
	}
	s.cdb.SetMaxOpenConns(1)
	w, err := newWriter(ctx, conn, s, opts, j)
	if err != nil {
		j.close()
		conn.Close()
		return nil, err
	}
	s.w = w
	if w.broken != nil {
		s.chainErr = w.broken
	}
	s.ckpt = newCheckpointer(s.cdb, s.log)
	w.ckpt = s.ckpt
	s.feed = store.NewFeed(s.readAfter, w.lastPos, store.FeedOptions{Buffer: opts.FollowBuffer, Logger: s.log, Committed: s.lastCommitted, Poll: opts.FollowPoll})
	w.feed = s.feed
	go w.run()
	if opts.Retention > 0 {
		s.pruneStop, s.pruneDone = make(chan struct{}), make(chan struct{})
		go s.retain(opts.Retention, opts.PruneEvery, opts.Now, s.pruneStop, s.pruneDone)
	}
	ok = true
	return s, nil
}

// openPrivate opens the file name with flag (os.O_RDONLY or os.O_RDWR),
// creating it first, empty and with mode 0600 whatever the umask, if it
// does not exist: the database (with the events, receipts and approvals it
// holds) and its lock file are for the gateway's operator only. SQLite
// creates the -wal and -shm files with the mode of the database file, so
// they are 0600 too. An existing file keeps its mode.
func openPrivate(name string, flag int) (*os.File, error) {
	f, err := os.OpenFile(name, flag|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, os.ErrExist) {
		return os.OpenFile(name, flag, 0)
	}
	if err != nil {
		return nil, err
	}
	// The umask may have taken bits off 0600 (a umask of 0277 leaves
	// 0400): set the mode explicitly.
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// PathProblem returns why path cannot name a Store's database file, or ""
// if it can: it must be a plain file name, non-empty, without '?' (the
// driver reads what follows as options), not a "file:" URI (the driver
// would open the file the URI names, while the lock of Options.Exclusive
// would be taken on a file literally named "file:…") and not ":memory:"
// (no WAL, nothing durable).
func PathProblem(path string) string {
	switch {
	case path == "":
		return "the database path is empty"
	case strings.ContainsRune(path, '?'):
		return fmt.Sprintf("database path %q contains '?' (options are not accepted in the path)", path)
	case strings.HasPrefix(strings.ToLower(path), "file:"):
		return fmt.Sprintf("database path %q is a URI; give a plain file path", path)
	case path == ":memory:":
		return "database path \":memory:\" is not durable; give a file path"
	}
	return ""
}

// checkExisting implements Options.Existing: path must hold toolgate's
// tables, looked up on a query-only connection.
func checkExisting(ctx context.Context, path string) error {
	notStore := func(why string) error {
		return errcode.Errorf(errcode.InvalidArgument, "open store %s: %s", path, why).WithDetails(map[string]any{"field": "path"})
	}
	fi, err := os.Stat(path)
	switch {
	case err != nil:
		return notStore(err.Error())
	case !fi.Mode().IsRegular():
		return notStore("not a regular file")
	case fi.Size() == 0:
		return notStore("the file is empty, not a toolgate store")
	}
	db, err := sql.Open("sqlite", path+"?_pragma=query_only(1)&_pragma=busy_timeout(10000)")
	if err != nil {
		return store.Unavailable("open store "+path, err)
	}
	defer db.Close()
	// Other tools keep a schema_migrations table too: look for all of
	// toolgate's own tables, and for the columns of its schema_migrations.
	var n int
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM sqlite_master WHERE type = 'table'
		AND name IN ('schema_migrations', 'events', 'receipts', 'checkpoints', 'approvals', 'sessions')`).Scan(&n); err != nil {
		return notStore("not a SQLite database: " + err.Error())
	}
	if n != 6 {
		return notStore("a SQLite database without toolgate's tables (not a toolgate store)")
	}
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM pragma_table_info('schema_migrations') WHERE name IN ('version', 'name', 'applied_at')").Scan(&n); err != nil || n != 3 {
		return notStore("a SQLite database whose schema_migrations is not toolgate's (not a toolgate store)")
	}
	return nil
}

// checkOptions validates opts, fills defaults and returns the synchronous
// pragma value.
func checkOptions(path string, opts *Options) (string, error) {
	bad := func(field, format string, args ...any) (string, error) {
		return "", errcode.Errorf(errcode.InvalidArgument, "open store: "+format, args...).
			WithDetails(map[string]any{"field": field})
	}
	if opts.Signer == nil {
		return bad("signer", "a signer is required")
	}
	if msg := PathProblem(path); msg != "" {
		return bad("path", "%s", msg)
	}
	mode := ""
	switch strings.ToLower(opts.Synchronous) {
	case "", "normal":
		mode = "NORMAL"
	case "full":
		mode = "FULL"
	default:
		return bad("synchronous", "synchronous must be normal or full, not %q", opts.Synchronous)
	}
	if opts.MaxBatch < 0 || opts.MaxDelay < 0 || opts.QueueSize < 0 || opts.FollowBuffer < 0 || opts.ReadConns < 0 ||
		opts.Retention < 0 || opts.PruneEvery < 0 {
		return bad("options", "sizes and delays must not be negative")
	}
	if opts.MaxBatch == 0 {
		opts.MaxBatch = DefaultMaxBatch
	}
	if opts.MaxDelay == 0 {
		opts.MaxDelay = DefaultMaxDelay
	}
	if opts.QueueSize == 0 {
		opts.QueueSize = DefaultQueueSize
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.PruneEvery == 0 {
		opts.PruneEvery = DefaultPruneEvery
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return mode, nil
}

// Close stops accepting writes, lets the writer commit what is queued,
// closes every follower's channel and closes the database. Idempotent; it
// returns the first close error (as AuditUnavailable) every time.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		if s.pruneStop != nil {
			close(s.pruneStop)
			<-s.pruneDone
		}
		s.closed.Store(true)
		s.w.stopAndWait()
		s.ckpt.close()
		s.feed.Close()
		if err := s.closeDBs(); err != nil {
			s.closeErr = store.Unavailable("close store", err)
		}
		s.unlock() // after the database is closed: the next owner finds it at rest
	})
	return s.closeErr
}

// unlock releases the lock of Options.Exclusive, if held. The lock file
// stays.
func (s *Store) unlock() {
	if s.lock != nil {
		s.lock.Close() // closing the only descriptors releases the flocks
		s.lock = nil
	}
}

// lastCommitted is the feed's FeedOptions.Committed: the highest event
// position ever committed. The writer publishes a commit only after it is
// readable, and Open starts the feed at MAX(pos), which retention pruning
// may have lowered; sqlite_sequence remembers the highest position
// AUTOINCREMENT gave out in a committed transaction, deleted rows
// included.
func (s *Store) lastCommitted(ctx context.Context) (int64, error) {
	if err := s.w.barrier(ctx, "follow events"); err != nil {
		return 0, err
	}
	var last int64
	err := s.rdb.QueryRowContext(ctx, `SELECT MAX(
		COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'events'), 0),
		COALESCE((SELECT MAX(pos) FROM events), 0))`).Scan(&last)
	if err != nil {
		return 0, store.Unavailable("follow events", err)
	}
	return last, nil
}

// closeDBs closes the writer's statements and connection and both pools.
func (s *Store) closeDBs() error {
	var errs []error
	if s.w != nil {
		errs = append(errs, s.w.close())
	}
	if s.wdb != nil {
		errs = append(errs, s.wdb.Close())
	}
	if s.rdb != nil {
		errs = append(errs, s.rdb.Close())
	}
	if s.cdb != nil {
		errs = append(errs, s.cdb.Close())
	}
	return errors.Join(errs...)
}

// readable checks ctx and that the store is open, then waits until every
// event, receipt and checkpoint acknowledged before the call is in SQLite
// (the journal's barrier), so that the read that follows sees them.
func (s *Store) readable(ctx context.Context, op string) error {
	if err := s.open(ctx, op); err != nil {
		return err
	}
	return s.w.barrier(ctx, op)
}

// open checks ctx and that the store is open: for reads of approvals and
// sessions, whose writes commit to SQLite before they return.
func (s *Store) open(ctx context.Context, op string) error {
	if err := store.ContextError(ctx, op); err != nil {
		return err
	}
	if s.closed.Load() {
		return store.ErrClosed(op)
	}
	return nil
}

// Journaled reports whether this Store owns the journal (see the package
// doc, "Journal"): false with Options.NoJournal, when another Store holds
// it, or on systems without flock(2). Safe for concurrent use.
func (s *Store) Journaled() bool { return s.w != nil && s.w.j != nil }

// ChainError returns the AuditUnavailable error that makes this store
// refuse every write since Open, or nil: the stored receipt chain's head is
// not covered by a signed checkpoint (see the package doc, "Receipts and
// checkpoints"). toolgate serve refuses to start on such a store. Safe for
// concurrent use.
func (s *Store) ChainError() error { return s.chainErr }

// ChainID implements store.Receipts.ChainID.
func (s *Store) ChainID() string { return s.signer.KeyID() }

// QueueDepth is the number of appends waiting for the writer now (the
// group-commit queue; bounded by Options.QueueSize), for metrics. 0 for a
// read-only Store. Safe for concurrent use.
func (s *Store) QueueDepth() int {
	if s.w == nil {
		return 0
	}
	return len(s.w.reqs)
}

// PublicKey implements store.Receipts.PublicKey.
func (s *Store) PublicKey() ed25519.PublicKey { return s.signer.PublicKey() }

// timeLayout is the stored form of times: fixed width, so that the strings
// sort as the times they encode (years 0000–9999).
const timeLayout = "2006-01-02T15:04:05.000000000Z"

// fmtTime returns t's stored form; "" for the zero time.
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

package sqlite

import (
	"context"
	"database/sql"
	"log/slog"
	"sync/atomic"
	"time"
)

// WAL checkpointing.
//
// A checkpoint copies the WAL back into the database file; with
// synchronous=normal or full it also fsyncs both files. SQLite's automatic
// checkpoint would run it inside the writer's COMMIT, stalling every caller
// of the batch, so the writer's connection has wal_autocheckpoint off and a
// checkpointer goroutine copies the WAL from its own connection instead, in
// PASSIVE mode (it never blocks the writer or readers), at most once per
// checkpointInterval and only after commits. The interval is long enough
// that the pages every commit rewrites (the right edges of the event
// indexes, sqlite_sequence) are copied once per interval rather than once
// per commit or two, and the pass's two fsyncs are rare: at 20 ms the
// passes took 5 % of the process's CPU in BenchmarkGatewayCalls, the
// writer 65 % (issue 15.1 in BENCHMARKS.md).
//
// That alone would let the WAL grow without bound under continuous writes:
// SQLite restarts the WAL from its beginning only when a write transaction
// begins on a completely copied WAL, and a checkpoint running beside the
// writer never sees it complete. So once the WAL holds softWALFrames
// frames, the writer itself runs a PASSIVE checkpoint (only the frames
// since the last background pass are left to copy) as soon as it is idle
// (no request for idleRestart), and its next transaction restarts the WAL;
// under load that never lets it idle, it does so between two batches once
// the WAL holds hardWALFrames frames. Each of these costs the waiting
// callers a few milliseconds (copying plus two fsyncs), rarely.
const (
	checkpointInterval = 250 * time.Millisecond
	softWALFrames      = 4096  // 16 MiB of 4 KiB pages
	hardWALFrames      = 32768 // 128 MiB of 4 KiB pages
	idleRestart        = time.Millisecond
)

// checkpointer runs the background checkpoints (see above).
type checkpointer struct {
	db     *sql.DB // one connection
	log    *slog.Logger
	kick   chan struct{} // capacity 1: "there were commits"
	stop   chan struct{}
	done   chan struct{}
	frames atomic.Int64 // WAL size in frames at the last checkpoint
	closed bool
}

func newCheckpointer(db *sql.DB, log *slog.Logger) *checkpointer {
	c := &checkpointer{db: db, log: log, kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go c.run()
	return c
}

// committed tells the checkpointer that the writer committed. It never
// blocks.
func (c *checkpointer) committed() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

func (c *checkpointer) run() {
	defer close(c.done)
	pause := time.NewTimer(0)
	defer pause.Stop()
	for {
		select {
		case <-c.kick:
		case <-c.stop:
			return
		}
		if frames, err := walCheckpoint(context.Background(), c.db); err != nil {
			c.log.Warn("store: WAL checkpoint failed", "err", err)
		} else {
			c.frames.Store(int64(frames))
		}
		pause.Reset(checkpointInterval)
		select {
		case <-pause.C:
		case <-c.stop:
			return
		}
	}
}

// queryer is *sql.DB or *sql.Conn.
type queryer interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// walCheckpoint runs a PASSIVE checkpoint on q and returns the WAL's size
// in frames. A failure leaves the WAL as it is (it grows until a later
// checkpoint succeeds; nothing is lost).
func walCheckpoint(ctx context.Context, q queryer) (frames int, err error) {
	var busy, copied int
	err = q.QueryRowContext(ctx, "PRAGMA wal_checkpoint(PASSIVE)").Scan(&busy, &frames, &copied)
	return frames, err
}

// close stops the goroutine (SQLite checkpoints the rest when the last
// connection closes). It does not close db. Not safe for concurrent use.
func (c *checkpointer) close() {
	if c.closed {
		return
	}
	c.closed = true
	close(c.stop)
	<-c.done
}

package postgres

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/toolgate/toolgate/errcode"
)

// Guard timings: how often the chain lock's connection is checked (and,
// while the lock is lost, how often it is asked for again), and how long
// one check may take before the connection counts as lost.
const (
	guardInterval = time.Second
	guardTimeout  = 5 * time.Second
)

// chainGuard keeps a writing Store's hold on its chain lock (lockChain)
// and fences the Store's writes while it does not hold it. The session
// advisory lock lives as long as its connection: should that connection
// drop (a network cut, a restarted server, a terminated backend), another
// Store with the same key may take the lock, and two writers would
// alternate on one chain (and the newcomer would close the first one's
// running calls as interrupted). So a goroutine checks the connection
// every guardInterval; once it fails, every write of the Store is refused
// (lostErr) until the guard holds the lock again on a new connection,
// after which the writer resumes its chain from the stored head (resume),
// since another Store may have appended to it meanwhile.
type chainGuard struct {
	cc      *pgx.ConnConfig
	chainID string
	conn    *pgx.Conn     // the lock's connection; owned by run once started
	pid     atomic.Uint32 // conn's backend process id (fenceStmt's $1)
	lost    atomic.Pointer[errcode.Error]
	resume  atomic.Bool
	done    chan struct{} // closed when run returns
	started bool
	log     func(msg string, args ...any)
}

// lostErr is the AuditUnavailable error writes answer while the lock is
// not held, or nil.
func (g *chainGuard) lostErr() error {
	if g == nil {
		return nil
	}
	if e := g.lost.Load(); e != nil {
		return e
	}
	return nil
}

// run checks the lock's connection until ctx ends, then closes it.
func (g *chainGuard) run(ctx context.Context) {
	defer close(g.done)
	t := time.NewTicker(guardInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			g.closeConn()
			return
		case <-t.C:
		}
		if g.conn != nil {
			pctx, cancel := context.WithTimeout(ctx, guardTimeout)
			err := g.conn.Ping(pctx)
			cancel()
			if err == nil && g.lost.Load() == nil {
				continue
			}
			if err == nil {
				err = errors.New("a write found the lock not held by this connection")
			}
			if ctx.Err() != nil {
				g.closeConn()
				return
			}
			g.closeConn()
			g.lost.Store(errcode.Errorf(errcode.AuditUnavailable,
				"receipt chain %s: this replica lost its chain lock (its database connection dropped): writes are refused until it holds the lock again", g.chainID))
			g.log("store/postgres: the receipt chain lock was lost; writes are refused until it is taken again", "chainId", g.chainID, "err", err)
		}
		conn, err := lockChain(ctx, g.cc, g.chainID)
		if err != nil {
			if errcode.CodeOf(err) == errcode.InvalidConfig {
				g.lost.Store(errcode.Errorf(errcode.AuditUnavailable,
					"receipt chain %s: another replica with the same signing key holds the chain lock: this replica writes nothing until it is released (each replica needs its own key)", g.chainID))
			}
			continue
		}
		g.setConn(conn)
		g.resume.Store(true)
		g.lost.Store(nil)
		g.log("store/postgres: the receipt chain lock is held again; writes resume", "chainId", g.chainID)
	}
}

// setConn makes conn the lock's connection.
func (g *chainGuard) setConn(conn *pgx.Conn) {
	g.conn = conn
	g.pid.Store(conn.PgConn().PID())
}

// fenceStmt, first in every writing transaction of a Store with a chain
// lock, fails the transaction (division by zero, SQLSTATE 22012) unless
// the lock's connection ($1, its backend pid) holds an advisory lock: a
// write can never commit for a Store that lost its lock, not even between
// two of the guard's checks.
const fenceStmt = `SELECT 1 / count(*)::int FROM pg_locks WHERE locktype = 'advisory' AND pid = $1 AND granted`

// isFenceFailure reports whether err is fenceStmt's refusal.
func isFenceFailure(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "22012"
}

// fenced marks the lock lost after a write's fence refused it (the guard
// then takes the lock again on a new connection, or reports who holds it).
func (g *chainGuard) fenced() error {
	e := errcode.Errorf(errcode.AuditUnavailable,
		"receipt chain %s: this replica does not hold its chain lock: writes are refused until it holds the lock again", g.chainID)
	g.lost.Store(e)
	return e
}

// closeConn closes the lock's connection, if any (releasing the lock).
func (g *chainGuard) closeConn() {
	if g.conn != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = g.conn.Close(ctx)
		g.conn = nil
	}
}

package postgres

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/toolgate/toolgate/store"
)

// Notification kinds: one channel each, named per schema (channelName).
const (
	kindEvents    = "events"    // payload: the committed feed number
	kindApprovals = "approvals" // payload: the resolved approval's id
)

// channelName is the LISTEN/NOTIFY channel of kind for the tables of
// schema: notifications are database-wide, so the schema is part of the
// name (hashed, since a channel name is at most 63 bytes).
func channelName(kind, schema string) string {
	h := sha256.Sum256([]byte(schema))
	return "toolgate_" + kind + "_" + hex.EncodeToString(h[:8])
}

// waker is a broadcast signal: wait returns a channel that the next wake
// closes. The zero value is ready.
type waker struct {
	mu sync.Mutex
	ch chan struct{}
}

// wait returns the channel the next wake closes.
func (w *waker) wait() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ch == nil {
		w.ch = make(chan struct{})
	}
	return w.ch
}

// wake wakes every current waiter.
func (w *waker) wake() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ch != nil {
		close(w.ch)
		w.ch = nil
	}
}

// Reconnection backoff of the listening connection.
const (
	listenBackoffMin = 100 * time.Millisecond
	listenBackoffMax = 5 * time.Second
)

// listener owns the Store's dedicated listening connection (not one of
// the pool's): it LISTENs on the events and approvals channels and hands
// each notification to the Store. When the connection drops it reconnects
// with backoff and, once listening again, wakes every follower and
// approval watcher, since notifications sent meanwhile are lost.
type listener struct {
	s         *Store
	cfg       *pgx.ConnConfig
	events    string // channel names
	approvals string
	done      chan struct{} // closed when run returns
}

func newListener(s *Store, cfg *pgx.ConnConfig, schema string) *listener {
	return &listener{s: s, cfg: cfg.Copy(), events: channelName(kindEvents, schema), approvals: channelName(kindApprovals, schema),
		done: make(chan struct{})}
}

// connect opens a connection listening on both channels.
func (l *listener) connect(ctx context.Context) (*pgx.Conn, error) {
	conn, err := pgx.ConnectConfig(ctx, l.cfg)
	if err != nil {
		return nil, err
	}
	for _, ch := range []string{l.events, l.approvals} {
		if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{ch}.Sanitize()); err != nil {
			_ = conn.Close(context.Background())
			return nil, err
		}
	}
	return conn, nil
}

// start connects (so that notifications are received once Open returns)
// and starts the listening goroutine. Errors: AuditUnavailable, Cancelled,
// Timeout.
func (l *listener) start(ctx context.Context) error {
	conn, err := l.connect(ctx)
	if err != nil {
		close(l.done)
		return store.Unavailable("open postgres store: listen", err)
	}
	go l.run(conn)
	return nil
}

// run receives notifications until the Store closes, reconnecting when
// the connection drops.
func (l *listener) run(conn *pgx.Conn) {
	defer close(l.done)
	ctx := l.s.base
	backoff := listenBackoffMin
	for {
		if conn == nil {
			var err error
			if conn, err = l.connect(ctx); err != nil {
				if ctx.Err() != nil {
					return
				}
				l.s.log.Warn("store/postgres: cannot listen for notifications; followers fall back to polling", "retryIn", backoff, "err", err)
				t := time.NewTimer(backoff)
				select {
				case <-t.C:
				case <-ctx.Done():
					t.Stop()
					return
				}
				backoff = min(2*backoff, listenBackoffMax)
				continue
			}
			backoff = listenBackoffMin
			l.s.log.Info("store/postgres: listening for notifications again")
			l.s.newEvents.wake()
			l.s.wakeApprovals("")
		}
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			_ = conn.Close(context.Background())
			conn = nil
			if ctx.Err() != nil {
				return
			}
			l.s.log.Warn("store/postgres: the listening connection dropped; reconnecting", "err", err)
			continue
		}
		switch n.Channel {
		case l.events:
			l.s.newEvents.wake()
		case l.approvals:
			l.s.wakeApprovals(n.Payload)
		}
	}
}

// WatchApproval returns a channel that receives a value whenever approval
// id may have been resolved by any Store (of any replica) sharing this
// database schema, through a NOTIFY the resolving transaction sends on
// commit, or when the listening connection was re-established (a
// notification may have been lost). The channel has a buffer of one and
// never blocks the sender; it carries no state: re-read the approval
// (GetApproval) when it fires. stop unregisters it (idempotent). It is the
// approval.Watcher the approval manager uses to wake a waiting call at
// once. Safe for concurrent use.
func (s *Store) WatchApproval(id string) (wake <-chan struct{}, stop func()) {
	ch := make(chan struct{}, 1)
	s.apprMu.Lock()
	ws := s.apprWatch[id]
	if ws == nil {
		ws = map[chan struct{}]struct{}{}
		s.apprWatch[id] = ws
	}
	ws[ch] = struct{}{}
	s.apprMu.Unlock()
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			s.apprMu.Lock()
			defer s.apprMu.Unlock()
			delete(s.apprWatch[id], ch)
			if len(s.apprWatch[id]) == 0 {
				delete(s.apprWatch, id)
			}
		})
	}
}

// wakeApprovals signals the watchers of approval id, or every watcher for
// "".
func (s *Store) wakeApprovals(id string) {
	s.apprMu.Lock()
	defer s.apprMu.Unlock()
	signal := func(ws map[chan struct{}]struct{}) {
		for ch := range ws {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}
	if id != "" {
		signal(s.apprWatch[id])
		return
	}
	for _, ws := range s.apprWatch {
		signal(ws)
	}
}

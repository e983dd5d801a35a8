package postgres

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/receipt"
	"github.com/toolgate/toolgate/store"
)

// feedSchema creates a fresh schema, dropped when t ends, and returns a
// DSN using it (application_name is the schema's name, for tests that
// look at the store's sessions). It fails when the server is missing.
func feedSchema(t *testing.T) string {
	t.Helper()
	dsn := baseDSN()
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("PostgreSQL at %s is required: %v", dsn, err)
	}
	defer admin.Close(context.Background())
	schema := fmt.Sprintf("tg_feed_%d", time.Now().UnixNano())
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), dsn)
		if err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
			return
		}
		defer c.Close(context.Background())
		if _, err := c.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
	})
	u, _ := url.Parse(dsn)
	q := u.Query()
	q.Set("search_path", schema)
	q.Set("application_name", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

// baseDSN is TOOLGATE_TEST_POSTGRES or the machine's test server.
func baseDSN() string {
	if dsn := os.Getenv("TOOLGATE_TEST_POSTGRES"); dsn != "" {
		return dsn
	}
	return "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
}

// openFeedStore opens a Store on dsn signing with key n.
func openFeedStore(t *testing.T, dsn string, n byte, opts Options) *Store {
	t.Helper()
	opts.Signer = receipt.NewSigner(ed25519.NewKeyFromSeed(bytes.Repeat([]byte{n}, 32)))
	s, err := Open(context.Background(), dsn, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func feedEvent(t *testing.T, run string) *audit.Event {
	t.Helper()
	ev, err := audit.NewEvent(run, audit.TypeToolCalled, json.RawMessage(`{}`), "", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	ev.Tenant = "acme"
	return ev
}

// recv returns the next followed event, failing after a minute or when
// the channel closes.
func recv(t *testing.T, ch <-chan store.Followed) store.Followed {
	t.Helper()
	select {
	case f, ok := <-ch:
		if !ok {
			t.Fatal("the follower's channel closed")
		}
		return f
	case <-time.After(time.Minute):
		t.Fatal("no event within a minute")
	}
	panic("unreachable")
}

// quiet fails if ch delivers anything before the store has certainly
// re-read its feed: it appends a sentinel event through s and expects it
// to be the next one delivered.
func quiet(t *testing.T, s *Store, ch <-chan store.Followed, what string) {
	t.Helper()
	sentinel := feedEvent(t, "run_sentinel")
	if err := s.AppendEvents(context.Background(), sentinel); err != nil {
		t.Fatal(err)
	}
	if f := recv(t, ch); f.Event.EventID != sentinel.EventID {
		t.Fatalf("%s: got %s (%s), want the sentinel next", what, f.Event.EventID, f.Event.RunID)
	}
}

// TestFollowOutOfOrderCommits: T1 (store A's writer transaction) inserts
// an event and stays open; T2 (store B, another replica) inserts an event
// after it, so with a higher pos, and commits; then T1 commits. A
// follower delivers both, each once, in commit order (T2, then T1): it
// never skips T1's row although a follower of pos would have moved past
// it. Reconnecting with either cursor yields no duplicate.
func TestFollowOutOfOrderCommits(t *testing.T) {
	dsn := feedSchema(t)
	a := openFeedStore(t, dsn, 1, Options{})
	b := openFeedStore(t, dsn, 2, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	follower, err := b.Follow(ctx, "acme", "")
	if err != nil {
		t.Fatal(err)
	}

	inserted, release := make(chan struct{}), make(chan struct{})
	a.beforeFeed = func() { // T1 has inserted its event; hold it open
		close(inserted)
		<-release
	}
	ev1, ev2 := feedEvent(t, "run_t1"), feedEvent(t, "run_t2")
	t1done := make(chan error, 1)
	go func() { t1done <- a.AppendEvents(context.Background(), ev1) }()
	select {
	case <-inserted:
	case <-ctx.Done():
		t.Fatal("T1 did not reach its commit")
	}
	if err := b.AppendEvents(ctx, ev2); err != nil { // T2 commits while T1 is open
		t.Fatal(err)
	}
	f2 := recv(t, follower)
	if f2.Event.EventID != ev2.EventID {
		t.Fatalf("first delivered %s, want T2's event", f2.Event.RunID)
	}
	close(release)
	if err := <-t1done; err != nil {
		t.Fatal(err)
	}
	a.beforeFeed = nil // the writer is idle: T1's answer came back
	f1 := recv(t, follower)
	if f1.Event.EventID != ev1.EventID {
		t.Fatalf("then delivered %s, want T1's event", f1.Event.RunID)
	}
	c1, _ := store.ParseCursor(f1.Cursor)
	c2, _ := store.ParseCursor(f2.Cursor)
	if c1.Pos >= c2.Pos {
		t.Fatalf("T1's pos %d is not below T2's %d: the commits were not out of order", c1.Pos, c2.Pos)
	}
	t.Logf("T1 pos %d committed after T2 pos %d; both delivered once", c1.Pos, c2.Pos)
	quiet(t, b, follower, "after both")

	// Reconnect (on either replica) with the last cursor: nothing again.
	for _, s := range []*Store{a, b} {
		again, err := s.Follow(ctx, "acme", f1.Cursor)
		if err != nil {
			t.Fatal(err)
		}
		f := recv(t, again)
		if f.Event.RunID != "run_sentinel" {
			t.Fatalf("resumed from T1's cursor: got %s, want only the sentinel (no duplicate)", f.Event.RunID)
		}
	}
	// With T2's cursor: T1's event, then the sentinel.
	again, err := a.Follow(ctx, "acme", f2.Cursor)
	if err != nil {
		t.Fatal(err)
	}
	if f := recv(t, again); f.Event.EventID != ev1.EventID {
		t.Fatalf("resumed from T2's cursor: got %s, want T1's event", f.Event.RunID)
	}
	if f := recv(t, again); f.Event.RunID != "run_sentinel" {
		t.Fatalf("resumed from T2's cursor: got %s after T1's, want the sentinel", f.Event.RunID)
	}
	// From the start: every event once, in commit order.
	all, err := a.Follow(ctx, "acme", store.FromStart)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"run_t2", "run_t1", "run_sentinel"} {
		if f := recv(t, all); f.Event.RunID != want {
			t.Fatalf("from the start: got %s, want %s", f.Event.RunID, want)
		}
	}
	quiet(t, a, all, "from the start")
}

// TestFollowOtherReplicaByNotify: a follower on store B receives the
// events store A commits, woken by A's NOTIFY: B's safety poll is an hour,
// so nothing else could wake it.
func TestFollowOtherReplicaByNotify(t *testing.T) {
	dsn := feedSchema(t)
	a := openFeedStore(t, dsn, 1, Options{FollowPoll: time.Hour})
	b := openFeedStore(t, dsn, 2, Options{FollowPoll: time.Hour})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	follower, err := b.Follow(ctx, "acme", "")
	if err != nil {
		t.Fatal(err)
	}
	const n = 20
	var worst, total, commits time.Duration
	for i := range n {
		ev := feedEvent(t, fmt.Sprintf("run_%d", i))
		start := time.Now()
		if err := a.AppendEvents(ctx, ev); err != nil {
			t.Fatal(err)
		}
		committed := time.Now()
		f := recv(t, follower)
		d := time.Since(committed)
		if f.Event.EventID != ev.EventID {
			t.Fatalf("event %d: got %s, want %s", i, f.Event.EventID, ev.EventID)
		}
		worst, total, commits = max(worst, d), total+d, commits+committed.Sub(start)
	}
	t.Logf("A's append returned → delivered on B (NOTIFY): mean %v, worst %v over %d events (A's append itself: mean %v)",
		total/n, worst, n, commits/n)
}

// TestFollowAfterListenerReconnects: when the server drops every
// connection of the stores (the listening ones included), store B
// reconnects its listener, and a follower on B is again woken by A's
// NOTIFY (B's safety poll is an hour, so nothing else wakes it).
func TestFollowAfterListenerReconnects(t *testing.T) {
	dsn := feedSchema(t)
	u, _ := url.Parse(dsn)
	app := u.Query().Get("application_name")
	a := openFeedStore(t, dsn, 1, Options{FollowPoll: time.Hour})
	b := openFeedStore(t, dsn, 2, Options{FollowPoll: time.Hour})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin, err := pgx.Connect(ctx, baseDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	listening := func() int {
		var n int
		if err := admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND query LIKE 'LISTEN %'`, app).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	waitFor(t, func() bool { return listening() == 2 })
	var pids []int32
	rows, err := admin.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE application_name = $1 AND query LIKE 'LISTEN %'`, app)
	if err != nil {
		t.Fatal(err)
	}
	if pids, err = pgx.CollectRows(rows, pgx.RowTo[int32]); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1`, app); err != nil {
		t.Fatal(err)
	}
	// Both listeners are back, on new connections.
	waitFor(t, func() bool {
		var n int
		if err := admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND query LIKE 'LISTEN %' AND NOT pid = ANY($2)`, app, pids).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 2
	})
	// The pools' connections were dropped too: the first statements may
	// fail (AuditUnavailable) until the pools reconnect.
	var follower <-chan store.Followed
	waitFor(t, func() bool { follower, err = b.Follow(ctx, "acme", ""); return err == nil })
	waitFor(t, func() bool {
		ev := feedEvent(t, "run_after")
		if a.AppendEvents(ctx, ev) != nil {
			return false
		}
		if f := recv(t, follower); f.Event.EventID != ev.EventID {
			t.Fatalf("got %s, want the event appended after the reconnect", f.Event.EventID)
		}
		return true
	})
}

// TestFollowConcurrentReplicasWithReconnects: eight writers on two Stores
// append 2,000 events of eight runs while two followers read: one on B
// throughout, one that disconnects every 300 events and reconnects with
// its last cursor, alternately on A and on B. Each sees every event once,
// and each run's events in sequence order (0, 1, 2, … with no gap).
func TestFollowConcurrentReplicasWithReconnects(t *testing.T) {
	dsn := feedSchema(t)
	stores := []*Store{openFeedStore(t, dsn, 1, Options{}), openFeedStore(t, dsn, 2, Options{})}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const writers, perWriter = 8, 250
	const total = writers * perWriter
	steady, err := stores[1].Follow(ctx, "acme", "")
	if err != nil {
		t.Fatal(err)
	}
	first, err := stores[0].Follow(ctx, "acme", "")
	if err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, writers)
	for w := range writers {
		go func() {
			for range perWriter {
				ev := feedEvent(t, fmt.Sprintf("run_%d", w%8))
				if err := stores[w%2].AppendEvents(ctx, ev); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	check := func(name string, got []store.Followed) {
		t.Helper()
		seen := map[string]bool{}
		next := map[string]int64{}
		for _, f := range got {
			if seen[f.Event.EventID] {
				t.Fatalf("%s: %s delivered twice", name, f.Event.EventID)
			}
			seen[f.Event.EventID] = true
			if f.Event.Sequence != next[f.Event.RunID] {
				t.Fatalf("%s: %s sequence %d, want %d (a gap or out of order)", name, f.Event.RunID, f.Event.Sequence, next[f.Event.RunID])
			}
			next[f.Event.RunID]++
		}
		if len(got) != total {
			t.Fatalf("%s: %d events, want %d", name, len(got), total)
		}
	}
	done := make(chan []store.Followed, 1)
	go func() {
		var got []store.Followed
		for len(got) < total {
			f, ok := <-steady
			if !ok {
				break
			}
			got = append(got, f)
		}
		done <- got
	}()
	var got []store.Followed
	ch, fctx, fcancel := first, ctx, context.CancelFunc(func() {})
	for n := 0; len(got) < total; n++ {
		f := recv(t, ch)
		got = append(got, f)
		if len(got)%300 == 0 {
			fcancel()
			fctx, fcancel = context.WithCancel(ctx)
			if ch, err = stores[n%2].Follow(fctx, "acme", f.Cursor); err != nil {
				t.Fatal(err)
			}
		}
	}
	fcancel()
	for range writers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	check("reconnecting follower", got)
	check("steady follower", <-done)
}

// TestFeedMigratesExistingEvents: a schema written before the feed
// (migration 0001 only, with events) is upgraded by Open; its events are
// followed from the start, in pos order, then new ones.
func TestFeedMigratesExistingEvents(t *testing.T) {
	dsn := feedSchema(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	initSQL, err := migrationFS.ReadFile("migrations/0001_init.sql")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, string(initSQL)); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL);
		INSERT INTO schema_migrations VALUES (1, '0001_init', '');`); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := conn.Exec(ctx, `INSERT INTO events (event_id, tenant, run_id, seq, type, ts, payload) VALUES ($1, 'acme', 'run_old', $2, 'agent.toolCalled', $3, '{}')`,
			fmt.Sprintf("evt_old_%d", i), i, fmtTime(time.Now())); err != nil {
			t.Fatal(err)
		}
	}
	s := openFeedStore(t, dsn, 1, Options{})
	fctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	ch, err := s.Follow(fctx, "acme", store.FromStart)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if f := recv(t, ch); f.Event.EventID != fmt.Sprintf("evt_old_%d", i) {
			t.Fatalf("event %d from the start: %s, want evt_old_%d", i, f.Event.EventID, i)
		}
	}
	quiet(t, s, ch, "after the migrated events")
}

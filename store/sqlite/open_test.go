package sqlite

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/receipt"
	"github.com/toolgate/toolgate/store"
)

// TestReopen: sequences, the receipt chain and follow cursors continue
// across restarts, and the export of the whole chain verifies.
func TestReopen(t *testing.T) {
	path := tempDB(t)
	ctx := context.Background()
	var lastHash string
	var cursor string
	for round := range 3 {
		s, err := Open(ctx, path, Options{Signer: signerN(1)})
		if err != nil {
			t.Fatalf("round %d: Open: %v", round, err)
		}
		var n int
		if err := s.rdb.QueryRowContext(ctx, "SELECT COUNT(*) FROM schema_migrations").Scan(&n); err != nil || n != 9 {
			t.Fatalf("round %d: schema_migrations has %d rows (%v), want 9 (0001-0009)", round, n, err)
		}
		if round > 0 {
			// A follower resuming with a cursor from before the restart
			// gets exactly the events after it.
			ch, err := s.Follow(ctx, "acme", cursor)
			if err != nil {
				t.Fatal(err)
			}
			select {
			case f := <-ch:
				if f.Event.Sequence != int64(4*round-1) {
					t.Fatalf("round %d: resumed follower got seq %d, want %d", round, f.Event.Sequence, 4*round-1)
				}
			case <-time.After(time.Minute):
				t.Fatal("resumed follower got nothing")
			}
		}
		for i := range 4 {
			ev := event(t, "acme", "run_r", i, 0)
			if err := s.AppendEvents(ctx, ev); err != nil {
				t.Fatal(err)
			}
			if want := int64(4*round + i); ev.Sequence != want {
				t.Fatalf("round %d: Sequence %d, want %d", round, ev.Sequence, want)
			}
			r := rcpt(fmt.Sprint(round, "_", i))
			if err := s.AppendReceipt(ctx, r); err != nil {
				t.Fatal(err)
			}
			if want := uint64(4*round + i); r.Seq != want || (r.Seq > 0 && r.PrevHash != lastHash) {
				t.Fatalf("round %d: receipt seq %d prev %q, want %d after %q", round, r.Seq, r.PrevHash, want, lastHash)
			}
			lastHash = r.Hash
		}
		evs, _, err := s.EventsByTime(ctx, "acme", time.Time{}, time.Time{}, "", 1000)
		if err != nil {
			t.Fatal(err)
		}
		cursor = cursorOf(t, s, evs[len(evs)-2].EventID)
		if rep := verifyExport(t, s); rep.Receipts != 4*(round+1) {
			t.Fatalf("round %d: export has %d receipts", round, rep.Receipts)
		}
		if err := s.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
	}
}

// cursorOf returns the follow cursor of event id, read with FromStart.
func cursorOf(t testing.TB, s *Store, id string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, err := s.Follow(ctx, "acme", store.FromStart)
	if err != nil {
		t.Fatal(err)
	}
	for f := range ch {
		if f.Event.EventID == id {
			return f.Cursor
		}
	}
	t.Fatalf("event %s not followed", id)
	return ""
}

// TestReopenOtherKey: a new signing key starts a new chain; the old one
// stays readable and verifiable with its key.
func TestReopenOtherKey(t *testing.T) {
	path := tempDB(t)
	ctx := context.Background()
	s1, err := Open(ctx, path, Options{Signer: signerN(1)})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := s1.AppendReceipt(ctx, rcpt(fmt.Sprint("a", i))); err != nil {
			t.Fatal(err)
		}
	}
	oldChain, oldKey := s1.ChainID(), s1.PublicKey()
	s1.Close()
	s2 := openAt(t, path, Options{Signer: signerN(2)})
	r := rcpt("b0")
	if err := s2.AppendReceipt(ctx, r); err != nil || r.Seq != 0 || r.ChainID == oldChain {
		t.Fatalf("first receipt of the new key: seq %d chain %s, %v", r.Seq, r.ChainID, err)
	}
	var buf bytes.Buffer
	if err := s2.ExportReceipts(ctx, &buf, oldChain, 0); err != nil {
		t.Fatal(err)
	}
	if rep, err := receipt.Verify(&buf, oldKey, receipt.VerifyOptions{}); err != nil || rep.Receipts != 3 {
		t.Fatalf("old chain: %v, %v", rep, err)
	}
	if rep := verifyExport(t, s2); rep.Receipts != 1 {
		t.Fatalf("new chain: %d receipts", rep.Receipts)
	}
}

// TestUncoveredHeadRefusesWrites: a database whose chain head has no
// checkpoint was changed by something else (here: its checkpoints deleted;
// in the field: a receipt forged onto the head). Open signs nothing, so the
// forgery stays uncovered and verify reports it; every write is refused;
// reads still work.
func TestUncoveredHeadRefusesWrites(t *testing.T) {
	path := tempDB(t)
	ctx := context.Background()
	s := openAt(t, path, Options{})
	for i := range 3 {
		if err := s.AppendReceipt(ctx, rcpt(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.ChainError(); err != nil {
		t.Fatalf("ChainError of a sound store: %v", err)
	}
	s.Close()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("DELETE FROM checkpoints"); err != nil {
		t.Fatal(err)
	}
	db.Close()
	s = openAt(t, path, Options{})
	wantCode(t, s.ChainError(), errcode.AuditUnavailable, "ChainError")
	if msg := s.ChainError().Error(); !strings.Contains(msg, "seq 2") || !strings.Contains(msg, "not covered by a signed checkpoint") {
		t.Fatalf("ChainError: %q", msg)
	}
	if cps, err := s.Checkpoints(ctx, s.ChainID(), 0, 10); err != nil || len(cps) != 0 {
		t.Fatalf("checkpoints after open: %v, %v; want none (nothing signed)", cps, err)
	}
	err = s.AppendReceipt(ctx, rcpt("3"))
	wantCode(t, err, errcode.AuditUnavailable, "AppendReceipt")
	if !strings.Contains(err.Error(), "not covered by a signed checkpoint") {
		t.Fatalf("AppendReceipt: %v", err)
	}
	wantCode(t, s.AppendEvents(ctx, event(t, "acme", "run_x", 0, 16)), errcode.AuditUnavailable, "AppendEvents")
	// Reads work; the export stops at the last checkpoint, which covers
	// nothing here.
	var buf bytes.Buffer
	if err := s.ExportReceipts(ctx, &buf, s.ChainID(), 0); err != nil || buf.Len() != 0 {
		t.Fatalf("export: %v, %q", err, buf.String())
	}
	if rs, err := s.ReceiptsByChain(ctx, s.ChainID(), 0, 10); err != nil || len(rs) != 3 {
		t.Fatalf("ReceiptsByChain: %d, %v", len(rs), err)
	}
}

func TestMigrations(t *testing.T) {
	ctx := context.Background()
	db, err := sql.Open("sqlite", tempDB(t))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	applied, err := migrate(ctx, conn, migrationFS)
	if err != nil || !slices.Equal(applied, []int{1, 2, 3, 4, 5, 6, 7, 8, 9}) {
		t.Fatalf("first migrate: %v, %v; want [1 2 3 4 5 6 7 8 9]", applied, err)
	}
	applied, err = migrate(ctx, conn, migrationFS)
	if err != nil || len(applied) != 0 {
		t.Fatalf("second migrate: %v, %v; want none", applied, err)
	}
	// A later migration applies alone; a failing one applies nothing.
	shipped, err := store.LoadMigrations(migrationFS)
	if err != nil {
		t.Fatal(err)
	}
	base := func() fstest.MapFS {
		fs := fstest.MapFS{}
		for _, m := range shipped {
			fs["migrations/"+m.Name+".sql"] = &fstest.MapFile{Data: []byte("SELECT 1")}
		}
		return fs
	}
	n0 := len(shipped)
	name := func(v int, rest string) string { return fmt.Sprintf("migrations/%04d_%s.sql", v, rest) }
	next := base()
	next[name(n0+1, "extra")] = &fstest.MapFile{Data: []byte("CREATE TABLE extra (x INTEGER); CREATE INDEX extra_x ON extra (x);")}
	if applied, err := migrate(ctx, conn, next); err != nil || !slices.Equal(applied, []int{n0 + 1}) {
		t.Fatalf("migrate %04d: %v, %v; want [%d]", n0+1, applied, err, n0+1)
	}
	broken := base()
	broken[name(n0+1, "extra")] = &fstest.MapFile{Data: []byte("SELECT 1")}
	broken[name(n0+2, "good")] = &fstest.MapFile{Data: []byte("CREATE TABLE good (x INTEGER)")}
	broken[name(n0+3, "bad")] = &fstest.MapFile{Data: []byte("CREATE TABLE bad (x INTEGER); THIS IS NOT SQL")}
	_, err = migrate(ctx, conn, broken)
	if errcode.CodeOf(err) != errcode.AuditUnavailable {
		t.Fatalf("failing migration: %v", err)
	}
	var n int
	if err := conn.QueryRowContext(ctx, "SELECT COUNT(*) FROM sqlite_schema WHERE name IN ('good', 'bad')").Scan(&n); err != nil || n != 0 {
		t.Fatalf("a failed migration run left %d tables (%v)", n, err)
	}
	if err := conn.QueryRowContext(ctx, "SELECT COUNT(*) FROM schema_migrations").Scan(&n); err != nil || n != n0+1 {
		t.Fatalf("schema_migrations has %d rows (%v), want %d", n, err, n0+1)
	}
	// A database from a newer build is refused.
	if _, err := migrate(ctx, conn, migrationFS); errcode.CodeOf(err) != errcode.InvalidConfig {
		t.Fatalf("migrate with an unknown applied version: %v, want invalid_config", err)
	}
	for _, bad := range []fstest.MapFS{
		{"migrations/init.sql": {Data: []byte("SELECT 1")}},
		{"migrations/0001_a.sql": {Data: []byte("SELECT 1")}, "migrations/01_b.sql": {Data: []byte("SELECT 1")}},
	} {
		if _, err := store.LoadMigrations(bad); err == nil {
			t.Errorf("store.LoadMigrations(%v) accepted bad names", bad)
		}
	}
}

func TestOpenOptions(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name string
		path string
		opts Options
		code errcode.Code
	}{
		{"no signer", tempDB(t), Options{}, errcode.InvalidArgument},
		{"bad synchronous", tempDB(t), Options{Signer: signerN(1), Synchronous: "off"}, errcode.InvalidArgument},
		{"negative size", tempDB(t), Options{Signer: signerN(1), QueueSize: -1}, errcode.InvalidArgument},
		{"question mark", tempDB(t) + "?mode=ro", Options{Signer: signerN(1)}, errcode.InvalidArgument},
		{"missing directory", filepath.Join(t.TempDir(), "no", "such", "dir", "x.db"), Options{Signer: signerN(1)}, errcode.AuditUnavailable},
	} {
		s, err := Open(ctx, c.path, c.opts)
		if err == nil {
			s.Close()
		}
		if errcode.CodeOf(err) != c.code {
			t.Errorf("%s: Open = %v, want %s", c.name, err, c.code)
		}
	}
	for _, c := range []struct {
		sync string
		want int
	}{{"", 1}, {"normal", 1}, {"FULL", 2}} {
		s := openAt(t, tempDB(t), Options{Synchronous: c.sync})
		var got int
		err := s.runOp(ctx, "test", func(w *writer) error {
			return w.conn.QueryRowContext(ctx, "PRAGMA synchronous").Scan(&got)
		})
		if err != nil || got != c.want {
			t.Errorf("synchronous %q: PRAGMA synchronous = %d (%v), want %d", c.sync, got, err, c.want)
		}
		var mode string
		if err := s.rdb.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil || mode != "wal" {
			t.Errorf("journal_mode = %q (%v), want wal", mode, err)
		}
		// The read pool cannot write.
		if _, err := s.rdb.ExecContext(ctx, "DELETE FROM events"); err == nil {
			t.Error("the read pool can write")
		}
	}
	// A file that is not a database.
	junk := filepath.Join(t.TempDir(), "junk.db")
	if err := os.WriteFile(junk, bytes.Repeat([]byte("not a database "), 1000), 0o600); err != nil {
		t.Fatal(err)
	}
	if s, err := Open(ctx, junk, Options{Signer: signerN(1)}); errcode.CodeOf(err) != errcode.AuditUnavailable {
		if s != nil {
			s.Close()
		}
		t.Fatalf("Open(junk) = %v, want audit_unavailable", err)
	}
}

// TestWALRestarts: once the WAL is large, the writer checkpoints between
// batches so that the next transaction restarts the WAL from its
// beginning.
func TestWALRestarts(t *testing.T) {
	t.Run("no journal", func(t *testing.T) { testWALRestarts(t, openAt(t, tempDB(t), Options{NoJournal: true})) })
	t.Run("journal applied per batch", func(t *testing.T) {
		s := openAt(t, tempDB(t), Options{})
		s.w.applyEvery = 0 // before the first request: the writer reads it after receiving one
		testWALRestarts(t, s)
	})
}

func testWALRestarts(t *testing.T, s *Store) {
	s.ckpt.close() // this test runs the checkpoints itself
	ctx := context.Background()
	for i := range 40 {
		batch := make([]*audit.Event, 50)
		for j := range batch {
			batch[j] = event(t, "acme", fmt.Sprint("run_", j), i, 200)
		}
		if err := s.AppendEvents(ctx, batch...); err != nil {
			t.Fatal(err)
		}
	}
	// Nothing was copied back yet (no background checkpointer): a large
	// WAL. The writer's own checkpoint, due once it sees the WAL size, is
	// what lets the transaction after it restart the WAL.
	s.ckpt.frames.Store(hardWALFrames) // seen after the next batch
	for i := range 2 {
		if err := s.AppendEvents(ctx, event(t, "acme", "run_x", i, 0)); err != nil {
			t.Fatal(err)
		}
	}
	s.EventsByRun(ctx, "acme", "run_x", -1, 1) // with a journal: its barrier applies the last batch
	after, err := walCheckpoint(ctx, s.cdb)
	if err != nil || after > 20 {
		t.Fatalf("after the restart the WAL holds %d frames (%v), want only the last batch's", after, err)
	}
	if evs, _ := s.EventsByRun(ctx, "acme", "run_x", -1, 10); len(evs) != 2 {
		t.Fatalf("run_x has %d events", len(evs))
	}

	// Past the soft limit the writer restarts the WAL as soon as it idles.
	for i := range 20 {
		if err := s.AppendEvents(ctx, event(t, "acme", "run_y", i, 200)); err != nil {
			t.Fatal(err)
		}
	}
	s.ckpt.frames.Store(softWALFrames)
	if err := s.AppendEvents(ctx, event(t, "acme", "run_y", 20, 0)); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for s.ckpt.frames.Load() != 0 { // restartWAL resets it
		if time.Now().After(deadline) {
			t.Fatal("the idle writer did not checkpoint")
		}
		runtime.Gosched()
	}
	if err := s.AppendEvents(ctx, event(t, "acme", "run_y", 21, 0)); err != nil {
		t.Fatal(err)
	}
	s.EventsByRun(ctx, "acme", "run_y", -1, 1) // with a journal: its barrier applies the last batch
	if after, err := walCheckpoint(ctx, s.cdb); err != nil || after > 20 {
		t.Fatalf("after the idle restart the WAL holds %d frames (%v)", after, err)
	}
}

// Options.Existing refuses, changing nothing, a path that is not already a
// toolgate store; it opens one that is.
func TestOpenExisting(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	other := filepath.Join(dir, "app.db")
	db, err := sql.Open("sqlite", other)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("CREATE TABLE users (id INTEGER)"); err != nil {
		t.Fatal(err)
	}
	db.Close()
	// Another tool's migrations table, with toolgate's table names even.
	migrated := filepath.Join(dir, "migrated.db")
	if db, err = sql.Open("sqlite", migrated); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"CREATE TABLE schema_migrations (version TEXT PRIMARY KEY)", "INSERT INTO schema_migrations VALUES ('20240101120000')",
		"CREATE TABLE events (x)", "CREATE TABLE receipts (x)", "CREATE TABLE checkpoints (x)", "CREATE TABLE approvals (x)", "CREATE TABLE sessions (x)"} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()
	empty := filepath.Join(dir, "empty.db")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	garbage := filepath.Join(dir, "garbage.db")
	if err := os.WriteFile(garbage, []byte(strings.Repeat("not a database ", 512)), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ path, want string }{
		{filepath.Join(dir, "missing.db"), "no such file"},
		{empty, "the file is empty"},
		{other, "without toolgate's tables"},
		{migrated, "schema_migrations is not toolgate's"},
		{garbage, "not a SQLite database"},
		{dir, "not a regular file"},
	} {
		before, _ := os.ReadFile(c.path)
		_, err := Open(ctx, c.path, Options{Signer: signerN(1), Existing: true})
		wantCode(t, err, errcode.InvalidArgument, c.path)
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.path, err, c.want)
		}
		if after, _ := os.ReadFile(c.path); !bytes.Equal(before, after) {
			t.Errorf("%s changed", c.path)
		}
		if _, err := os.Stat(c.path + "-wal"); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s-wal exists after a refused Open: %v", c.path, err)
		}
	}
	path := tempDB(t)
	openAt(t, path, Options{}).Close()
	s, err := Open(ctx, path, Options{Signer: signerN(1), Existing: true})
	if err != nil {
		t.Fatalf("Existing on a store: %v", err)
	}
	s.Close()
}

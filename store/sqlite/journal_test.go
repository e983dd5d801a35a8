package sqlite

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"reflect"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/store"
)

// openHeld opens a journaled store whose acknowledged rows stay out of
// SQLite until a read (barrier) or Close applies them.
func openHeld(t *testing.T, path string) *Store {
	t.Helper()
	s := openAt(t, path, Options{})
	if !s.Journaled() {
		t.Fatal("the store does not own its journal")
	}
	s.w.applyEvery = 1 << 62 // before the first request: the writer reads it after receiving one
	return s
}

// crashImage copies the store's files as they are on disk now, while the
// writer is blocked inside a batch: what a kill -9 at that moment leaves.
// It returns the copy's database path.
func crashImage(t *testing.T, s *Store) string {
	t.Helper()
	release := blockWriter(t, s)
	defer release()
	dst := tempDB(t)
	for _, suffix := range []string{"", "-wal", JournalSuffix} {
		data, err := os.ReadFile(s.path + suffix)
		if err != nil {
			if os.IsNotExist(err) {
				continue
			}
			t.Fatal(err)
		}
		if err := os.WriteFile(dst+suffix, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// countRows counts the rows of table in the store's file, reading SQLite
// directly.
func countRows(t *testing.T, s *Store, table string) int {
	t.Helper()
	var n int
	if err := s.rdb.QueryRowContext(context.Background(), "SELECT COUNT(*) FROM "+table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// appendCalls appends n calls' worth of rows: an agent.toolCalled, then an
// outcome (agent.toolReturned and a receipt), each its own group.
func appendCalls(t *testing.T, s *Store, prefix string, n int) {
	t.Helper()
	ctx := context.Background()
	for i := range n {
		called := event(t, "acme", prefix, 2*i, 0)
		if err := s.AppendEvents(ctx, called); err != nil {
			t.Fatal(err)
		}
		ret := event(t, "acme", prefix, 2*i+1, 0)
		ret.Type = audit.TypeToolReturned
		if err := s.AppendOutcome(ctx, []*audit.Event{ret}, rcpt(fmt.Sprintf("%s_%d", prefix, i))); err != nil {
			t.Fatal(err)
		}
	}
}

// TestJournalReplayAfterCrash: rows acknowledged but not yet in SQLite when
// the process dies are in the journal, and the next Open puts them into
// SQLite: events in their runs' order, receipts that verify, nothing twice.
func TestJournalReplayAfterCrash(t *testing.T) {
	s := openHeld(t, tempDB(t))
	appendCalls(t, s, "run_a", 5)
	if n := countRows(t, s, "events"); n != 0 {
		t.Fatalf("%d events in SQLite before any read: the test needs them in the journal only", n)
	}
	img := crashImage(t, s)
	if fi, err := os.Stat(img + JournalSuffix); err != nil || fi.Size() == 0 {
		t.Fatalf("crash image journal: %v, %v", fi, err)
	}

	c := openAt(t, img, Options{})
	evs, err := c.EventsByRun(context.Background(), "acme", "run_a", -1, 100)
	if err != nil || len(evs) != 10 {
		t.Fatalf("after replay: %d events, %v; want 10", len(evs), err)
	}
	for i, ev := range evs {
		if ev.Sequence != int64(i) {
			t.Fatalf("event %d has sequence %d", i, ev.Sequence)
		}
	}
	if rep := verifyExport(t, c); rep.Receipts != 5 {
		t.Fatalf("after replay: %d receipts verify, want 5", rep.Receipts)
	}
	if fi, err := os.Stat(img + JournalSuffix); err != nil || fi.Size() != 0 {
		t.Fatalf("the journal is not empty after the replay: %v, %v", fi, err)
	}
	// The writer goes on where the journal ended: sequences and the chain.
	appendCalls(t, c, "run_a2", 1)
	next := event(t, "acme", "run_a", 99, 0)
	if err := c.AppendEvents(context.Background(), next); err != nil || next.Sequence != 10 {
		t.Fatalf("next event of run_a: seq %d, %v; want 10", next.Sequence, err)
	}
	if rep := verifyExport(t, c); rep.Receipts != 6 {
		t.Fatalf("%d receipts verify, want 6", rep.Receipts)
	}
}

// TestJournalReplayIdempotent: a journal applied twice (a crash after the
// SQLite commit and before the truncation) adds no row.
func TestJournalReplayIdempotent(t *testing.T) {
	s := openHeld(t, tempDB(t))
	appendCalls(t, s, "run_i", 4)
	img := crashImage(t, s)
	saved, err := os.ReadFile(img + JournalSuffix)
	if err != nil || len(saved) == 0 {
		t.Fatalf("journal: %d bytes, %v", len(saved), err)
	}
	c, err := Open(context.Background(), img, Options{Signer: signerN(1)})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(img+JournalSuffix, saved, 0o600); err != nil { // the same records again
		t.Fatal(err)
	}
	c = openAt(t, img, Options{})
	if n := countRows(t, c, "events"); n != 8 {
		t.Fatalf("%d events after applying the journal twice, want 8", n)
	}
	if n := countRows(t, c, "receipts"); n != 4 {
		t.Fatalf("%d receipts after applying the journal twice, want 4", n)
	}
	if rep := verifyExport(t, c); rep.Receipts != 4 {
		t.Fatalf("%d receipts verify, want 4", rep.Receipts)
	}
}

// TestJournalTornTail: a frame cut short by a crash mid-write, or zeros
// the file system left after the last frame, is dropped and cut from the
// file; the frames before it are applied.
func TestJournalTornTail(t *testing.T) {
	for _, tc := range []struct {
		name string
		tail func(frame []byte) []byte
	}{
		{"half a frame", func(f []byte) []byte { return f[:len(f)/2] }},
		{"header only", func(f []byte) []byte { return f[:5] }},
		{"last byte missing", func(f []byte) []byte { return f[:len(f)-1] }},
		{"bad checksum on the last frame", func(f []byte) []byte { g := bytes.Clone(f); g[len(g)-1] ^= 0xff; return g }},
		{"zeros", func([]byte) []byte { return make([]byte, 4096) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := openHeld(t, tempDB(t))
			appendCalls(t, s, "run_t", 3)
			img := crashImage(t, s)
			good, err := os.ReadFile(img + JournalSuffix)
			if err != nil {
				t.Fatal(err)
			}
			lost := event(t, "acme", "run_t", 6, 0)
			lost.Sequence = 6
			frame := appendFrame(nil, &jFrame{Events: []jEvent{{Pos: 1000, Seq: 6, EventID: lost.EventID, Tenant: "acme", RunID: "run_t",
				Type: lost.Type, TS: fmtTime(lost.Timestamp), Payload: lost.Payload}}})
			if err := os.WriteFile(img+JournalSuffix, append(bytes.Clone(good), tc.tail(frame)...), 0o600); err != nil {
				t.Fatal(err)
			}
			c := openAt(t, img, Options{})
			evs, err := c.EventsByRun(context.Background(), "acme", "run_t", -1, 100)
			if err != nil || len(evs) != 6 {
				t.Fatalf("after a torn tail: %d events, %v; want the 6 of the whole frames", len(evs), err)
			}
			if rep := verifyExport(t, c); rep.Receipts != 3 {
				t.Fatalf("%d receipts verify, want 3", rep.Receipts)
			}
		})
	}
}

// TestJournalCorruptMiddle: a damaged frame followed by more frames is not
// a torn write: Open fails with AuditUnavailable naming the journal and
// the offset, and applies nothing.
func TestJournalCorruptMiddle(t *testing.T) {
	s := openHeld(t, tempDB(t))
	appendCalls(t, s, "run_c", 3)
	img := crashImage(t, s)
	data, err := os.ReadFile(img + JournalSuffix)
	if err != nil {
		t.Fatal(err)
	}
	data[frameHeader+3] ^= 0x55 // inside the first frame's payload
	if err := os.WriteFile(img+JournalSuffix, data, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = Open(context.Background(), img, Options{Signer: signerN(1)})
	wantCode(t, err, errcode.AuditUnavailable, "open with a corrupt journal")
	if err == nil || !strings.Contains(err.Error(), "corrupt frame at offset 0") || !strings.Contains(err.Error(), JournalSuffix) {
		t.Fatalf("the error does not say what and where: %v", err)
	}
	after, err := os.ReadFile(img + JournalSuffix)
	if err != nil || !bytes.Equal(after, data) {
		t.Fatal("the corrupt journal was changed by the failed Open")
	}
}

// TestReadsSeeAcknowledgedWrites: with the journal holding rows back from
// SQLite, every read that follows an acknowledged write sees it, under
// concurrent writers and readers (run with -race).
func TestReadsSeeAcknowledgedWrites(t *testing.T) {
	s := openHeld(t, tempDB(t))
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			run := fmt.Sprint("run_r", g)
			for i := range 15 {
				ev := event(t, "acme", run, i, 0)
				r := rcpt(fmt.Sprintf("r%d_%d", g, i))
				if err := s.AppendOutcome(ctx, []*audit.Event{ev}, r); err != nil {
					errs <- err
					return
				}
				evs, err := s.EventsByRun(ctx, "acme", run, int64(i)-1, 10)
				if err != nil || len(evs) != 1 || evs[0].EventID != ev.EventID {
					errs <- fmt.Errorf("%s: read after acknowledged event %d: %d events, %v", run, i, len(evs), err)
					return
				}
				got, err := s.ReceiptByID(ctx, "acme", r.ReceiptID)
				if err != nil || got.Hash != r.Hash {
					errs <- fmt.Errorf("%s: read after acknowledged receipt %s: %v", run, r.ReceiptID, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if rep := verifyExport(t, s); rep.Receipts != 8*15 {
		t.Fatalf("%d receipts verify, want %d", rep.Receipts, 8*15)
	}
}

// TestFollowWithJournal: a follower gets each acknowledged event live, and
// one that starts behind catches up from SQLite through the barrier.
func TestFollowWithJournal(t *testing.T) {
	s := openHeld(t, tempDB(t))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	live, err := s.Follow(ctx, "acme", "")
	if err != nil {
		t.Fatal(err)
	}
	appendCalls(t, s, "run_f", 2)
	for i := range 4 {
		if f := <-live; f.Event.RunID != "run_f" || f.Event.Sequence != int64(i) {
			t.Fatalf("live event %d: %+v", i, f.Event)
		}
	}
	behind, err := s.Follow(ctx, "acme", store.FromStart)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		if f := <-behind; f.Event.Sequence != int64(i) {
			t.Fatalf("caught-up event %d: %+v", i, f.Event)
		}
	}
}

// TestJournalWriteFails: a journal write that fails halfway (a disk that
// fills up: part of the frame written, then ENOSPC) fails the batch with
// AuditUnavailable, cuts the part written and stores nothing of the batch;
// the next write succeeds and continues the runs and the chain without a
// gap, and a reopen finds a clean journal.
func TestJournalWriteFails(t *testing.T) {
	path := tempDB(t)
	s := openHeld(t, path)
	ctx := context.Background()
	appendCalls(t, s, "run_u", 1)
	setHook := func(h func(*os.File, []byte, int64) error) {
		if err := s.runOp(ctx, "hook", func(w *writer) error { w.j.writeHook = h; return nil }); err != nil {
			t.Fatal(err)
		}
	}
	setHook(func(f *os.File, b []byte, off int64) error {
		if _, err := f.WriteAt(b[:len(b)/2], off); err != nil {
			return err
		}
		return syscall.ENOSPC
	})
	doomed := rcpt("doomed")
	ev := event(t, "acme", "run_u", 5, 0)
	err := s.AppendOutcome(ctx, []*audit.Event{ev}, doomed)
	wantCode(t, err, errcode.AuditUnavailable, "append with a full disk under the journal")
	if !strings.Contains(fmt.Sprint(err), "no space left") {
		t.Errorf("the error does not name the cause: %v", err)
	}
	if doomed.Hash != "" {
		t.Fatal("the receipt of the failed batch stays linked")
	}
	if evs, _ := s.EventsByRun(ctx, "acme", "run_u", -1, 10); len(evs) != 2 {
		t.Fatalf("%d events stored, want the 2 before the failure", len(evs))
	}
	setHook(nil)
	again := rcpt("again")
	if err := s.AppendOutcome(ctx, []*audit.Event{ev}, again); err != nil {
		t.Fatal(err)
	}
	if ev.Sequence != 2 || again.Seq != 1 {
		t.Fatalf("after recovery: event seq %d, receipt seq %d; want 2 and 1", ev.Sequence, again.Seq)
	}
	img := crashImage(t, s) // its journal holds "again" and must scan cleanly
	c := openAt(t, img, Options{})
	if rep := verifyExport(t, c); rep.Receipts != 2 {
		t.Fatalf("%d receipts verify after a reopen, want 2", rep.Receipts)
	}
}

// TestJournalUncuttable: when a failed journal write cannot even be cut
// back (the file is no longer writable at all), the store refuses every
// later write with AuditUnavailable rather than append after a damaged
// frame.
func TestJournalUncuttable(t *testing.T) {
	s := openHeld(t, tempDB(t))
	ctx := context.Background()
	appendCalls(t, s, "run_x", 1)
	if err := s.runOp(ctx, "swap", func(w *writer) error {
		ro, err := os.Open(s.path + JournalSuffix)
		if err != nil {
			return err
		}
		w.j.f.Close()
		w.j.f = ro
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"cutting the journal back failed too", "every write is refused"} {
		err := s.AppendEvents(ctx, event(t, "acme", "run_x", 10+i, 0))
		wantCode(t, err, errcode.AuditUnavailable, "append after an uncuttable journal")
		if !strings.Contains(fmt.Sprint(err), want) {
			t.Fatalf("write %d: %v, want it to say %q", i, err, want)
		}
	}
}

// TestSecondStoreWithoutJournal: a second Store on the same file (a CLI
// command beside a gateway) does not take the journal: it writes straight
// to SQLite, and sees the owner's rows once the owner applied them.
func TestSecondStoreWithoutJournal(t *testing.T) {
	path := tempDB(t)
	s := openHeld(t, path)
	other := openAt(t, path, Options{})
	if other.Journaled() {
		t.Fatal("the second Store took the journal")
	}
	appendCalls(t, s, "run_o", 1)
	if _, err := s.EventsByRun(context.Background(), "acme", "run_o", -1, 10); err != nil { // applies
		t.Fatal(err)
	}
	if evs, err := other.EventsByRun(context.Background(), "acme", "run_o", -1, 10); err != nil || len(evs) != 2 {
		t.Fatalf("the second Store reads %d events, %v; want 2", len(evs), err)
	}
}

// TestFrameRoundTrip: appendFrame and nextFrame agree.
func TestFrameRoundTrip(t *testing.T) {
	f := &jFrame{
		Events:      []jEvent{{Pos: 7, Seq: -1 + 2, EventID: "evt", Tenant: "t", RunID: "r", Type: "x", TS: "ts", CausationID: "c", SchemaVersion: 3, Payload: []byte(`{}`), Principal: "p"}},
		Receipts:    []jReceipt{{ChainID: "k", Seq: 9, ReceiptID: "rc", Tenant: "t", Body: []byte(`{"a":1}`)}},
		Checkpoints: []jCheckpoint{{ChainID: "k", Seq: 9, Body: []byte(`{}`)}},
	}
	data := appendFrame(nil, f)
	got, n, err := nextFrame(data)
	if err != nil || n != len(data) || !reflect.DeepEqual(got, f) {
		t.Fatalf("round trip: %+v, %d, %v", got, n, err)
	}
}

// FuzzJournalScan: scanJournal never panics on any file content; what it
// accepts re-encodes to frames it decodes the same way, and it never
// reports more good bytes than it was given.
func FuzzJournalScan(f *testing.F) {
	f.Add([]byte{})
	f.Add(appendFrame(nil, &jFrame{Events: []jEvent{{Pos: 1, EventID: "e", Payload: []byte(`{"n":1}`)}}}))
	f.Add(appendFrame(appendFrame(nil, &jFrame{Receipts: []jReceipt{{ChainID: "k", Seq: 1, ReceiptID: "r", Body: []byte(`{}`)}}}),
		&jFrame{Checkpoints: []jCheckpoint{{ChainID: "k", Seq: 1, Body: []byte(`{}`)}}}))
	f.Fuzz(func(t *testing.T, data []byte) {
		frames, good, err := scanJournal(data)
		if err != nil {
			return
		}
		if good > len(data) {
			t.Fatalf("good %d > %d bytes", good, len(data))
		}
		var again []byte
		for _, fr := range frames {
			again = appendFrame(again, fr)
		}
		back, n, err := scanJournal(again)
		if err != nil || n != len(again) || len(back) != len(frames) {
			t.Fatalf("re-encoded frames do not scan back: %d of %d bytes, %d frames of %d, %v", n, len(again), len(back), len(frames), err)
		}
		for i := range back {
			if !reflect.DeepEqual(normal(back[i]), normal(frames[i])) {
				t.Fatalf("frame %d differs after re-encoding", i)
			}
		}
	})
}

// normal maps empty byte strings to nil, which the decoder does not tell
// apart.
func normal(f *jFrame) *jFrame {
	g := *f
	g.Events = append([]jEvent(nil), f.Events...)
	for i := range g.Events {
		if len(g.Events[i].Payload) == 0 {
			g.Events[i].Payload = nil
		}
	}
	g.Receipts = append([]jReceipt(nil), f.Receipts...)
	for i := range g.Receipts {
		if len(g.Receipts[i].Body) == 0 {
			g.Receipts[i].Body = nil
		}
	}
	g.Checkpoints = append([]jCheckpoint(nil), f.Checkpoints...)
	for i := range g.Checkpoints {
		if len(g.Checkpoints[i].Body) == 0 {
			g.Checkpoints[i].Body = nil
		}
	}
	return &g
}

// TestNoJournalReplaysLeftJournal: switching the journal off (NoJournal)
// after a crash still applies what the journal holds, and then writes
// without it.
func TestNoJournalReplaysLeftJournal(t *testing.T) {
	s := openHeld(t, tempDB(t))
	appendCalls(t, s, "run_n", 3)
	img := crashImage(t, s)
	c := openAt(t, img, Options{NoJournal: true})
	if c.Journaled() {
		t.Fatal("NoJournal store owns the journal")
	}
	if evs, err := c.EventsByRun(context.Background(), "acme", "run_n", -1, 100); err != nil || len(evs) != 6 {
		t.Fatalf("after replay without a journal: %d events, %v; want 6", len(evs), err)
	}
	appendCalls(t, c, "run_n2", 1)
	if fi, err := os.Stat(img + JournalSuffix); err != nil || fi.Size() != 0 {
		t.Fatalf("journal after a NoJournal store wrote: %v, %v", fi, err)
	}
	if rep := verifyExport(t, c); rep.Receipts != 4 {
		t.Fatalf("%d receipts verify, want 4", rep.Receipts)
	}
}

package sqlite

import (
	"context"
	"testing"
	"time"

	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/store"
)

// TestFollowCursorAfterPruneAndReopen: once retention has pruned every
// event and the store is reopened, the feed starts from MAX(pos) = 0, yet a
// cursor of a pruned event is not ahead of the log (positions are never
// reused): Follow accepts it and delivers what comes next, and refuses
// only a position no commit has reached.
func TestFollowCursorAfterPruneAndReopen(t *testing.T) {
	ctx := context.Background()
	path := tempDB(t)
	s := openAt(t, path, Options{})
	for i := range 3 {
		if err := s.AppendEvents(ctx, event(t, "acme", "run_p", i, 0)); err != nil {
			t.Fatal(err)
		}
	}
	evs, err := s.EventsByRun(ctx, "acme", "run_p", -1, 10)
	if err != nil || len(evs) != 3 {
		t.Fatalf("EventsByRun: %d events, %v", len(evs), err)
	}
	cursor := cursorOf(t, s, evs[2].EventID)
	c, err := store.ParseCursor(cursor)
	if err != nil {
		t.Fatal(err)
	}
	if res, err := s.Prune(ctx, t0.Add(time.Hour)); err != nil || res.Events != 3 {
		t.Fatalf("Prune: %+v, %v", res, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = openAt(t, path, Options{})
	if last := s.feed.Last(); last != 0 {
		t.Fatalf("reopened feed starts at %d, want 0 (every event pruned)", last)
	}
	if last, err := s.lastCommitted(ctx); err != nil || last != c.Pos {
		t.Fatalf("lastCommitted = %d, %v; want %d", last, err, c.Pos)
	}
	fctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	ch, err := s.Follow(fctx, "acme", cursor)
	if err != nil {
		t.Fatalf("Follow with a pruned event's cursor: %v", err)
	}
	_, err = s.Follow(fctx, "acme", store.Cursor{Time: t0, Pos: c.Pos + 1}.String())
	wantCode(t, err, errcode.InvalidArgument, "Follow one past the last committed position")
	next := event(t, "acme", "run_p", 3, 0)
	if err := s.AppendEvents(ctx, next); err != nil {
		t.Fatal(err)
	}
	select {
	case f := <-ch:
		if f.Event.EventID != next.EventID || f.Event.Sequence != 3 {
			t.Fatalf("follower got %s seq %d, want %s seq 3", f.Event.EventID, f.Event.Sequence, next.EventID)
		}
	case <-fctx.Done():
		t.Fatal("follower got nothing")
	}
}

package sqlite

import (
	"context"
	"slices"
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

// Issue 13.15: with FollowPoll, a Store's followers see the events another
// Store (another process, in production: `audit tail --follow` beside a
// running gateway) commits to the same file, in commit order, each once,
// interleaved with its own commits.
func TestFollowSeesAnotherStoresCommits(t *testing.T) {
	ctx := context.Background()
	path := tempDB(t)
	gw := openAt(t, path, Options{})
	if err := gw.AppendEvents(ctx, event(t, "acme", "run_old", 0, 0)); err != nil {
		t.Fatal(err)
	}
	tail := openAt(t, path, Options{FollowPoll: 20 * time.Millisecond, Signer: signerN(2)})
	plain := openAt(t, path, Options{Signer: signerN(3)})
	fctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	fromNow, err := tail.Follow(fctx, "acme", "")
	if err != nil {
		t.Fatal(err)
	}
	fromStart, err := tail.Follow(fctx, "acme", store.FromStart)
	if err != nil {
		t.Fatal(err)
	}
	// The other store's commits, one of another tenant, and one of the
	// follower's own store in between.
	var want []string
	for i := range 3 {
		ev := event(t, "acme", "run_gw", i, 0)
		if err := gw.AppendEvents(ctx, ev, event(t, "other", "run_x", i, 0)); err != nil {
			t.Fatal(err)
		}
		want = append(want, ev.EventID)
		if i == 1 {
			mine := event(t, "acme", "run_tail", 0, 0)
			if err := tail.AppendEvents(ctx, mine); err != nil {
				t.Fatal(err)
			}
			want = append(want, mine.EventID)
		}
	}
	recv := func(name string, ch <-chan store.Followed, n int) []string {
		var got []string
		for len(got) < n {
			select {
			case f, ok := <-ch:
				if !ok {
					t.Fatalf("%s: channel closed after %v", name, got)
				}
				got = append(got, f.Event.EventID)
			case <-fctx.Done():
				t.Fatalf("%s: got %v, want %v", name, got, want)
			}
		}
		return got
	}
	if got := recv("follow from now", fromNow, len(want)); !slices.Equal(got, want) {
		t.Fatalf("follow from now: %v, want %v", got, want)
	}
	if got := recv("follow from start", fromStart, len(want)+1); !slices.Equal(got[1:], want) {
		t.Fatalf("follow from start: %v, want run_old's event then %v", got, want)
	}
	mine := event(t, "acme", "run_plain", 0, 0)
	if err := plain.AppendEvents(ctx, mine); err != nil {
		t.Fatal(err)
	}
	// Nothing is delivered twice: the polling follower's next events are
	// that one (a third store's) and one more of the gateway's.
	last := event(t, "acme", "run_gw", 3, 0)
	if err := gw.AppendEvents(ctx, last); err != nil {
		t.Fatal(err)
	}
	if got := recv("follow from now", fromNow, 2); !slices.Equal(got, []string{mine.EventID, last.EventID}) {
		t.Fatalf("after two more commits: %v, want [%s %s]", got, mine.EventID, last.EventID)
	}
}

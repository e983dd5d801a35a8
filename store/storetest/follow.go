package storetest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/store"
)

// recvN receives n events from ch, failing if it closes first or if they
// do not arrive within waitLimit.
func recvN(t testing.TB, ch <-chan store.Followed, n int) []store.Followed {
	t.Helper()
	timer := time.NewTimer(waitLimit)
	defer timer.Stop()
	out := make([]store.Followed, 0, n)
	for len(out) < n {
		select {
		case f, ok := <-ch:
			if !ok {
				t.Fatalf("follow channel closed after %d of %d events", len(out), n)
			}
			out = append(out, f)
		case <-timer.C:
			t.Fatalf("follow: received %d of %d events within %v", len(out), n, waitLimit)
		}
	}
	return out
}

// waitClosed drains ch until it is closed, failing after waitLimit.
func waitClosed(t testing.TB, ch <-chan store.Followed) {
	t.Helper()
	timer := time.NewTimer(waitLimit)
	defer timer.Stop()
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return
			}
		case <-timer.C:
			t.Fatalf("follow channel not closed within %v", waitLimit)
		}
	}
}

// wantIDs fails unless got carries exactly want's events, in order.
func wantIDs(t testing.TB, got []store.Followed, want []*audit.Event, what string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d events, want %d", what, len(got), len(want))
	}
	for i := range want {
		if got[i].Event.EventID != want[i].EventID {
			t.Fatalf("%s: event %d is %s, want %s", what, i, got[i].Event.EventID, want[i].EventID)
		}
		sameEvent(t, got[i].Event, want[i], want[i].Sequence)
		if got[i].Cursor == "" {
			t.Fatalf("%s: event %d has no cursor", what, i)
		}
	}
}

func testFollowLive(t *testing.T, s store.Store) {
	ctx := deadline(t)
	mustAppend(t, s, newEvent(t, "acme", "run_0", -1, t0)) // before Follow: not delivered
	acme, err := s.Follow(ctx, "acme", "")
	if err != nil {
		t.Fatalf("Follow: %v", err)
	}
	globex, err := s.Follow(ctx, "globex", "")
	if err != nil {
		t.Fatalf("Follow: %v", err)
	}
	var wantA, wantG []*audit.Event
	for i := range 50 {
		a := newEvent(t, "acme", fmt.Sprintf("run_%d", i%3), i, t0.Add(time.Duration(i)*time.Millisecond))
		if i%5 == 0 {
			a2 := newEvent(t, "acme", "run_batch", i, t0)
			mustAppend(t, s, a, a2)
			wantA = append(wantA, a, a2)
		} else {
			mustAppend(t, s, a)
			wantA = append(wantA, a)
		}
		g := newEvent(t, "globex", "run_0", i, t0)
		mustAppend(t, s, g)
		wantG = append(wantG, g)
	}
	wantIDs(t, recvN(t, acme, len(wantA)), wantA, "follow acme")
	wantIDs(t, recvN(t, globex, len(wantG)), wantG, "follow globex")
	// Nothing else was queued for acme: the next event is the sentinel.
	sentinel := newEvent(t, "acme", "run_0", 1000, t0)
	mustAppend(t, s, sentinel)
	wantIDs(t, recvN(t, acme, 1), []*audit.Event{sentinel}, "follow acme sentinel")
}

func testFollowReplay(t *testing.T, s store.Store) {
	ctx := deadline(t)
	var want []*audit.Event
	for i := range 30 {
		ev := newEvent(t, "acme", fmt.Sprintf("run_%d", i%4), i, t0)
		mustAppend(t, s, ev, newEvent(t, "globex", "run_0", i, t0))
		want = append(want, ev)
	}
	all, err := s.Follow(ctx, "acme", store.FromStart)
	if err != nil {
		t.Fatalf("Follow(FromStart): %v", err)
	}
	got := recvN(t, all, 30)
	wantIDs(t, got, want, "replay from the start")
	for i := range 10 {
		ev := newEvent(t, "acme", "run_live", i, t0)
		mustAppend(t, s, ev)
		want = append(want, ev)
	}
	got = append(got, recvN(t, all, 10)...)
	wantIDs(t, got, want, "replay, then live")

	// Resume after the 20th event with its cursor.
	resumed, err := s.Follow(ctx, "acme", got[19].Cursor)
	if err != nil {
		t.Fatalf("Follow(cursor): %v", err)
	}
	wantIDs(t, recvN(t, resumed, 20), want[20:], "resume from a follow cursor")
	// A cursor from EventsByTime (all events have the same timestamp, so
	// time order is store order) resumes after that event too.
	page, next, err := s.EventsByTime(ctx, "acme", time.Time{}, time.Time{}, "", 5)
	if err != nil || len(page) != 5 || next == "" {
		t.Fatalf("EventsByTime: %d events, next %q, %v", len(page), next, err)
	}
	fromTime, err := s.Follow(ctx, "acme", next)
	if err != nil {
		t.Fatalf("Follow(EventsByTime cursor): %v", err)
	}
	wantIDs(t, recvN(t, fromTime, 35), want[5:], "resume from an EventsByTime cursor")
	extra := newEvent(t, "acme", "run_live", 99, t0)
	mustAppend(t, s, extra)
	for name, ch := range map[string]<-chan store.Followed{"all": all, "resumed": resumed, "fromTime": fromTime} {
		wantIDs(t, recvN(t, ch, 1), []*audit.Event{extra}, "live after replay ("+name+")")
	}
	_, err = s.Follow(ctx, "acme", "garbage!")
	wantCode(t, err, errcode.InvalidArgument, "Follow with a malformed cursor")
}

func testFollowSlow(t *testing.T, s store.Store) {
	ctx := deadline(t)
	slow, err := s.Follow(ctx, "acme", "")
	if err != nil {
		t.Fatalf("Follow: %v", err)
	}
	fast, err := s.Follow(ctx, "acme", "")
	if err != nil {
		t.Fatalf("Follow: %v", err)
	}
	const writers, perW = 4, 500
	var fastGot []store.Followed
	fastDone := make(chan struct{})
	go func() {
		defer close(fastDone)
		for f := range fast {
			fastGot = append(fastGot, f)
			if len(fastGot) == writers*perW {
				return
			}
		}
	}()
	// The slow follower reads nothing while 2000 events are appended: the
	// writers must not wait for it.
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range perW {
				if err := s.AppendEvents(context.Background(), newEvent(t, "acme", fmt.Sprintf("run_%d", w), i, t0)); err != nil {
					t.Errorf("AppendEvents: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	check := func(got []store.Followed, who string) {
		t.Helper()
		if len(got) != writers*perW {
			t.Fatalf("%s follower got %d events, want %d", who, len(got), writers*perW)
		}
		next := map[string]int64{}
		seen := map[string]bool{}
		for _, f := range got {
			if seen[f.Event.EventID] {
				t.Fatalf("%s follower: event %s delivered twice", who, f.Event.EventID)
			}
			seen[f.Event.EventID] = true
			if f.Event.Sequence != next[f.Event.RunID] {
				t.Fatalf("%s follower: %s seq %d, want %d (order or loss)", who, f.Event.RunID, f.Event.Sequence, next[f.Event.RunID])
			}
			next[f.Event.RunID]++
		}
	}
	check(recvN(t, slow, writers*perW), "slow")
	select {
	case <-fastDone:
	case <-ctx.Done():
		t.Fatal("the fast follower did not receive every event")
	}
	check(fastGot, "fast")
}

func testFollowEnds(t *testing.T, s store.Store) {
	ctx, cancel := context.WithCancel(deadline(t))
	ch, err := s.Follow(ctx, "acme", "")
	if err != nil {
		t.Fatalf("Follow: %v", err)
	}
	ev := newEvent(t, "acme", "run_0", 0, t0)
	mustAppend(t, s, ev)
	wantIDs(t, recvN(t, ch, 1), []*audit.Event{ev}, "follow")
	cancel()
	waitClosed(t, ch)
	// A follower that stopped reading (and is detached) ends as well.
	ctx2, cancel2 := context.WithCancel(deadline(t))
	ch2, err := s.Follow(ctx2, "acme", store.FromStart)
	if err != nil {
		t.Fatalf("Follow: %v", err)
	}
	for i := range 300 {
		mustAppend(t, s, newEvent(t, "acme", "run_1", i, t0))
	}
	cancel2()
	waitClosed(t, ch2)
	done, cancel3 := context.WithCancel(context.Background())
	cancel3()
	_, err = s.Follow(done, "acme", "")
	wantCode(t, err, errcode.Cancelled, "Follow with a cancelled ctx")
}

func testFollowCursorAhead(t *testing.T, s store.Store) {
	ctx := deadline(t)
	ahead := func(pos int64, what string) {
		t.Helper()
		_, err := s.Follow(ctx, "acme", store.Cursor{Time: t0, Pos: pos}.String())
		wantCode(t, err, errcode.InvalidArgument, what)
	}
	ahead(1, "Follow on an empty store with a cursor of position 1")
	for i := range 5 {
		mustAppend(t, s, newEvent(t, "acme", "run_0", i, t0), newEvent(t, "globex", "run_0", i, t0))
	}
	// The newest event is globex's: its cursor is the log's last position.
	// It is not ahead (positions are the store's, across tenants), so an
	// acme follower resumes from it without skipping anything.
	g, err := s.Follow(ctx, "globex", store.FromStart)
	if err != nil {
		t.Fatalf("Follow: %v", err)
	}
	got := recvN(t, g, 5)
	newest, err := store.ParseCursor(got[4].Cursor)
	if err != nil {
		t.Fatalf("ParseCursor(%q): %v", got[4].Cursor, err)
	}
	acme, err := s.Follow(ctx, "acme", got[4].Cursor)
	if err != nil {
		t.Fatalf("Follow with the newest event's cursor: %v", err)
	}
	ahead(newest.Pos+1, "Follow with a cursor one past the newest event")
	ahead(1<<62, "Follow with a cursor far ahead of the log")
	ev := newEvent(t, "acme", "run_0", 5, t0)
	mustAppend(t, s, ev)
	wantIDs(t, recvN(t, acme, 1), []*audit.Event{ev}, "follow from the newest cursor")
	// The log has grown: the position that was ahead is now the newest.
	resumed, err := s.Follow(ctx, "acme", store.Cursor{Time: t0, Pos: newest.Pos + 1}.String())
	if err != nil {
		t.Fatalf("Follow with a cursor the log has reached: %v", err)
	}
	next := newEvent(t, "acme", "run_0", 6, t0)
	mustAppend(t, s, next)
	wantIDs(t, recvN(t, resumed, 1), []*audit.Event{next}, "follow from a cursor the log has reached")
}

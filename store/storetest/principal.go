package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/store"
)

// testEventPrincipal: an event's Principal (the owner reads are scoped to)
// is stored and returned by every read: EventsByRun, EventsByTime, Follow,
// for events appended one at a time, in a batch and through AppendOutcome;
// an event of no principal keeps "". A re-append with another principal
// is a conflict, not the same event.
func testEventPrincipal(t *testing.T, s store.Store) {
	ctx := context.Background()
	mk := func(n int, principal string) *audit.Event {
		ev := newEvent(t, "acme", "run_p", n, t0)
		ev.Principal = principal
		return ev
	}
	a, b, none := mk(0, "alice"), mk(1, "bob"), mk(2, "")
	mustAppend(t, s, a)
	mustAppend(t, s, b, none)
	ret := mk(3, "alice")
	if err := s.(store.Outcomes).AppendOutcome(ctx, []*audit.Event{ret}, newReceipt("acme", "p1")); err != nil {
		t.Fatalf("AppendOutcome: %v", err)
	}
	want := map[string]string{a.EventID: "alice", b.EventID: "bob", none.EventID: "", ret.EventID: "alice"}
	check := func(what string, evs []audit.Event) {
		t.Helper()
		if len(evs) != len(want) {
			t.Fatalf("%s: %d events, want %d", what, len(evs), len(want))
		}
		for _, ev := range evs {
			if p, ok := want[ev.EventID]; !ok || ev.Principal != p {
				t.Fatalf("%s: event %s has principal %q, want %q", what, ev.EventID, ev.Principal, p)
			}
		}
	}
	check("EventsByRun", allByRun(t, s, "acme", "run_p"))
	page, _, err := s.EventsByTime(ctx, "acme", time.Time{}, time.Time{}, "", store.MaxLimit)
	if err != nil {
		t.Fatalf("EventsByTime: %v", err)
	}
	check("EventsByTime", page)
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch, err := s.Follow(fctx, "acme", store.FromStart)
	if err != nil {
		t.Fatalf("Follow: %v", err)
	}
	var followed []audit.Event
	for _, f := range recvN(t, ch, len(want)) {
		followed = append(followed, f.Event)
	}
	check("Follow", followed)
	other := *a
	other.Principal = "mallory"
	if err := s.AppendEvents(ctx, &other); err == nil {
		t.Fatal("re-appending an event under another principal succeeded")
	}
}

package cli

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/store"
)

// flakyFeed is a store.Events whose Follow serves a fixed log from the
// cursor it is given, but ends the first feed after one event (a read
// failure) and refuses the second Follow as unavailable.
type flakyFeed struct {
	store.Events // unused methods panic
	mu           sync.Mutex
	log          []audit.Event
	cursors      []string // the cursor of each Follow call
}

func (f *flakyFeed) Follow(ctx context.Context, tenant, cursor string) (<-chan store.Followed, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cursors = append(f.cursors, cursor)
	if len(f.cursors) == 2 {
		return nil, errcode.New(errcode.AuditUnavailable, "store unreachable")
	}
	start := 0
	if cursor != store.FromStart {
		for i := range f.log {
			if f.log[i].EventID == cursor {
				start = i + 1
			}
		}
	}
	n := len(f.log) - start
	if len(f.cursors) == 1 {
		n = 1
	}
	ch := make(chan store.Followed, n)
	for _, e := range f.log[start : start+n] {
		ch <- store.Followed{Event: e, Cursor: e.EventID}
	}
	if len(f.cursors) == 1 {
		close(ch) // the feed fails after one event
	} else {
		go func() { <-ctx.Done(); close(ch) }() // as a store's feed ends with ctx
	}
	return ch, nil
}

// audit tail --follow survives a feed that ends and a store that is
// briefly unavailable: it resumes after the last printed event, printing
// every event once (before, it returned at the first interruption).
func TestFollowEventsResumes(t *testing.T) {
	f := &flakyFeed{}
	for _, id := range []string{"e1", "e2", "e3"} {
		f.log = append(f.log, audit.Event{EventID: id, RunID: "r", Type: audit.TypeToolCalled})
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var got []string
	var warn strings.Builder
	emit := func(e audit.Event) error {
		got = append(got, e.EventID)
		if len(got) == 3 {
			cancel()
		}
		return nil
	}
	done := make(chan error, 1)
	go func() { done <- followEvents(ctx, f, "acme", "", emit, &warn, time.Millisecond) }()
	select {
	case err := <-done:
		if err != context.Canceled {
			t.Fatalf("followEvents = %v, want context.Canceled", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("followEvents did not resume")
	}
	if strings.Join(got, ",") != "e1,e2,e3" {
		t.Errorf("printed %v, want e1,e2,e3 once each", got)
	}
	if want := []string{store.FromStart, "e1", "e1"}; strings.Join(f.cursors, ",") != strings.Join(want, ",") {
		t.Errorf("Follow cursors %v, want %v", f.cursors, want)
	}
	for _, want := range []string{"interrupted", "cannot be read"} {
		if !strings.Contains(warn.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, warn.String())
		}
	}
	// A refusal that is not unavailability ends it.
	bad := &badFollow{}
	if err := followEvents(context.Background(), bad, "acme", "", emit, &warn, time.Millisecond); errcode.CodeOf(err) != errcode.InvalidArgument {
		t.Errorf("invalid cursor: %v", err)
	}
}

type badFollow struct{ store.Events }

func (badFollow) Follow(context.Context, string, string) (<-chan store.Followed, error) {
	return nil, errcode.New(errcode.InvalidArgument, "bad cursor")
}

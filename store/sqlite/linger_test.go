package sqlite

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/toolgate/toolgate/audit"
)

// While calls are running their tools (agent.toolCalled committed, outcome
// not yet written), the writer waits for their outcomes, up to MaxDelay,
// and commits them together.
func TestWriterWaitsForRunningCalls(t *testing.T) {
	s := openAt(t, tempDB(t), Options{MaxDelay: time.Hour})
	var mu sync.Mutex
	var sizes []int
	s.w.batchHook = func(n int) { mu.Lock(); sizes = append(sizes, n); mu.Unlock() }
	ctx := context.Background()
	const calls = 8
	var called []*audit.Event
	for i := range calls {
		called = append(called, event(t, "acme", fmt.Sprintf("run_%d", i), 0, 0))
	}
	if err := s.AppendEvents(ctx, called...); err != nil { // one request: nothing to wait for
		t.Fatal(err)
	}
	mu.Lock()
	sizes = nil
	mu.Unlock()
	errs := make(chan error, calls)
	for i := range calls {
		go func() {
			ret := event(t, "acme", fmt.Sprintf("run_%d", i), 1, 0)
			ret.Type = audit.TypeToolReturned
			errs <- s.AppendOutcome(ctx, []*audit.Event{ret}, rcpt(fmt.Sprintf("r%d", i)))
		}()
	}
	for range calls {
		select {
		case err := <-errs:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(time.Minute):
			t.Fatal("the outcomes were not committed")
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(sizes) != 1 || sizes[0] != calls {
		t.Errorf("outcomes committed in batches %v, want one of %d", sizes, calls)
	}
}

// finishes runs writes on a goroutine and fails the test with what if it
// has not returned within a minute (the writer waited out MaxDelay, an
// hour in these tests).
func finishes(t *testing.T, what string, writes func() error) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- writes() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		t.Fatal(what)
	}
}

// A lone caller never waits: with MaxDelay an hour, one call after another
// (toolCalled, then its outcome) completes at once.
func TestWriterLoneCallerDoesNotWait(t *testing.T) {
	s := openAt(t, tempDB(t), Options{MaxDelay: time.Hour})
	ctx := context.Background()
	finishes(t, "a lone caller's writes waited for others", func() error {
		for i := range 5 {
			if err := s.AppendEvents(ctx, event(t, "acme", "run_1", 2*i, 0)); err != nil {
				return err
			}
			ret := event(t, "acme", "run_1", 2*i+1, 0)
			ret.Type = audit.TypeToolReturned
			if err := s.AppendOutcome(ctx, []*audit.Event{ret}, rcpt(fmt.Sprintf("r%d", i))); err != nil {
				return err
			}
		}
		return nil
	})
}

// A writer of agent.toolCalled events alone (no outcomes ever) never waits
// for outcomes: with MaxDelay an hour, appends complete one after another.
func TestWriterEventsAloneDoNotWait(t *testing.T) {
	s := openAt(t, tempDB(t), Options{MaxDelay: time.Hour})
	ctx := context.Background()
	finishes(t, "appends of toolCalled events waited for outcomes", func() error {
		for i := range 20 {
			if err := s.AppendEvents(ctx, event(t, "acme", fmt.Sprintf("run_%d", i), 0, 0)); err != nil {
				return err
			}
		}
		return nil
	})
}

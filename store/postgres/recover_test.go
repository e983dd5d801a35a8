package postgres_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/toolgate/toolgate/audit"
)

// TestOpenCallsOfThisReplica: OpenCalls returns the unanswered
// agent.toolCalled events this Store's replica (signing key) wrote, and
// neither another replica's (still running, perhaps) nor answered ones;
// a reopened Store with the same key finds its own again.
func TestOpenCallsOfThisReplica(t *testing.T) {
	dsn := newSchema(t)
	ctx := context.Background()
	a, b := open(t, dsn, 1), open(t, dsn, 2)
	ev := func(run, typ, cause string) *audit.Event {
		e, err := audit.NewEvent(run, typ, json.RawMessage(`{}`), cause, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		e.Tenant = "acme"
		return e
	}
	aOpen, aDone, bOpen := ev("run_a", audit.TypeToolCalled, ""), ev("run_a", audit.TypeToolCalled, ""), ev("run_b", audit.TypeToolCalled, "")
	for _, w := range []struct {
		s interface {
			AppendEvents(context.Context, ...*audit.Event) error
		}
		ev *audit.Event
	}{{a, aOpen}, {a, aDone}, {b, bOpen}} {
		if err := w.s.AppendEvents(ctx, w.ev); err != nil {
			t.Fatal(err)
		}
	}
	// aDone is answered by an outcome that replica B wrote (a retry
	// through B, say): it is closed whoever answered it.
	if err := b.AppendEvents(ctx, ev("run_a", audit.TypeToolReturned, aDone.EventID)); err != nil {
		t.Fatal(err)
	}
	ids := func(evs []audit.Event, err error) []string {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, e := range evs {
			out = append(out, e.EventID)
		}
		return out
	}
	if got := ids(a.OpenCalls(ctx)); len(got) != 1 || got[0] != aOpen.EventID {
		t.Errorf("replica A's open calls: %v, want only %s", got, aOpen.EventID)
	}
	if got := ids(b.OpenCalls(ctx)); len(got) != 1 || got[0] != bOpen.EventID {
		t.Errorf("replica B's open calls: %v, want only %s", got, bOpen.EventID)
	}
	a.Close()
	if _, err := a.OpenCalls(ctx); err == nil {
		t.Errorf("OpenCalls on a closed store succeeded")
	}
	again := open(t, dsn, 1)
	if got := ids(again.OpenCalls(ctx)); len(got) != 1 || got[0] != aOpen.EventID {
		t.Errorf("replica A reopened: open calls %v, want only %s", got, aOpen.EventID)
	}
}

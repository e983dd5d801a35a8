// Package storetest is the conformance suite every store.Store backend
// must pass: a backend's test calls Run with a constructor of fresh, empty
// stores.
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) store.Store {
//			s, err := mybackend.Open(...)
//			if err != nil {
//				t.Fatal(err)
//			}
//			return s
//		})
//	}
//
// The suite checks ordering, per-run sequences starting at 0 without gaps,
// idempotent re-append, atomic batches, tenant scoping of every read,
// not-found and conflict as typed errors, concurrent writers, cursor
// pagination (also under concurrent appends), follow mode (live, replay,
// resume, slow followers, a cursor ahead of the log refused), the event's
// principal kept by every read, receipt
// linking and export verification, the approval and session state machines
// (an approval is consumed exactly once under concurrency), the pipeline
// adapters and Close. Run it with -race.
// It does not sleep: concurrency is synchronised with channels and wait
// groups, and every blocking wait has a generous deadline that fails the
// test instead of hanging it.
package storetest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/receipt"
	"github.com/toolgate/toolgate/store"
)

// waitLimit bounds every blocking wait of the suite (slow under -race, on a
// loaded machine): reaching it is a failure, never a synchronisation.
const waitLimit = 60 * time.Second

// Run runs the conformance suite as subtests of t. newStore must return a
// new, empty store each time it is called (for example a fresh database in
// t.TempDir()); the suite closes every store it gets (Close may be called
// more than once). The backend is expected to register its own cleanup of
// files. The store must also implement store.Outcomes.
func Run(t *testing.T, newStore func(t *testing.T) store.Store) {
	open := func(t *testing.T) store.Store {
		t.Helper()
		s := newStore(t)
		t.Cleanup(func() {
			if err := s.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
		})
		return s
	}
	tests := []struct {
		name string
		fn   func(t *testing.T, s store.Store)
	}{
		{"AppendSequences", testAppendSequences},
		{"AppendValidation", testAppendValidation},
		{"IdempotentReappend", testIdempotentReappend},
		{"EventsByRunPaging", testEventsByRunPaging},
		{"EventsByTime", testEventsByTime},
		{"EventsByTimeConcurrentAppends", testEventsByTimeConcurrent},
		{"ConcurrentWriters", testConcurrentWriters},
		{"FollowLive", testFollowLive},
		{"FollowReplayAndResume", testFollowReplay},
		{"FollowSlowFollower", testFollowSlow},
		{"FollowEnds", testFollowEnds},
		{"FollowCursorAhead", testFollowCursorAhead},
		{"Receipts", testReceipts},
		{"ReceiptErrors", testReceiptErrors},
		{"ReceiptsConcurrent", testReceiptsConcurrent},
		{"ExportFromSeq", testExportFromSeq},
		{"Outcomes", testOutcomes},
		{"EventPrincipal", testEventPrincipal},
		{"Approvals", testApprovals},
		{"ApprovalExpiry", testApprovalExpiry},
		{"ApprovalConsumeOnce", testApprovalConsumeOnce},
		{"Sessions", testSessions},
		{"RecordedCalls", testRecordedCalls},
		{"RecordedCallsPrune", testRecordedCallsPrune},
		{"Pins", testPins},
		{"Adapters", testAdapters},
		{"Close", testClose},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, open(t)) })
	}
}

// t0 is the suite's reference time (millisecond precision, as NewEvent
// builds events).
var t0 = time.Date(2026, 3, 14, 15, 9, 26, 535_000_000, time.UTC)

// newEvent returns a valid agent.toolCalled-typed event of (tenant, run)
// with a small payload naming n and timestamp at.
func newEvent(t testing.TB, tenant, run string, n int, at time.Time) *audit.Event {
	t.Helper()
	ev, err := audit.NewEvent(run, audit.TypeToolCalled, json.RawMessage(fmt.Sprintf(`{"n":%d}`, n)), "", at)
	if err != nil {
		t.Fatalf("NewEvent: %v", err)
	}
	ev.Tenant = tenant
	return ev
}

// mustAppend appends events and fails the test on error.
func mustAppend(t testing.TB, s store.Events, events ...*audit.Event) {
	t.Helper()
	if err := s.AppendEvents(context.Background(), events...); err != nil {
		t.Fatalf("AppendEvents: %v", err)
	}
}

// allByRun pages through EventsByRun and returns the whole run.
func allByRun(t testing.TB, s store.Events, tenant, run string) []audit.Event {
	t.Helper()
	var out []audit.Event
	after := int64(-1)
	for {
		page, err := s.EventsByRun(context.Background(), tenant, run, after, store.MaxLimit)
		if err != nil {
			t.Fatalf("EventsByRun: %v", err)
		}
		out = append(out, page...)
		if len(page) < store.MaxLimit {
			return out
		}
		after = page[len(page)-1].Sequence
	}
}

// wantCode fails the test unless err is an *errcode.Error with code.
func wantCode(t testing.TB, err error, code errcode.Code, what string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: got nil error, want %s", what, code)
	}
	if errcode.As(err) == nil {
		t.Fatalf("%s: got %T %v, want an *errcode.Error", what, err, err)
	}
	if !errors.Is(err, &errcode.Error{Code: code}) {
		t.Fatalf("%s: got %v, want code %s", what, err, code)
	}
}

// sameEvent fails the test unless got is want as stored (with seq).
func sameEvent(t testing.TB, got audit.Event, want *audit.Event, seq int64) {
	t.Helper()
	w := *want
	w.Sequence = seq
	if !store.SameEvent(&got, &w) || got.Sequence != seq {
		t.Fatalf("event mismatch:\n got  %+v\n want %+v", got, w)
	}
	if got.Timestamp.Location() != time.UTC {
		t.Fatalf("event %s: timestamp %v is not in UTC", got.EventID, got.Timestamp)
	}
}

func sha(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// newReceipt returns a valid, unlinked ok receipt for call id of tenant.
func newReceipt(tenant, id string) *receipt.Receipt {
	d := int64(3)
	return &receipt.Receipt{
		ReceiptID: "rcpt_" + id, CallID: "call_" + id, RunID: "run_1", AgentID: "agent.planner",
		Principal: "alice", Tenant: tenant, ToolID: "mcp:fs.read_file", Transport: "mcp",
		Decision:          receipt.Decision{Effect: "allow", RuleID: "readers", PolicyVersion: "v1"},
		RequestedArgsHash: sha("args " + id), ExecutedArgsHash: sha("args " + id),
		Status: receipt.StatusOK, ResultHash: sha("result " + id), StartedAt: t0, DurationMs: &d,
	}
}

// deadline returns a context that ends after waitLimit.
func deadline(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	t.Cleanup(cancel)
	return ctx
}

package storetest

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/store"
)

// recorded returns a valid recorded ok call of (tenant, run) started at at.
func recorded(tenant, run, call, parent string, at time.Time) *store.RecordedCall {
	return &store.RecordedCall{
		Tenant: tenant, RunID: run, CallID: call, ParentCallID: parent, Principal: "alice", ToolID: "mcp:fs.read",
		Effect: "allow", ArgsHash: "ab", Args: json.RawMessage(`{"path":"/a"}`), Status: "ok",
		Result: json.RawMessage(`{"content":[]}`), ResultHash: "cd", Ran: true, DurationMs: 7, StartedAt: at,
	}
}

// testRecordedCalls: append, read back by call and by run (ordered by
// start, then append order), tenant scoping, conflicts and validation.
func testRecordedCalls(t *testing.T, s store.Store) {
	ctx := context.Background()
	// The parent starts first and is appended last (its children finish
	// before it does).
	parent := recorded("acme", "run-1", "c-parent", "", t0)
	child1 := recorded("acme", "run-1", "c-child1", "c-parent", t0.Add(time.Millisecond))
	child2 := recorded("acme", "run-1", "c-child2", "c-parent", t0.Add(2*time.Millisecond))
	child2.Status, child2.Result, child2.ResultHash, child2.Error = "error", nil, "", &store.RecordedError{Code: "tool_execution_failed", Message: "boom", Details: map[string]any{"k": "v"}}
	for i, c := range []*store.RecordedCall{child1, child2, parent} {
		if err := s.AppendRecordedCall(ctx, c); err != nil {
			t.Fatalf("AppendRecordedCall %s: %v", c.CallID, err)
		}
		if c.Seq != int64(i) {
			t.Errorf("%s: Seq = %d, want %d (append order)", c.CallID, c.Seq, i)
		}
	}
	if err := s.AppendRecordedCall(ctx, recorded("other", "run-1", "c-parent", "", t0)); err != nil {
		t.Fatalf("another tenant's call with the same ids: %v", err)
	}
	run, err := s.RecordedRun(ctx, "acme", "run-1")
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, c := range run {
		ids = append(ids, c.CallID)
	}
	if len(ids) != 3 || ids[0] != "c-parent" || ids[1] != "c-child1" || ids[2] != "c-child2" {
		t.Fatalf("RecordedRun order = %v, want [c-parent c-child1 c-child2] (by start)", ids)
	}
	got := run[2]
	if got.Error == nil || got.Error.Code != "tool_execution_failed" || got.Error.Message != "boom" || got.Error.Details["k"] != "v" || got.Status != "error" {
		t.Errorf("recorded error round trip: %+v", got)
	}
	if !got.StartedAt.Equal(child2.StartedAt) || got.DurationMs != 7 || !got.Ran || string(got.Args) != `{"path":"/a"}` {
		t.Errorf("recorded fields round trip: %+v", got)
	}
	one, err := s.RecordedCall(ctx, "acme", "c-child1")
	if err != nil || string(one.Result) != `{"content":[]}` || one.ParentCallID != "c-parent" || one.ResultHash != "cd" {
		t.Fatalf("RecordedCall = %+v, %v", one, err)
	}
	if _, err := s.RecordedCall(ctx, "evil", "c-child1"); errcode.CodeOf(err) != errcode.NotFound {
		t.Errorf("another tenant's recorded call: %v, want not_found", err)
	}
	if other, err := s.RecordedRun(ctx, "evil", "run-1"); err != nil || len(other) != 0 {
		t.Errorf("another tenant's recorded run: %v, %v, want empty", other, err)
	}
	if err := s.AppendRecordedCall(ctx, recorded("acme", "run-2", "c-child1", "", t0)); errcode.CodeOf(err) != errcode.Conflict {
		t.Errorf("duplicate callId: %v, want conflict", err)
	}
	bad := recorded("acme", "run-1", "c-bad", "", t0)
	bad.Args = json.RawMessage(`[1]`)
	if err := s.AppendRecordedCall(ctx, bad); errcode.CodeOf(err) != errcode.InvalidArgument {
		t.Errorf("args not an object: %v, want invalid_argument", err)
	}
	bad = recorded("acme", "run-1", "c-bad", "", t0)
	bad.Status = "error"
	if err := s.AppendRecordedCall(ctx, bad); errcode.CodeOf(err) != errcode.InvalidArgument {
		t.Errorf("error status without an error: %v, want invalid_argument", err)
	}
	if _, err := s.RecordedCall(ctx, "acme", "c-bad"); errcode.CodeOf(err) != errcode.NotFound {
		t.Errorf("a refused append was stored: %v", err)
	}
}

// testRecordedCallsPrune: PruneRecordings removes the calls that started
// before the cutoff, and only those.
func testRecordedCallsPrune(t *testing.T, s store.Store) {
	ctx := context.Background()
	for i, c := range []*store.RecordedCall{
		recorded("acme", "run-old", "old-1", "", t0.Add(-48*time.Hour)),
		recorded("acme", "run-old", "old-2", "", t0.Add(-25*time.Hour)),
		recorded("acme", "run-new", "new-1", "", t0),
	} {
		if err := s.AppendRecordedCall(ctx, c); err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
	}
	n, err := s.PruneRecordings(ctx, t0.Add(-24*time.Hour))
	if err != nil || n != 2 {
		t.Fatalf("PruneRecordings = %d, %v, want 2", n, err)
	}
	if _, err := s.RecordedCall(ctx, "acme", "old-1"); errcode.CodeOf(err) != errcode.NotFound {
		t.Errorf("pruned call still readable: %v", err)
	}
	if run, err := s.RecordedRun(ctx, "acme", "run-new"); err != nil || len(run) != 1 {
		t.Errorf("kept run = %v, %v", run, err)
	}
}

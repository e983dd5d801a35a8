package audit_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/errcode"
)

// pair builds a toolCalled and its toolReturned event in run runID.
func pair(t testing.TB, tenant, runID, callID string) (*audit.Event, *audit.Event) {
	t.Helper()
	ref := testRef
	ref.CallID = callID
	called := mustCalled(t, runID, ref)
	called.Tenant = tenant
	ret, err := audit.ReturnedEvent(called, audit.ReturnedOK(ref, nil, time.Millisecond), testNow)
	if err != nil {
		t.Fatal(err)
	}
	return called, ret
}

func sequences(evs []audit.Event) []int64 {
	out := make([]int64, len(evs))
	for i, ev := range evs {
		out[i] = ev.Sequence
	}
	return out
}

func TestMemoryLogSequences(t *testing.T) {
	var log audit.MemoryLog // the zero value is ready to use
	ctx := t.Context()
	a1, a2 := pair(t, "", "run-a", "c1")
	a1.Sequence = 77 // overwritten
	if err := log.Append(ctx, a1, a2); err != nil {
		t.Fatal(err)
	}
	if a1.Sequence != 0 || a2.Sequence != 1 {
		t.Fatalf("sequences %d, %d; want 0, 1", a1.Sequence, a2.Sequence)
	}
	b1, b2 := pair(t, "", "run-b", "c2")
	a3, a4 := pair(t, "", "run-a", "c3")
	x1, x2 := pair(t, "acme", "run-a", "c4") // same runId, other tenant: another run
	for _, batch := range [][]*audit.Event{{b1}, {a3}, {x1, x2}, {b2, a4}} {
		if err := log.Append(ctx, batch...); err != nil {
			t.Fatal(err)
		}
	}
	want := map[[2]string][]string{
		{"", "run-a"}:     {a1.EventID, a2.EventID, a3.EventID, a4.EventID},
		{"", "run-b"}:     {b1.EventID, b2.EventID},
		{"acme", "run-a"}: {x1.EventID, x2.EventID},
	}
	for key, ids := range want {
		evs := log.Events(key[0], key[1])
		if len(evs) != len(ids) {
			t.Fatalf("%v: %d events, want %d", key, len(evs), len(ids))
		}
		for i, ev := range evs {
			if ev.Sequence != int64(i) || ev.EventID != ids[i] || ev.Tenant != key[0] || ev.RunID != key[1] {
				t.Errorf("%v[%d] = seq %d id %s tenant %q run %q, want seq %d id %s", key, i, ev.Sequence, ev.EventID, ev.Tenant, ev.RunID, i, ids[i])
			}
		}
	}
	if log.Events("", "run-c") != nil || log.Events("other", "run-a") != nil {
		t.Error("events for an unknown run")
	}
	all := log.All()
	if log.Len() != 8 || len(all) != 8 {
		t.Fatalf("Len %d, All %d; want 8", log.Len(), len(all))
	}
	order := []string{a1.EventID, a2.EventID, b1.EventID, a3.EventID, x1.EventID, x2.EventID, b2.EventID, a4.EventID}
	for i, ev := range all {
		if ev.EventID != order[i] {
			t.Errorf("All()[%d] = %s, want %s", i, ev.EventID, order[i])
		}
	}
}

func TestMemoryLogAppendAtomic(t *testing.T) {
	log := audit.NewMemoryLog()
	ctx := t.Context()
	c1, r1 := pair(t, "", "run", "c1")
	bad := *r1
	bad.EventID = "ev_bad"
	bad.Type = "nope"
	c1.Sequence, r1.Sequence = 5, 6

	check := func(name string, err error, code errcode.Code, index int) {
		t.Helper()
		if errcode.CodeOf(err) != code {
			t.Fatalf("%s: error %v, want %s", name, err, code)
		}
		if got := errcode.As(err).Details["index"]; got != index {
			t.Errorf("%s: details.index = %v, want %d", name, got, index)
		}
		if log.Len() != 0 || c1.Sequence != 5 || r1.Sequence != 6 {
			t.Errorf("%s: partial append: len %d, sequences %d %d", name, log.Len(), c1.Sequence, r1.Sequence)
		}
	}
	check("invalid event", log.Append(ctx, c1, &bad), errcode.InvalidArgument, 1)
	check("nil event", log.Append(ctx, c1, r1, nil), errcode.InvalidArgument, 2)
	check("repeated eventId", log.Append(ctx, c1, r1, c1), errcode.Conflict, 2)

	if err := log.Append(ctx, c1, r1); err != nil {
		t.Fatal(err)
	}
	c2, r2 := pair(t, "", "run", "c2")
	dup := *c1
	if err := log.Append(ctx, c2, &dup, r2); errcode.CodeOf(err) != errcode.Conflict {
		t.Fatalf("eventId already in log: %v", err)
	}
	if log.Len() != 2 {
		t.Fatalf("conflicting batch partially appended: len %d", log.Len())
	}
	if err := log.Append(ctx, c2, r2); err != nil {
		t.Fatal(err)
	}
	if got := sequences(log.Events("", "run")); fmt.Sprint(got) != "[0 1 2 3]" {
		t.Errorf("sequences after rejected batches %v, want [0 1 2 3]", got)
	}
	if err := log.Append(ctx); err != nil || log.Len() != 4 {
		t.Errorf("empty append: %v, len %d", err, log.Len())
	}

	// A big batch with a repeat is rejected too (map-based check).
	var big []*audit.Event
	for i := range 20 {
		c, r := pair(t, "", "run-big", fmt.Sprint("b", i))
		big = append(big, c, r)
	}
	big = append(big, big[3])
	if err := log.Append(ctx, big...); errcode.CodeOf(err) != errcode.Conflict || log.Len() != 4 {
		t.Errorf("big batch with repeat: %v, len %d", err, log.Len())
	}
}

func TestMemoryLogContextDone(t *testing.T) {
	log := audit.NewMemoryLog()
	c, r := pair(t, "", "run", "c")
	cancelled, cancel := context.WithCancel(t.Context())
	cancel()
	if err := log.Append(cancelled, c, r); errcode.CodeOf(err) != errcode.Cancelled {
		t.Errorf("cancelled ctx: %v", err)
	}
	expired, cancel2 := context.WithDeadline(t.Context(), time.Unix(0, 0))
	defer cancel2()
	if err := log.Append(expired, c, r); errcode.CodeOf(err) != errcode.Timeout {
		t.Errorf("expired ctx: %v", err)
	}
	if log.Len() != 0 {
		t.Errorf("appended with a done ctx: %d", log.Len())
	}
}

func TestMemoryLogCopies(t *testing.T) {
	log := audit.NewMemoryLog()
	ev, err := audit.NewEvent("run", "acme.note", json.RawMessage(`{"a":1}`), "", testNow)
	if err != nil {
		t.Fatal(err)
	}
	if err := log.Append(t.Context(), ev); err != nil {
		t.Fatal(err)
	}
	ev.Payload[2] = 'X' // the caller's buffer
	ev.RunID = "changed"
	got := log.Events("", "run")
	if len(got) != 1 || string(got[0].Payload) != `{"a":1}` {
		t.Fatalf("log changed with the caller's event: %+v", got)
	}
	got[0].Payload[2] = 'Y' // a reader's copy
	all := log.All()
	all[0].Payload[3] = 'Z'
	if p := string(log.Events("", "run")[0].Payload); p != `{"a":1}` {
		t.Errorf("log changed through a read: %s", p)
	}
}

// TestMemoryLogConcurrentAppend appends call pairs from many goroutines to a
// few runs while readers read, and checks that every run's sequences are
// 0..n-1 and that each pair (one batch) got consecutive sequences.
func TestMemoryLogConcurrentAppend(t *testing.T) {
	const (
		writers = 16
		perG    = 150
		runs    = 4
	)
	log := audit.NewMemoryLog()
	// Build outside the goroutines: t.Fatal must run on the test goroutine.
	batches := make([][][2]*audit.Event, writers)
	for g := range writers {
		for i := range perG {
			c, r := pair(t, "", fmt.Sprint("run-", (g+i)%runs), fmt.Sprintf("c-%d-%d", g, i))
			batches[g] = append(batches[g], [2]*audit.Event{c, r})
		}
	}
	errs := make(chan error, writers)
	done := make(chan struct{})
	var wg, readers sync.WaitGroup
	readers.Go(func() {
		for {
			select {
			case <-done:
				return
			default:
				_ = log.Events("", "run-0")
				_ = log.Len()
			}
		}
	})
	for g := range writers {
		wg.Go(func() {
			for _, b := range batches[g] {
				if err := log.Append(context.Background(), b[0], b[1]); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(done)
	readers.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	total := 0
	for run := range runs {
		evs := log.Events("", fmt.Sprint("run-", run))
		total += len(evs)
		seqOf := make(map[string]int64, len(evs))
		for i, ev := range evs {
			if ev.Sequence != int64(i) {
				t.Fatalf("run-%d: event %d has sequence %d", run, i, ev.Sequence)
			}
			seqOf[ev.EventID] = ev.Sequence
		}
		for _, ev := range evs {
			if ev.Type == audit.TypeToolReturned && seqOf[ev.CausationID] != ev.Sequence-1 {
				t.Fatalf("run-%d: returned at %d, its called at %d: batch interleaved", run, ev.Sequence, seqOf[ev.CausationID])
			}
		}
	}
	if total != writers*perG*2 || log.Len() != total {
		t.Errorf("total %d, Len %d, want %d", total, log.Len(), writers*perG*2)
	}
	// The callers' events carry the sequences the log assigned.
	for _, b := range batches[0] {
		if b[1].Sequence != b[0].Sequence+1 {
			t.Fatalf("caller's pair has sequences %d, %d", b[0].Sequence, b[1].Sequence)
		}
	}
}

// BenchmarkEventPair measures the audit work of one in-memory call: build
// the agent.toolCalled event, build the paired agent.toolReturned event, and
// append both to a MemoryLog (each in its own Append, as the pipeline does:
// toolCalled is durable before the tool runs).
func BenchmarkEventPair(b *testing.B) {
	ctx := context.Background()
	now := time.Now()
	ref := testRef
	log := audit.NewMemoryLog()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if i%4096 == 0 {
			log = audit.NewMemoryLog() // bound memory; amortized like real growth
		}
		i++
		called, err := audit.NewEvent("run-1", audit.TypeToolCalled, audit.NewToolCalled(ref, testHash, "alice", audit.TransportMCP), "", now)
		if err != nil {
			b.Fatal(err)
		}
		if err := log.Append(ctx, called); err != nil {
			b.Fatal(err)
		}
		ret, err := audit.ReturnedEvent(called, audit.ReturnedOK(ref, nil, 412*time.Millisecond), now)
		if err != nil {
			b.Fatal(err)
		}
		if err := log.Append(ctx, ret); err != nil {
			b.Fatal(err)
		}
	}
}

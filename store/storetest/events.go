package storetest

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/store"
)

func testAppendSequences(t *testing.T, s store.Store) {
	a1 := newEvent(t, "acme", "run_a", 1, t0)
	a1.Sequence = 99 // overwritten by the store
	mustAppend(t, s, a1)
	a2, a3 := newEvent(t, "acme", "run_a", 2, t0), newEvent(t, "acme", "run_a", 3, t0)
	b1 := newEvent(t, "acme", "run_b", 1, t0)
	mustAppend(t, s, a2, b1, a3) // a batch over two runs
	other := newEvent(t, "globex", "run_a", 1, t0)
	mustAppend(t, s, other) // same runId, other tenant: its own run
	a4 := newEvent(t, "acme", "run_a", 4, t0.Add(time.Second))
	a4.CausationID, a4.SchemaVersion = a1.EventID, 2
	mustAppend(t, s, a4)

	for _, c := range []struct {
		ev   *audit.Event
		want int64
	}{{a1, 0}, {a2, 1}, {a3, 2}, {a4, 3}, {b1, 0}, {other, 0}} {
		if c.ev.Sequence != c.want {
			t.Errorf("event %s: Sequence %d, want %d", c.ev.EventID, c.ev.Sequence, c.want)
		}
	}
	got := allByRun(t, s, "acme", "run_a")
	if len(got) != 4 {
		t.Fatalf("run_a has %d events, want 4", len(got))
	}
	for i, want := range []*audit.Event{a1, a2, a3, a4} {
		sameEvent(t, got[i], want, int64(i))
	}
	if got := allByRun(t, s, "globex", "run_a"); len(got) != 1 {
		t.Fatalf("globex run_a has %d events, want 1", len(got))
	} else {
		sameEvent(t, got[0], other, 0)
	}
	if got := allByRun(t, s, "acme", "run_b"); len(got) != 1 || got[0].EventID != b1.EventID {
		t.Fatalf("run_b = %+v, want b1", got)
	}
	// The caller's copy is not shared with the store.
	a1.Payload[1] = 'X'
	if got := allByRun(t, s, "acme", "run_a"); got[0].Payload[1] == 'X' {
		t.Fatal("the store shares the appended payload's memory")
	}
	got[0].Payload[1] = 'Y'
	if again := allByRun(t, s, "acme", "run_a"); again[0].Payload[1] == 'Y' {
		t.Fatal("the store shares the returned payload's memory")
	}
}

func testAppendValidation(t *testing.T, s store.Store) {
	ctx := context.Background()
	good := newEvent(t, "acme", "run_v", 1, t0)
	good.Sequence = 77
	check := func(what string, code errcode.Code, events ...*audit.Event) {
		t.Helper()
		wantCode(t, s.AppendEvents(ctx, events...), code, what)
		if good.Sequence != 77 {
			t.Fatalf("%s: a failed append changed the caller's Sequence to %d", what, good.Sequence)
		}
		if got := allByRun(t, s, "acme", "run_v"); len(got) != 0 {
			t.Fatalf("%s: a failed batch stored %d events", what, len(got))
		}
	}
	check("nil event", errcode.InvalidArgument, good, nil)
	noRun := newEvent(t, "acme", "run_v", 2, t0)
	noRun.RunID = ""
	check("empty runId", errcode.InvalidArgument, good, noRun)
	badPayload := newEvent(t, "acme", "run_v", 3, t0)
	badPayload.Payload = json.RawMessage(`{"open":`)
	check("malformed payload", errcode.InvalidArgument, good, badPayload)
	noTime := newEvent(t, "acme", "run_v", 4, t0)
	noTime.Timestamp = time.Time{}
	check("zero timestamp", errcode.InvalidArgument, good, noTime)
	dup := *good
	check("eventId repeated in the batch", errcode.Conflict, good, &dup)

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	wantCode(t, s.AppendEvents(cancelled, good), errcode.Cancelled, "cancelled ctx")
	expired, cancel2 := context.WithDeadline(ctx, time.Now().Add(-time.Second))
	defer cancel2()
	wantCode(t, s.AppendEvents(expired, good), errcode.Timeout, "expired ctx")
	if good.Sequence != 77 {
		t.Fatalf("a cancelled append changed the caller's Sequence to %d", good.Sequence)
	}
	if err := s.AppendEvents(ctx); err != nil {
		t.Fatalf("appending no events: %v", err)
	}
	mustAppend(t, s, good)
	if good.Sequence != 0 {
		t.Fatalf("first event of run_v after failed batches: Sequence %d, want 0", good.Sequence)
	}
}

func testIdempotentReappend(t *testing.T, s store.Store) {
	ctx := context.Background()
	e1, e2 := newEvent(t, "acme", "run_i", 1, t0), newEvent(t, "acme", "run_i", 2, t0)
	mustAppend(t, s, e1, e2)

	again := *e1
	again.Sequence = 0
	again.Payload = append(json.RawMessage(nil), e1.Payload...)
	mustAppend(t, s, &again)
	if again.Sequence != 0 {
		t.Fatalf("re-appended e1 got Sequence %d, want its original 0", again.Sequence)
	}
	if n := len(allByRun(t, s, "acme", "run_i")); n != 2 {
		t.Fatalf("after re-append the run has %d events, want 2", n)
	}

	// A mixed batch: stored events keep their sequences, new ones take the
	// next numbers in argument order.
	re2, re1 := *e2, *e1
	re2.Sequence, re1.Sequence = 50, 50
	e3, e4 := newEvent(t, "acme", "run_i", 3, t0), newEvent(t, "acme", "run_i", 4, t0)
	mustAppend(t, s, &re2, e3, &re1, e4)
	for _, c := range []struct {
		ev   *audit.Event
		want int64
	}{{&re2, 1}, {e3, 2}, {&re1, 0}, {e4, 3}} {
		if c.ev.Sequence != c.want {
			t.Errorf("mixed batch: event n=%s Sequence %d, want %d", c.ev.Payload, c.ev.Sequence, c.want)
		}
	}
	got := allByRun(t, s, "acme", "run_i")
	if len(got) != 4 {
		t.Fatalf("after the mixed batch the run has %d events, want 4", len(got))
	}
	for i, want := range []*audit.Event{e1, e2, e3, e4} {
		sameEvent(t, got[i], want, int64(i))
	}

	// Same eventId, different content: Conflict, and the batch's new event
	// is not stored either.
	e5 := newEvent(t, "acme", "run_i", 5, t0)
	e5.Sequence = 42
	changed := *e1
	changed.Payload = json.RawMessage(`{"n":"changed"}`)
	err := s.AppendEvents(ctx, e5, &changed)
	wantCode(t, err, errcode.Conflict, "eventId re-used with another payload")
	if idx, _ := errcode.As(err).Details["index"].(int); idx != 1 {
		t.Errorf("conflict details.index = %v, want 1", errcode.As(err).Details["index"])
	}
	if e5.Sequence != 42 {
		t.Fatalf("rejected batch changed e5.Sequence to %d", e5.Sequence)
	}
	otherTenant := *e1
	otherTenant.Tenant = "globex"
	wantCode(t, s.AppendEvents(ctx, &otherTenant), errcode.Conflict, "eventId re-used by another tenant")
	otherRun := *e1
	otherRun.RunID = "run_other"
	wantCode(t, s.AppendEvents(ctx, &otherRun), errcode.Conflict, "eventId re-used in another run")
	later := *e1
	later.Timestamp = later.Timestamp.Add(time.Millisecond)
	wantCode(t, s.AppendEvents(ctx, &later), errcode.Conflict, "eventId re-used with another timestamp")
	if n := len(allByRun(t, s, "acme", "run_i")); n != 4 {
		t.Fatalf("after conflicts the run has %d events, want 4", n)
	}
	if n := len(allByRun(t, s, "globex", "run_i")); n != 0 {
		t.Fatalf("conflicting re-use stored %d events for globex", n)
	}
	mustAppend(t, s, e5)
	if e5.Sequence != 4 {
		t.Fatalf("e5 after conflicts: Sequence %d, want 4 (no gap)", e5.Sequence)
	}

	// Concurrent retries of one new event: all succeed with one sequence,
	// and it is stored once.
	e6 := newEvent(t, "acme", "run_i", 6, t0)
	var wg sync.WaitGroup
	seqs := make([]int64, 8)
	for i := range seqs {
		wg.Go(func() {
			cp := *e6
			if err := s.AppendEvents(ctx, &cp); err != nil {
				t.Errorf("concurrent re-append: %v", err)
			}
			seqs[i] = cp.Sequence
		})
	}
	wg.Wait()
	for _, seq := range seqs {
		if seq != 5 {
			t.Fatalf("concurrent re-appends got sequences %v, want all 5", seqs)
		}
	}
	if n := len(allByRun(t, s, "acme", "run_i")); n != 6 {
		t.Fatalf("after concurrent re-appends the run has %d events, want 6", n)
	}
}

func testEventsByRunPaging(t *testing.T, s store.Store) {
	ctx := context.Background()
	var evs []*audit.Event
	for i := range 10 {
		evs = append(evs, newEvent(t, "acme", "run_p", i, t0))
	}
	mustAppend(t, s, evs[:4]...)
	for _, ev := range evs[4:] {
		mustAppend(t, s, ev)
	}
	page := func(after int64, limit int) []int64 {
		t.Helper()
		got, err := s.EventsByRun(ctx, "acme", "run_p", after, limit)
		if err != nil {
			t.Fatalf("EventsByRun(%d, %d): %v", after, limit, err)
		}
		seqs := make([]int64, len(got))
		for i, ev := range got {
			seqs[i] = ev.Sequence
			if ev.EventID != evs[ev.Sequence].EventID || ev.Tenant != "acme" {
				t.Fatalf("EventsByRun: seq %d is %s of tenant %q", ev.Sequence, ev.EventID, ev.Tenant)
			}
		}
		return seqs
	}
	for _, c := range []struct {
		after int64
		limit int
		want  []int64
	}{
		{-1, 3, []int64{0, 1, 2}},
		{2, 3, []int64{3, 4, 5}},
		{7, 0, []int64{8, 9}}, // 0: the default page
		{8, 5, []int64{9}},
		{9, 5, []int64{}},
		{100, 5, []int64{}},
	} {
		if got := page(c.after, c.limit); !slices.Equal(got, c.want) {
			t.Errorf("EventsByRun(after %d, limit %d) = %v, want %v", c.after, c.limit, got, c.want)
		}
	}
	_, err := s.EventsByRun(ctx, "acme", "run_p", -2, 5)
	wantCode(t, err, errcode.InvalidArgument, "afterSeq -2")
	for _, c := range [][2]string{{"acme", "no_such_run"}, {"globex", "run_p"}, {"", "run_p"}} {
		got, err := s.EventsByRun(ctx, c[0], c[1], -1, 10)
		if err != nil || len(got) != 0 {
			t.Errorf("EventsByRun(%q, %q) = %d events, %v; want none", c[0], c[1], len(got), err)
		}
	}
}

// walkByTime pages through EventsByTime and returns every event.
func walkByTime(t testing.TB, s store.Events, tenant string, from, to time.Time, limit int) []audit.Event {
	t.Helper()
	var out []audit.Event
	cursor := ""
	for pages := 0; ; pages++ {
		if pages > 100000 {
			t.Fatal("EventsByTime: pagination does not end")
		}
		page, next, err := s.EventsByTime(context.Background(), tenant, from, to, cursor, limit)
		if err != nil {
			t.Fatalf("EventsByTime: %v", err)
		}
		out = append(out, page...)
		if next == "" {
			if len(page) == limit {
				t.Fatalf("EventsByTime: a full page (%d) without a next cursor", limit)
			}
			return out
		}
		if len(page) != limit {
			t.Fatalf("EventsByTime: a short page (%d of %d) with a next cursor", len(page), limit)
		}
		cursor = next
	}
}

func testEventsByTime(t *testing.T, s store.Store) {
	ctx := context.Background()
	// 30 events one second apart, appended in shuffled order over three
	// runs, plus ties: three more events at t0+10s.
	rng := rand.New(rand.NewPCG(1, 2))
	var evs []*audit.Event
	for i := range 30 {
		evs = append(evs, newEvent(t, "acme", fmt.Sprintf("run_%d", i%3), i, t0.Add(time.Duration(i)*time.Second)))
	}
	rng.Shuffle(len(evs), func(i, j int) { evs[i], evs[j] = evs[j], evs[i] })
	for i := range 3 {
		evs = append(evs, newEvent(t, "acme", "run_tie", 100+i, t0.Add(10*time.Second)))
	}
	for _, ev := range evs {
		mustAppend(t, s, ev)
		mustAppend(t, s, newEvent(t, "globex", "run_0", 0, ev.Timestamp)) // noise of another tenant
	}
	// Expected order: by timestamp, then append order.
	want := slices.Clone(evs)
	slices.SortStableFunc(want, func(a, b *audit.Event) int { return a.Timestamp.Compare(b.Timestamp) })
	filter := func(from, to time.Time) []string {
		var ids []string
		for _, ev := range want {
			if (from.IsZero() || !ev.Timestamp.Before(from)) && (to.IsZero() || ev.Timestamp.Before(to)) {
				ids = append(ids, ev.EventID)
			}
		}
		return ids
	}
	ids := func(evs []audit.Event) []string {
		out := make([]string, len(evs))
		for i, ev := range evs {
			out[i] = ev.EventID
			if ev.Tenant != "acme" {
				t.Fatalf("EventsByTime(acme) returned an event of tenant %q", ev.Tenant)
			}
		}
		return out
	}
	for _, c := range []struct {
		from, to time.Time
		limit    int
	}{
		{time.Time{}, time.Time{}, 7},
		{time.Time{}, time.Time{}, 1},
		{time.Time{}, time.Time{}, 0},
		{time.Time{}, time.Time{}, 33},
		{t0.Add(5 * time.Second), t0.Add(25 * time.Second), 4},
		{t0.Add(10 * time.Second), t0.Add(11 * time.Second), 2},
		{t0.Add(5 * time.Second), time.Time{}, 6},
		{time.Time{}, t0.Add(5 * time.Second), 100},
		{t0.Add(time.Hour), time.Time{}, 5},
		{t0.Add(20 * time.Second), t0.Add(10 * time.Second), 5}, // empty range
	} {
		got := ids(walkByTime(t, s, "acme", c.from, c.to, c.limit))
		if w := filter(c.from, c.to); !slices.Equal(got, w) {
			t.Errorf("EventsByTime(%v, %v, limit %d):\n got  %v\n want %v", c.from, c.to, c.limit, got, w)
		}
	}
	// The returned events are complete.
	page, _, err := s.EventsByTime(ctx, "acme", time.Time{}, time.Time{}, store.FromStart, 1)
	if err != nil || len(page) != 1 {
		t.Fatalf("EventsByTime(FromStart) = %d events, %v", len(page), err)
	}
	sameEvent(t, page[0], want[0], want[0].Sequence)
	if got := walkByTime(t, s, "initech", time.Time{}, time.Time{}, 10); len(got) != 0 {
		t.Fatalf("EventsByTime(initech) = %d events, want none", len(got))
	}
	if got := walkByTime(t, s, "globex", time.Time{}, time.Time{}, 10); len(got) != len(evs) {
		t.Fatalf("EventsByTime(globex) = %d events, want %d", len(got), len(evs))
	}
	for _, bad := range []string{"x", "not a cursor!", "MS4xLjE", store.Cursor{Pos: 5}.String() + "=="} {
		_, _, err := s.EventsByTime(ctx, "acme", time.Time{}, time.Time{}, bad, 5)
		wantCode(t, err, errcode.InvalidArgument, "EventsByTime with cursor "+bad)
	}
}

func testEventsByTimeConcurrent(t *testing.T, s store.Store) {
	// 300 events in [t0, t0+300s) exist before the walk; once it has read
	// its first page, writers append 450 more, inside and after that range.
	const n, writers, perW = 300, 3, 150
	before := map[string]bool{}
	var batch []*audit.Event
	for i := range n {
		ev := newEvent(t, "acme", fmt.Sprintf("run_%d", i%5), i, t0.Add(time.Duration(i)*time.Second))
		before[ev.EventID] = true
		batch = append(batch, ev)
		if len(batch) == 25 {
			mustAppend(t, s, batch...)
			batch = nil
		}
	}
	started := make(chan struct{})
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			<-started
			for i := range perW {
				at := t0.Add(time.Duration((i*7+w*13)%(2*n)) * time.Second) // half inside the range, half after
				if err := s.AppendEvents(context.Background(), newEvent(t, "acme", fmt.Sprintf("run_w%d", w), i, at)); err != nil {
					t.Errorf("concurrent AppendEvents: %v", err)
					return
				}
			}
		})
	}
	var got []audit.Event
	func() {
		once := sync.OnceFunc(func() { close(started) })
		defer func() { once(); wg.Wait() }() // also when the walk fails the test
		cursor := ""
		for {
			page, next, err := s.EventsByTime(context.Background(), "acme", t0, t0.Add(n*time.Second), cursor, 17)
			if err != nil {
				t.Fatalf("EventsByTime: %v", err)
			}
			once()
			got = append(got, page...)
			if next == "" {
				return
			}
			cursor = next
		}
	}()
	seen := map[string]bool{}
	for i, ev := range got {
		if seen[ev.EventID] {
			t.Fatalf("event %s returned twice", ev.EventID)
		}
		seen[ev.EventID] = true
		if i > 0 && ev.Timestamp.Before(got[i-1].Timestamp) {
			t.Fatalf("events out of time order at %d", i)
		}
	}
	for id := range before {
		if !seen[id] {
			t.Fatalf("event %s, stored before the walk, was missed", id)
		}
	}
}

func testConcurrentWriters(t *testing.T, s store.Store) {
	const goroutines, perG = 16, 200
	type rec struct {
		id  string
		seq int64
	}
	results := make([][]rec, goroutines)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for g := range goroutines {
		wg.Go(func() {
			<-start
			tenant := []string{"acme", "globex"}[g%2]
			for i := range perG {
				run := fmt.Sprintf("run_%d", (g+i)%4)
				evs := []*audit.Event{newEvent(t, tenant, run, i, t0)}
				if i%10 == 0 { // some two-event batches
					evs = append(evs, newEvent(t, tenant, run, -i, t0))
				}
				if err := s.AppendEvents(context.Background(), evs...); err != nil {
					t.Errorf("goroutine %d append %d: %v", g, i, err)
					return
				}
				if len(evs) == 2 && evs[1].Sequence != evs[0].Sequence+1 {
					t.Errorf("a batch's events got sequences %d and %d, want consecutive", evs[0].Sequence, evs[1].Sequence)
				}
				for _, ev := range evs {
					results[g] = append(results[g], rec{ev.EventID, ev.Sequence})
				}
			}
		})
	}
	close(start)
	wg.Wait()
	if t.Failed() {
		return
	}
	assigned := map[string]int64{}
	total := 0
	for _, rs := range results {
		for _, r := range rs {
			assigned[r.id] = r.seq
			total++
		}
	}
	stored := 0
	for _, tenant := range []string{"acme", "globex"} {
		for run := range 4 {
			evs := allByRun(t, s, tenant, fmt.Sprintf("run_%d", run))
			for i, ev := range evs {
				if ev.Sequence != int64(i) {
					t.Fatalf("%s run_%d: position %d has Sequence %d (gap or duplicate)", tenant, run, i, ev.Sequence)
				}
				if seq, ok := assigned[ev.EventID]; !ok || seq != ev.Sequence {
					t.Fatalf("%s run_%d: event %s stored with Sequence %d, its append returned %d (%v)", tenant, run, ev.EventID, ev.Sequence, seq, ok)
				}
			}
			stored += len(evs)
		}
	}
	if stored != total {
		t.Fatalf("stored %d events, appended %d", stored, total)
	}
}

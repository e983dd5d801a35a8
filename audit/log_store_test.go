package audit

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/errcode"
)

// TestIDIndex checks the id index against a map, over canonical, custom
// and near-identical ids, through several growths; and that a hash match
// alone (forced by a colliding index entry) is not taken for the id.
func TestIDIndex(t *testing.T) {
	var x idIndex
	var events []*Event
	if x.has("ev_x", events) {
		t.Fatal("empty index has an id")
	}
	want := map[string]bool{}
	for i := 0; i < 5000; i++ {
		var id string
		switch i % 4 {
		case 0:
			id = NewEventID()
		case 1:
			id = fmt.Sprintf("custom-%d", i)
		case 2:
			id = "ev_" + strings.ToUpper(NewEventID()[3:])
		default:
			id = fmt.Sprintf("custom-%d ", i-2) // a near twin of case 1
		}
		if x.has(id, events) {
			t.Fatalf("%q found before it was added", id)
		}
		x.add(id, len(events))
		events = append(events, &Event{EventID: id})
		want[id] = true
	}
	if x.n != len(want) || 2*x.n > len(x.hashes) {
		t.Fatalf("%d ids in %d slots, want %d at most half full", x.n, len(x.hashes), len(want))
	}
	for id := range want {
		if !x.has(id, events) {
			t.Fatalf("%q not found", id)
		}
	}
	for i := 0; i < 1000; i++ {
		if id := fmt.Sprintf("absent-%d", i); x.has(id, events) {
			t.Fatalf("%q found", id)
		}
	}
	// A slot whose hash matches but whose event has another id is skipped.
	var y idIndex
	y.add("a", 0)
	h := y.hash("b")
	y.put(h, 0) // "b"'s hash, pointing at event "a"
	y.n++
	if evs := []*Event{{EventID: "a"}}; y.has("b", evs) || !y.has("a", evs) {
		t.Fatal("a hash match was taken for the id")
	}
}

// TestMemoryLogConflictRollback checks that a batch refused for an id
// already in the log leaves no id of the batch behind.
func TestMemoryLogConflictRollback(t *testing.T) {
	ctx := context.Background()
	var log MemoryLog
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	ev := func(id string) *Event {
		return &Event{EventID: id, RunID: "r", Type: "x-test.thing", Payload: []byte(`{}`), Timestamp: now}
	}
	old, custom := NewEventID(), "custom-1"
	if err := log.Append(ctx, ev(old), ev(custom)); err != nil {
		t.Fatal(err)
	}
	fresh1, fresh2 := NewEventID(), "custom-2"
	for _, batch := range [][]*Event{{ev(fresh1), ev(fresh2), ev(old)}, {ev(fresh2), ev(fresh1), ev(custom)}} {
		if err := log.Append(ctx, batch...); errcode.CodeOf(err) != errcode.Conflict || log.Len() != 2 {
			t.Fatalf("conflicting batch: %v, len %d", err, log.Len())
		}
	}
	if err := log.Append(ctx, ev(fresh1), ev(fresh2)); err != nil {
		t.Fatalf("ids of a refused batch were kept: %v", err)
	}
	for _, id := range []string{old, custom, fresh1, fresh2} {
		if err := log.Append(ctx, ev(id)); errcode.CodeOf(err) != errcode.Conflict {
			t.Fatalf("%s: %v, want conflict", id, err)
		}
	}
}

// TestMemoryLogStoreBlocks appends events over many slab and arena blocks,
// with payloads of every size class, and checks that every stored copy is
// intact and independent of the caller's memory.
func TestMemoryLogStoreBlocks(t *testing.T) {
	ctx := context.Background()
	var log MemoryLog
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var want []Event
	for i := 0; i < 3*maxSlabEvents+7; i++ {
		n := (i * 37) % (3 * maxArenaPayload)
		payload := []byte(`"` + strings.Repeat(string(rune('a'+i%26)), n) + `"`)
		ev := &Event{EventID: NewEventID(), RunID: fmt.Sprintf("run-%d", i%3), Type: "x-test.thing",
			Payload: payload, Timestamp: now, Tenant: "t"}
		if i%5 == 0 {
			ev.EventID = fmt.Sprintf("custom-%d", i)
		}
		if err := log.Append(ctx, ev); err != nil {
			t.Fatal(err)
		}
		cp := *ev
		cp.Payload = bytes.Clone(payload)
		want = append(want, cp)
		for j := range payload {
			payload[j] = 'z' // the log must have its own copy
		}
	}
	got := log.All()
	if len(got) != len(want) {
		t.Fatalf("%d events, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i].EventID != want[i].EventID || got[i].Sequence != want[i].Sequence || !bytes.Equal(got[i].Payload, want[i].Payload) {
			t.Fatalf("event %d: got %+v, want %+v", i, got[i], want[i])
		}
		if err := log.Append(ctx, &want[i]); errcode.CodeOf(err) != errcode.Conflict {
			t.Fatalf("re-appending event %d: %v, want conflict", i, err)
		}
	}
	// Reads return copies too.
	got[0].Payload[0] = 'X'
	if again := log.All(); again[0].Payload[0] == 'X' {
		t.Fatal("a read shares payload memory with the log")
	}
}

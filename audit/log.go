package audit

import (
	"bytes"
	"context"
	"errors"
	"hash/maphash"
	"sync"

	"github.com/toolgate/toolgate/errcode"
)

// Log is the append-only run-event log the pipeline writes to (CONTRACT §4
// "Events are appended to the durable log with sequence starting at 0 and
// monotonic"; DESIGN.md decision 7). It is toolgate's extension point for
// event sinks: MemoryLog here, durable stores elsewhere.
//
// A run is identified by (Event.Tenant, Event.RunID): two tenants that use
// the same runId have independent runs and sequences, so one tenant can
// neither observe nor disturb another's sequence numbers.
//
// Append contract, for every implementation:
//   - It validates every event and rejects the batch with *errcode.Error
//     InvalidArgument if one is nil or fails Event.Validate, and with
//     Conflict if an EventID is already in the log or repeated in the batch.
//     The one check an implementation may skip is the well-formedness scan
//     of Payload, which costs O(len(Payload)) and is redundant for events
//     built by NewEvent or ReturnedEvent or decoded by Event.UnmarshalJSON
//     (their payloads are valid by construction); MemoryLog skips it, a
//     durable log should not store malformed JSON. A hand-built event with a
//     malformed payload is a caller bug; Event.MarshalJSON rejects it.
//   - It assigns Sequence to each event, in argument order: the next number
//     of the event's run, the first event of a run being 0, with no gaps and
//     no duplicates, overwriting any value the caller set. Sequence is
//     written into the caller's *Event only on success.
//   - The batch is atomic: either every event is appended, with consecutive
//     sequences per run (no other append interleaves), or none is.
//   - A durable log returns only once the batch is durable, so the caller
//     may then act on it ("durable before visible"); an error means nothing
//     was appended, and the pipeline fails closed (audit_unavailable).
//   - A ctx that is already done fails with Cancelled or Timeout; appending
//     zero events is a no-op returning nil.
//   - Append takes ownership of nothing: the log copies what it keeps.
//   - Append is safe for concurrent use.
type Log interface {
	Append(ctx context.Context, events ...*Event) error
}

var _ Log = (*MemoryLog)(nil)

// runKey identifies a run: runs are tenant-scoped.
type runKey struct{ tenant, runID string }

// MemoryLog is an in-memory Log for tests, development and embedding without
// a store. It is not durable (a restart loses everything) and it is
// unbounded: it keeps every event, and a per-run index, until the process
// exits; production deployments use a durable store.
//
// It copies each event (including the Payload bytes) on Append and again on
// every read, so callers never share memory with it. The zero MemoryLog is
// empty and ready to use. All methods are safe for concurrent use.
type MemoryLog struct {
	mu     sync.RWMutex
	events []*Event          // immutable copies, in append order
	runs   map[runKey]*[]int // indices into events, by sequence
	last   runKey            // the run of the last event appended
	lastIx *[]int            // its runs entry (the call pair shares a run)
	ids    idIndex           // every EventID appended

	// The copies are carved out of blocks, so that appending costs no
	// allocation in the steady state: slab holds Events, arena Payload bytes
	// (each copy's capacity is capped at its length, so no two overlap).
	slab  []Event
	arena []byte
}

// NewMemoryLog returns an empty MemoryLog.
func NewMemoryLog() *MemoryLog { return &MemoryLog{} }

// Append appends events atomically, following the Log contract (it skips
// the Payload well-formedness scan). Errors (*errcode.Error): InvalidArgument
// for a nil or invalid event (details.field names the member, details.index
// the event's position); Conflict for a duplicate EventID; Cancelled or
// Timeout when ctx is done.
func (m *MemoryLog) Append(ctx context.Context, events ...*Event) error {
	if err := ctx.Err(); err != nil {
		return contextError(err)
	}
	if len(events) == 0 {
		return nil
	}
	for i, ev := range events {
		if ev == nil {
			return invalid("event", "append events: event %d is nil", i).WithDetails(map[string]any{"index": i})
		}
		if err := ev.validateEnvelope(); err != nil {
			return errcode.As(err).WithDetails(map[string]any{"index": i})
		}
	}
	if err := duplicateInBatch(events); err != nil {
		return err
	}

	m.mu.Lock()
	defer m.mu.Unlock()
	for i, ev := range events {
		if m.ids.has(ev.EventID, m.events) {
			return errcode.Errorf(errcode.Conflict, "append events: eventId %q is already in the log", ev.EventID).
				WithDetails(map[string]any{"field": "eventId", "index": i})
		}
	}
	if m.runs == nil {
		m.runs = make(map[runKey]*[]int)
	}
	// Nothing can fail from here on: the batch is committed as a whole.
	for _, ev := range events {
		key := runKey{ev.Tenant, ev.RunID}
		idx := m.lastIx
		if idx == nil || key != m.last {
			if idx = m.runs[key]; idx == nil {
				idx = new([]int)
				m.runs[key] = idx
			}
			m.last, m.lastIx = key, idx
		}
		ev.Sequence = int64(len(*idx))
		stored := m.store(ev)
		*idx = append(*idx, len(m.events))
		m.ids.add(ev.EventID, len(m.events))
		m.events = append(m.events, stored)
	}
	return nil
}

// Block sizes of MemoryLog's slab (in events, doubling from the first) and
// arena (in bytes). A payload larger than maxArenaPayload gets its own copy.
const (
	firstSlabEvents = 8
	maxSlabEvents   = 256
	arenaBlockBytes = 16 << 10
	maxArenaPayload = arenaBlockBytes / 8
)

// store returns a copy of *ev, with its own copy of the Payload bytes,
// carved out of m's blocks. m.mu is held.
func (m *MemoryLog) store(ev *Event) *Event {
	if len(m.slab) == cap(m.slab) {
		n := min(max(2*cap(m.slab), firstSlabEvents), maxSlabEvents)
		m.slab = make([]Event, 0, n)
	}
	m.slab = append(m.slab, *ev)
	cp := &m.slab[len(m.slab)-1]
	cp.Payload = m.copyPayload(ev.Payload)
	return cp
}

// copyPayload returns a copy of p whose capacity is its length.
func (m *MemoryLog) copyPayload(p []byte) []byte {
	if p == nil {
		return nil
	}
	if len(p) > maxArenaPayload {
		return bytes.Clone(p)
	}
	if cap(m.arena)-len(m.arena) < len(p) {
		m.arena = make([]byte, 0, arenaBlockBytes)
	}
	start := len(m.arena)
	m.arena = append(m.arena, p...)
	return m.arena[start:len(m.arena):len(m.arena)]
}

// idIndex is the set of the EventIDs of a MemoryLog's events: an
// open-addressing hash table (linear probing, at most half full) of the
// ids' 64-bit hashes (hash/maphash, randomly seeded), each with the index of
// its event, against whose EventID a matching hash is confirmed. A lookup
// of an absent id, the common case, reads only the hash array, and growing
// moves hashes without rehashing ids. The zero value is empty.
type idIndex struct {
	seed   maphash.Seed
	hashes []uint64 // 0: empty slot
	events []int    // the event index of each used slot
	n      int      // used slots
}

// hash returns the hash of id, never 0 (the empty slot).
func (x *idIndex) hash(id string) uint64 {
	if h := maphash.String(x.seed, id); h != 0 {
		return h
	}
	return 1
}

// has reports whether an event of events has EventID id.
func (x *idIndex) has(id string, events []*Event) bool {
	if x.n == 0 {
		return false
	}
	h := x.hash(id)
	mask := len(x.hashes) - 1
	for i := int(h) & mask; ; i = (i + 1) & mask {
		switch x.hashes[i] {
		case 0:
			return false
		case h:
			if events[x.events[i]].EventID == id {
				return true
			}
		}
	}
}

// add records id as the EventID of event index i; id must be absent.
func (x *idIndex) add(id string, i int) {
	if len(x.hashes) == 0 {
		x.seed = maphash.MakeSeed()
	}
	if 2*(x.n+1) > len(x.hashes) {
		x.grow()
	}
	x.put(x.hash(id), i)
	x.n++
}

// put stores hash h with event index i in the first empty slot of its probe
// sequence.
func (x *idIndex) put(h uint64, i int) {
	mask := len(x.hashes) - 1
	j := int(h) & mask
	for x.hashes[j] != 0 {
		j = (j + 1) & mask
	}
	x.hashes[j], x.events[j] = h, i
}

// grow doubles the table (64 slots at first).
func (x *idIndex) grow() {
	oldH, oldE := x.hashes, x.events
	n := max(64, 2*len(oldH))
	x.hashes, x.events = make([]uint64, n), make([]int, n)
	for j, h := range oldH {
		if h != 0 {
			x.put(h, oldE[j])
		}
	}
}

// duplicateInBatch returns a Conflict error if two events share an EventID.
func duplicateInBatch(events []*Event) error {
	dup := -1
	if len(events) <= 16 {
	outer:
		for i := 1; i < len(events); i++ {
			for j := 0; j < i; j++ {
				if events[i].EventID == events[j].EventID {
					dup = i
					break outer
				}
			}
		}
	} else {
		seen := make(map[string]struct{}, len(events))
		for i, ev := range events {
			if _, ok := seen[ev.EventID]; ok {
				dup = i
				break
			}
			seen[ev.EventID] = struct{}{}
		}
	}
	if dup < 0 {
		return nil
	}
	return errcode.Errorf(errcode.Conflict, "append events: eventId %q is repeated in the batch", events[dup].EventID).
		WithDetails(map[string]any{"field": "eventId", "index": dup})
}

// contextError maps a done context's error to Timeout or Cancelled.
func contextError(err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return errcode.Wrap(errcode.Timeout, err, "append events")
	}
	return errcode.Wrap(errcode.Cancelled, err, "append events")
}

// Events returns copies of the events of run (tenant, runID), ordered by
// Sequence (0, 1, 2, ...), or nil if the run has none. The caller owns the
// result.
func (m *MemoryLog) Events(tenant, runID string) []Event {
	m.mu.RLock()
	defer m.mu.RUnlock()
	p := m.runs[runKey{tenant, runID}]
	if p == nil || len(*p) == 0 {
		return nil
	}
	idx := *p
	out := make([]Event, len(idx))
	for i, j := range idx {
		out[i] = *copyEvent(m.events[j])
	}
	return out
}

// All returns copies of every event in append order (within a run, that is
// Sequence order), or nil when the log is empty. The caller owns the result.
func (m *MemoryLog) All() []Event {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if len(m.events) == 0 {
		return nil
	}
	out := make([]Event, len(m.events))
	for i := range m.events {
		out[i] = *copyEvent(m.events[i])
	}
	return out
}

// Len returns the number of events in the log.
func (m *MemoryLog) Len() int {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return len(m.events)
}

// copyEvent returns a copy of *ev with its own copy of the Payload bytes.
func copyEvent(ev *Event) *Event {
	cp := *ev
	cp.Payload = bytes.Clone(ev.Payload)
	return &cp
}

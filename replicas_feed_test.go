package toolgate_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/audit"
)

// The event-stream sub-test of TestTwoReplicas (replicas_test.go): it
// needs issue 14 point 3, a commit-ordered feed across replicas.

// sseEvent is one event of GET /v1/events/stream.
type sseEvent struct {
	cursor string
	ev     audit.Event
}

// openStream opens GET /v1/events/stream on r as principal with query q
// and lastID (Last-Event-ID, "" for none). It returns once the stream is
// open (its opening comment arrived, so the follower is registered) and
// a channel of its events, closed when the stream ends; the stream ends
// with the returned cancel or t.
func openStream(t *testing.T, r *replica, principal, q, lastID string) (<-chan sseEvent, context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	t.Cleanup(cancel)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.base+"/v1/events/stream?"+q, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+replicaKeys[principal])
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Fatalf("GET /v1/events/stream on %s: %d %s", r.name, resp.StatusCode, b)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	if !sc.Scan() || !strings.HasPrefix(sc.Text(), ":") {
		resp.Body.Close()
		t.Fatalf("the stream on %s did not open with a comment: %q %v", r.name, sc.Text(), sc.Err())
	}
	ch := make(chan sseEvent, 1024)
	go func() {
		defer close(ch)
		defer resp.Body.Close()
		var cur sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "id: "):
				cur.cursor = strings.TrimPrefix(line, "id: ")
			case strings.HasPrefix(line, "data: "):
				if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &cur.ev); err != nil {
					cur.ev = audit.Event{Type: "undecodable: " + err.Error()}
				}
			case line == "" && cur.cursor != "":
				select {
				case ch <- cur:
				case <-ctx.Done():
					return
				}
				cur = sseEvent{}
			}
		}
	}()
	return ch, cancel
}

// nextEvents reads n events from ch, failing t when the stream ends or
// stays silent for 10 s.
func nextEvents(t *testing.T, ch <-chan sseEvent, n int, what string) []sseEvent {
	t.Helper()
	var got []sseEvent
	for len(got) < n {
		select {
		case e, ok := <-ch:
			if !ok {
				t.Fatalf("%s: the stream ended after %d of %d events", what, len(got), n)
			}
			got = append(got, e)
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: %d of %d events arrived; then nothing for 10 s", what, len(got), n)
		}
	}
	return got
}

// checkRunEvents checks that evs are the events of run runID with
// sequences from, from+1, … in order, each a distinct cursor, in
// agent.toolCalled / agent.toolReturned pairs.
func checkRunEvents(t *testing.T, evs []sseEvent, runID string, from int64, seen map[string]bool) {
	t.Helper()
	for i, e := range evs {
		want := from + int64(i)
		if e.ev.RunID != runID || e.ev.Sequence != want {
			t.Fatalf("stream event %d: run %q sequence %d (%s); want run %q sequence %d: a gap or a reorder", i, e.ev.RunID, e.ev.Sequence, e.ev.Type, runID, want)
		}
		wantType := audit.TypeToolCalled
		if want%2 == 1 {
			wantType = audit.TypeToolReturned
		}
		if e.ev.Type != wantType {
			t.Fatalf("stream event %d (sequence %d): %s; want %s", i, want, e.ev.Type, wantType)
		}
		if seen[e.cursor] || seen[e.ev.EventID] {
			t.Fatalf("stream event %d (sequence %d): cursor or event id delivered twice", i, want)
		}
		seen[e.cursor], seen[e.ev.EventID] = true, true
	}
}

// (d) An SSE stream on B receives the events A commits, live, in commit
// order, without gap (per-run sequences 0, 1, …); resumed on B with the
// last cursor it continues with the next event, without duplicate, while
// both replicas write the run.
func testStreamAcross(t *testing.T, rs *replicaSet) {
	const runID = "run_replicas_stream"
	const first, second = 5, 6
	ch, cancel := openStream(t, rs.b, "alice", "runId="+runID, "")
	for i := range first {
		if a := mustCall(t, rs.a, "alice", "mcp:up.echo", runID, map[string]any{"i": i}); a.Status != http.StatusOK || a.CallStatus != "ok" {
			t.Fatalf("call %d on A: %+v", i, a)
		}
	}
	seen := map[string]bool{}
	got := nextEvents(t, ch, 2*first, "B's stream of A's calls")
	checkRunEvents(t, got, runID, 0, seen)
	cancel()

	// Both replicas write the run while no stream is open; B's resumed
	// stream delivers them from the cursor on, then live ones.
	last := got[len(got)-1].cursor
	for i := range second / 2 {
		r := []*replica{rs.a, rs.b}[i%2]
		if a := mustCall(t, r, "alice", "mcp:up.echo", runID, map[string]any{"j": i}); a.Status != http.StatusOK {
			t.Fatalf("call %d on %s: %+v", i, r.name, a)
		}
	}
	ch, _ = openStream(t, rs.b, "alice", "runId="+runID, last)
	for i := second / 2; i < second; i++ {
		r := []*replica{rs.a, rs.b}[i%2]
		if a := mustCall(t, r, "alice", "mcp:up.echo", runID, map[string]any{"j": i}); a.Status != http.StatusOK {
			t.Fatalf("call %d on %s: %+v", i, r.name, a)
		}
	}
	got = nextEvents(t, ch, 2*second, "B's stream resumed with Last-Event-ID")
	checkRunEvents(t, got, runID, 2*first, seen)
	// No duplicate trails them: one more call's events are the next ones
	// the stream delivers.
	mustCall(t, rs.a, "alice", "mcp:up.echo", runID, map[string]any{"probe": true})
	probe := nextEvents(t, ch, 1, "the probe call's event")
	checkRunEvents(t, probe, runID, 2*(first+second), seen)
}

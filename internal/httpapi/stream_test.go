package httpapi_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// streamed is one SSE event of GET /v1/events/stream.
type streamed struct {
	id, runID, typ string
	payload        map[string]any
}

// readStream opens the SSE stream path as who (resuming after lastID when
// set) and collects events until until(collected) is true; it fails the
// test after 20 s. Every event is validated like the JSON event reads.
func readStream(t *testing.T, s *server, who, path, lastID string, until func([]streamed) bool) []streamed {
	t.Helper()
	return readStreamAfter(t, s, who, path, lastID, nil, until)
}

// readStreamAfter is readStream calling opened, when not nil, once the
// stream is open (its answer's header arrived, so the server is following
// the store: an event stored from then on is delivered).
func readStreamAfter(t *testing.T, s *server, who, path, lastID string, opened func(), until func([]streamed) bool) []streamed {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", s.base+path, nil)
	req.Header.Set("Authorization", "Bearer "+s.keys[who])
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := s.http.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("GET %s: %d %s", path, resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	if opened != nil {
		opened()
	}
	var got []streamed
	if until(got) {
		return got
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var cur streamed
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "id: "):
			cur.id = strings.TrimPrefix(line, "id: ")
		case strings.HasPrefix(line, "data: "):
			raw := []byte(strings.TrimPrefix(line, "data: "))
			checkEvent(t, "SSE "+path, raw)
			var ev struct {
				RunID   string         `json:"runId"`
				Type    string         `json:"type"`
				Payload map[string]any `json:"payload"`
			}
			if err := json.Unmarshal(raw, &ev); err != nil {
				t.Fatalf("SSE data %s: %v", raw, err)
			}
			cur.runID, cur.typ, cur.payload = ev.RunID, ev.Type, ev.Payload
		case line == "" && cur.typ != "":
			if cur.id == "" {
				t.Fatalf("SSE event without id: %+v", cur)
			}
			got = append(got, cur)
			cur = streamed{}
			if until(got) {
				return got
			}
		}
	}
	t.Fatalf("GET %s ended (%v) before the expected events; got %d", path, sc.Err(), len(got))
	return nil
}

// TestEventStream: GET /v1/events/stream delivers the caller's tenant's
// events as SSE with id = cursor, live and from the start, resumes after
// Last-Event-ID without a gap or a duplicate, filters by type and runId,
// never shows another tenant's events, and refuses a malformed cursor with
// the envelope.
func TestEventStream(t *testing.T) {
	s := startServe(t, false)
	call := func(who, tool, run string) {
		t.Helper()
		r := s.do(t, who, "POST", "/v1/calls", map[string]any{"toolId": tool, "args": map[string]any{"text": "x"}, "runId": run})
		if r.status != 200 {
			t.Fatalf("call %s as %s: %d %s", tool, who, r.status, r.body)
		}
	}
	call("bob", "mcp:up.b_notes", "run-b-1") // tenant b: never on a's stream
	call("alice", "mcp:up.echo", "run-a-1")
	call("alice", "mcp:up.echo", "run-a-2")

	all := readStream(t, s, "alice", "/v1/events/stream?from=start", "", func(g []streamed) bool { return len(g) >= 4 })
	wantRuns := []string{"run-a-1", "run-a-1", "run-a-2", "run-a-2"}
	for i, e := range all[:4] {
		if e.runID != wantRuns[i] {
			t.Fatalf("event %d: run %s, want %s (events %+v)", i, e.runID, wantRuns[i], all)
		}
	}
	// Resume after the second event: exactly the third and fourth follow.
	rest := readStream(t, s, "alice", "/v1/events/stream", all[1].id, func(g []streamed) bool { return len(g) >= 2 })
	if rest[0].id != all[2].id || rest[1].id != all[3].id {
		t.Fatalf("resume after %s gave %+v, want %s then %s", all[1].id, rest, all[2].id, all[3].id)
	}
	// Live delivery with filters: a call made once the stream is open.
	live := readStreamAfter(t, s, "alice", "/v1/events/stream?type=agent.toolReturned&runId=run-a-3", "",
		func() { call("alice", "mcp:up.echo", "run-a-3") }, func(g []streamed) bool { return len(g) >= 1 })
	if live[0].typ != "agent.toolReturned" || live[0].runID != "run-a-3" {
		t.Fatalf("filtered live event %+v", live[0])
	}
	for _, e := range append(all, rest...) {
		if e.runID == "run-b-1" {
			t.Fatalf("tenant a's stream shows tenant b's event %+v", e)
		}
	}
	bobs := readStream(t, s, "bob", "/v1/events/stream?from=start", "", func(g []streamed) bool { return len(g) >= 2 })
	if bobs[0].runID != "run-b-1" || bobs[1].runID != "run-b-1" {
		t.Fatalf("tenant b's stream: %+v", bobs)
	}
	if r := s.do(t, "alice", "GET", "/v1/events/stream?cursor=not-a-cursor", nil); r.status != 400 {
		t.Fatalf("malformed cursor: %d %s", r.status, r.body)
	}
	if r := s.do(t, "", "GET", "/v1/events/stream", nil); r.status != 401 {
		t.Fatalf("no credentials: %d", r.status)
	}
}

// Review defect 1: a key removed by a SIGHUP reload ends its open event
// stream before the stream delivers another event.
func TestReloadEndsEventStream(t *testing.T) {
	s := startServe(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", s.base+"/v1/events/stream", nil)
	req.Header.Set("Authorization", "Bearer "+s.keys["audra"])
	resp, err := s.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("audra's stream: %d", resp.StatusCode)
	}
	var lines []string
	for _, l := range strings.Split(s.cfgHead+defaultPolicy, "\n") {
		if !strings.Contains(l, "{id: audra,") {
			lines = append(lines, l)
		}
	}
	if err := os.WriteFile(s.cfgFile, []byte(strings.Join(lines, "\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for s.do(t, "audra", "GET", "/v1/tools", nil).status != 401 {
		if time.Now().After(deadline) {
			t.Fatalf("audra's removed key still works after the reload; stderr:\n%s", s.stderr.String())
		}
	}
	if r := s.do(t, "alice", "POST", "/v1/calls", map[string]any{"toolId": "mcp:up.echo", "args": map[string]any{"text": "x"}, "runId": "run-after-reload"}); r.status != 200 {
		t.Fatalf("alice's call: %d %s", r.status, r.body)
	}
	sc := bufio.NewScanner(resp.Body)
	var tail []string
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "data: ") {
			t.Fatalf("the stream of a key removed by a reload delivered %s", sc.Text())
		}
		tail = append(tail, sc.Text())
	}
	if ctx.Err() != nil || !strings.Contains(strings.Join(tail, "\n"), "no longer accepted") {
		t.Fatalf("the stream did not end after the reload (%v): %q", ctx.Err(), tail)
	}
}

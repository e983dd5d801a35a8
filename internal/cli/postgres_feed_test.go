package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/auth"
)

// sseEvent is one event of /v1/events/stream.
type sseEvent struct {
	id    string
	runID string
	typ   string
	seq   int64
}

// openStream opens base's /v1/events/stream with key (and Last-Event-ID
// lastID, if set) and returns its events as they arrive; cancel ends it.
func openStream(t *testing.T, base, key, lastID string) (<-chan sseEvent, context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/events/stream", nil)
	req.Header.Set("Authorization", "Bearer "+key)
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		cancel()
		t.Fatalf("GET /v1/events/stream: %d %s", resp.StatusCode, body)
	}
	out := make(chan sseEvent, 64)
	go func() {
		defer resp.Body.Close()
		defer close(out)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		var id string
		for sc.Scan() {
			line := sc.Text()
			if v, ok := strings.CutPrefix(line, "id: "); ok {
				id = v
			}
			if v, ok := strings.CutPrefix(line, "data: "); ok {
				var ev struct {
					RunID    string `json:"runId"`
					Type     string `json:"type"`
					Sequence int64  `json:"sequence"`
				}
				if json.Unmarshal([]byte(v), &ev) == nil {
					out <- sseEvent{id: id, runID: ev.RunID, typ: ev.Type, seq: ev.Sequence}
				}
			}
		}
	}()
	t.Cleanup(cancel)
	return out, cancel
}

// nextSSE returns the stream's next event, failing after a minute.
func nextSSE(t *testing.T, ch <-chan sseEvent) sseEvent {
	t.Helper()
	select {
	case ev, ok := <-ch:
		if !ok {
			t.Fatal("the event stream ended")
		}
		return ev
	case <-time.After(time.Minute):
		t.Fatal("no event on the stream within a minute")
	}
	panic("unreachable")
}

// TestPostgresEventStreamAcrossReplicas: two serve processes (replicas A
// and B, each with its own signing key) share one PostgreSQL schema. An
// SSE stream on B delivers the events of a call made through A; after a
// disconnect, a reconnect to B with Last-Event-ID delivers the next
// call's events, and none of the first again.
func TestPostgresEventStreamAcrossReplicas(t *testing.T) {
	dsn := postgresSchema(t)
	up := startWaitUpstream(t)
	close(up.release)
	key, err := auth.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	replica := func() *serveChild {
		dir := t.TempDir()
		cfg := fmt.Sprintf(`listen: 127.0.0.1:0
store: {driver: postgres, dsn: %q}
signing: {key_file: %s}
auth:
  api_keys:
    - {id: tester, key_sha256: "%s", tenant: t1}
servers:
  - {name: up, url: "%s", sessions: shared}
policy:
  default: deny
  rules:
    - {id: all, effect: allow, tools: ["mcp:up.*"]}
`, dsn, filepath.Join(dir, "toolgate.key"), auth.HashKey(key), up.url)
		return startChildConfig(t, dir, cfg, key)
	}
	a, b := replica(), replica()
	call := func(c *serveChild, runID string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, c.base+"/v1/calls", strings.NewReader(`{"toolId":"mcp:up.wait","args":{},"runId":"`+runID+`"}`))
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("POST /v1/calls on %s: %d %s", c.base, resp.StatusCode, body)
		}
	}
	want := func(ch <-chan sseEvent, runID string) sseEvent {
		t.Helper()
		var last sseEvent
		for i, typ := range []string{"agent.toolCalled", "agent.toolReturned"} {
			ev := nextSSE(t, ch)
			if ev.runID != runID || ev.typ != typ || ev.seq != int64(i) || ev.id == "" {
				t.Fatalf("stream event %+v, want %s %s sequence %d with an id", ev, runID, typ, i)
			}
			last = ev
		}
		return last
	}

	stream, stop := openStream(t, b.base, key, "")
	start := time.Now()
	call(a, "run_feed_1")
	last := want(stream, "run_feed_1")
	t.Logf("a call through A: both events on B's stream %v after the call started", time.Since(start))
	stop()

	call(a, "run_feed_2")
	resumed, _ := openStream(t, b.base, key, last.id)
	want(resumed, "run_feed_2")
	// Nothing else is pending: the next event is a third call's.
	call(b, "run_feed_3")
	want(resumed, "run_feed_3")
}

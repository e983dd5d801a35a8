package httpapi

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/catalog"
	"github.com/toolgate/toolgate/internal/auth"
	"github.com/toolgate/toolgate/internal/config"
	"github.com/toolgate/toolgate/internal/pipeline"
	"github.com/toolgate/toolgate/internal/schematest"
	"github.com/toolgate/toolgate/policy"
)

// visFixture is newFixture with two principals of tenant a, alice (scopes
// files:read and toolgate:audit: she reads every principal's events, of
// the tools she may see) and bob (no scope: he reads his own events), and
// a catalog of mcp:up.read_file (needs
// files:read, so hidden from bob), mcp:open.ping and native:echo (visible to
// both), every tool allowed by the policy.
type visFixture struct {
	*fixture
	pipe *pipeline.Pipeline
}

func newVisFixture(t *testing.T, seams bool) *visFixture {
	t.Helper()
	a, err := auth.New(context.Background(), config.Auth{APIKeys: []config.APIKey{
		{ID: "alice", Tenant: "a", KeySHA256: auth.HashKey("k-alice"), Scopes: []string{"files:read", DefaultAuditScope}},
		{ID: "bob", Tenant: "a", KeySHA256: auth.HashKey("k-bob")},
	}}, auth.Options{})
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, func(o *Options) { o.Auth, o.TestSeams = a, seams })
	vf := &visFixture{fixture: f, pipe: f.h.pipe}
	vf.swap(t, []string{"files:read"})
	return vf
}

// swap installs the fixture's catalog, mcp:up.read_file requiring scopes
// (none: visible to every principal).
func (f *visFixture) swap(t *testing.T, scopes []string) {
	t.Helper()
	ro := catalog.ToolDescriptor{ToolID: "mcp:up.read_file", Source: catalog.SourceMCP, SafetyTier: catalog.TierRead}
	if len(scopes) > 0 {
		ro.Auth = &catalog.Auth{Scopes: scopes}
	}
	tools := []catalog.Tool{
		{Descriptor: ro, Transport: catalog.TransportMCP, Server: "up", Name: "read_file"},
		{Descriptor: catalog.ToolDescriptor{ToolID: "mcp:open.ping", Source: catalog.SourceMCP, SafetyTier: catalog.TierPure},
			Transport: catalog.TransportMCP, Server: "open", Name: "ping"},
		{Descriptor: catalog.ToolDescriptor{ToolID: "native:echo", Source: catalog.SourceHostExtension, SafetyTier: catalog.TierPure},
			Transport: catalog.TransportNative, Name: "echo"},
	}
	snap, err := catalog.NewSnapshot(tools, catalog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	prg, err := policy.Load("p.yaml", []byte(`rules: [{id: all, effect: allow, tools: ["*"]}]`), policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	echo := pipeline.InvokerFunc(func(_ context.Context, _ *catalog.Tool, args json.RawMessage) (json.RawMessage, error) {
		return args, nil
	})
	f.pipe.Swap(&pipeline.State{Catalog: snap, Policy: prg, Invokers: map[string]pipeline.Invoker{
		"mcp:up.read_file": echo, "mcp:open.ping": echo, "native:echo": echo}})
}

// call posts a call as key and returns the status.
func (f *visFixture) call(t *testing.T, key, tool, run string) int {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"toolId": tool, "runId": run})
	resp, raw := f.do(t, key, "POST", "/v1/calls", string(body))
	if resp.StatusCode != 200 && resp.StatusCode != 404 {
		t.Fatalf("call %s as %s: %d %s", tool, key, resp.StatusCode, raw)
	}
	return resp.StatusCode
}

// append stores one event of bob's of type typ with payload in tenant a's
// run.
func (f *visFixture) append(t *testing.T, run, typ string, payload any) {
	t.Helper()
	ev, err := audit.NewEvent(run, typ, payload, "", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	ev.Tenant, ev.Principal = "a", "bob"
	if err := f.h.events.AppendEvents(context.Background(), ev); err != nil {
		t.Fatal(err)
	}
}

// events reads GET path as key: status and, on 200, the events.
func (f *visFixture) events(t *testing.T, key, path string) (int, []byte, []audit.Event) {
	t.Helper()
	resp, raw := f.do(t, key, "GET", path, "")
	if resp.StatusCode != 200 {
		schematest.Validate(t, "error-envelope.schema.json", json.RawMessage(raw))
		return resp.StatusCode, raw, nil
	}
	var doc struct{ Events []audit.Event }
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("GET %s: %v\n%s", path, err, raw)
	}
	return 200, raw, doc.Events
}

// sameAsUnknown asserts that GET path (with run id run) answers, as key,
// exactly what the same path answers for a run that was never written.
func (f *visFixture) sameAsUnknown(t *testing.T, key, pathFmt, run string) {
	t.Helper()
	const unknown = "never-written-run"
	hs, hb, _ := f.events(t, key, strings.ReplaceAll(pathFmt, "RUN", url.PathEscape(run)))
	us, ub, _ := f.events(t, key, strings.ReplaceAll(pathFmt, "RUN", unknown))
	if hs != us || strings.ReplaceAll(string(hb), run, "RUN") != strings.ReplaceAll(string(ub), unknown, "RUN") {
		t.Errorf("%s for %s: %d %s\nunknown run: %d %s", pathFmt, run, hs, hb, us, ub)
	}
}

// sseEvent is one event of the SSE stream.
type sseEvent struct {
	id string
	ev audit.Event
}

// openStream opens GET /v1/events/stream?query as key and returns a
// function that reads the next event (failing the test after 10 s) and
// one that closes the stream.
func (f *visFixture) openStream(t *testing.T, key, query string) (next func() sseEvent, stop func()) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	req, _ := http.NewRequestWithContext(ctx, "GET", f.srv.URL+"/v1/events/stream?"+query, nil)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		cancel()
		t.Fatalf("stream %s: %d", query, resp.StatusCode)
	}
	ch := make(chan sseEvent, 64)
	go func() {
		defer close(ch)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		var cur sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "id: "):
				cur.id = strings.TrimPrefix(line, "id: ")
			case strings.HasPrefix(line, "data: "):
				if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &cur.ev); err != nil {
					return
				}
			case line == "" && cur.id != "":
				ch <- cur
				cur = sseEvent{}
			}
		}
	}()
	next = func() sseEvent {
		t.Helper()
		select {
		case e, ok := <-ch:
			if !ok {
				t.Fatal("the stream ended")
			}
			return e
		case <-time.After(10 * time.Second):
			t.Fatal("no event within 10 s")
		}
		return sseEvent{}
	}
	return next, func() { cancel(); resp.Body.Close() }
}

// TestHiddenToolRunLeak is the reviewer's scenario: bob (no scope) calls
// mcp:up.read_file, hidden from him, with runId probe1 and gets 404; the
// refusal is recorded, but GET /v1/runs/probe1/events answers him exactly
// as for a run never written (with and without filters), the stream never
// delivers it to him, and alice, who may see the tool, still reads it.
func TestHiddenToolRunLeak(t *testing.T) {
	f := newVisFixture(t, true)
	if got := f.call(t, "k-bob", "mcp:up.read_file", "probe1"); got != 404 {
		t.Fatalf("bob's call of a hidden tool: %d", got)
	}
	for _, p := range []string{
		"/v1/runs/RUN/events", "/v1/runs/RUN/events?after=0", "/v1/runs/RUN/events?type=agent.toolReturned",
		"/v1/runs/RUN/events?limit=1", "/v1/host/sample/test/runs/RUN/events",
	} {
		f.sameAsUnknown(t, "k-bob", p, "probe1")
	}
	if st, raw, _ := f.events(t, "k-bob", "/v1/runs/probe1/events"); st != 404 || !strings.Contains(string(raw), `"error":"not_found"`) {
		t.Errorf("bob reads probe1: %d %s", st, raw)
	}
	if st, raw, _ := f.events(t, "k-bob", "/v1/host/sample/test/runs/probe1/events"); st != 200 || string(raw) != "{\"events\":[]}\n" {
		t.Errorf("bob's seam read of probe1: %d %s", st, raw)
	}
	// The owner of the tool reads the refusal, by every door.
	for _, p := range []string{"/v1/runs/probe1/events", "/v1/host/sample/test/runs/probe1/events"} {
		st, raw, evs := f.events(t, "k-alice", p)
		if st != 200 || len(evs) != 2 || evs[1].Type != audit.TypeToolReturned ||
			!strings.Contains(string(evs[1].Payload), `"toolName":"mcp:up.read_file"`) ||
			!strings.Contains(string(evs[1].Payload), `"status":"forbidden"`) {
			t.Errorf("alice reads %s: %d %s", p, st, raw)
		}
	}
	// The stream from the start: bob gets his visible call (the sentinel)
	// but not probe1; alice gets probe1 first.
	f.call(t, "k-bob", "native:echo", "after1")
	next, stop := f.openStream(t, "k-bob", "from=start")
	for {
		e := next()
		if e.ev.RunID == "probe1" {
			t.Fatalf("bob's stream delivered %s of probe1: %s", e.ev.Type, e.ev.Payload)
		}
		if e.ev.RunID == "after1" && e.ev.Type == audit.TypeToolReturned {
			break
		}
	}
	stop()
	next, stop = f.openStream(t, "k-alice", "from=start")
	if e := next(); e.ev.RunID != "probe1" {
		t.Errorf("alice's stream starts with %s of %s, want probe1", e.ev.Type, e.ev.RunID)
	}
	stop()
	// Live, too: a hidden call made while bob's stream is open is skipped.
	next, stop = f.openStream(t, "k-bob", "")
	defer stop()
	f.call(t, "k-bob", "mcp:up.read_file", "probe2")
	f.call(t, "k-bob", "native:echo", "after2")
	if e := next(); e.ev.RunID != "after2" {
		t.Errorf("bob's live stream delivered %s of %s first, want after2", e.ev.Type, e.ev.RunID)
	}
}

// TestEventFilterRules: which events name a tool, and when such a tool is
// visible: toolName and toolId (approval events, session events with a
// full toolId), "mcp:<server>" sessions (visible with any tool of the
// server), events naming no tool, paging over hidden events, and the
// seams' synthetic tool.
func TestEventFilterRules(t *testing.T) {
	f := newVisFixture(t, true)
	f.append(t, "sess-up", audit.TypeSessionOpened, audit.SessionOpened{SessionID: "s1", ToolID: "mcp:up"})
	f.append(t, "sess-open", audit.TypeSessionOpened, audit.SessionOpened{SessionID: "s2", ToolID: "mcp:open"})
	f.append(t, "sess-gone", audit.TypeSessionOpened, audit.SessionOpened{SessionID: "s3", ToolID: "mcp:gone"})
	f.append(t, "sess-full", audit.TypeSessionOpened, audit.SessionOpened{SessionID: "s4", ToolID: "mcp:up.read_file"})
	f.append(t, "appr", "toolgate.approval.requested", map[string]any{"approvalId": "ap1", "toolId": "mcp:up.read_file", "principal": "bob"})
	f.append(t, "appr-ok", "toolgate.approval.requested", map[string]any{"approvalId": "ap2", "toolId": "native:echo", "principal": "bob"})
	f.append(t, "vendor", "acme.thing.done", map[string]any{"note": "no tool here"})
	f.append(t, "removed", "acme.thing.done", map[string]any{"toolName": "native:removed"})
	// mixed: a hidden event, then a visible one.
	f.call(t, "k-bob", "mcp:up.read_file", "mixed")
	f.call(t, "k-bob", "native:echo", "mixed")

	for _, c := range []struct {
		run      string
		bob, all int // events bob and alice read (0: 404)
	}{
		{"sess-up", 0, 1}, {"sess-open", 1, 1}, {"sess-gone", 0, 0}, {"sess-full", 0, 1},
		{"appr", 0, 1}, {"appr-ok", 1, 1}, {"vendor", 1, 1}, {"mixed", 2, 4},
		// With the seams on, a native id outside the gate's catalog is
		// taken for the seams' synthetic tool (see the end of the test).
		{"removed", 1, 1},
	} {
		for _, r := range []struct {
			key  string
			want int
		}{{"k-bob", c.bob}, {"k-alice", c.all}} {
			st, raw, evs := f.events(t, r.key, "/v1/runs/"+c.run+"/events")
			if r.want == 0 {
				if st != 404 {
					t.Errorf("%s as %s: %d %s, want 404", c.run, r.key, st, raw)
				}
				continue
			}
			if st != 200 || len(evs) != r.want {
				t.Errorf("%s as %s: %d %s, want %d events", c.run, r.key, st, raw, r.want)
			}
		}
	}
	// Paging: the first page holds only the hidden call's events; the run
	// has visible ones, so bob gets an empty page, not 404, and reads on.
	st, raw, evs := f.events(t, "k-bob", "/v1/runs/mixed/events?limit=2")
	if st != 200 || len(evs) != 0 || !strings.Contains(string(raw), `"nextAfter":1`) {
		t.Errorf("mixed limit=2 as bob: %d %s", st, raw)
	}
	if _, raw, evs := f.events(t, "k-bob", "/v1/runs/mixed/events?after=1"); len(evs) != 2 || evs[0].Sequence != 2 {
		t.Errorf("mixed after=1 as bob: %s", raw)
	}

	// Without the seams, an id outside the catalog is visible to nobody.
	g := newVisFixture(t, false)
	g.append(t, "removed", "acme.thing.done", map[string]any{"toolName": "native:removed"})
	if st, raw, _ := g.events(t, "k-alice", "/v1/runs/removed/events"); st != 404 {
		t.Errorf("a removed tool's event without seams: %d %s", st, raw)
	}
}

// TestSeamToolEventsVisible: the seams' synthetic tools (outside the gate's
// catalog) stay readable by their caller through every event read.
func TestSeamToolEventsVisible(t *testing.T) {
	f := newVisFixture(t, true)
	resp, raw := f.do(t, "k-bob", "POST", "/v1/host/sample/tools/session-run", `{}`)
	if resp.StatusCode != 200 {
		t.Fatalf("session-run: %d %s", resp.StatusCode, raw)
	}
	var sr SessionRunResponse
	json.Unmarshal(raw, &sr)
	for _, p := range []string{"/v1/runs/" + sr.RunID + "/events", "/v1/host/sample/test/runs/" + sr.RunID + "/events"} {
		if st, raw, evs := f.events(t, "k-bob", p); st != 200 || len(evs) != 4 {
			t.Errorf("%s: %d %s", p, st, raw)
		}
	}
	// A session over a gate tool bob may not see is refused (404) before
	// anything is recorded; over one he sees, it is readable.
	if resp, raw := f.do(t, "k-bob", "POST", "/v1/host/sample/tools/session-run", `{"toolId":"mcp:up.read_file"}`); resp.StatusCode != 404 {
		t.Errorf("session-run over a hidden tool: %d %s", resp.StatusCode, raw)
	}
}

// TestStreamFollowsPolicySwap: the stream's visible set is recomputed when
// the pipeline state is swapped: once mcp:up.read_file needs no scope, the
// events of bob's calls of it reach his open stream.
func TestStreamFollowsPolicySwap(t *testing.T) {
	f := newVisFixture(t, false)
	next, stop := f.openStream(t, "k-bob", "type=agent.toolReturned")
	defer stop()
	f.call(t, "k-bob", "mcp:up.read_file", "before-swap") // hidden: refused, recorded
	f.call(t, "k-bob", "native:echo", "sentinel")
	if e := next(); e.ev.RunID != "sentinel" {
		t.Fatalf("before the swap bob's stream delivered %s", e.ev.RunID)
	}
	f.swap(t, nil)
	f.call(t, "k-bob", "mcp:up.read_file", "after-swap")
	if e := next(); e.ev.RunID != "after-swap" {
		t.Fatalf("after the swap bob's stream delivered %s, want after-swap", e.ev.RunID)
	}
}

// TestEventTypeFilterValidation: ?type= on the run read and the stream
// accepts run-event types (toolgate's and vendor ones) only.
func TestEventTypeFilterValidation(t *testing.T) {
	f := newVisFixture(t, false)
	f.call(t, "k-alice", "native:echo", "r1")
	for _, c := range []struct {
		query string
		ok    bool
	}{
		{"type=agent.toolCalled", true}, {"type=agent.toolReturned", true}, {"type=tool.session.opened", true},
		{"type=tool.session.closed", true}, {"type=toolgate.approval.requested", true}, {"type=toolgate.approval.resolved", true},
		{"type=acme.thing_x.done-1", true},
		{"type=", false}, {"type=agent", false}, {"type=Agent.toolCalled", false}, {"type=agent..x", false},
		{"type=agent.x.", false}, {"type=1a.b", false}, {"type=a.b%20c", false}, {"type=a.b&type=c.d", false},
		{"type=" + strings.Repeat("x", 5000), false},
	} {
		resp, raw := f.do(t, "k-alice", "GET", "/v1/runs/r1/events?"+c.query, "")
		if (resp.StatusCode == 200) != c.ok || (!c.ok && resp.StatusCode != 400) {
			t.Errorf("run read ?%.60s: %d %.300s", c.query, resp.StatusCode, raw)
		}
		if !c.ok {
			schematest.Validate(t, "error-envelope.schema.json", json.RawMessage(raw))
			if len(raw) > 600 {
				t.Errorf("run read ?%.60s: the message echoes the whole value (%d bytes)", c.query, len(raw))
			}
			if resp, raw := f.do(t, "k-alice", "GET", "/v1/events/stream?"+c.query, ""); resp.StatusCode != 400 {
				t.Errorf("stream ?%.60s: %d %.300s", c.query, resp.StatusCode, raw)
			}
		}
	}
	next, stop := f.openStream(t, "k-alice", "from=start&type=acme.thing.done")
	defer stop()
	f.append(t, "r2", "acme.thing.done", map[string]any{"n": 1})
	if e := next(); e.ev.Type != "acme.thing.done" {
		t.Errorf("vendor type filter delivered %s", e.ev.Type)
	}
}

func TestValidEventType(t *testing.T) {
	for typ, want := range map[string]bool{
		"agent.toolCalled": true, "toolgate.approval.resolved": true, "a.b": true, "a.B-_9.c": true, "run.started": true,
		"": false, "a": false, "a.": false, ".a": false, "a..b": false, "A.b": false, "_a.b": false, "a.b c": false, "a.b\n": false,
	} {
		if got := validEventType(typ); got != want {
			t.Errorf("validEventType(%q) = %v", typ, got)
		}
	}
}

func TestPayloadTools(t *testing.T) {
	for _, c := range []struct {
		payload string
		names   string
		ok      bool
	}{
		{`{"toolName":"mcp:a.b","callId":"c"}`, "mcp:a.b", true},
		{`{"toolId":"mcp:a","sessionId":"s"}`, "mcp:a", true},
		{`{"toolName":"x:a","toolName":"x:b","toolId":"x:c"}`, "x:a,x:b,x:c", true},
		{`{"nested":{"toolName":"x:a"},"toolName":7,"toolId":""}`, "", true},
		{`[1,2]`, "", true},
		{`"s"`, "", true},
		{``, "", true},
		{`{"toolName":`, "", false},
		{`{"toolName":"a"} x`, "", false},
	} {
		names, ok := payloadTools(json.RawMessage(c.payload))
		if ok != c.ok || strings.Join(names, ",") != c.names {
			t.Errorf("payloadTools(%s) = %v, %v", c.payload, names, ok)
		}
	}
}

package pipeline

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/catalog"
	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/ratelimit"
	"github.com/toolgate/toolgate/store"
	"github.com/toolgate/toolgate/store/memstore"
)

// replayRig is a pipeline over a memstore with three native tools, one per
// replayPolicy, each counting its invocations: t.rand (non-deterministic,
// answers a fresh number each time), t.idem (idempotent) and t.det
// (deterministic, answers det's current value).
type replayRig struct {
	p                *Pipeline
	st               *memstore.Store
	snap             *catalog.Snapshot
	inv              map[string]Invoker
	rand, idem, detN atomic.Int64
	det              atomic.Value // string
}

const replayPolicy = `rules:
- {id: all, effect: allow, tools: ['native:t.*']}
- {id: no-block, effect: deny, tools: ['native:t.*'], when: 'has(args.block) && args.block == true'}
`

func newReplayRig(t *testing.T) *replayRig {
	t.Helper()
	st, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	r := &replayRig{st: st}
	r.det.Store("same")
	r.p, err = New(Options{Limiter: ratelimit.NewMemory(ratelimit.MemoryOptions{}), Events: store.EventLog(st), Receipts: store.ReceiptLog(st),
		Recordings: st, RecordScope: "toolgate:record", ReadersScope: "toolgate:audit"})
	if err != nil {
		t.Fatal(err)
	}
	tool := func(name string, rp catalog.ReplayPolicy) catalog.Tool {
		return catalog.Tool{Descriptor: catalog.ToolDescriptor{ToolID: "native:" + name, Source: catalog.SourceHostExtension,
			SafetyTier: catalog.TierRead, ReplayPolicy: rp}, Transport: catalog.TransportNative, Name: name}
	}
	r.snap, err = catalog.NewSnapshot([]catalog.Tool{tool("t.rand", catalog.ReplayNonDeterministic),
		tool("t.idem", catalog.ReplayIdempotent), tool("t.det", catalog.ReplayDeterministic)}, catalog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r.inv = map[string]Invoker{
		"native:t.rand": NativeInvoker(func(context.Context, json.RawMessage) (any, error) {
			return map[string]any{"n": r.rand.Add(1) * 1000}, nil
		}),
		"native:t.idem": NativeInvoker(func(_ context.Context, args json.RawMessage) (any, error) {
			r.idem.Add(1)
			if strings.Contains(string(args), "fail") {
				return nil, errcode.New(errcode.ToolExecutionFailed, "upstream said no")
			}
			return map[string]any{"args": json.RawMessage(args)}, nil
		}),
		"native:t.det": NativeInvoker(func(context.Context, json.RawMessage) (any, error) {
			r.detN.Add(1)
			return map[string]any{"v": r.det.Load()}, nil
		}),
	}
	r.setPolicy(t, replayPolicy)
	return r
}

func (r *replayRig) setPolicy(t *testing.T, src string) {
	t.Helper()
	spec, err := policy.Parse("p.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	prog, err := policy.Compile(spec, policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r.p.Swap(&State{Catalog: r.snap, Policy: prog, Invokers: r.inv})
}

var (
	recorder = policy.Principal{ID: "alice", Tenant: "acme", Scopes: []string{"toolgate:record"}}
	noScope  = policy.Principal{ID: "bob", Tenant: "acme"}
)

// step is one call of a scripted run.
type step struct {
	id, parent, tool, args string
}

// run runs steps as run runID (recording it, or replaying replayOf) and
// returns the results by step id.
func (r *replayRig) run(t *testing.T, pr policy.Principal, runID, replayOf string, steps []step) map[string]*Result {
	t.Helper()
	out := map[string]*Result{}
	for _, s := range steps {
		c := Call{Tool: s.tool, Args: json.RawMessage(s.args), Principal: pr, RunID: runID, CallID: runID + "-" + s.id,
			Record: replayOf == "", ReplayOf: replayOf}
		if s.parent != "" {
			c.ParentCallID = runID + "-" + s.parent
		}
		res, err := r.p.Call(context.Background(), c)
		if err != nil {
			t.Fatalf("%s %s: %v", runID, s.id, err)
		}
		out[s.id] = res
	}
	return out
}

// TestRecordStoresRedactedContent: a recorded call's redacted arguments
// and result are in the store, bound by the receipt's resultHash, and
// never in the content-free events or the receipt.
func TestRecordStoresRedactedContent(t *testing.T) {
	r := newReplayRig(t)
	ctx := context.Background()
	res := r.run(t, recorder, "rec", "", []step{{"a", "", "native:t.idem", `{"q":"needle-in-args","password":"hunter2"}`}})["a"]
	if res.Status != audit.StatusOK {
		t.Fatalf("call: %+v", res)
	}
	rc, err := r.st.RecordedCall(ctx, "acme", res.CallID)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(rc.Args), "needle-in-args") || strings.Contains(string(rc.Args), "hunter2") || strings.Contains(string(rc.Result), "hunter2") {
		t.Errorf("stored args %s / result %s: want the redacted content", rc.Args, rc.Result)
	}
	rcpt, err := r.st.ReceiptByID(ctx, "acme", res.ReceiptID)
	if err != nil {
		t.Fatal(err)
	}
	if rc.ResultHash != rcpt.ResultHash || rc.ArgsHash != rcpt.RequestedArgsHash || rc.ReceiptID != rcpt.ReceiptID {
		t.Errorf("recording %+v does not bind to receipt %+v", rc, rcpt)
	}
	if h, err := audit.NewRedactor().ArgsHash(rc.Args); err != nil || h != rc.ArgsHash {
		t.Errorf("the stored redacted arguments hash to %s (%v), recorded argsHash %s", h, err, rc.ArgsHash)
	}
	if !rc.ResultRedacted && hashHex(rc.Result) != rcpt.ResultHash {
		t.Errorf("sha256(stored result) = %s, receipt resultHash %s", hashHex(rc.Result), rcpt.ResultHash)
	}
	evs, err := r.st.EventsByRun(ctx, "acme", "rec", -1, 0)
	if err != nil || len(evs) != 2 {
		t.Fatalf("events: %v %v", evs, err)
	}
	for _, ev := range evs {
		if strings.Contains(string(ev.Payload), "needle-in-args") {
			t.Errorf("content in a content-free event: %s", ev.Payload)
		}
	}
	body, _ := json.Marshal(rcpt)
	if strings.Contains(string(body), "needle-in-args") {
		t.Errorf("content in the receipt: %s", body)
	}
	// A call that does not ask to be recorded is not.
	plain, err := r.p.Call(ctx, Call{Tool: "native:t.idem", Args: json.RawMessage(`{}`), Principal: recorder})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.st.RecordedCall(ctx, "acme", plain.CallID); errcode.CodeOf(err) != errcode.NotFound {
		t.Errorf("an unrecorded call was stored: %v", err)
	}
}

// TestRecordNeedsScope: asking to record or to replay without
// audit.record_scope is refused (forbidden, reason record_scope), the
// refusal is recorded, and nothing is stored or invoked.
func TestRecordNeedsScope(t *testing.T) {
	r := newReplayRig(t)
	ctx := context.Background()
	for _, c := range []Call{
		{Tool: "native:t.idem", Principal: noScope, RunID: "nosc", CallID: "nosc-1", Record: true},
		{Tool: "native:t.idem", Principal: noScope, RunID: "nosc2", CallID: "nosc-2", ReplayOf: "whatever"},
	} {
		res, err := r.p.Call(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		if res.Status != audit.StatusForbidden || res.Err.Code != errcode.Forbidden || res.Err.Details["reason"] != "record_scope" || res.ReceiptID == "" {
			t.Errorf("%s: %+v, want a recorded forbidden with reason record_scope", c.CallID, res)
		}
		if _, err := r.st.RecordedCall(ctx, "acme", c.CallID); errcode.CodeOf(err) != errcode.NotFound {
			t.Errorf("%s was stored: %v", c.CallID, err)
		}
	}
	if r.idem.Load() != 0 {
		t.Errorf("the tool ran %d times", r.idem.Load())
	}
}

// TestReplayAnswersFromRecording: non-deterministic and idempotent tools
// are answered from the recording without being invoked, with the
// recorded durationMs (not re-measured); a deterministic tool runs again;
// an upstream error and a policy denial replay unchanged.
func TestReplayAnswersFromRecording(t *testing.T) {
	r := newReplayRig(t)
	ctx := context.Background()
	steps := []step{
		{"a", "", "native:t.rand", `{"x":1,"y":2}`},
		{"b", "a", "native:t.idem", `{"k":"v"}`},
		{"c", "b", "native:t.det", `{}`},
		{"d", "", "native:t.idem", `{"fail":true}`},
		{"e", "", "native:t.rand", `{"block":true}`},
	}
	recd := r.run(t, recorder, "rec", "", steps)
	if recd["d"].Status != audit.StatusError || recd["e"].Status != audit.StatusForbidden {
		t.Fatalf("recording: d %+v, e %+v", recd["d"], recd["e"])
	}
	randN, idemN, detN := r.rand.Load(), r.idem.Load(), r.detN.Load()
	// Key order differs: the argsHash (RFC 8785) is the same.
	steps[0].args = `{"y":2,"x":1}`
	rep := r.run(t, recorder, "rep", "rec", steps)
	if r.rand.Load() != randN || r.idem.Load() != idemN {
		t.Errorf("replayed non-deterministic/idempotent calls reached the tool: rand %d→%d, idem %d→%d", randN, r.rand.Load(), idemN, r.idem.Load())
	}
	if r.detN.Load() != detN+1 {
		t.Errorf("the deterministic tool ran %d times on replay, want 1", r.detN.Load()-detN)
	}
	for _, id := range []string{"a", "b", "c", "d", "e"} {
		a, b := recd[id], rep[id]
		if a.Status != b.Status || string(a.Output) != string(b.Output) || a.RequestedArgsHash != b.RequestedArgsHash {
			t.Errorf("%s: recorded %s %s, replayed %s %s", id, a.Status, a.Output, b.Status, b.Output)
		}
		if (a.Err == nil) != (b.Err == nil) || (a.Err != nil && (a.Err.Code != b.Err.Code || a.Err.Message != b.Err.Message)) {
			t.Errorf("%s: recorded error %v, replayed %v", id, a.Err, b.Err)
		}
	}
	if rep["e"].Err.Code != errcode.Forbidden || rep["e"].Decision.RuleID != "no-block" {
		t.Errorf("denied call replayed as %+v", rep["e"])
	}

	// The recorded durationMs is reused: a recording that says 4242 ms
	// answers 4242 ms, in the result and in the receipt.
	if err := r.st.AppendRecordedCall(ctx, &store.RecordedCall{Tenant: "acme", RunID: "slow", CallID: "slow-1", Principal: "alice",
		ToolID: "native:t.rand", Effect: "allow", ArgsHash: recd["a"].RequestedArgsHash, Args: json.RawMessage(`{"x":1,"y":2}`),
		Status: "ok", Result: json.RawMessage(`{"n":7}`), ResultHash: hashHex([]byte(`{"n":7}`)), Ran: true, DurationMs: 4242,
		StartedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	slow := r.run(t, recorder, "slow-rep", "slow", steps[:1])["a"]
	rcpt, err := r.st.ReceiptByID(ctx, "acme", slow.ReceiptID)
	if err != nil {
		t.Fatal(err)
	}
	if slow.DurationMs != 4242 || rcpt.DurationMs == nil || *rcpt.DurationMs != 4242 || string(slow.Output) != `{"n":7}` || rcpt.ResultHash != hashHex([]byte(`{"n":7}`)) {
		t.Errorf("replayed durationMs %d, receipt %v, output %s: want the recorded 4242 and result", slow.DurationMs, rcpt.DurationMs, slow.Output)
	}
}

// TestReplayDivergence: each kind of mismatch answers status error, code
// replay_divergence, with details naming the recorded and the new call
// and what differed; the divergence is recorded (events and receipt).
func TestReplayDivergence(t *testing.T) {
	base := []step{
		{"a", "", "native:t.rand", `{"q":1}`},
		{"b", "a", "native:t.idem", `{"q":2}`},
		{"c", "", "native:t.det", `{}`},
	}
	for _, tc := range []struct {
		name    string
		steps   []step
		change  func(r *replayRig, t *testing.T)
		at      string // the step that diverges
		differs string
		recID   string // the recorded call named, "" for none
	}{
		{name: "tool", steps: []step{base[0], base[1], {"c", "", "native:t.idem", `{}`}}, at: "c", differs: "toolId", recID: "rec-c"},
		{name: "argsHash", steps: []step{{"a", "", "native:t.rand", `{"q":9}`}, base[1], base[2]}, at: "a", differs: "argsHash", recID: "rec-a"},
		{name: "order", steps: []step{base[2], base[0], base[1]}, at: "c", differs: "order", recID: "rec-a"},
		{name: "extra call", steps: []step{base[0], base[1], base[2], {"d", "", "native:t.rand", `{}`}}, at: "d", differs: "order"},
		{name: "parent", steps: []step{base[0], {"b", "zz", "native:t.idem", `{"q":2}`}}, at: "b", differs: "parentCallId"},
		{name: "result hash", steps: base, change: func(r *replayRig, _ *testing.T) { r.det.Store("changed") }, at: "c", differs: "resultHash", recID: "rec-c"},
		{name: "allowed then, denied now", steps: base, change: func(r *replayRig, t *testing.T) {
			r.setPolicy(t, replayPolicy+"- {id: no-det, effect: deny, tools: ['native:t.det']}\n")
		}, at: "c", differs: "decision", recID: "rec-c"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newReplayRig(t)
			r.run(t, recorder, "rec", "", base)
			if tc.change != nil {
				tc.change(r, t)
			}
			rep := r.run(t, recorder, "rep", "rec", tc.steps)
			checkDivergence(t, r, rep[tc.at], tc.differs, "rep-"+tc.at, tc.recID)
			for id, res := range rep {
				if id != tc.at && tc.name != "order" && res.Err != nil && res.Err.Code == errcode.ReplayDivergence {
					t.Errorf("%s also diverged: %v", id, res.Err)
				}
			}
		})
	}
	t.Run("denied then, allowed now", func(t *testing.T) {
		r := newReplayRig(t)
		r.setPolicy(t, replayPolicy+"- {id: no-det, effect: deny, tools: ['native:t.det']}\n")
		r.run(t, recorder, "rec", "", base)
		r.setPolicy(t, replayPolicy)
		detN := r.detN.Load()
		rep := r.run(t, recorder, "rep", "rec", base)
		checkDivergence(t, r, rep["c"], "decision", "rep-c", "rec-c")
		if r.detN.Load() != detN {
			t.Errorf("a call denied in the recording ran on replay")
		}
	})
	t.Run("another principal without the readers scope", func(t *testing.T) {
		r := newReplayRig(t)
		r.run(t, recorder, "rec", "", base)
		carol := policy.Principal{ID: "carol", Tenant: "acme", Scopes: []string{"toolgate:record"}}
		if res := r.run(t, carol, "rep", "rec", base[:1])["a"]; res.Err == nil || res.Err.Code != errcode.NotFound {
			t.Errorf("carol replaying alice's run: %+v, want not_found", res)
		}
		carol.Scopes = append(carol.Scopes, "toolgate:audit")
		if res := r.run(t, carol, "rep2", "rec", base[:1])["a"]; res.Status != audit.StatusOK || r.rand.Load() != 1 {
			t.Errorf("carol with the readers scope: %+v (tool ran %d times)", res, r.rand.Load())
		}
	})
	t.Run("another tenant", func(t *testing.T) {
		r := newReplayRig(t)
		r.run(t, recorder, "rec", "", base)
		evil := policy.Principal{ID: "mallory", Tenant: "evil", Scopes: []string{"toolgate:record"}}
		res := r.run(t, evil, "rep", "rec", base[:1])["a"]
		if res.Err == nil || res.Err.Code != errcode.NotFound || r.rand.Load() != 1 {
			t.Errorf("replay of another tenant's run: %+v (tool ran %d times)", res, r.rand.Load())
		}
	})
}

func checkDivergence(t *testing.T, r *replayRig, res *Result, differs, newID, recID string) {
	t.Helper()
	if res == nil || res.Status != audit.StatusError || res.Err == nil || res.Err.Code != errcode.ReplayDivergence {
		t.Fatalf("result %+v, want status error replay_divergence", res)
	}
	d := res.Err.Details
	if d["differs"] != differs || d["replayOf"] != "rec" {
		t.Errorf("details %v: want differs %q", d, differs)
	}
	if n, _ := d["new"].(map[string]any); n == nil || n["callId"] != newID {
		t.Errorf("details.new %v: want callId %s", d["new"], newID)
	}
	rec, _ := d["recorded"].(map[string]any)
	if recID == "" && rec != nil || recID != "" && (rec == nil || rec["callId"] != recID) {
		t.Errorf("details.recorded %v: want callId %q", d["recorded"], recID)
	}
	rcpt, err := r.st.ReceiptByID(context.Background(), "acme", res.ReceiptID)
	if err != nil || rcpt.Error == nil || rcpt.Error.Code != string(errcode.ReplayDivergence) {
		t.Errorf("receipt of the divergence: %+v %v", rcpt, err)
	}
	evs, _ := r.st.EventsByRun(context.Background(), "acme", "rep", -1, 0)
	found := false
	for _, ev := range evs {
		if ev.Type == audit.TypeToolReturned && strings.Contains(string(ev.Payload), fmt.Sprintf("%q", newID)) && strings.Contains(string(ev.Payload), "replay_divergence") {
			found = true
		}
	}
	if !found {
		t.Errorf("no agent.toolReturned with replay_divergence for %s", newID)
	}
}

// TestRecordByToolClass: a tool classified record: true (catalog
// ToolDescriptor.Record) is recorded whoever calls it, without the record
// scope and without asking.
func TestRecordByToolClass(t *testing.T) {
	r := newReplayRig(t)
	var tools []catalog.Tool
	for _, tl := range r.snap.Tools() {
		c := tl.Clone()
		if c.Descriptor.ToolID == "native:t.idem" {
			c.Descriptor.Record = true
		}
		tools = append(tools, c)
	}
	snap, err := catalog.NewSnapshot(tools, catalog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r.snap = snap
	r.setPolicy(t, replayPolicy)
	ctx := context.Background()
	classed, err := r.p.Call(ctx, Call{Tool: "native:t.idem", Args: json.RawMessage(`{"k":1}`), Principal: noScope})
	if err != nil || classed.Status != audit.StatusOK {
		t.Fatalf("call: %+v %v", classed, err)
	}
	if rc, err := r.st.RecordedCall(ctx, "acme", classed.CallID); err != nil || rc.Principal != "bob" || rc.ReplayPolicy != "idempotent" {
		t.Errorf("a record: true tool's call: %+v, %v; want it recorded", rc, err)
	}
	other, err := r.p.Call(ctx, Call{Tool: "native:t.rand", Args: json.RawMessage(`{}`), Principal: noScope})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.st.RecordedCall(ctx, "acme", other.CallID); errcode.CodeOf(err) != errcode.NotFound {
		t.Errorf("a tool without record: true was recorded: %v", err)
	}
}

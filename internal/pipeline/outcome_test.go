package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/catalog"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/ratelimit"
	"github.com/toolgate/toolgate/receipt"
	"github.com/toolgate/toolgate/store"
	"github.com/toolgate/toolgate/store/memstore"
)

// countingOutcomes counts the combined writes of a store.ReceiptLog.
type countingOutcomes struct {
	OutcomeLog
	n atomic.Int64
}

func (c *countingOutcomes) AppendOutcome(ctx context.Context, events []*audit.Event, r *receipt.Receipt) error {
	c.n.Add(1)
	return c.OutcomeLog.AppendOutcome(ctx, events, r)
}

func testPipeline(t *testing.T, events audit.Log, receipts ReceiptLog) *Pipeline {
	t.Helper()
	p, err := New(Options{Limiter: ratelimit.NewMemory(ratelimit.MemoryOptions{}), Events: events, Receipts: receipts})
	if err != nil {
		t.Fatal(err)
	}
	spec, err := policy.Parse("p.yaml", []byte("rules:\n- {id: all, effect: allow, tools: ['native:text.echo']}\n"))
	if err != nil {
		t.Fatal(err)
	}
	prog, err := policy.Compile(spec, policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	tools := []catalog.Tool{
		{Descriptor: catalog.ToolDescriptor{ToolID: "native:text.echo", Source: catalog.SourceHostExtension, SafetyTier: catalog.TierRead}, Transport: catalog.TransportNative, Name: "text.echo"},
		{Descriptor: catalog.ToolDescriptor{ToolID: "native:fs.delete", Source: catalog.SourceHostExtension, SafetyTier: catalog.TierWrite}, Transport: catalog.TransportNative, Name: "fs.delete"},
	}
	snap, err := catalog.NewSnapshot(tools, catalog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	echo := NativeInvoker(func(_ context.Context, args json.RawMessage) (any, error) { return args, nil })
	p.Swap(&State{Catalog: snap, Policy: prog, Invokers: map[string]Invoker{"native:text.echo": echo, "native:fs.delete": echo}})
	return p
}

// TestOutcomeOneWrite: with a store's EventLog and ReceiptLog, a call's
// toolReturned and receipt (and a refusal's toolCalled too) are recorded
// in one AppendOutcome.
func TestOutcomeOneWrite(t *testing.T) {
	ctx := context.Background()
	m, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	rl, ok := store.ReceiptLog(m).(OutcomeLog)
	if !ok {
		t.Fatal("store.ReceiptLog of a memstore is not an OutcomeLog")
	}
	counting := &countingOutcomes{OutcomeLog: rl}
	p := testPipeline(t, store.EventLog(m), counting)
	if p.outcomes == nil {
		t.Fatal("the pipeline does not use AppendOutcome")
	}
	alice := policy.Principal{ID: "alice", Tenant: "acme"}
	for _, tc := range []struct {
		tool   string
		status audit.Status
	}{{"native:text.echo", audit.StatusOK}, {"native:fs.delete", audit.StatusForbidden}} {
		before := counting.n.Load()
		res, err := p.Call(ctx, Call{Tool: tc.tool, Principal: alice, Args: json.RawMessage(`{"x":1}`)})
		if err != nil {
			t.Fatal(err)
		}
		if res.Status != tc.status {
			t.Fatalf("%s: status %s (%v), want %s", tc.tool, res.Status, res.Err, tc.status)
		}
		if n := counting.n.Load() - before; n != 1 {
			t.Fatalf("%s: %d AppendOutcome calls, want 1", tc.tool, n)
		}
		evs, err := m.EventsByRun(ctx, "acme", res.RunID, -1, 0)
		if err != nil || len(evs) != 2 || evs[0].Type != audit.TypeToolCalled || evs[1].Type != audit.TypeToolReturned || evs[1].Sequence != 1 {
			t.Fatalf("%s: run events %+v (%v), want toolCalled, toolReturned", tc.tool, evs, err)
		}
		r, err := m.ReceiptByID(ctx, "acme", res.ReceiptID)
		if err != nil || r.Status != string(tc.status) || r.CallID != res.CallID {
			t.Fatalf("%s: receipt %+v (%v)", tc.tool, r, err)
		}
	}
}

// TestOutcomeOtherEventLog: when the event log is not the receipt store's,
// the pipeline appends events and receipt separately.
func TestOutcomeOtherEventLog(t *testing.T) {
	m, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	other, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	mem := audit.NewMemoryLog()
	for _, events := range []audit.Log{mem, store.EventLog(other)} {
		p := testPipeline(t, events, store.ReceiptLog(m))
		if p.outcomes != nil {
			t.Fatalf("%T: the pipeline would write events to the receipt store", events)
		}
		res, err := p.Call(context.Background(), Call{Tool: "native:text.echo", Principal: policy.Principal{ID: "alice", Tenant: "acme"}})
		if err != nil || res.Status != audit.StatusOK {
			t.Fatalf("call: %+v, %v", res, err)
		}
		if _, err := m.ReceiptByID(context.Background(), "acme", res.ReceiptID); err != nil {
			t.Fatalf("receipt: %v", err)
		}
	}
	if n := mem.Len(); n != 2 {
		t.Fatalf("memory log holds %d events, want 2", n)
	}
}

// failingOutcomes fails every outcome write with an error that names the
// database, as a driver's connection error does.
type failingOutcomes struct{ OutcomeLog }

func (failingOutcomes) AppendOutcome(context.Context, []*audit.Event, *receipt.Receipt) error {
	return errors.New("failed to connect to `user=postgres database=test`: 127.0.0.1:5432: dial tcp: connection refused")
}

// TestOutcomeUnrecordedAfterRun: when the tool ran but its outcome cannot
// be recorded, the caller is told it ran (details.ran "yes", result
// withheld) and is not shown the store's error, which names the database;
// a call refused before it ran says the tool was not run.
func TestOutcomeUnrecordedAfterRun(t *testing.T) {
	m, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	rl := store.ReceiptLog(m).(OutcomeLog)
	p := testPipeline(t, store.EventLog(m), failingOutcomes{rl})
	var ran atomic.Int64
	st := p.State()
	st.Invokers = map[string]Invoker{"native:text.echo": NativeInvoker(func(_ context.Context, args json.RawMessage) (any, error) {
		ran.Add(1)
		return args, nil
	})}
	p.Swap(st)
	res, err := p.Call(context.Background(), Call{Tool: "native:text.echo", Principal: policy.Principal{ID: "alice", Tenant: "acme"}})
	if err != nil {
		t.Fatal(err)
	}
	if ran.Load() != 1 {
		t.Fatalf("the tool ran %d times, want 1", ran.Load())
	}
	if res.Err == nil || res.Err.Code != "audit_unavailable" || res.Err.Details["ran"] != "yes" || res.Output != nil || res.ReceiptID != "" {
		t.Fatalf("result %+v err %+v: want audit_unavailable with details.ran yes, no output and no receiptId (none was stored)", res, res.Err)
	}
	for _, leak := range []string{"postgres", "127.0.0.1", "dial tcp"} {
		if strings.Contains(res.Err.Message, leak) {
			t.Errorf("the caller's message names the store (%q): %s", leak, res.Err.Message)
		}
	}
}

package pipeline

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/metrics"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/store"
	"github.com/toolgate/toolgate/store/memstore"
)

// fakeRecorder notes what the pipeline records, as lines.
type fakeRecorder struct {
	mu    sync.Mutex
	lines []string
}

func (f *fakeRecorder) add(format string, a ...any) {
	f.mu.Lock()
	f.lines = append(f.lines, fmt.Sprintf(format, a...))
	f.mu.Unlock()
}
func (f *fakeRecorder) ToolCall(tool, transport, status string, _ time.Duration) {
	f.add("call %s %s %s", tool, transport, status)
}
func (f *fakeRecorder) PolicyDecision(effect, rule string, _ time.Duration) {
	f.add("decision %s %s", effect, rule)
}
func (f *fakeRecorder) UpstreamCall(server string, _ time.Duration) { f.add("upstream %s", server) }
func (f *fakeRecorder) StoreCommit(time.Duration)                   { f.add("commit") }
func (f *fakeRecorder) StoreUnavailable()                           { f.add("unavailable") }

var _ metrics.Recorder = (*fakeRecorder)(nil)

// TestMetricsRecorded: an allowed call records its decision, its durable
// outcome and the call; a call the store cannot record counts as store
// unavailable (and no commit); a denied call records its decision and the
// refusal; an unknown tool records nothing.
func TestMetricsRecorded(t *testing.T) {
	m, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	for _, c := range []struct {
		name     string
		receipts ReceiptLog
		tool     string
		want     []string
	}{
		{"ok", store.ReceiptLog(m), "native:text.echo", []string{"decision allow all", "commit", "call native:text.echo native ok"}},
		{"unrecorded", failingOutcomes{store.ReceiptLog(m).(OutcomeLog)}, "native:text.echo", []string{"decision allow all", "unavailable", "call native:text.echo native error"}},
		{"denied", store.ReceiptLog(m), "native:fs.delete", []string{"decision deny ", "commit", "call native:fs.delete native forbidden"}},
		{"unknown", store.ReceiptLog(m), "native:nope.x", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := testPipeline(t, store.EventLog(m), c.receipts)
			rec := &fakeRecorder{}
			p.m = rec // testPipeline's Options have no Metrics
			p.Call(context.Background(), Call{Tool: c.tool, Transport: "native", Principal: policy.Principal{ID: "alice", Tenant: "acme"}})
			if fmt.Sprint(rec.lines) != fmt.Sprint(c.want) {
				t.Errorf("recorded %q, want %q", rec.lines, c.want)
			}
		})
	}
}

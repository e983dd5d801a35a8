package metrics

import (
	"testing"
	"time"
)

// BenchmarkRecordCall is what the pipeline records for one allowed call:
// a decision and a call outcome.
func BenchmarkRecordCall(b *testing.B) {
	p := NewPrometheus()
	b.ReportAllocs()
	for b.Loop() {
		p.PolicyDecision("allow", "tenant", time.Microsecond)
		p.ToolCall("native:noop.run", "native", "ok", time.Millisecond)
	}
}

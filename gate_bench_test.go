package toolgate_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/toolgate/toolgate"
	"github.com/toolgate/toolgate/catalog"
	"github.com/toolgate/toolgate/internal/config"
	"github.com/toolgate/toolgate/internal/metrics"
	"github.com/toolgate/toolgate/internal/tracing"
)

// BenchmarkCall measures a full in-memory Call of a no-op native tool:
// resolve, decide (a policy with CEL conditions), rate limit, argsHash,
// agent.toolCalled + agent.toolReturned appended, receipt hashed and chained.
// Target: ≤ 15 µs/op (issue 2, acceptance 7).
func BenchmarkCall(b *testing.B) { benchCall(b, nil) }

// BenchmarkCallMetrics is BenchmarkCall with the Prometheus recorder
// `toolgate serve` uses (issue 16, acceptance 5: within 5 % of
// BenchmarkCall in the same run).
func BenchmarkCallMetrics(b *testing.B) { benchCall(b, metrics.NewPrometheus()) }

func benchCall(b *testing.B, m metrics.Recorder) {
	var rules strings.Builder
	rules.WriteString("rules:\n")
	for i := 0; i < 20; i++ {
		fmt.Fprintf(&rules, "  - {id: deny-%d, effect: deny, tools: [\"native:other%d.*\"], when: 'has(args.path) && args.path.startsWith(\"/etc\")'}\n", i, i)
	}
	rules.WriteString("  - {id: no-etc, effect: deny, tools: [\"native:*\"], when: 'has(args.path) && args.path.startsWith(\"/etc\")'}\n")
	rules.WriteString("  - {id: tenant, effect: allow, tools: [\"native:noop.*\"], when: 'principal.tenant == \"acme\"'}\n")
	rules.WriteString("ratelimits:\n  - {tools: [\"*\"], per: principal_tool, rate: 1000000000/s, burst: 1000000000}\n")
	prog := mustPolicy(b, rules.String())
	gw, err := toolgate.New(toolgate.Options{Policy: prog, Metrics: m})
	if err != nil {
		b.Fatal(err)
	}
	defer gw.Close()
	noop := func(context.Context, json.RawMessage) (any, error) { return json.RawMessage(`{"ok":true}`), nil }
	if err := gw.RegisterNative(catalog.ToolDescriptor{ToolID: "native:noop.run", Source: catalog.SourceHostExtension, SafetyTier: catalog.TierPure}, noop); err != nil {
		b.Fatal(err)
	}
	p := toolgate.Principal{ID: "alice", Tenant: "acme", Scopes: []string{"x"}}
	args := json.RawMessage(`{"path":"/tmp/report.txt","limit":10,"q":"quarterly numbers"}`)
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		res, err := gw.Call(ctx, toolgate.Call{Tool: "native:noop.run", Args: args, Principal: p, RunID: "bench"})
		if err != nil || res.Err != nil {
			b.Fatalf("%v %+v", err, res)
		}
	}
}

// BenchmarkCallTracing is BenchmarkCall with tracing off (no tracer: the
// gate as BenchmarkCall runs it) and on, exporting to a local OTLP/HTTP
// receiver through the real config path (internal/tracing.New: batch
// span processor, OTLP/HTTP protobuf exporter). Each call is three spans
// (execute_tool, toolgate.decide, toolgate.invoke); ns/op includes the
// exporter's background work (same process, 2 shared cores here). Issue 16 acceptance 5:
// the figures are in BENCHMARKS.md ("Issue 16.5 tracing").
func BenchmarkCallTracing(b *testing.B) {
	// The receiver reads and discards each export (decoding it here
	// would charge the receiver's work to the gate: same process).
	var posts atomic.Int64
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		posts.Add(1)
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer rcv.Close()
	prog := mustPolicy(b, "rules:\n  - {id: tenant, effect: allow, tools: [\"native:noop.*\"], when: 'principal.tenant == \"acme\"'}\n"+
		"ratelimits:\n  - {tools: [\"*\"], per: principal_tool, rate: 1000000000/s, burst: 1000000000}\n")
	noop := func(context.Context, json.RawMessage) (any, error) { return json.RawMessage(`{"ok":true}`), nil }
	for _, on := range []bool{false, true} {
		name := "off"
		if on {
			name = "on-otlp-http"
		}
		b.Run(name, func(b *testing.B) {
			var tr trace.Tracer
			if on {
				tp, err := tracing.New(context.Background(), config.Tracing{Enabled: true, Endpoint: rcv.URL + "/v1/traces", Protocol: "http"}, tracing.Options{})
				if err != nil {
					b.Fatal(err)
				}
				defer tp.Shutdown(context.Background())
				tr = tp.Tracer()
				posts.Store(0)
			}
			gw, err := toolgate.New(toolgate.Options{Policy: prog, Tracer: tr})
			if err != nil {
				b.Fatal(err)
			}
			defer gw.Close()
			if err := gw.RegisterNative(catalog.ToolDescriptor{ToolID: "native:noop.run", Source: catalog.SourceHostExtension, SafetyTier: catalog.TierPure}, noop); err != nil {
				b.Fatal(err)
			}
			p := toolgate.Principal{ID: "alice", Tenant: "acme", Scopes: []string{"x"}}
			args := json.RawMessage(`{"path":"/tmp/report.txt","limit":10,"q":"quarterly numbers"}`)
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				res, err := gw.Call(ctx, toolgate.Call{Tool: "native:noop.run", Args: args, Principal: p, RunID: "bench"})
				if err != nil || res.Err != nil {
					b.Fatalf("%v %+v", err, res)
				}
			}
			b.StopTimer()
			if on && posts.Load() == 0 && b.N > 4096 {
				b.Fatal("the receiver got no export: tracing did not run")
			}
		})
	}
}

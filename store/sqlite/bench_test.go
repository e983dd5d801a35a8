package sqlite_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/receipt"
	"github.com/toolgate/toolgate/store/sqlite"
)

// callers is the number of concurrent callers of the benchmarks.
const callers = 64

// benchParallel runs op from 64 goroutines (b.SetParallelism over
// GOMAXPROCS), each call one durable append, and reports the throughput
// (unit/s) and the p50 and p99 of the wait for durability.
func benchParallel(b *testing.B, unit string, op func(g, i int) error) {
	procs := runtime.GOMAXPROCS(0)
	par := (callers + procs - 1) / procs
	b.SetParallelism(par)
	var (
		mu   sync.Mutex
		lats []time.Duration
		gid  atomic.Int64
	)
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		g := int(gid.Add(1))
		local := make([]time.Duration, 0, 1024)
		for i := 0; pb.Next(); i++ {
			t := time.Now()
			if err := op(g, i); err != nil {
				b.Error(err)
				return
			}
			local = append(local, time.Since(t))
		}
		mu.Lock()
		lats = append(lats, local...)
		mu.Unlock()
	})
	elapsed := time.Since(start)
	b.StopTimer()
	if len(lats) == 0 {
		return
	}
	slices.Sort(lats)
	b.ReportMetric(float64(len(lats))/elapsed.Seconds(), unit+"/s")
	b.ReportMetric(float64(lats[len(lats)*50/100].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lats[len(lats)*99/100].Microseconds()), "p99-µs")
}

func openBench(b *testing.B) *sqlite.Store {
	s, err := sqlite.Open(context.Background(), filepath.Join(b.TempDir(), "bench.db"), sqlite.Options{Signer: testSigner()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s
}

// BenchmarkAppendEvents64: 64 concurrent callers each append one event per
// op (synchronous=normal), as the pipeline appends agent.toolCalled and
// agent.toolReturned; each caller is its own run.
func BenchmarkAppendEvents64(b *testing.B) {
	benchEvents(b, nil)
}

// BenchmarkAppendEvents64OrderedIDs is BenchmarkAppendEvents64 with event
// ids that start with their creation time in milliseconds ("ev_" + 12 hex
// digits of Unix ms + 20 random hex digits, the shape audit.NewEventID
// has) instead of 128 random bits: the store's unique index on eventId then
// takes appends instead of random inserts, which is most of the writer's
// cost per event.
func BenchmarkAppendEvents64OrderedIDs(b *testing.B) {
	benchEvents(b, orderedID)
}

// orderedID returns a time-ordered event id: "ev_", 12 hex digits of Unix
// milliseconds, 20 random hex digits.
func orderedID() string {
	var raw [16]byte
	ms := uint64(time.Now().UnixMilli())
	for i := range 6 {
		raw[i] = byte(ms >> (40 - 8*i))
	}
	_, _ = rand.Read(raw[6:])
	return "ev_" + hex.EncodeToString(raw[:])
}

func benchEvents(b *testing.B, id func() string) {
	s := openBench(b)
	payload := json.RawMessage(`{"toolId":"native:text.echo","argsHash":"9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08","principal":"alice","transport":"native"}`)
	benchParallel(b, "events", func(g, i int) error {
		ev, err := audit.NewEvent(fmt.Sprintf("run_%d", g), audit.TypeToolCalled, payload, "", time.Now())
		if err != nil {
			return err
		}
		if id != nil {
			ev.EventID = id()
		}
		ev.Tenant = "acme"
		return s.AppendEvents(context.Background(), ev)
	})
}

// BenchmarkAppendReceipts64: 64 concurrent callers each append one receipt
// per op, with random receipt ids as the pipeline makes them ("rcpt_" + 32
// random hex digits); each batch also signs and stores one checkpoint.
func BenchmarkAppendReceipts64(b *testing.B) {
	benchReceipts(b, func() string { return "rcpt_" + randomHex(16) })
}

// BenchmarkAppendReceipts64OrderedIDs is BenchmarkAppendReceipts64 with
// time-ordered receipt ids (see BenchmarkAppendEvents64OrderedIDs).
func BenchmarkAppendReceipts64OrderedIDs(b *testing.B) {
	benchReceipts(b, func() string { return "rcpt_" + orderedID()[3:] })
}

func randomHex(n int) string {
	raw := make([]byte, n)
	_, _ = rand.Read(raw)
	return hex.EncodeToString(raw)
}

func benchReceipts(b *testing.B, id func() string) {
	s := openBench(b)
	hash := "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
	benchParallel(b, "receipts", func(g, i int) error {
		d := int64(1)
		r := &receipt.Receipt{
			ReceiptID: id(), CallID: "call_" + randomHex(16), RunID: fmt.Sprintf("run_%d", g), AgentID: "agent.planner",
			Principal: "alice", Tenant: "acme", ToolID: "native:text.echo", Transport: "native",
			Decision:          receipt.Decision{Effect: "allow", RuleID: "r", PolicyVersion: "v1"},
			RequestedArgsHash: hash, ExecutedArgsHash: hash, Status: receipt.StatusOK, StartedAt: time.Now(), DurationMs: &d,
		}
		return s.AppendReceipt(context.Background(), r)
	})
}

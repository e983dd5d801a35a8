package postgres_test

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolgate/toolgate"
	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/catalog"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/receipt"
	"github.com/toolgate/toolgate/store"
	"github.com/toolgate/toolgate/store/postgres"
	"github.com/toolgate/toolgate/store/sqlite"
)

// The benchmarks of this file measure each store backend against the
// other in one run (sub-benchmarks sqlite and postgres): the 2 cores of
// the machine are shared, so only figures taken side by side compare.
// scripts/bench.sh scale runs them alternately and reports medians.

// benchCallers is the number of concurrent callers (as in
// store/sqlite's BenchmarkAppendEvents64).
const benchCallers = 64

// backends opens each store under test, closed when b ends.
var backends = []struct {
	name string
	open func(b *testing.B, key ed25519.PrivateKey) store.Store
}{
	{"sqlite", func(b *testing.B, key ed25519.PrivateKey) store.Store {
		s, err := sqlite.Open(context.Background(), filepath.Join(b.TempDir(), "bench.db"), sqlite.Options{Signer: receipt.NewSigner(key)})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { s.Close() })
		return s
	}},
	{"postgres", func(b *testing.B, key ed25519.PrivateKey) store.Store {
		s, err := postgres.Open(context.Background(), newSchema(b), postgres.Options{Signer: receipt.NewSigner(key)})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { s.Close() })
		return s
	}},
}

// parallel runs op from benchCallers goroutines until b.N ops are done
// (each op returns only once durable) and reports the throughput (unit/s)
// and the p50 and p99 of one op's latency.
func parallel(b *testing.B, s store.Store, unit string, op func(g, i int) error) {
	procs := runtime.GOMAXPROCS(0)
	b.SetParallelism((benchCallers + procs - 1) / procs)
	var (
		mu   sync.Mutex
		lats []time.Duration
		gid  atomic.Int64
	)
	b.ReportAllocs()
	b.ResetTimer()
	commits := commitsOf(s)
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
	if commits >= 0 {
		b.ReportMetric(float64(commitsOf(s)-commits)/float64(len(lats)), "commits/op")
	}
	slices.Sort(lats)
	b.ReportMetric(float64(len(lats))/elapsed.Seconds(), unit+"/s")
	b.ReportMetric(float64(lats[len(lats)*50/100].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lats[len(lats)*99/100].Microseconds()), "p99-µs")
}

// commitsOf is the transactions s committed so far, -1 if not known (SQLite).
func commitsOf(s store.Store) int64 {
	if p, ok := s.(*postgres.Store); ok {
		return postgres.Commits(p)
	}
	return -1
}

// BenchmarkAppendEvents64 (issue 14, acceptance 5: target ≥ 10,000
// events/s on PostgreSQL): 64 concurrent callers each append one
// agent.toolCalled event per op, each caller its own run, and wait until
// it is committed; the writer's group commit shares transactions among
// them.
func BenchmarkAppendEvents64(b *testing.B) {
	payload := json.RawMessage(`{"toolId":"native:text.echo","argsHash":"9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08","principal":"alice","transport":"native"}`)
	for _, be := range backends {
		b.Run(be.name, func(b *testing.B) {
			s := be.open(b, ed25519.NewKeyFromSeed(make([]byte, 32)))
			parallel(b, s, "events", func(g, i int) error {
				ev, err := audit.NewEvent(fmt.Sprintf("run_%d", g), audit.TypeToolCalled, payload, "", time.Now())
				if err != nil {
					return err
				}
				ev.Tenant = "acme"
				return s.AppendEvents(context.Background(), ev)
			})
		})
	}
}

// BenchmarkCallDurable64 (issue 14, acceptance 5: target ≥ 3,000 full
// durable calls/s on PostgreSQL): 64 concurrent callers each make full
// toolgate.Call of a no-op native tool through the gateway pipeline
// (policy decision, argsHash, agent.toolCalled committed before the tool
// runs, agent.toolReturned and the linked receipt committed before the
// result returns), each caller its own run.
func BenchmarkCallDurable64(b *testing.B) {
	prog, err := policy.Load("bench.yaml", []byte("rules: [{id: all, effect: allow, tools: ['*']}]"), policy.Options{})
	if err != nil {
		b.Fatal(err)
	}
	p := toolgate.Principal{ID: "alice", Tenant: "acme", Scopes: []string{"x"}}
	noop := func(context.Context, json.RawMessage) (any, error) { return json.RawMessage(`{"ok":true}`), nil }
	for _, be := range backends {
		b.Run(be.name, func(b *testing.B) {
			key := ed25519.NewKeyFromSeed(make([]byte, 32))
			s := be.open(b, key)
			gw, err := toolgate.New(toolgate.Options{Policy: prog, SigningKey: key, Events: store.EventLog(s), Receipts: store.ReceiptLog(s)})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { gw.Close() })
			if err := gw.RegisterNative(catalog.ToolDescriptor{ToolID: "native:noop.run", Source: catalog.SourceHostExtension, SafetyTier: catalog.TierPure}, noop); err != nil {
				b.Fatal(err)
			}
			parallel(b, s, "calls", func(g, i int) error {
				res, err := gw.Call(context.Background(), toolgate.Call{Tool: "native:noop.run", Principal: p, RunID: fmt.Sprintf("run_%d", g)})
				if err != nil {
					return err
				}
				if res.Err != nil || res.Status != audit.StatusOK {
					return fmt.Errorf("call: status %s, %v", res.Status, res.Err)
				}
				return nil
			})
		})
	}
}

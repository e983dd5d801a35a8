package toolgate_test

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/toolgate/toolgate"
	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/catalog"
	"github.com/toolgate/toolgate/receipt"
	"github.com/toolgate/toolgate/store"
	"github.com/toolgate/toolgate/store/sqlite"
)

// openDurable returns a gateway whose events and receipts go to a SQLite
// store signed with the gateway's own key.
func openDurable(tb testing.TB, path string) (*toolgate.Gateway, *sqlite.Store) {
	tb.Helper()
	key, _, err := receipt.LoadOrCreateKey(filepath.Join(filepath.Dir(path), "toolgate.key"))
	if err != nil {
		tb.Fatal(err)
	}
	st, err := sqlite.Open(context.Background(), path, sqlite.Options{Signer: receipt.NewSigner(key)})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { st.Close() })
	gw, err := toolgate.New(toolgate.Options{Policy: mustPolicy(tb, allowAllPolicy), SigningKey: key,
		Events: store.EventLog(st), Receipts: store.ReceiptLog(st)})
	if err != nil {
		tb.Fatal(err)
	}
	noop := func(context.Context, json.RawMessage) (any, error) { return json.RawMessage(`{"ok":true}`), nil }
	if err := gw.RegisterNative(catalog.ToolDescriptor{ToolID: "native:noop.run", Source: catalog.SourceHostExtension, SafetyTier: catalog.TierPure}, noop); err != nil {
		tb.Fatal(err)
	}
	return gw, st
}

// The gate on the SQLite store: concurrent calls are all durable (events per
// run numbered from 0, receipts exported from the store verify offline),
// also after reopening the database.
func TestGatewayOnSQLiteStore(t *testing.T) {
	path := filepath.Join(t.TempDir(), "toolgate.db")
	for round := 0; round < 2; round++ {
		gw, st := openDurable(t, path)
		var wg sync.WaitGroup
		for i := 0; i < 16; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for j := 0; j < 10; j++ {
					res, err := gw.Call(context.Background(), toolgate.Call{Tool: "native:noop.run", Principal: alice, RunID: "durable"})
					if err != nil || res.Status != audit.StatusOK {
						t.Errorf("call: %v %+v", err, res)
					}
				}
			}()
		}
		wg.Wait()
		evs, err := st.EventsByRun(context.Background(), "acme", "durable", -1, 1000)
		if err != nil {
			t.Fatal(err)
		}
		if want := 320 * (round + 1); len(evs) != want {
			t.Fatalf("round %d: %d events, want %d", round, len(evs), want)
		}
		for i, e := range evs {
			if e.Sequence != int64(i) {
				t.Fatalf("event %d has sequence %d", i, e.Sequence)
			}
		}
		var buf bytes.Buffer
		if err := st.ExportReceipts(context.Background(), &buf, st.ChainID(), 0); err != nil {
			t.Fatal(err)
		}
		rep, err := receipt.Verify(&buf, gw.PublicKey(), receipt.VerifyOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if rep.Receipts != 160*(round+1) {
			t.Fatalf("round %d: %d receipts", round, rep.Receipts)
		}
		st.Close()
	}
}

// BenchmarkCallDurable64 is a full Call with events and receipt durable in
// SQLite (synchronous=normal, group commit), 64 concurrent callers. It
// reports calls/s and the p50 and p99 latency of a call, which is almost
// all wait for durability (two group commits: agent.toolCalled before the
// tool runs, agent.toolReturned and the receipt after).
func BenchmarkCallDurable64(b *testing.B) {
	gw, _ := openDurable(b, filepath.Join(b.TempDir(), "toolgate.db"))
	procs := runtime.GOMAXPROCS(0)
	b.SetParallelism((64 + procs - 1) / procs)
	var (
		mu   sync.Mutex
		lats []time.Duration
	)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		local := make([]time.Duration, 0, 1024)
		for pb.Next() {
			t := time.Now()
			res, err := gw.Call(context.Background(), toolgate.Call{Tool: "native:noop.run", Principal: alice, RunID: "bench"})
			if err != nil || res.Err != nil {
				b.Errorf("%v %+v", err, res)
				return
			}
			local = append(local, time.Since(t))
		}
		mu.Lock()
		lats = append(lats, local...)
		mu.Unlock()
	})
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "calls/s")
	if len(lats) > 0 {
		slices.Sort(lats)
		b.ReportMetric(float64(lats[len(lats)*50/100].Microseconds()), "p50-µs")
		b.ReportMetric(float64(lats[len(lats)*99/100].Microseconds()), "p99-µs")
	}
}

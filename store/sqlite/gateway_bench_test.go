//go:build unix

package sqlite

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/receipt"
)

// outcomeAppender is the combined write of a call's outcome, when the store
// has it.
type outcomeAppender interface {
	AppendOutcome(ctx context.Context, events []*audit.Event, r *receipt.Receipt) error
}

// BenchmarkGatewayCalls models the gateway's writes per tool call: each of
// N callers loops over calls, each call appending agent.toolCalled (one
// event, durable before the tool runs), yielding the processor (the tool),
// (tool 0) or sleeping for tool (a tool that takes time without the
// gateway's CPU, which spreads the callers' arrivals as in toolgate serve),
// then agent.toolReturned and the call's receipt (one combined write when
// the store offers AppendOutcome, two sequential writes otherwise). It
// reports the process CPU (user+sys, getrusage) per call, the commits per
// call and the calls per second. The process CPU includes the callers'
// own work (building events and receipts), the same for every version of
// the store, but not the simulated gateway work ("serve": 200 µs of
// hashing per call around a 500 µs tool, which spreads arrivals at the
// writer as toolgate serve does).
func BenchmarkGatewayCalls(b *testing.B) {
	for _, m := range []struct {
		name string
		tool time.Duration
		work int
	}{{"yield", 0, 0}, {"serve", 500 * time.Microsecond, 200}} {
		for _, n := range []int{1, 16} {
			b.Run(fmt.Sprintf("%s/N=%d", m.name, n), func(b *testing.B) { benchGateway(b, n, m.tool, m.work) })
		}
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// busy burns CPU: n rounds of hashing 1 KiB (about 1 µs each), the
// gateway's own work per call (HTTP, JSON-RPC, policy).
func busy(n int) {
	var buf [1024]byte
	for range n {
		sum := sha256.Sum256(buf[:])
		buf[0] ^= sum[0]
	}
	sink.Add(uint64(buf[0]))
}

var sink atomic.Uint64

// busyCost is the CPU time of busy(n), measured alone.
func busyCost(n int) time.Duration {
	if n == 0 {
		return 0
	}
	const rounds = 200
	c0 := cpuTime()
	for range rounds {
		busy(n)
	}
	return (cpuTime() - c0) / rounds
}

func benchGateway(b *testing.B, callers int, tool time.Duration, work int) {
	workCPU := busyCost(work)
	s := openAt(b, tempDB(b), Options{})
	var commits atomic.Int64
	s.w.batchHook = func(int) { commits.Add(1) }
	ctx := context.Background()
	hash := sha("args")
	called := json.RawMessage(`{"agentId":"agent.planner","toolName":"native:text.echo","callId":"call_x","argsHash":"` + hash + `","principal":"alice","transport":"mcp"}`)
	returned := json.RawMessage(`{"agentId":"agent.planner","toolName":"native:text.echo","callId":"call_x","status":"ok","durationMs":1}`)
	outcome, combined := any(s).(outcomeAppender)
	call := func(g, i int) error {
		busy(work / 2)
		run := fmt.Sprintf("run_%d_%d", g, i)
		ev, err := audit.NewEvent(run, audit.TypeToolCalled, called, "", time.Now())
		if err != nil {
			return err
		}
		ev.Tenant = "acme"
		if err := s.AppendEvents(ctx, ev); err != nil {
			return err
		}
		if tool > 0 {
			time.Sleep(tool) // the tool; no CPU
		} else {
			runtime.Gosched()
		}
		busy(work - work/2)
		ret, err := audit.NewEvent(run, audit.TypeToolReturned, returned, ev.EventID, time.Now())
		if err != nil {
			return err
		}
		ret.Tenant = "acme"
		d := int64(1)
		r := &receipt.Receipt{
			ReceiptID: "rcpt_" + audit.NewEventID()[3:], CallID: fmt.Sprintf("call_%d_%d", g, i), RunID: run, AgentID: "agent.planner",
			Principal: "alice", Tenant: "acme", ToolID: "native:text.echo", Transport: "mcp",
			Decision:          receipt.Decision{Effect: "allow", RuleID: "r", PolicyVersion: "v1"},
			RequestedArgsHash: hash, ExecutedArgsHash: hash, ResultHash: hash, Status: receipt.StatusOK, StartedAt: time.Now(), DurationMs: &d,
		}
		if combined {
			return outcome.AppendOutcome(ctx, []*audit.Event{ret}, r)
		}
		if err := s.AppendEvents(ctx, ret); err != nil {
			return err
		}
		return s.AppendReceipt(ctx, r)
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	commits.Store(0)
	cpu0, t0 := cpuTime(), time.Now()
	for g := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1)
				if i > int64(b.N) {
					return
				}
				if err := call(g, int(i)); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed, cpu := time.Since(t0), cpuTime()-cpu0
	b.StopTimer()
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N)-float64(workCPU.Nanoseconds()), "cpu-ns/call")
	b.ReportMetric(float64(commits.Load())/float64(b.N), "commits/call")
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "calls/s")
}

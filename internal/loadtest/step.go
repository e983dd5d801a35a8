package loadtest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// callTimeout bounds one tools/call.
const callTimeout = 30 * time.Second

// target is where a step sends its calls.
type target struct {
	name     string // "direct" or "toolgate"
	sessions string // the gateway's sessions mode; "" for direct
	store    string // the gateways' store driver; "" for direct
	// urls are the MCP endpoints: one, or one per replica (client session
	// i goes to urls[i % len(urls)], so the load is spread evenly).
	urls []string
	key  string // bearer API key; "" for none
	pids []int  // the gateway children whose CPU is measured (summed); none for direct or in process
}

// Result is one measured step.
type Result struct {
	Target      string        // "direct" or "toolgate"
	Sessions    string        // per_client or shared (toolgate); "" for direct
	Store       string        // sqlite or postgres (toolgate); "" for direct
	Replicas    int           // toolgate serve processes sharing the load (toolgate); 0 for direct
	Concurrency int           // client sessions, one worker each (spread over the replicas)
	Protocol    string        // the MCP protocol version negotiated
	Calls       int           // calls that started and ended inside the measured window
	Elapsed     time.Duration // the measured window
	PerSec      float64
	P50, P99    time.Duration
	// GatewayCPU is the gateway children's user+system CPU over the
	// window (all replicas together); -1 when not measured (direct, or
	// the gateway runs in process).
	GatewayCPU time.Duration
	// LoaderCPU is this process's CPU over the window: clients and echo
	// server (and the gateway too, in process).
	LoaderCPU time.Duration
}

// GatewayCPUPerCall is GatewayCPU/Calls; -1 when not measured.
func (r Result) GatewayCPUPerCall() time.Duration {
	if r.GatewayCPU < 0 || r.Calls == 0 {
		return -1
	}
	return r.GatewayCPU / time.Duration(r.Calls)
}

// sample is one call: its start (offset from the step's base time) and
// latency, in nanoseconds.
type sample struct{ start, lat int64 }

// maxExtensions bounds how often runStep extends a window in which no
// call completed.
const maxExtensions = 20

// runStep opens c client sessions to t, runs every session's worker for
// warmup and then for d (measured), and closes the sessions. Any failed
// call or unexpected result fails the step.
func runStep(ctx context.Context, t target, c int, warmup, d time.Duration, payload string) (Result, error) {
	res := Result{Target: t.name, Sessions: t.sessions, Store: t.store, Concurrency: c, GatewayCPU: -1}
	if t.store != "" {
		res.Replicas = len(t.urls)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns, tr.MaxIdleConnsPerHost = 4*c+16, 4*c+16
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	if t.key != "" {
		hc.Transport = bearer{base: tr, key: t.key}
	}
	sessions := make([]*mcp.ClientSession, 0, c)
	defer func() {
		for _, cs := range sessions {
			cs.Close()
		}
	}()
	for i := range c {
		url := t.urls[i%len(t.urls)]
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		cl := mcp.NewClient(&mcp.Implementation{Name: "toolgate-load", Version: "1.0.0"}, nil)
		cs, err := cl.Connect(cctx, &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: hc}, nil)
		cancel()
		if err != nil {
			return res, fmt.Errorf("connecting to %s: %w", url, err)
		}
		sessions = append(sessions, cs)
	}
	if ir := sessions[0].InitializeResult(); ir != nil {
		res.Protocol = ir.ProtocolVersion
	}

	base := time.Now()
	var measureFrom atomic.Int64 // ns after base; 0 during warm-up
	var measured atomic.Int64    // calls that started in the window and completed
	var stop atomic.Bool
	samples := make([][]sample, c)
	sctx, fail := context.WithCancelCause(ctx) // a failed call ends the step
	defer fail(nil)
	wctx, cancelWorkers := context.WithCancel(ctx)
	defer cancelWorkers()
	var wg sync.WaitGroup
	for i, cs := range sessions {
		wg.Go(func() {
			pprof.Do(wctx, pprof.Labels("role", "client"), func(ctx context.Context) {
				var err error
				if samples[i], err = work(ctx, cs, payload, base, &measureFrom, &measured, &stop); err != nil {
					fail(err)
				}
			})
		})
	}
	var c0, c1, l0 time.Duration
	var t0 time.Time
	err := pause(sctx, warmup)
	if err == nil {
		t0 = time.Now()
		c0, err = procsCPU(t.pids)
		l0 = selfCPU()
		measureFrom.Store(max(int64(t0.Sub(base)), 1))
	}
	if err == nil {
		err = pause(sctx, d)
	}
	// A window in which no call completed (a machine so loaded that one
	// call outlasts d) is extended, d at a time, up to maxExtensions
	// times: the figures then cover the longer window.
	for ext := 0; err == nil && measured.Load() == 0 && ext < maxExtensions; ext++ {
		err = pause(sctx, d)
	}
	t1 := time.Now()
	l1 := selfCPU()
	if err == nil {
		c1, err = procsCPU(t.pids)
	}
	// Let in-flight calls finish (bounded), then cancel the stragglers.
	stop.Store(true)
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		cancelWorkers()
		<-done
	}
	if cause := context.Cause(sctx); cause != nil && cause != ctx.Err() {
		return res, fmt.Errorf("%s c=%d: %w", t.name, c, cause)
	}
	if err != nil {
		return res, err
	}

	from, to := int64(t0.Sub(base)), int64(t1.Sub(base))
	var lats []int64
	for _, ss := range samples {
		for _, s := range ss {
			if s.start >= from && s.start+s.lat <= to {
				lats = append(lats, s.lat)
			}
		}
	}
	if len(lats) == 0 {
		return res, fmt.Errorf("%s c=%d: no call completed within the %s window", t.name, c, t1.Sub(t0).Round(time.Millisecond))
	}
	slices.Sort(lats)
	res.Calls = len(lats)
	res.Elapsed = t1.Sub(t0)
	res.PerSec = float64(res.Calls) / res.Elapsed.Seconds()
	res.P50 = time.Duration(percentile(lats, 0.50))
	res.P99 = time.Duration(percentile(lats, 0.99))
	res.LoaderCPU = l1 - l0
	if len(t.pids) > 0 {
		res.GatewayCPU = c1 - c0
	}
	return res, nil
}

// work calls echo on cs until stop, recording the calls that start after
// measureFrom is set. It returns at the first failure.
func work(ctx context.Context, cs *mcp.ClientSession, payload string, base time.Time, measureFrom, measured *atomic.Int64, stop *atomic.Bool) ([]sample, error) {
	params := &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": payload}}
	var out []sample
	for !stop.Load() {
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		start := time.Now()
		res, err := cs.CallTool(cctx, params)
		lat := time.Since(start)
		cancel()
		if err != nil && stop.Load() && ctx.Err() != nil {
			return out, nil // a straggler cancelled at the end of the step
		}
		if err != nil {
			return out, fmt.Errorf("tools/call: %w", err)
		}
		if err := checkEcho(res, payload); err != nil {
			return out, err
		}
		if from := measureFrom.Load(); from != 0 {
			if s := int64(start.Sub(base)); s >= from {
				out = append(out, sample{start: s, lat: int64(lat)})
				measured.Add(1)
			}
		}
	}
	return out, nil
}

// checkEcho verifies that res is the echo of payload.
func checkEcho(res *mcp.CallToolResult, payload string) error {
	if res.IsError {
		var msg []string
		for _, c := range res.Content {
			if t, ok := c.(*mcp.TextContent); ok {
				msg = append(msg, t.Text)
			}
		}
		return fmt.Errorf("tools/call returned an error result: %s", strings.Join(msg, "; "))
	}
	if len(res.Content) != 1 {
		return fmt.Errorf("tools/call returned %d content items, want 1", len(res.Content))
	}
	if t, ok := res.Content[0].(*mcp.TextContent); !ok || t.Text != payload {
		return errors.New("tools/call did not echo the text")
	}
	return nil
}

// procsCPU is the summed user+system CPU of pids (0 for none).
func procsCPU(pids []int) (time.Duration, error) {
	var sum time.Duration
	for _, pid := range pids {
		c, err := procCPU(pid)
		if err != nil {
			return 0, err
		}
		sum += c
	}
	return sum, nil
}

// percentile is the nearest-rank p-quantile of sorted (non-empty).
func percentile(sorted []int64, p float64) int64 {
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// pause waits for d or until ctx ends (then it returns ctx's error).
func pause(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// bearer adds Authorization: Bearer key to every request.
type bearer struct {
	base http.RoundTripper
	key  string
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.key)
	return b.base.RoundTrip(r)
}

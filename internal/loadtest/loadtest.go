// Package loadtest is toolgate-load: a small load tool that measures the
// MCP gateway's overhead (issue 4, BENCHMARKS.md). It starts a Go SDK echo
// server on 127.0.0.1 in its own process and toolgate serve as a child
// process with the full gate on (a policy with CEL rules evaluated on every
// call, a rate limit, durable SQLite events and receipts), then runs
// tools/call echo from c client sessions (one worker each) directly to the
// echo server and through toolgate, at each concurrency, and reports
// calls/s, p50/p99 latency and the gateway child's CPU per call (from
// /proc/<pid>/stat over the measured window). Every concurrency also
// measures a bare httputil.ReverseProxy hop to the echo server (issue 15
// point 3: `toolgate-load proxy`, a child process measured like the
// gateway), and the report gives every target's ratios to it.
//
// With no toolgate binary (Options.Toolgate "") the gateway runs in this
// process instead (cli.Main, on goroutines labelled role=gateway for CPU
// profiles); gateway CPU is then not measured. The package test runs that
// smoke mode.
package loadtest

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Options configures Run.
type Options struct {
	// Toolgate is the toolgate binary started as the gateway child; ""
	// runs the gateway in this process.
	Toolgate    string
	Duration    time.Duration // measured time per step; 0: 10 s
	Warmup      time.Duration // unmeasured time before each step; 0: none
	Concurrency []int         // client sessions per step; nil: 1, 16, 64
	// Sessions are the gateway's servers[].sessions modes measured, one
	// gateway each; nil: per_client (the default mode).
	Sessions []string
	// Stores are the gateways' store drivers measured: sqlite (in the
	// gateway's directory) and postgres (Postgres, a fresh schema per
	// target, dropped afterwards); nil: sqlite.
	Stores []string
	// Replicas are the toolgate serve counts measured on postgres: each
	// count is one target whose replicas share one schema (and Redis,
	// with Redis set) and get the client sessions round-robin. sqlite is
	// always measured with one. nil: 1.
	Replicas []int
	Postgres string // the PostgreSQL DSN for postgres (its schemas are created in it)
	// Redis is a Redis URL: when set, every gateway takes its rate limit
	// in Redis (ratelimit.backend redis, a key prefix per target), as
	// replicas that share limits do; "": in-process limits.
	Redis    string
	Runs     int  // repetitions of every step (medians are reported); 0: 1
	NoDirect bool // skip the direct steps
	// NoProxy skips the bare proxy steps (issue 15 point 3: an
	// httputil.ReverseProxy hop to the echo server, no MCP work).
	NoProxy bool
	// Self is the load tool's own binary, started as `Self proxy` for the
	// bare proxy target (a child process, its CPU measured like the
	// gateway's); "": the proxy runs in this process.
	Self    string
	GOGC    int // GC percent Main set for the load tool's own process (clients and echo server); 0: Go's default or the environment's (reported only)
	Payload int // bytes of the echoed text; 0: 64
	// Progress receives one line per finished step; nil: none.
	Progress io.Writer
	// Dir holds the gateways' configs, databases and keys; "": a new
	// temporary directory, removed afterwards.
	Dir string
}

// Report is the outcome of Run: every step of every run.
type Report struct {
	Options Options
	Steps   []Result // in the order run
	Started time.Time
	// LoadAvg is the 1-minute load average at the start and the end (from
	// /proc/loadavg; "?" elsewhere): other work on the machine skews
	// every figure.
	LoadAvg [2]string
}

// Run starts the echo server and the gateways, runs the steps and stops
// everything (also on error). Errors: a server that does not start or get
// ready, a failed call, ctx ending.
func Run(ctx context.Context, opts Options) (*Report, error) {
	opts = opts.withDefaults()
	rep := &Report{Options: opts, Started: time.Now(), LoadAvg: [2]string{loadAvg(), "?"}}
	defer func() { rep.LoadAvg[1] = loadAvg() }()
	dir := opts.Dir
	if dir == "" {
		d, err := os.MkdirTemp("", "toolgate-load-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	echo, err := startEcho()
	if err != nil {
		return nil, fmt.Errorf("starting the echo server: %w", err)
	}
	defer echo.close()
	targets := []target{}
	if !opts.NoDirect {
		targets = append(targets, target{name: "direct", urls: []string{echo.url}})
	}
	if !opts.NoProxy {
		p, err := startProxy(ctx, opts.Self, echo.url)
		if err != nil {
			return nil, fmt.Errorf("starting the bare proxy: %w", err)
		}
		defer p.stop()
		t := target{name: "proxy", urls: []string{p.url}}
		if p.pid != 0 {
			t.pids = []int{p.pid}
		}
		targets = append(targets, t)
	}
	for _, st := range opts.Stores {
		counts := opts.Replicas
		if st == "sqlite" {
			counts = []int{1}
		}
		for _, n := range counts {
			for _, mode := range opts.Sessions {
				t, stop, err := startTarget(ctx, opts, dir, echo.url, st, mode, n)
				defer stop()
				if err != nil {
					return nil, fmt.Errorf("starting toolgate (store %s, %d replica(s), sessions: %s): %w", st, n, mode, err)
				}
				targets = append(targets, t)
			}
		}
	}
	for run := 1; run <= opts.Runs; run++ {
		for _, c := range opts.Concurrency {
			for _, t := range targets {
				r, err := runStep(ctx, t, c, opts.Warmup, opts.Duration, strings.Repeat("x", opts.Payload))
				if err != nil {
					return rep, err
				}
				rep.Steps = append(rep.Steps, r)
				if opts.Progress != nil {
					fmt.Fprintf(opts.Progress, "run %d/%d: %s\n", run, opts.Runs, r.line())
				}
			}
		}
	}
	return rep, nil
}

func (o Options) withDefaults() Options {
	if o.Duration <= 0 {
		o.Duration = 10 * time.Second
	}
	if len(o.Concurrency) == 0 {
		o.Concurrency = []int{1, 16, 64}
	}
	if len(o.Sessions) == 0 {
		o.Sessions = []string{"per_client"}
	}
	if len(o.Stores) == 0 {
		o.Stores = []string{"sqlite"}
	}
	if len(o.Replicas) == 0 {
		o.Replicas = []int{1}
	}
	if o.Runs <= 0 {
		o.Runs = 1
	}
	if o.Payload <= 0 {
		o.Payload = 64
	}
	return o
}

// line is a one-line summary of r.
func (r Result) line() string {
	s := fmt.Sprintf("%-8s %-10s %-8s ×%d c=%-3d %8.0f calls/s  p50 %s  p99 %s", r.Target, r.Sessions, r.Store, r.Replicas, r.Concurrency, r.PerSec, ms(r.P50), ms(r.P99))
	if cpu := r.GatewayCPUPerCall(); cpu >= 0 {
		s += fmt.Sprintf("  gateway CPU %s/call", ms(cpu))
	}
	return s + fmt.Sprintf("  (%d calls, protocol %s)", r.Calls, r.Protocol)
}

// ms formats d in milliseconds.
func ms(d time.Duration) string { return fmt.Sprintf("%.3f ms", float64(d)/1e6) }

// row is the median of one step (target, sessions, concurrency) over the
// runs.
type row struct {
	Result
	runs             int
	minRate, maxRate float64
}

// rows are the steps' medians, in the order first run.
func (rep *Report) rows() []row {
	type key struct {
		target, sessions, store string
		replicas, c             int
	}
	var order []key
	by := map[key][]Result{}
	for _, r := range rep.Steps {
		k := key{r.Target, r.Sessions, r.Store, r.Replicas, r.Concurrency}
		if _, ok := by[k]; !ok {
			order = append(order, k)
		}
		by[k] = append(by[k], r)
	}
	var out []row
	for _, k := range order {
		rs := by[k]
		med := func(f func(Result) float64) float64 {
			v := make([]float64, len(rs))
			for i, r := range rs {
				v[i] = f(r)
			}
			slices.Sort(v)
			if n := len(v); n%2 == 0 {
				return (v[n/2-1] + v[n/2]) / 2
			}
			return v[len(v)/2]
		}
		m := rs[0]
		m.PerSec = med(func(r Result) float64 { return r.PerSec })
		m.P50 = time.Duration(med(func(r Result) float64 { return float64(r.P50) }))
		m.P99 = time.Duration(med(func(r Result) float64 { return float64(r.P99) }))
		m.Calls = int(med(func(r Result) float64 { return float64(r.Calls) }))
		m.Elapsed = time.Duration(med(func(r Result) float64 { return float64(r.Elapsed) }))
		m.LoaderCPU = time.Duration(med(func(r Result) float64 { return float64(r.LoaderCPU) / float64(r.Calls) })) * time.Duration(m.Calls)
		if m.GatewayCPU >= 0 {
			// The median of CPU per call, kept as a total over the median calls.
			m.GatewayCPU = time.Duration(med(func(r Result) float64 { return float64(r.GatewayCPU) / float64(r.Calls) })) * time.Duration(m.Calls)
		}
		rw := row{Result: m, runs: len(rs), minRate: m.PerSec, maxRate: m.PerSec}
		for _, r := range rs {
			rw.minRate, rw.maxRate = min(rw.minRate, r.PerSec), max(rw.maxRate, r.PerSec)
		}
		out = append(out, rw)
	}
	return out
}

// Targets of issue 4 (acceptance 4), checked at concurrency 16.
const (
	targetCPUPerCall = 250 * time.Microsecond
	targetRatio      = 0.7
	targetC          = 16
)

// Markdown writes the report: a header, the table of medians, the
// throughput ratio through/direct per concurrency, and the issue 4 targets
// (met or missed).
func (rep *Report) Markdown(w io.Writer) {
	o := rep.Options
	gw := "child process `" + o.Toolgate + "`"
	if o.Toolgate == "" {
		gw = "in process (gateway CPU not measured)"
	}
	gogc := "default"
	if env := os.Getenv("GOGC"); env != "" {
		gogc = env
	}
	if o.GOGC != 0 {
		gogc = strconv.Itoa(o.GOGC)
	}
	limits := "in process"
	if o.Redis != "" {
		limits = "in Redis"
	}
	fmt.Fprintf(w, "toolgate-load %s: %d run(s) × %s per step (warm-up %s), echo text %d bytes, gateway %s, rate limits %s, GOMAXPROCS %d, %d CPUs, load tool GOGC %s, load average %s at the start, %s at the end\n\n",
		rep.Started.Format("2006-01-02 15:04"), o.Runs, o.Duration, o.Warmup, o.Payload, gw, limits, runtime.GOMAXPROCS(0), runtime.NumCPU(), gogc, rep.LoadAvg[0], rep.LoadAvg[1])
	fmt.Fprintln(w, "| target | sessions | store | replicas | concurrency | calls/s (median) | calls/s range | p50 | p99 | gateway CPU per call | gateway CPU (cores) | load tool CPU per call | protocol |")
	fmt.Fprintln(w, "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
	rows := rep.rows()
	for _, r := range rows {
		sess, st, reps, cpu, cores := r.Sessions, r.Store, "—", "—", "—"
		if sess == "" {
			sess = "—"
		}
		if st == "" {
			st = "—"
		}
		if r.Replicas > 0 {
			reps = strconv.Itoa(r.Replicas)
		}
		if pc := r.GatewayCPUPerCall(); pc >= 0 {
			cpu = ms(pc)
			cores = fmt.Sprintf("%.2f", float64(r.GatewayCPU)/float64(r.Elapsed))
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %d | %.0f | %.0f–%.0f | %s | %s | %s | %s | %s | %s |\n",
			r.Target, sess, st, reps, r.Concurrency, r.PerSec, r.minRate, r.maxRate, ms(r.P50), ms(r.P99), cpu, cores,
			ms(r.LoaderCPU/time.Duration(max(r.Calls, 1))), r.Protocol)
	}
	fmt.Fprintln(w)
	direct := map[int]row{}
	for _, r := range rows {
		if r.Target == "direct" {
			direct[r.Concurrency] = r
		}
	}
	for _, r := range rows {
		if r.Target != "toolgate" {
			continue
		}
		line := fmt.Sprintf("- toolgate (%s), concurrency %d:", r.Sessions, r.Concurrency)
		if len(o.Stores) > 1 || r.Store != "sqlite" || r.Replicas != 1 {
			line = fmt.Sprintf("- toolgate (%s, %s ×%d), concurrency %d:", r.Sessions, r.Store, r.Replicas, r.Concurrency)
		}
		d, ok := direct[r.Concurrency]
		if ok {
			ratio := r.PerSec / d.PerSec
			line += fmt.Sprintf(" throughput %.2f× direct", ratio)
			if r.Concurrency == targetC {
				line += fmt.Sprintf(" (target ≥ %.1f×: %s)", targetRatio, verdict(ratio >= targetRatio))
			}
			line += ";"
		}
		if pc := r.GatewayCPUPerCall(); pc >= 0 {
			line += fmt.Sprintf(" gateway CPU %s per call (target ≤ %s: %s)", ms(pc), ms(targetCPUPerCall), verdict(pc <= targetCPUPerCall))
		} else {
			line += " gateway CPU not measured"
		}
		fmt.Fprintln(w, line)
	}
	proxyRatios(w, rows, len(o.Stores) > 1)
}

// Targets of issue 15 (relative to the bare proxy hop, on the same run).
const (
	targetProxyThroughput = 0.95 // toolgate calls/s ≥ this × the proxy's, every concurrency
	targetProxyCPU        = 1.1  // toolgate gateway CPU per call ≤ this × the proxy's, at targetC
	targetProxyAdded      = 1.2  // toolgate's added p50 at c=1 ≤ this × the proxy's
)

// proxyRatios writes, for every row measured with a proxy row at the same
// concurrency, its ratios to the bare proxy hop: throughput, p50 and p99,
// gateway CPU per call (both measured), and at concurrency 1 the added
// latency (p50 minus direct's p50), with the issue 15 targets for toolgate
// (named with store and replicas when multi, or not sqlite ×1).
func proxyRatios(w io.Writer, rows []row, multi bool) {
	proxy, direct := map[int]row{}, map[int]row{}
	for _, r := range rows {
		switch r.Target {
		case "proxy":
			proxy[r.Concurrency] = r
		case "direct":
			direct[r.Concurrency] = r
		}
	}
	if len(proxy) == 0 {
		return
	}
	fmt.Fprintln(w, "\nRatios to the bare proxy hop (issue 15 targets for toolgate: throughput ≥ 0.95× at every concurrency, gateway CPU per call ≤ 1.1× at c=16, added p50 latency at c=1 ≤ 1.2×):")
	fmt.Fprintln(w)
	for _, r := range rows {
		p, ok := proxy[r.Concurrency]
		if !ok || r.Target == "proxy" {
			continue
		}
		tg := r.Target == "toolgate"
		name := r.Target
		if tg {
			name = fmt.Sprintf("toolgate (%s)", r.Sessions)
			if multi || r.Store != "sqlite" || r.Replicas != 1 {
				name = fmt.Sprintf("toolgate (%s, %s ×%d)", r.Sessions, r.Store, r.Replicas)
			}
		}
		tp := r.PerSec / p.PerSec
		line := fmt.Sprintf("- %s, concurrency %d: throughput %.2f× proxy", name, r.Concurrency, tp)
		if tg {
			line += fmt.Sprintf(" (target ≥ %.2f×: %s)", targetProxyThroughput, verdict(tp >= targetProxyThroughput))
		}
		line += fmt.Sprintf("; p50 %.2f×, p99 %.2f× proxy", float64(r.P50)/float64(p.P50), float64(r.P99)/float64(p.P99))
		if d, ok := direct[r.Concurrency]; ok && r.Concurrency == 1 && tg {
			added, padded := r.P50-d.P50, p.P50-d.P50
			line += fmt.Sprintf("; added latency %s (proxy %s)", ms(added), ms(padded))
			if padded > 0 {
				ar := float64(added) / float64(padded)
				line += fmt.Sprintf(", %.2f× proxy (target ≤ %.1f×: %s)", ar, targetProxyAdded, verdict(ar <= targetProxyAdded))
			}
		}
		if rc, pc := r.GatewayCPUPerCall(), p.GatewayCPUPerCall(); tg && rc >= 0 && pc > 0 {
			cr := float64(rc) / float64(pc)
			line += fmt.Sprintf("; gateway CPU %s vs proxy %s per call, %.2f×", ms(rc), ms(pc), cr)
			if r.Concurrency == targetC {
				line += fmt.Sprintf(" (target ≤ %.1f×: %s)", targetProxyCPU, verdict(cr <= targetProxyCPU))
			}
		}
		fmt.Fprintln(w, line)
	}
}

// loadAvg is the 1-minute load average, or "?".
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) > 0 {
		return f[0]
	}
	return "?"
}

func verdict(ok bool) string {
	if ok {
		return "target met"
	}
	return "target missed"
}

// profile runs fn with a CPU profile written to file ("" : no profile).
func profile(file string, fn func() error) error {
	if file == "" {
		return fn()
	}
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := pprof.StartCPUProfile(f); err != nil {
		return err
	}
	err = fn()
	pprof.StopCPUProfile()
	return err
}

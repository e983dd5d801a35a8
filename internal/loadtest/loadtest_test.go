package loadtest

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"
)

// The smoke mode against in-process servers (echo and gateway): every call
// succeeds and every step is reported. No timing is asserted.
func TestSmokeInProcess(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep, err := Run(ctx, Options{Duration: 300 * time.Millisecond, Warmup: 100 * time.Millisecond,
		Concurrency: []int{1, 4}, Sessions: []string{"per_client", "shared"}, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Steps) != 8 {
		t.Fatalf("%d steps, want 8 (2 concurrencies × direct, proxy, per_client, shared)", len(rep.Steps))
	}
	for _, r := range rep.Steps {
		if r.Calls < 1 || !(r.PerSec > 0) || r.P50 <= 0 || r.P99 < r.P50 || r.Protocol == "" {
			t.Errorf("step %+v: no calls or bad figures", r)
		}
		if r.GatewayCPU != -1 {
			t.Errorf("step %s c=%d: gateway CPU %v measured in process", r.Target, r.Concurrency, r.GatewayCPU)
		}
	}
	var b strings.Builder
	rep.Markdown(&b)
	md := b.String()
	for _, want := range []string{"| direct | — | — | — | 1 |", "| proxy | — | — | — | 4 |", "| toolgate | per_client | sqlite | 1 | 4 |", "| toolgate | shared | sqlite | 1 | 4 |",
		"toolgate (per_client), concurrency 4: throughput", "- toolgate (shared), concurrency 4: throughput ",
		"- toolgate (per_client), concurrency 1: throughput ", "× proxy (target ≥ 0.95×: target ", "; added latency "} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
}

// The bare proxy and toolgate serve as child processes (this test binary,
// see TestMain): calls through both echo, both children's CPU is
// measured, and the report gives toolgate's ratios to the proxy at every
// concurrency, the added latency at c=1 and the CPU ratio. No timing is
// asserted.
func TestProxyChildRatios(t *testing.T) {
	t.Setenv(slowChildEnv, "1")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep, err := Run(ctx, Options{Duration: 300 * time.Millisecond, Warmup: 100 * time.Millisecond,
		Concurrency: []int{1, 16}, Self: os.Args[0], Toolgate: os.Args[0], Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	var proxies int
	for _, r := range rep.Steps {
		if r.Target != "proxy" {
			continue
		}
		proxies++
		if r.Calls < 1 || r.GatewayCPU < 0 || r.Protocol == "" {
			t.Errorf("proxy step %+v: want calls, a protocol and the child's CPU measured", r)
		}
	}
	if proxies != 2 {
		t.Fatalf("%d proxy steps, want 2: %+v", proxies, rep.Steps)
	}
	var b strings.Builder
	rep.Markdown(&b)
	md := b.String()
	for _, want := range []string{"| proxy | — | — | — | 1 |", "| proxy | — | — | — | 16 |", "Ratios to the bare proxy hop",
		"- direct, concurrency 16: throughput ", "- toolgate (per_client), concurrency 1: throughput ",
		"- toolgate (per_client), concurrency 16: throughput ", " per call, ", "× (target ≤ 1.1×: target "} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
}

// The ratios to the proxy from known steps: throughput, p50/p99, added
// latency at c=1 and gateway CPU per call, with the issue 15 verdicts.
func TestProxyRatios(t *testing.T) {
	ms := time.Millisecond
	rep := &Report{Steps: []Result{
		{Target: "direct", Concurrency: 1, PerSec: 2000, Calls: 2000, P50: ms / 2, P99: ms, GatewayCPU: -1},
		{Target: "proxy", Concurrency: 1, PerSec: 1000, Calls: 1000, P50: ms, P99: 2 * ms, GatewayCPU: 200 * ms, Elapsed: time.Second},
		{Target: "toolgate", Sessions: "per_client", Store: "sqlite", Replicas: 1, Concurrency: 1, PerSec: 900, Calls: 900, P50: 1100 * time.Microsecond, P99: 3 * ms, GatewayCPU: 270 * ms, Elapsed: time.Second},
		{Target: "direct", Concurrency: 16, PerSec: 4000, Calls: 4000, P50: ms, P99: ms, GatewayCPU: -1},
		{Target: "proxy", Concurrency: 16, PerSec: 2000, Calls: 2000, P50: ms, P99: ms, GatewayCPU: 400 * ms, Elapsed: time.Second},
		{Target: "toolgate", Sessions: "per_client", Store: "sqlite", Replicas: 1, Concurrency: 16, PerSec: 1960, Calls: 2000, P50: ms, P99: ms, GatewayCPU: 420 * ms, Elapsed: time.Second},
	}}
	var b strings.Builder
	rep.Markdown(&b)
	md := b.String()
	for _, want := range []string{
		"- direct, concurrency 1: throughput 2.00× proxy; p50 0.50×, p99 0.50× proxy\n",
		"- toolgate (per_client), concurrency 1: throughput 0.90× proxy (target ≥ 0.95×: target missed); p50 1.10×, p99 1.50× proxy; added latency 0.600 ms (proxy 0.500 ms), 1.20× proxy (target ≤ 1.2×: target met); gateway CPU 0.300 ms vs proxy 0.200 ms per call, 1.50×\n",
		"- toolgate (per_client), concurrency 16: throughput 0.98× proxy (target ≥ 0.95×: target met); p50 1.00×, p99 1.00× proxy; gateway CPU 0.210 ms vs proxy 0.200 ms per call, 1.05× (target ≤ 1.1×: target met)\n",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
}

// Main's flag errors exit 2 before starting anything.
func TestMainFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--concurrency", "0"}, {"--concurrency", "a"}, {"--sessions", "pooled"}, {"--payload", "1000"},
		{"--in-process", "--toolgate", "x"}, {"--bogus"},
		{"--stores", "mysql"}, {"--replicas", "0"}, {"--replicas", "2"}, {"--stores", "postgres"},
		{"--stores", "postgres", "--postgres", "host=x"}, {"--redis", "http://x"},
		{"proxy"}, {"proxy", "--upstream", "ftp://x"}, {"proxy", "--upstream", "http://127.0.0.1:1/mcp", "extra"},
	} {
		var out, errb strings.Builder
		if code := Main(context.Background(), args, &out, &errb); code != 2 {
			t.Errorf("%v: exit %d, want 2 (%s)", args, code, errb.String())
		}
	}
}

// A target with two URLs (two replicas) gets the client sessions
// round-robin: with 4 sessions, both servers serve calls.
func TestStepSpreadsSessionsOverReplicas(t *testing.T) {
	a, err := startEcho()
	if err != nil {
		t.Fatal(err)
	}
	defer a.close()
	b, err := startEcho()
	if err != nil {
		t.Fatal(err)
	}
	defer b.close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := runStep(ctx, target{name: "toolgate", store: "postgres", sessions: "per_client", urls: []string{a.url, b.url}}, 4, 0, 300*time.Millisecond, "hello")
	if err != nil {
		t.Fatal(err)
	}
	if r.Replicas != 2 || r.Calls < 1 {
		t.Fatalf("step %+v: want 2 replicas and some calls", r)
	}
	if a.calls.Load() == 0 || b.calls.Load() == 0 {
		t.Fatalf("calls per replica: %d and %d, want both above 0", a.calls.Load(), b.calls.Load())
	}
}

// Two gateway replicas on one PostgreSQL schema, limits in Redis (the
// machine's test services), in process: every call through either
// succeeds and the report names the target.
func TestSmokeTwoReplicasPostgres(t *testing.T) {
	dsn := os.Getenv("TOOLGATE_TEST_POSTGRES")
	if dsn == "" {
		dsn = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	}
	rd := os.Getenv("TOOLGATE_TEST_REDIS")
	if rd == "" {
		rd = "redis://127.0.0.1:6379"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep, err := Run(ctx, Options{Duration: 300 * time.Millisecond, Warmup: 100 * time.Millisecond, Concurrency: []int{4},
		Stores: []string{"postgres"}, Replicas: []int{2}, Postgres: dsn, Redis: rd, NoDirect: true, NoProxy: true, Dir: t.TempDir()})
	if err != nil {
		t.Fatalf("Run (PostgreSQL at %s and Redis at %s are required): %v", dsn, rd, err)
	}
	if len(rep.Steps) != 1 || rep.Steps[0].Replicas != 2 || rep.Steps[0].Store != "postgres" || rep.Steps[0].Calls < 1 {
		t.Fatalf("steps %+v, want one postgres ×2 step with calls", rep.Steps)
	}
	var sb strings.Builder
	rep.Markdown(&sb)
	if !strings.Contains(sb.String(), "| toolgate | per_client | postgres | 2 | 4 |") || !strings.Contains(sb.String(), "rate limits in Redis") {
		t.Errorf("report:\n%s", sb.String())
	}
}

func TestPercentile(t *testing.T) {
	v := []int64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	for _, tc := range []struct {
		p    float64
		want int64
	}{{0.5, 5}, {0.99, 10}, {0.1, 1}, {0, 1}, {1, 10}} {
		if got := percentile(v, tc.p); got != tc.want {
			t.Errorf("p%v = %d, want %d", tc.p, got, tc.want)
		}
	}
}

func TestMedians(t *testing.T) {
	rep := &Report{Steps: []Result{
		{Target: "direct", Concurrency: 16, PerSec: 100, Calls: 1000, GatewayCPU: -1},
		{Target: "toolgate", Sessions: "per_client", Concurrency: 16, PerSec: 50, Calls: 500, GatewayCPU: 500 * time.Millisecond, Elapsed: time.Second},
		{Target: "direct", Concurrency: 16, PerSec: 300, Calls: 3000, GatewayCPU: -1},
		{Target: "toolgate", Sessions: "per_client", Concurrency: 16, PerSec: 90, Calls: 900, GatewayCPU: 90 * time.Millisecond, Elapsed: time.Second},
		{Target: "direct", Concurrency: 16, PerSec: 200, Calls: 2000, GatewayCPU: -1},
		{Target: "toolgate", Sessions: "per_client", Concurrency: 16, PerSec: 160, Calls: 1600, GatewayCPU: 320 * time.Millisecond, Elapsed: time.Second},
	}}
	rows := rep.rows()
	if len(rows) != 2 || rows[0].PerSec != 200 || rows[0].minRate != 100 || rows[0].maxRate != 300 || rows[1].PerSec != 90 {
		t.Fatalf("rows = %+v", rows)
	}
	if got := rows[1].GatewayCPUPerCall(); got != 200*time.Microsecond { // per call: 1 ms, 0.1 ms, 0.2 ms
		t.Errorf("median gateway CPU per call = %v, want 200µs", got)
	}
	var b strings.Builder
	rep.Markdown(&b)
	if !strings.Contains(b.String(), "throughput 0.45× direct (target ≥ 0.7×: target missed); gateway CPU 0.200 ms per call (target ≤ 0.250 ms: target met)") {
		t.Errorf("report:\n%s", b.String())
	}
}

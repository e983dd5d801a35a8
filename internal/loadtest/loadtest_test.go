package loadtest

import (
	"context"
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
	if len(rep.Steps) != 6 {
		t.Fatalf("%d steps, want 6 (2 concurrencies × direct, per_client, shared)", len(rep.Steps))
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
	for _, want := range []string{"| direct | — | 1 |", "| toolgate | per_client | 4 |", "| toolgate | shared | 4 |",
		"toolgate (per_client), concurrency 4: throughput"} {
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
	} {
		var out, errb strings.Builder
		if code := Main(context.Background(), args, &out, &errb); code != 2 {
			t.Errorf("%v: exit %d, want 2 (%s)", args, code, errb.String())
		}
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

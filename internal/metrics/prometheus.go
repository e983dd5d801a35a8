package metrics

import (
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/common/expfmt"
)

// Caps on distinct label values per process: past them, values are
// counted as Other.
const (
	MaxToolIDs = 1000
	MaxRuleIDs = 1000
	MaxServers = 256
)

// Prometheus is a Recorder backed by its own client_golang registry
// (never the global one), which also holds the Go runtime and process
// collectors and whatever Register adds. Its metrics:
//
//   - toolgate_tool_calls_total{tool_id, transport, status} (counter)
//   - toolgate_tool_call_duration_seconds{tool_id, status} (histogram)
//   - toolgate_policy_decisions_total{effect, rule_id} (counter)
//   - toolgate_policy_decision_duration_seconds (histogram)
//   - toolgate_upstream_call_duration_seconds{server} (histogram)
//   - toolgate_store_commit_duration_seconds (histogram)
//   - toolgate_store_unavailable_total (counter)
//
// tool_id and rule_id are capped at MaxToolIDs and MaxRuleIDs distinct
// values, server at MaxServers (overflow: "other"). Safe for concurrent
// use.
type Prometheus struct {
	reg *prometheus.Registry

	tools, rules, servers *capSet

	calls       *prometheus.CounterVec
	callDur     *prometheus.HistogramVec
	decisions   *prometheus.CounterVec
	decisionDur prometheus.Histogram
	upstreamDur *prometheus.HistogramVec
	commitDur   prometheus.Histogram
	unavailable prometheus.Counter

	// Series already resolved, by their raw label values (only values
	// within the caps are cached, so the caches stay bounded): a call
	// then costs one map lookup instead of a label hash per metric.
	callSeries     sync.Map // callKey → *callSeries
	decisionSeries sync.Map // [2]string{effect, ruleID} → prometheus.Counter
}

type callKey struct{ tool, transport, status string }

type callSeries struct {
	n prometheus.Counter
	d prometheus.Observer
}

// NewPrometheus returns a Prometheus recorder with a fresh registry.
func NewPrometheus() *Prometheus {
	p := &Prometheus{reg: prometheus.NewRegistry(),
		tools: newCapSet(MaxToolIDs), rules: newCapSet(MaxRuleIDs), servers: newCapSet(MaxServers)}
	p.calls = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "toolgate_tool_calls_total",
		Help: "Tool calls recorded by the gate (every outcome, including refusals), by tool, transport and status."},
		[]string{"tool_id", "transport", "status"})
	p.callDur = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "toolgate_tool_call_duration_seconds",
		Help:    "Duration of a tool call in the gate, from its start to its recorded outcome, by tool and status.",
		Buckets: prometheus.ExponentialBuckets(0.0005, 4, 10)}, []string{"tool_id", "status"})
	p.decisions = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "toolgate_policy_decisions_total",
		Help: "Policy decisions, by effect and deciding rule (rule_id \"\" is the default decision)."},
		[]string{"effect", "rule_id"})
	p.decisionDur = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "toolgate_policy_decision_duration_seconds",
		Help:    "Time one policy decision took.",
		Buckets: prometheus.ExponentialBuckets(0.000001, 4, 10)})
	p.upstreamDur = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "toolgate_upstream_call_duration_seconds",
		Help:    "Duration of a tool call forwarded to an upstream MCP server, by server.",
		Buckets: prometheus.ExponentialBuckets(0.0005, 4, 10)}, []string{"server"})
	p.commitDur = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "toolgate_store_commit_duration_seconds",
		Help:    "Time a call's outcome (closing events and receipt) took to become durable in the store, group commit included.",
		Buckets: prometheus.ExponentialBuckets(0.00005, 4, 10)})
	p.unavailable = prometheus.NewCounter(prometheus.CounterOpts{Name: "toolgate_store_unavailable_total",
		Help: "Calls answered audit_unavailable because the store could not record them."})
	p.reg.MustRegister(p.calls, p.callDur, p.decisions, p.decisionDur, p.upstreamDur, p.commitDur, p.unavailable,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return p
}

// ToolCall implements Recorder.
func (p *Prometheus) ToolCall(toolID, transport, status string, d time.Duration) {
	k := callKey{toolID, transport, status}
	v, ok := p.callSeries.Load(k)
	if !ok {
		id := p.tools.value(toolID)
		v = &callSeries{p.calls.WithLabelValues(id, transport, status), p.callDur.WithLabelValues(id, status)}
		if id == toolID {
			p.callSeries.Store(k, v)
		}
	}
	s := v.(*callSeries)
	s.n.Inc()
	s.d.Observe(d.Seconds())
}

// PolicyDecision implements Recorder.
func (p *Prometheus) PolicyDecision(effect, ruleID string, d time.Duration) {
	k := [2]string{effect, ruleID}
	v, ok := p.decisionSeries.Load(k)
	if !ok {
		id := p.rules.value(ruleID)
		v = p.decisions.WithLabelValues(effect, id)
		if id == ruleID {
			p.decisionSeries.Store(k, v)
		}
	}
	v.(prometheus.Counter).Inc()
	p.decisionDur.Observe(d.Seconds())
}

// UpstreamCall implements Recorder.
func (p *Prometheus) UpstreamCall(server string, d time.Duration) {
	p.upstreamDur.WithLabelValues(p.servers.value(server)).Observe(d.Seconds())
}

// StoreCommit implements Recorder.
func (p *Prometheus) StoreCommit(d time.Duration) { p.commitDur.Observe(d.Seconds()) }

// StoreUnavailable implements Recorder.
func (p *Prometheus) StoreUnavailable() { p.unavailable.Inc() }

// Register adds collectors to the registry (for example CounterFunc and
// GaugeFunc values read at scrape time). It panics, as
// prometheus.Registry.MustRegister does, on a duplicate or invalid
// metric: a programming error.
func (p *Prometheus) Register(cs ...prometheus.Collector) { p.reg.MustRegister(cs...) }

// Gatherer returns the registry, for tests and other exporters.
func (p *Prometheus) Gatherer() prometheus.Gatherer { return p.reg }

// Handler serves the registry in the Prometheus exposition format (the
// text format unless the scraper negotiates another), as promhttp does.
func (p *Prometheus) Handler() http.Handler {
	return promhttp.HandlerFor(p.reg, promhttp.HandlerOpts{})
}

// Text returns the metrics of cs, gathered by a registry of their own, in
// the Prometheus text exposition format; for tests and diagnostics.
// Errors: a collector's invalid or duplicate metric.
func Text(cs ...prometheus.Collector) (string, error) {
	reg := prometheus.NewRegistry()
	if err := reg.Register(multi(cs)); err != nil {
		return "", err
	}
	mfs, err := reg.Gather()
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for _, mf := range mfs {
		if _, err := expfmt.MetricFamilyToText(&b, mf); err != nil {
			return "", err
		}
	}
	return b.String(), nil
}

// multi is several collectors as one.
type multi []prometheus.Collector

func (m multi) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m {
		c.Describe(ch)
	}
}

func (m multi) Collect(ch chan<- prometheus.Metric) {
	for _, c := range m {
		c.Collect(ch)
	}
}

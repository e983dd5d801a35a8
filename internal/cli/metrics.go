package cli

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/toolgate/toolgate/approval"
	"github.com/toolgate/toolgate/hook/webhook"
	"github.com/toolgate/toolgate/internal/auth"
	"github.com/toolgate/toolgate/internal/mcpgw"
	"github.com/toolgate/toolgate/internal/metrics"
	"github.com/toolgate/toolgate/internal/pipeline"
)

// registerServeMetrics adds to m the counts serve's parts keep themselves,
// read at each scrape: the policy dry run's would-deny count, each
// webhook's dropped requests, the gateway's sessions and upstreams, the
// authentication refusals, the listener's unauthenticated connections and
// the approvals waited for and resolved, and the store's write queue
// (st, when it reports QueueDepth).
func registerServeMetrics(m *metrics.Prometheus, pipe *pipeline.Pipeline, webhooks []*webhook.Hook, gw *mcpgw.Gateway,
	refusals *auth.Refusals, ed *edge, approvals *approval.Manager, st any) {
	if q, ok := st.(interface{ QueueDepth() int }); ok {
		m.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "toolgate_store_queue_depth",
			Help: "Appends (events, receipts, outcomes) waiting now for the store's group-commit writer."},
			func() float64 { return float64(q.QueueDepth()) }))
	}
	m.Register(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "toolgate_approvals_pending",
			Help: "Calls of this gateway waiting now for a pending approval to be resolved."},
			func() float64 { return float64(approvals.Waiting()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "toolgate_approvals_resolved_total",
			Help: "Approvals resolved through this gateway, by outcome.", ConstLabels: prometheus.Labels{"outcome": "approved"}},
			func() float64 { a, _ := approvals.Resolved(); return float64(a) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "toolgate_approvals_resolved_total",
			Help: "Approvals resolved through this gateway, by outcome.", ConstLabels: prometheus.Labels{"outcome": "denied"}},
			func() float64 { _, d := approvals.Resolved(); return float64(d) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "toolgate_approvals_resolved_total",
			Help: "Approvals resolved through this gateway, by outcome.", ConstLabels: prometheus.Labels{"outcome": "expired"}},
			func() float64 { return float64(approvals.Expired()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "toolgate_policy_would_deny_total",
			Help: "Calls a policy dry run (observe mode) would have denied."},
			func() float64 { return float64(pipe.WouldDenied()) }),
		gw.Collector(), refusals.Collector(),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "toolgate_http_unauthenticated_conns",
			Help: "Open connections that have not yet authenticated (capped by http.max_unauthenticated_conns)."},
			func() float64 { return float64(ed.unauth.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "toolgate_http_unauthenticated_conns_refused_total",
			Help: "New connections closed at once because http.max_unauthenticated_conns was reached."},
			func() float64 { return float64(ed.refused.Load()) }),
	)
	for _, h := range webhooks {
		m.Register(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "toolgate_hook_dropped_total",
			Help: "Observe webhook requests dropped on a full queue.", ConstLabels: prometheus.Labels{"hook": h.Name()}},
			func() float64 { return float64(h.Dropped()) }))
	}
}

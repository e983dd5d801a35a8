package mcpgw

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/toolgate/toolgate/identity"
	"github.com/toolgate/toolgate/internal/config"
)

// Session caps (issue 12 §4): mcp.max_sessions MCP sessions in all and
// mcp.max_sessions_per_principal per principal. A session takes its place
// when its initialize arrives (sessionLimits.reserve, in the HTTP handler)
// and keeps it from a successful initialize until it ends (DELETE, the
// session timeout, shutdown); an initialize that fails gives it back.

// CodeTooManySessions is the JSON-RPC error code of an initialize refused
// by the session caps (in the implementation-defined server error range of
// JSON-RPC 2.0 §5.1). Its data is {"limit": "mcp.max_sessions" or
// "mcp.max_sessions_per_principal", "max": N}; the HTTP status is 503 for
// the gateway's cap, 429 for the principal's.
const CodeTooManySessions = -32001

// sessionLimits counts the sessions holding a place, in all and per
// principal. Safe for concurrent use.
type sessionLimits struct {
	max, perPrincipal int

	mu    sync.Mutex
	total int
	per   map[string]int // principal key → places held

	refusedTotal     atomic.Int64 // initialize refused by max
	refusedPrincipal atomic.Int64 // initialize refused by perPrincipal
}

func newSessionLimits(c config.MCP) *sessionLimits {
	l := &sessionLimits{max: c.MaxSessions, perPrincipal: c.MaxSessionsPerPrincipal, per: map[string]int{}}
	if l.max <= 0 {
		l.max = config.DefaultMaxSessions
	}
	if l.perPrincipal <= 0 {
		l.perPrincipal = min(config.DefaultMaxSessionsPerPrincipal, l.max)
	}
	return l
}

// principalKey identifies p for the per-principal cap.
func limitKey(p identity.Principal) string { return p.Tenant + "\x00" + p.ID }

// sessionSlot is one place under the caps. Its state moves once from
// reserved to held (claim) and once to released (release, or
// releaseUnclaimed while still reserved); the count drops on release.
type sessionSlot struct {
	l     *sessionLimits
	key   string
	state atomic.Int32 // slotReserved, slotHeld, slotReleased
}

const (
	slotReserved int32 = iota
	slotHeld
	slotReleased
)

// reserve takes a place for a new session of p. It answers nil and the
// HTTP status and JSON-RPC error of the refusal when a cap is reached.
func (l *sessionLimits) reserve(p identity.Principal) (*sessionSlot, int, *refusal) {
	key := limitKey(p)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.per[key] >= l.perPrincipal {
		l.refusedPrincipal.Add(1)
		return nil, http.StatusTooManyRequests, &refusal{Limit: "mcp.max_sessions_per_principal", Max: l.perPrincipal,
			msg: fmt.Sprintf("too many sessions: this principal already has %d open MCP sessions (mcp.max_sessions_per_principal); end one (HTTP DELETE with its Mcp-Session-Id) or wait until one times out", l.perPrincipal)}
	}
	if l.total >= l.max {
		l.refusedTotal.Add(1)
		return nil, http.StatusServiceUnavailable, &refusal{Limit: "mcp.max_sessions", Max: l.max,
			msg: fmt.Sprintf("too many sessions: the gateway already has %d open MCP sessions (mcp.max_sessions); try again later", l.max)}
	}
	l.total++
	l.per[key]++
	return &sessionSlot{l: l, key: key}, 0, nil
}

// refusal is the JSON-RPC error data of a refused initialize.
type refusal struct {
	Limit string `json:"limit"`
	Max   int    `json:"max"`
	msg   string
}

// claim makes a reserved slot the session's; it reports false if the slot
// was already released.
func (s *sessionSlot) claim() bool {
	return s != nil && s.state.CompareAndSwap(slotReserved, slotHeld)
}

// releaseUnclaimed gives back a slot no session claimed.
func (s *sessionSlot) releaseUnclaimed() {
	if s != nil && s.state.CompareAndSwap(slotReserved, slotReleased) {
		s.l.put(s.key)
	}
}

// release gives back a slot, claimed or not; idempotent, nil-safe.
func (s *sessionSlot) release() {
	if s == nil {
		return
	}
	for {
		st := s.state.Load()
		if st == slotReleased {
			return
		}
		if s.state.CompareAndSwap(st, slotReleased) {
			s.l.put(s.key)
			return
		}
	}
}

func (l *sessionLimits) put(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.total--
	if l.per[key]--; l.per[key] <= 0 {
		delete(l.per, key)
	}
}

// open is how many sessions hold a place (or are being initialized).
func (l *sessionLimits) open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.total
}

type slotKey struct{}

// withSlot carries an initialize's reserved slot from the HTTP handler to
// the session (through the request's TokenInfo, see Handler).
func withSlot(ctx context.Context, s *sessionSlot) context.Context {
	return context.WithValue(ctx, slotKey{}, s)
}

func slotFrom(ctx context.Context) *sessionSlot {
	s, _ := ctx.Value(slotKey{}).(*sessionSlot)
	return s
}

// slotExtraKey is the TokenInfo.Extra key of the reserved slot.
const slotExtraKey = "toolgate/sessionSlot"

// admitSession reserves a place for the session an initialize request
// (body) of p would open. When a cap is reached it writes the refusal (HTTP
// 429 or 503 with a JSON-RPC error answering the request's id) and returns
// nil.
func (g *Gateway) admitSession(w http.ResponseWriter, body []byte, p identity.Principal) *sessionSlot {
	slot, status, ref := g.limits.reserve(p)
	if slot != nil {
		return slot
	}
	var req struct {
		ID json.RawMessage `json:"id"`
	}
	json.Unmarshal(body, &req)
	id := req.ID
	if len(id) == 0 {
		id = json.RawMessage("null")
	}
	g.log.Warn("mcp: initialize refused: session cap reached", "limit", ref.Limit, "max", ref.Max, "tenant", p.Tenant, "principal", p.ID)
	out, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id,
		"error": map[string]any{"code": CodeTooManySessions, "message": ref.msg, "data": ref}})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(out)
	return nil
}

// isInitialize reports whether the JSON-RPC message body is an initialize
// request.
func isInitialize(body []byte) bool {
	var m struct {
		Method string `json:"method"`
	}
	return json.Unmarshal(body, &m) == nil && m.Method == "initialize"
}

// sessionInitialized gives the session of a successful initialize req its
// reserved slot, released when the session ends. (Its state, dsession, is
// created by its first request after initialize, as before the caps.)
func (g *Gateway) sessionInitialized(req mcp.Request) {
	ss, _ := req.GetSession().(*mcp.ServerSession)
	ex := req.GetExtra()
	if ss == nil || ss.ID() == "" || ex == nil || ex.TokenInfo == nil {
		return
	}
	slot, _ := ex.TokenInfo.Extra[slotExtraKey].(*sessionSlot)
	if !slot.claim() {
		return
	}
	go func() {
		ss.Wait()
		slot.release()
	}()
}

// Stats are counts of what the gateway holds open, for readiness and
// metrics output.
type Stats struct {
	// Sessions is the number of open MCP sessions (counted against
	// mcp.max_sessions), MaxSessions and MaxSessionsPerPrincipal the caps.
	Sessions, MaxSessions, MaxSessionsPerPrincipal int
	// Processes is the number of running upstream stdio server processes
	// by server name (shared and per-client sessions; every configured
	// stdio server has an entry).
	Processes map[string]int
	// RefusedSessions counts initialize requests refused by
	// mcp.max_sessions (Total) and mcp.max_sessions_per_principal
	// (Principal) since start.
	RefusedTotal, RefusedPrincipal int64
	// IdleStops counts per-client upstream sessions stopped by
	// servers[].idle_timeout since start.
	IdleStops int64
	// Up says, by server name, whether the gateway's shared session to
	// that upstream server is connected now (every configured server has
	// an entry); Restarts counts its reconnects since start (sessions
	// established after the first, including restarts after an idle
	// stop).
	Up       map[string]bool
	Restarts map[string]int64
}

// Stats returns the gateway's current counts. Safe for concurrent use.
func (g *Gateway) Stats() Stats {
	st := Stats{Sessions: g.limits.open(), MaxSessions: g.limits.max, MaxSessionsPerPrincipal: g.limits.perPrincipal,
		Processes: map[string]int{}, RefusedTotal: g.limits.refusedTotal.Load(), RefusedPrincipal: g.limits.refusedPrincipal.Load(),
		IdleStops: g.idleStops.Load(), Up: map[string]bool{}, Restarts: map[string]int64{}}
	for name, u := range g.ups {
		if u.shared != nil {
			st.Up[name] = u.shared.live() != nil
			st.Restarts[name] = max(u.shared.connects.Load()-1, 0)
		} else {
			st.Up[name], st.Restarts[name] = false, 0
		}
		if len(u.cfg.Command) == 0 {
			continue
		}
		st.Processes[name] += 0
		if u.shared.process() != nil {
			st.Processes[name]++
		}
	}
	g.sessions.Range(func(_, v any) bool {
		ds := v.(*dsession)
		ds.mu.Lock()
		for name, c := range ds.conns {
			if c.process() != nil {
				st.Processes[name]++
			}
		}
		ds.mu.Unlock()
		return true
	})
	return st
}

// WriteReadiness writes the readiness body's counts (after its status
// line): "sessions N/MAX" and "upstream_processes N", one a line.
func (g *Gateway) WriteReadiness(w io.Writer) {
	st := g.Stats()
	n := 0
	for _, c := range st.Processes {
		n += c
	}
	fmt.Fprintf(w, "sessions %d/%d\nupstream_processes %d\n", st.Sessions, st.MaxSessions, n)
}

// gatewayDescs are the metrics of Gateway.Collector.
var (
	descSessions         = prometheus.NewDesc("toolgate_mcp_sessions", "Open MCP sessions.", nil, nil)
	descSessionsMax      = prometheus.NewDesc("toolgate_mcp_sessions_max", "The open MCP sessions cap (mcp.max_sessions).", nil, nil)
	descSessionsRefused  = prometheus.NewDesc("toolgate_mcp_sessions_refused_total", "initialize requests refused by a session cap.", []string{"limit"}, nil)
	descProcesses        = prometheus.NewDesc("toolgate_upstream_processes", "Running upstream stdio server processes.", []string{"server"}, nil)
	descIdleStops        = prometheus.NewDesc("toolgate_upstream_idle_stops_total", "Per-client upstream sessions stopped by servers[].idle_timeout.", nil, nil)
	descUpstreamUp       = prometheus.NewDesc("toolgate_upstream_up", "1 while the gateway's shared session to the upstream server is connected, else 0.", []string{"server"}, nil)
	descUpstreamRestarts = prometheus.NewDesc("toolgate_upstream_restarts_total", "Reconnects of the gateway's shared session to the upstream server since start.", []string{"server"}, nil)
)

// Collector returns a Prometheus collector of the gateway's counts, read
// from Stats at each scrape: toolgate_mcp_sessions, toolgate_mcp_sessions_max,
// toolgate_mcp_sessions_refused_total{limit}, toolgate_upstream_processes{server},
// toolgate_upstream_idle_stops_total, toolgate_upstream_up{server} and
// toolgate_upstream_restarts_total{server}. server label values are the
// configured servers[].name. Safe for concurrent use.
func (g *Gateway) Collector() prometheus.Collector { return gatewayCollector{g} }

type gatewayCollector struct{ g *Gateway }

func (c gatewayCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descSessions, descSessionsMax, descSessionsRefused, descProcesses, descIdleStops, descUpstreamUp, descUpstreamRestarts} {
		ch <- d
	}
}

func (c gatewayCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.g.Stats()
	ch <- prometheus.MustNewConstMetric(descSessions, prometheus.GaugeValue, float64(st.Sessions))
	ch <- prometheus.MustNewConstMetric(descSessionsMax, prometheus.GaugeValue, float64(st.MaxSessions))
	ch <- prometheus.MustNewConstMetric(descSessionsRefused, prometheus.CounterValue, float64(st.RefusedTotal), "mcp.max_sessions")
	ch <- prometheus.MustNewConstMetric(descSessionsRefused, prometheus.CounterValue, float64(st.RefusedPrincipal), "mcp.max_sessions_per_principal")
	for name, n := range st.Processes {
		ch <- prometheus.MustNewConstMetric(descProcesses, prometheus.GaugeValue, float64(n), name)
	}
	ch <- prometheus.MustNewConstMetric(descIdleStops, prometheus.CounterValue, float64(st.IdleStops))
	for name, up := range st.Up {
		v := 0.0
		if up {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(descUpstreamUp, prometheus.GaugeValue, v, name)
		ch <- prometheus.MustNewConstMetric(descUpstreamRestarts, prometheus.CounterValue, float64(st.Restarts[name]), name)
	}
}

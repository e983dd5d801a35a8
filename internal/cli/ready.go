package cli

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// Readiness probes of the shared backends (/readyz).
const (
	// readyPingTimeout bounds one backend probe.
	readyPingTimeout = 2 * time.Second
	// readyCacheFor is how long a probe's answer is reused, so that
	// /readyz (unauthenticated) cannot make the gateway hammer its
	// backends: at most one probe per backend per readyCacheFor.
	readyCacheFor = time.Second
)

// backendProbe is one shared backend /readyz checks: what it is called in
// the answer (never its DSN or URL) and how to ping it.
type backendProbe struct {
	name string // e.g. "store (postgres)"
	ping func(context.Context) error
}

// readiness answers whether the gateway's shared backends answer, from
// probes at most readyCacheFor old. Safe for concurrent use: concurrent
// callers wait for one round of probes.
type readiness struct {
	probes []backendProbe
	log    *slog.Logger

	mu   sync.Mutex
	at   time.Time
	down []string // names of the probes that failed at `at`
}

// unavailable returns the names of the backends that do not answer (nil
// when all do or there are none), probing them if the last answer is
// older than readyCacheFor. A failed probe is logged when its state
// changes.
func (r *readiness) unavailable(ctx context.Context) []string {
	if len(r.probes) == 0 {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.at.IsZero() && time.Since(r.at) < readyCacheFor {
		return r.down
	}
	was := map[string]bool{}
	for _, n := range r.down {
		was[n] = true
	}
	var down []string
	for _, p := range r.probes {
		pctx, cancel := context.WithTimeout(ctx, readyPingTimeout)
		err := p.ping(pctx)
		cancel()
		switch {
		case err != nil:
			down = append(down, p.name)
			if !was[p.name] {
				r.log.Warn("readiness: backend unavailable", "backend", p.name, "err", err)
			}
		case was[p.name]:
			r.log.Info("readiness: backend answers again", "backend", p.name)
		}
	}
	r.at, r.down = time.Now(), down
	return down
}

// Package metrics is toolgate's instrumentation: the Recorder interface the
// pipeline (and other parts of the gateway) call at the points an operator
// measures, a no-op Recorder (Nop) that costs a library user nothing, and
// Prometheus, a Recorder backed by a github.com/prometheus/client_golang
// registry that `toolgate serve` exposes on /metrics in the Prometheus text
// exposition format.
//
// Cardinality is bounded: label values come only from the catalog (tool
// ids, rule ids, server names) and closed enums (transport, status,
// effect, outcome, reason); no principal, tenant or argument content is
// ever a label. Tool ids and rule ids are further capped (MaxToolIDs,
// MaxRuleIDs distinct values per process): later values are counted under
// "other".
package metrics

import (
	"sync"
	"time"
)

// Recorder receives the gateway's measurements. Implementations must be
// safe for concurrent use and cheap: they are called on every tool call.
type Recorder interface {
	// ToolCall records one finished tool call (including a gate refusal):
	// toolID is the catalog's canonical id, transport one of mcp, http or
	// native, status one of ok, error, forbidden or rate_limited; d is the
	// call's duration from its start in the pipeline to its recorded
	// outcome.
	ToolCall(toolID, transport, status string, d time.Duration)
	// PolicyDecision records one policy decision: effect is allow, deny or
	// require_approval, ruleID the deciding rule's id ("" for the default),
	// d the time the decision took.
	PolicyDecision(effect, ruleID string, d time.Duration)
	// UpstreamCall records one call forwarded to the upstream MCP server
	// named server (the config's servers[].name), d its duration.
	UpstreamCall(server string, d time.Duration)
	// StoreCommit records how long a call's outcome (its closing events
	// and receipt) took to become durable in the store, as the caller
	// waits for it (group commit included).
	StoreCommit(d time.Duration)
	// StoreUnavailable records a call answered audit_unavailable because
	// the store could not record it.
	StoreUnavailable()
}

// Nop is the Recorder that records nothing (the default of every option
// that takes a Recorder).
var Nop Recorder = nop{}

type nop struct{}

func (nop) ToolCall(string, string, string, time.Duration) {}
func (nop) PolicyDecision(string, string, time.Duration)   {}
func (nop) UpstreamCall(string, time.Duration)             {}
func (nop) StoreCommit(time.Duration)                      {}
func (nop) StoreUnavailable()                              {}

// OrNop returns r, or Nop when r is nil.
func OrNop(r Recorder) Recorder {
	if r == nil {
		return Nop
	}
	return r
}

// IsNop reports whether r records nothing (nil or Nop): callers may then
// skip measuring (reading the clock) altogether.
func IsNop(r Recorder) bool { return r == nil || r == Nop }

// Other is the label value that stands for every value past a cap.
const Other = "other"

// capSet admits at most max distinct label values; later ones map to
// Other. Safe for concurrent use.
type capSet struct {
	max  int
	mu   sync.RWMutex
	seen map[string]struct{}
}

func newCapSet(max int) *capSet { return &capSet{max: max, seen: map[string]struct{}{}} }

// value returns v when it is admitted (seen before, or room remains), else
// Other.
func (c *capSet) value(v string) string {
	c.mu.RLock()
	_, ok := c.seen[v]
	full := len(c.seen) >= c.max
	c.mu.RUnlock()
	if ok {
		return v
	}
	if full {
		return Other
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.seen[v]; ok {
		return v
	}
	if len(c.seen) >= c.max {
		return Other
	}
	c.seen[v] = struct{}{}
	return v
}

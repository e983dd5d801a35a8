package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"strings"

	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/identity"
	"github.com/toolgate/toolgate/internal/pipeline"
	"github.com/toolgate/toolgate/store"
)

// eventFilter keeps a tool the reader may not see out of the event reads
// (GET /v1/runs/{runId}/events, GET /v1/events/stream and the event-log
// seam). A refused call of a hidden tool is recorded (DESIGN.md decision
// 5) under the run id its caller chose; showing that record to the caller
// would tell a hidden tool from an unknown one, which the 404 of POST
// /v1/calls does not.
//
// An event is shown iff it belongs to the reader (audit.Event.Principal is
// the reader's id) or the reader holds Options.AuditScope (then every
// event of its tenant counts, including those of no principal), and every
// tool its payload names is visible to the reader. Other principals'
// events are skipped wherever the reads page or stream: a run holding
// none of the reader's events answers 404 like an unknown run, and the
// SSE stream sends neither their data nor their ids (cursors), so that
// resuming never reveals them either. The payload names a tool through its top-level string members
// toolName (agent.toolCalled, agent.toolReturned) and toolId (tool.session.*,
// toolgate.approval.*, and the optional catalog id of agent.toolCalled):
//
//   - a full toolId is visible iff it is in pipeline.Disclose's answer for
//     the reader (so a tool no longer in the catalog is not: fail closed);
//   - "mcp:<server>" (the gateway's tool.session.* events, which are per
//     upstream server) is visible iff the reader sees at least one tool of
//     that server ("mcp:<server>." prefix);
//   - with Options.TestSeams, a "native:" id that is not in the gate's
//     catalog is the conformance seams' synthetic tool (seamPipeline): it
//     exists only in the seam's own catalog, which every authenticated
//     caller may call, so it is visible;
//   - an event whose payload is not a JSON object, or names no tool, is
//     shown; a payload that does not parse is not (fail closed).
//
// The visible set is computed once (Disclose) and recomputed when the
// pipeline's state (catalog, policy) is swapped: refresh compares the state
// pointer. A filter belongs to one request (or one SSE stream) and is not
// safe for concurrent use.
type eventFilter struct {
	h       *Handler
	p       identity.Principal
	all     bool // the reader holds Options.AuditScope: every principal's events
	state   *pipeline.State
	tools   map[string]struct{} // visible canonical toolIds
	servers map[string]struct{} // upstream servers with at least one visible tool
}

// newEventFilter returns the filter of reader p, computed now.
func (h *Handler) newEventFilter(ctx context.Context, p identity.Principal) *eventFilter {
	f := &eventFilter{h: h, p: p, all: hasScope(p, h.opts.AuditScope)}
	f.refresh(ctx)
	return f
}

// refresh recomputes the visible set if the pipeline's state changed since
// it was last computed. The state is read before Disclose runs, so a swap
// racing with Disclose is seen by the next refresh.
func (f *eventFilter) refresh(ctx context.Context) {
	st := f.h.pipe.State()
	if st == f.state && f.tools != nil {
		return
	}
	f.state = st
	f.tools, f.servers = map[string]struct{}{}, map[string]struct{}{}
	for _, t := range f.h.pipe.Disclose(ctx, f.p) {
		id := t.Descriptor.ToolID
		f.tools[id] = struct{}{}
		if rest, ok := strings.CutPrefix(id, "mcp:"); ok {
			if server, _, ok := strings.Cut(rest, "."); ok {
				f.servers[server] = struct{}{}
			}
		}
	}
}

// visible reports whether the reader may see ev (see eventFilter).
func (f *eventFilter) visible(ev *audit.Event) bool {
	if !f.all && ev.Principal != f.p.ID {
		return false
	}
	names, ok := payloadTools(ev.Payload)
	if !ok {
		return false
	}
	for _, n := range names {
		if !f.visibleTool(n) {
			return false
		}
	}
	return true
}

// visibleTool reports whether the tool (or upstream server) id names is
// visible to the reader.
func (f *eventFilter) visibleTool(id string) bool {
	if _, ok := f.tools[id]; ok {
		return true
	}
	if server, ok := strings.CutPrefix(id, "mcp:"); ok && !strings.Contains(server, ".") {
		_, ok := f.servers[server]
		return ok
	}
	if f.h.opts.TestSeams && strings.HasPrefix(id, "native:") {
		if _, inCatalog := f.state.Catalog.Lookup(id); !inCatalog {
			return true // the seams' synthetic tool
		}
	}
	return false
}

// payloadTools returns the non-empty string values of the top-level members
// toolName and toolId of payload, every occurrence (a duplicated member
// counts each time). ok is false when payload is not valid JSON; a payload
// that is not an object names no tool.
func payloadTools(payload json.RawMessage) (names []string, ok bool) {
	t := bytes.TrimLeft(payload, " \t\r\n")
	if len(t) == 0 || t[0] != '{' {
		return nil, len(t) == 0 || json.Valid(t)
	}
	dec := json.NewDecoder(bytes.NewReader(t))
	if _, err := dec.Token(); err != nil { // '{'
		return nil, false
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, false
		}
		key, _ := tok.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, false
		}
		if key != "toolName" && key != "toolId" {
			continue
		}
		var s string
		if json.Unmarshal(v, &s) == nil && s != "" {
			names = append(names, s)
		}
	}
	if _, err := dec.Token(); err != nil { // '}'
		return nil, false
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, false // trailing data
	}
	return names, true
}

// runHasVisible reports whether run (tenant, runID) holds at least one
// event f shows, reading it from the first event on.
func (h *Handler) runHasVisible(ctx context.Context, f *eventFilter, tenant, runID string) (bool, error) {
	after := int64(-1)
	for {
		page, err := h.events.EventsByRun(ctx, tenant, runID, after, store.MaxLimit)
		if err != nil {
			return false, err
		}
		for i := range page {
			if f.visible(&page[i]) {
				return true, nil
			}
		}
		if len(page) < store.MaxLimit {
			return false, nil
		}
		after = page[len(page)-1].Sequence
	}
}

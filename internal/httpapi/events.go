package httpapi

import (
	"bufio"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/store"
)

// RunEvents is the answer of GET /v1/runs/{runId}/events: the run's events
// (run-event.schema.json documents) ordered by sequence. NextAfter is set
// when more events may follow: pass it as ?after= to read on. A plain value.
type RunEvents struct {
	Events    []audit.Event `json:"events"`
	NextAfter *int64        `json:"nextAfter,omitempty"`
}

// runEvents serves GET /v1/runs/{runId}/events[?type=&after=&limit=]: the
// events of the caller's tenant's run runId with sequence > after (default
// -1: from the first), at most limit (1–1000, default 1000) scanned,
// optionally only those of type `type`. A run the caller's tenant does not
// have (never written, or another tenant's) is 404 not_found; the store
// query itself is tenant-scoped. Errors: invalid_argument for a malformed
// after or limit.
func (h *Handler) runEvents(w http.ResponseWriter, r *http.Request, p policy.Principal) error {
	runID := r.PathValue("runId")
	q := r.URL.Query()
	after := int64(-1)
	if v := q.Get("after"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < -1 {
			return invalid("after", "after %q is not a sequence number (an integer ≥ -1)", v)
		}
		after = n
	}
	limit := store.MaxLimit
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > store.MaxLimit {
			return invalid("limit", "limit %q is not an integer from 1 to %d", v, store.MaxLimit)
		}
		limit = n
	}
	typ := q.Get("type")
	page, err := h.events.EventsByRun(r.Context(), p.Tenant, runID, after, limit)
	if err != nil {
		return err
	}
	if len(page) == 0 {
		first, err := h.events.EventsByRun(r.Context(), p.Tenant, runID, -1, 1)
		if err != nil {
			return err
		}
		if len(first) == 0 {
			return errcode.Errorf(errcode.NotFound, "unknown run %q", runID)
		}
	}
	out := RunEvents{Events: []audit.Event{}}
	for _, ev := range page {
		if typ == "" || ev.Type == typ {
			out.Events = append(out.Events, ev)
		}
	}
	if len(page) == limit {
		last := page[len(page)-1].Sequence
		out.NextAfter = &last
	}
	h.writeJSON(w, r, http.StatusOK, out)
	return nil
}

// stream serves GET /v1/events/stream: Server-Sent Events of the caller's
// tenant's events as they are stored (store Follow), each as
//
//	id: <cursor>
//	data: <run-event.schema.json document>
//
// Resume with the Last-Event-ID header (or ?cursor=) set to the last id
// received: delivery continues right after that event, with no gap and no
// duplicate. Without one the stream starts with the events stored after it
// opens; ?from=start replays every stored event first. ?type= and ?runId=
// keep only matching events. A comment line is sent every
// Options.Heartbeat. The stream ends when the client goes, the store
// closes or the handler is closed. Errors (before the stream starts):
// invalid_argument for a malformed cursor or from; audit_unavailable.
func (h *Handler) stream(w http.ResponseWriter, r *http.Request, p policy.Principal) error {
	q := r.URL.Query()
	cursor := r.Header.Get("Last-Event-ID")
	if cursor == "" {
		cursor = q.Get("cursor")
	}
	if cursor == "" {
		switch from := q.Get("from"); from {
		case "", "now":
		case "start":
			cursor = store.FromStart
		default:
			return invalid("from", "from %q is not start or now", from)
		}
	}
	if _, err := store.ParseCursor(cursor); err != nil {
		return invalid("cursor", "malformed cursor (Last-Event-ID or cursor): use an id this stream sent")
	}
	fl, ok := w.(http.Flusher)
	if !ok {
		return errcode.New(errcode.Internal, "streaming is not supported by this connection")
	}
	typ, runID := q.Get("type"), q.Get("runId")
	ctx, cancel := h.detach(r)
	defer cancel()
	ch, err := h.events.Follow(ctx, p.Tenant, cursor)
	if err != nil {
		return err
	}
	hdr := w.Header()
	hdr.Set("Content-Type", "text/event-stream")
	hdr.Set("Cache-Control", "no-store")
	hdr.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	bw := bufio.NewWriter(w)
	bw.WriteString(": toolgate event stream\n\n")
	bw.Flush()
	fl.Flush()
	tick := time.NewTicker(h.opts.Heartbeat)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			bw.WriteString(": keep-alive\n\n")
		case f, ok := <-ch:
			if !ok {
				return nil
			}
			if (typ != "" && f.Event.Type != typ) || (runID != "" && f.Event.RunID != runID) {
				continue
			}
			data, err := json.Marshal(f.Event)
			if err != nil {
				h.log.Error("event stream: encoding an event", "eventId", f.Event.EventID, "err", err)
				continue
			}
			bw.WriteString("id: " + sseField(f.Cursor) + "\ndata: ")
			bw.Write(data)
			bw.WriteString("\n\n")
		}
		if err := bw.Flush(); err != nil {
			return nil // the client went away
		}
		fl.Flush()
	}
}

// sseField strips the line breaks an SSE field value cannot hold (cursors
// are base64url and never have any).
func sseField(s string) string { return strings.NewReplacer("\n", "", "\r", "").Replace(s) }

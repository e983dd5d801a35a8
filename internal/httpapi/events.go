package httpapi

import (
	"bufio"
	"encoding/json"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/identity"
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
// optionally only those of type `type`, without the events naming a tool
// the caller may not see (eventFilter). A run the caller's tenant does not
// have (never written, or another tenant's), and a run none of whose events
// the caller may see, is 404 not_found with the same body; the store query
// itself is tenant-scoped. NextAfter is the sequence of the last event
// scanned, shown or not. Errors: invalid_argument for a malformed after,
// limit or type (validEventType).
func (h *Handler) runEvents(w http.ResponseWriter, r *http.Request, p identity.Principal) error {
	runID := r.PathValue("runId")
	q := r.URL.Query()
	after := int64(-1)
	if v := q.Get("after"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < -1 {
			return invalid("after", "after %q is not a sequence number (an integer ≥ -1)", clip(v))
		}
		after = n
	}
	limit := store.MaxLimit
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > store.MaxLimit {
			return invalid("limit", "limit %q is not an integer from 1 to %d", clip(v), store.MaxLimit)
		}
		limit = n
	}
	typ, err := typeFilter(q)
	if err != nil {
		return err
	}
	page, err := h.events.EventsByRun(r.Context(), p.Tenant, runID, after, limit)
	if err != nil {
		return err
	}
	f := h.newEventFilter(r.Context(), p)
	out := RunEvents{Events: []audit.Event{}}
	shown := false
	for i := range page {
		if !f.visible(&page[i]) {
			continue
		}
		shown = true
		if typ == "" || page[i].Type == typ {
			out.Events = append(out.Events, page[i])
		}
	}
	if !shown {
		ok, err := h.runHasVisible(r.Context(), f, p.Tenant, runID)
		if err != nil {
			return err
		}
		if !ok {
			return unknownRun(runID)
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
// keep only matching events; an event naming a tool the caller may not see
// is never sent (eventFilter, its visible set recomputed when the gate's
// catalog or policy is swapped). A comment line is sent every
// Options.Heartbeat. The stream ends when the client goes, the store
// closes, the handler is closed, or the caller's authentication ends (g:
// the credential's expiry, a console sign-out, or a recheck, made before
// every event sent and at every heartbeat, that refuses it). Errors (before the stream starts):
// invalid_argument for a malformed cursor, from or type;
// audit_unavailable.
func (h *Handler) stream(w http.ResponseWriter, r *http.Request, p identity.Principal, g StreamGrant) error {
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
			return invalid("from", "from %q is not start or now", clip(from))
		}
	}
	if _, err := store.ParseCursor(cursor); err != nil {
		return invalid("cursor", "malformed cursor (Last-Event-ID or cursor): use an id this stream sent")
	}
	fl, ok := w.(http.Flusher)
	if !ok {
		return errcode.New(errcode.Internal, "streaming is not supported by this connection")
	}
	typ, err := typeFilter(q)
	if err != nil {
		return err
	}
	runID := q.Get("runId")
	ctx, cancel := h.detach(r)
	defer cancel()
	filter := h.newEventFilter(ctx, p)
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
	var expired <-chan time.Time
	if !g.Expires.IsZero() {
		t := time.NewTimer(time.Until(g.Expires))
		defer t.Stop()
		expired = t.C
	}
	end := func(why string) error {
		bw.WriteString(": " + why + "; the stream ends\n\n")
		bw.Flush()
		fl.Flush()
		return nil
	}
	stillValid := func() bool { return g.Recheck == nil || g.Recheck(time.Now()) == nil }
	refused := func() error {
		select {
		case <-g.Done: // the recheck failed because the session ended
			return end("the session ended")
		default:
			return end("the credential is no longer accepted")
		}
	}
	var resume <-chan time.Time // set while the feed is being followed again
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-g.Done:
			return end("the session ended")
		case <-expired:
			return end("the credential expired")
		case <-tick.C:
			if !stillValid() {
				return refused()
			}
			bw.WriteString(": keep-alive\n\n")
		case <-resume:
			// The store's feed ended (it could not be read): follow it
			// again after the last event this stream saw, so that the
			// client misses nothing. A stream that started "from now" and
			// saw no event yet has no position to resume from: it ends,
			// and the client reconnects.
			resume = nil
			if ch, err = h.events.Follow(ctx, p.Tenant, cursor); err != nil {
				if errcode.CodeOf(err) != errcode.AuditUnavailable {
					return nil
				}
				ch, resume = nil, time.After(resumeDelay)
			}
		case f, ok := <-ch:
			if !ok {
				if ctx.Err() != nil || cursor == "" {
					return nil
				}
				h.log.Warn("event stream: the store's feed ended; following it again", "tenant", p.Tenant)
				bw.WriteString(": the store cannot be read; resuming\n\n")
				ch, resume = nil, time.After(resumeDelay)
				break
			}
			cursor = f.Cursor
			if (typ != "" && f.Event.Type != typ) || (runID != "" && f.Event.RunID != runID) {
				continue
			}
			filter.refresh(ctx)
			if !filter.visible(&f.Event) {
				continue
			}
			if !g.Expires.IsZero() && !time.Now().Before(g.Expires) {
				return end("the credential expired")
			}
			if !stillValid() {
				return refused()
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

// resumeDelay is how long an event stream waits before it follows the
// store's feed again after the feed ended.
const resumeDelay = time.Second

// sseField strips the line breaks an SSE field value cannot hold (cursors
// are base64url and never have any).
func sseField(s string) string { return strings.NewReplacer("\n", "", "\r", "").Replace(s) }

// unknownRun is the one answer for a run the caller's tenant does not have
// and for a run none of whose events the caller may see.
func unknownRun(runID string) error {
	return errcode.Errorf(errcode.NotFound, "unknown run %q", clip(runID))
}

// runEventTypes are the run-event types toolgate emits (run-event.schema.json
// RunEventType values and toolgate's vendor types), each accepted by the
// ?type= filter of the event reads.
var runEventTypes = []string{
	audit.TypeToolCalled, audit.TypeToolReturned, audit.TypeSessionOpened, audit.TypeSessionClosed,
	"toolgate.approval.requested", "toolgate.approval.resolved",
}

// vendorEventType is the OpenWOP vendor event-type pattern.
var vendorEventType = regexp.MustCompile(`^[a-z][a-zA-Z0-9_-]*(\.[a-zA-Z0-9_-]+)+$`)

// validEventType reports whether typ is a value the ?type= filter accepts:
// one of runEventTypes or a string matching the vendor pattern
// ^[a-z][a-zA-Z0-9_-]*(\.[a-zA-Z0-9_-]+)+$.
func validEventType(typ string) bool {
	return slices.Contains(runEventTypes, typ) || vendorEventType.MatchString(typ)
}

// typeFilter returns the ?type= of q ("" when absent). Errors:
// invalid_argument (details.field "type") when it is given more than once
// or is not a valid event type (validEventType; the empty string is not).
func typeFilter(q url.Values) (string, error) {
	vs, ok := q["type"]
	if !ok {
		return "", nil
	}
	if len(vs) != 1 {
		return "", invalid("type", "type may be given only once")
	}
	if !validEventType(vs[0]) {
		return "", invalid("type", "type %q is not a run-event type (for example agent.toolReturned, or a vendor type like acme.thing.done)", clip(vs[0]))
	}
	return vs[0], nil
}

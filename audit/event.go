package audit

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/toolgate/toolgate/errcode"
)

// The OpenWOP run-event types toolgate emits (run-event.schema.json
// RunEventType; RFC 0002 / RFC 0064 for the call pair, RFC 0078 §D for the
// session bracket).
const (
	// TypeToolCalled is emitted before a tool is invoked; payload ToolCalled.
	TypeToolCalled = "agent.toolCalled"
	// TypeToolReturned is emitted when a call ends or is refused by a gate;
	// payload ToolReturned.
	TypeToolReturned = "agent.toolReturned"
	// TypeSessionOpened opens a multi-step tool session; payload SessionOpened.
	TypeSessionOpened = "tool.session.opened"
	// TypeSessionClosed closes a tool session; payload SessionClosed.
	TypeSessionClosed = "tool.session.closed"
)

// AgentSystem is the reserved synthetic agentId for calls no agent made
// (host-initiated egress, direct HTTP calls without an agentId). RFC 0064 §B:
// agentId stays required; transport tells the sources apart.
const AgentSystem = "core.system"

// Envelope and id length limits, in Unicode code points, as in
// run-event.schema.json (eventId, runId, causationId: 1–128) and
// run-event-payloads.schema.json (agentId: 3–256).
const (
	maxIDLen      = 128
	minAgentIDLen = 3
	maxAgentIDLen = 256
)

// timestampLayout is the wire form of Event.Timestamp: RFC 3339, UTC,
// fixed-width millisecond precision (the form JavaScript's
// Date.prototype.toISOString produces, so the OpenWOP reference hosts and
// conformance suites parse it losslessly, and so that the strings sort).
const timestampLayout = "2006-01-02T15:04:05.000Z"

// Event is one OpenWOP run event: the envelope of run-event.schema.json
// ("RunEventDoc", CONTRACT §1.5) around a type-specific payload.
//
// Wire form (JSON): eventId, runId, type, payload, timestamp, sequence, and
// causationId / schemaVersion when set. Tenant is never on the wire; it is
// kept so that reads can be tenant-scoped (a run is identified by the pair
// (Tenant, RunID), see Log).
//
// Build events with NewEvent and ReturnedEvent; the Log assigns Sequence on
// Append. An Event is a plain value: it is not safe to modify one while
// another goroutine reads it, and Payload must not be modified once the event
// has been appended.
type Event struct {
	// EventID is globally unique and opaque to consumers, 1–128 characters
	// (NewEventID).
	EventID string
	// RunID is the run this event belongs to, 1–128 characters.
	RunID string
	// Type is a RunEventType value (TypeToolCalled, ...) or a vendor type
	// (ValidEventType).
	Type string
	// Payload is the type-specific payload as JSON (any JSON value).
	Payload json.RawMessage
	// Timestamp is when the event was built, in UTC. NewEvent truncates it to
	// the millisecond; it is marshalled as RFC 3339 with exactly three
	// fractional digits and a "Z" zone.
	Timestamp time.Time
	// Sequence is the event's position in its run: 0 for the first event,
	// then +1 per event, without gaps. Assigned by Log.Append; any value set
	// before is overwritten.
	Sequence int64
	// CausationID is the eventId of the event that caused this one, or "" for
	// none (RFC 0002 §B). An agent.toolReturned's CausationID is its
	// agent.toolCalled's EventID (ReturnedEvent).
	CausationID string
	// SchemaVersion is the per-event payload schema version; 0 means absent
	// (omitted on the wire). toolgate leaves it 0.
	SchemaVersion int
	// Tenant scopes the event for reads; it is not marshalled ("" for a
	// single-tenant deployment).
	Tenant string
	// Principal is the id of the principal the event belongs to (the
	// call's principal; an approval's requester), so that reads can be
	// scoped to it; it is not marshalled. "" for an event of no principal
	// (only tenant-wide readers see it).
	Principal string
}

// eventWire is the JSON shape of Event.
type eventWire struct {
	EventID       string          `json:"eventId"`
	RunID         string          `json:"runId"`
	Type          string          `json:"type"`
	Payload       json.RawMessage `json:"payload"`
	Timestamp     string          `json:"timestamp"`
	Sequence      int64           `json:"sequence"`
	CausationID   string          `json:"causationId,omitempty"`
	SchemaVersion int             `json:"schemaVersion,omitempty"`
}

// eventWireIn is the JSON shape of Event for decoding; pointers tell a
// missing required field from a zero one.
type eventWireIn struct {
	EventID       *string         `json:"eventId"`
	RunID         *string         `json:"runId"`
	Type          *string         `json:"type"`
	Payload       json.RawMessage `json:"payload"`
	Timestamp     *string         `json:"timestamp"`
	Sequence      *int64          `json:"sequence"`
	CausationID   string          `json:"causationId"`
	SchemaVersion int             `json:"schemaVersion"`
}

// MarshalJSON encodes e as a run-event.schema.json document. A nil Payload is
// encoded as null. It fails with the json package's error if Payload is not
// valid JSON; it does not otherwise validate e (see Validate).
func (e Event) MarshalJSON() ([]byte, error) {
	payload := e.Payload
	if len(payload) == 0 {
		payload = json.RawMessage("null")
	}
	return json.Marshal(eventWire{
		EventID:       e.EventID,
		RunID:         e.RunID,
		Type:          e.Type,
		Payload:       payload,
		Timestamp:     string(e.Timestamp.UTC().AppendFormat(nil, timestampLayout)),
		Sequence:      e.Sequence,
		CausationID:   e.CausationID,
		SchemaVersion: e.SchemaVersion,
	})
}

// UnmarshalJSON decodes a run-event.schema.json document. It requires the
// envelope's required members (eventId, runId, type, payload, timestamp,
// sequence), an RFC 3339 timestamp (any precision; stored in UTC) and a
// sequence ≥ 0, and fails with *errcode.Error InvalidArgument otherwise. It
// accepts any event type, as readers must ignore, not reject, unknown types
// (COMPATIBILITY.md); Validate applies the writer-side rules. Unknown
// envelope members are dropped.
func (e *Event) UnmarshalJSON(data []byte) error {
	var w eventWireIn
	if err := json.Unmarshal(data, &w); err != nil {
		return errcode.Wrap(errcode.InvalidArgument, err, "decode run event")
	}
	switch {
	case w.EventID == nil:
		return invalid("eventId", "decode run event: eventId is required")
	case w.RunID == nil:
		return invalid("runId", "decode run event: runId is required")
	case w.Type == nil:
		return invalid("type", "decode run event: type is required")
	case len(w.Payload) == 0:
		return invalid("payload", "decode run event: payload is required")
	case w.Timestamp == nil:
		return invalid("timestamp", "decode run event: timestamp is required")
	case w.Sequence == nil:
		return invalid("sequence", "decode run event: sequence is required")
	case *w.Sequence < 0:
		return invalid("sequence", "decode run event: sequence must be >= 0")
	}
	ts, err := time.Parse(time.RFC3339Nano, *w.Timestamp)
	if err != nil {
		return invalid("timestamp", "decode run event: timestamp is not RFC 3339: %v", err)
	}
	*e = Event{
		EventID:       *w.EventID,
		RunID:         *w.RunID,
		Type:          *w.Type,
		Payload:       w.Payload,
		Timestamp:     ts.UTC(),
		Sequence:      *w.Sequence,
		CausationID:   w.CausationID,
		SchemaVersion: w.SchemaVersion,
	}
	return nil
}

// Validate checks the envelope rules a writer must follow (run-event.schema.json,
// CONTRACT §1.5): EventID and RunID are 1–128 characters of valid UTF-8, Type
// passes ValidEventType, Payload is valid JSON, Timestamp is set and within
// years 0000–9999, Sequence ≥ 0, CausationID is "" or 1–128 characters,
// SchemaVersion ≥ 0. It does not look inside Payload (NewEvent validates
// toolgate's own payloads). It returns *errcode.Error InvalidArgument with
// details.field naming the first offending member, or nil.
// Safe for concurrent use on an event nobody modifies.
func (e *Event) Validate() error {
	if err := e.validateEnvelope(); err != nil {
		return err
	}
	if !json.Valid(e.Payload) {
		return invalid("payload", "invalid run event: payload is not valid JSON")
	}
	return nil
}

// validateEnvelope is Validate without the O(len(Payload)) well-formedness
// scan of Payload (Payload must still be non-empty).
func (e *Event) validateEnvelope() error {
	if err := checkID("eventId", e.EventID, 1, maxIDLen); err != nil {
		return err
	}
	if err := checkID("runId", e.RunID, 1, maxIDLen); err != nil {
		return err
	}
	if !ValidEventType(e.Type) {
		return invalid("type", "invalid run event: type %q is neither an OpenWOP event type nor a vendor-prefixed one", e.Type)
	}
	if len(e.Payload) == 0 {
		return invalid("payload", "invalid run event: payload is required")
	}
	if e.Timestamp.IsZero() {
		return invalid("timestamp", "invalid run event: timestamp is required")
	}
	if y := e.Timestamp.UTC().Year(); y < 0 || y > 9999 {
		return invalid("timestamp", "invalid run event: timestamp year %d is out of range", y)
	}
	if e.Sequence < 0 {
		return invalid("sequence", "invalid run event: sequence must be >= 0")
	}
	if e.CausationID != "" {
		if err := checkID("causationId", e.CausationID, 1, maxIDLen); err != nil {
			return err
		}
	}
	if e.SchemaVersion < 0 {
		return invalid("schemaVersion", "invalid run event: schemaVersion must be >= 0")
	}
	return nil
}

// NewEventID returns a new event id: "ev_" followed by 32 lowercase hex
// digits (35 characters): 48 bits of Unix milliseconds, then 80 bits from
// crypto/rand. Ids are roughly time-ordered so that a store's unique index
// on them appends instead of writing random index pages (about 1.6× the
// SQLite append throughput); they reveal nothing the event's own timestamp
// does not. Consumers must treat the id as opaque (run-event.schema.json
// eventId). Collisions within one millisecond are negligible (birthday bound
// 2^40 ids per ms). Safe for concurrent use; it cannot fail (crypto/rand.Read
// never returns an error since Go 1.24).
func NewEventID() string {
	var raw [16]byte
	ms := uint64(time.Now().UnixMilli())
	for i := 0; i < 6; i++ {
		raw[i] = byte(ms >> (40 - 8*i))
	}
	_, _ = rand.Read(raw[6:])
	var buf [3 + 32]byte
	copy(buf[:], "ev_")
	hex.Encode(buf[3:], raw[:])
	return string(buf[:])
}

// NewEvent builds an event of type typ in run runID with a fresh EventID, the
// given causationID ("" for none) and Timestamp now in UTC truncated to the
// millisecond. Sequence is left 0 and Tenant "": Log.Append assigns the
// sequence, and the caller sets Tenant.
//
// payload is marshalled with encoding/json; a json.RawMessage or []byte is
// used as JSON text. toolgate's payload types are validated first
// (ToolCalled.Validate, ToolReturned.Validate, SessionOpened.Validate,
// SessionClosed.Validate; a pointer to one is accepted too), and each must be
// used with its own type: TypeToolCalled, TypeToolReturned, TypeSessionOpened
// or TypeSessionClosed. An agent.toolReturned with status ok or error must
// have a causationID (RFC 0002 §B: the paired agent.toolCalled's eventId,
// see ReturnedEvent); only a gate refusal (forbidden, rate_limited) may have
// none (forbidden-at-load).
//
// Errors (*errcode.Error InvalidArgument, details.field set): runID not 1–128
// characters of valid UTF-8; typ fails ValidEventType; a payload of the wrong
// type for typ or one that fails its Validate; a payload that does not
// marshal to JSON; causationID longer than 128 characters; now is zero.
// Safe for concurrent use.
func NewEvent(runID, typ string, payload any, causationID string, now time.Time) (*Event, error) {
	if err := checkEnvelope(runID, typ, causationID, now); err != nil {
		return nil, err
	}
	// The call pair, built on every call, is encoded without reflection
	// and stored with its event (boxedEvent).
	switch p := payload.(type) {
	case ToolCalled:
		return newCalledEvent(runID, typ, &p, causationID, now)
	case *ToolCalled:
		if p == nil {
			return nil, nilPayload[ToolCalled]()
		}
		return newCalledEvent(runID, typ, p, causationID, now)
	case ToolReturned:
		return newReturnedEvent(runID, typ, &p, causationID, now)
	case *ToolReturned:
		if p == nil {
			return nil, nilPayload[ToolReturned]()
		}
		return newReturnedEvent(runID, typ, p, causationID, now)
	}
	raw, err := marshalPayload(typ, payload)
	if err != nil {
		return nil, err
	}
	return buildEvent(runID, typ, raw, causationID, now), nil
}

// NewCalledEvent builds the agent.toolCalled event of c in run runID: it is
// NewEvent(runID, TypeToolCalled, c, "", now), with the same validation,
// result and errors (*errcode.Error InvalidArgument; a nil c is one), but c
// is neither converted to an interface nor retained, so the caller's
// ToolCalled need not be copied to the heap (the pipeline builds one per
// call). Safe for concurrent use.
func NewCalledEvent(runID string, c *ToolCalled, now time.Time) (*Event, error) {
	if err := checkEnvelope(runID, TypeToolCalled, "", now); err != nil {
		return nil, err
	}
	if c == nil {
		return nil, nilPayload[ToolCalled]()
	}
	return newCalledEvent(runID, TypeToolCalled, c, "", now)
}

// NewReturnedEvent builds the agent.toolReturned event of r in run runID:
// it is NewEvent(runID, TypeToolReturned, r, causationID, now), with the
// same validation, result and errors (*errcode.Error InvalidArgument; a nil
// r is one; status ok or error needs a causationID), without converting r
// to an interface or retaining it, like NewCalledEvent. Unlike
// ReturnedEvent it does not look at the agent.toolCalled event: the caller
// passes its EventID as causationID (and sets Tenant). Safe for concurrent
// use.
func NewReturnedEvent(runID string, r *ToolReturned, causationID string, now time.Time) (*Event, error) {
	if err := checkEnvelope(runID, TypeToolReturned, causationID, now); err != nil {
		return nil, err
	}
	if r == nil {
		return nil, nilPayload[ToolReturned]()
	}
	return newReturnedEvent(runID, TypeToolReturned, r, causationID, now)
}

// newCalledEvent is NewEvent for a ToolCalled payload.
func newCalledEvent(runID, typ string, p *ToolCalled, causationID string, now time.Time) (*Event, error) {
	if err := payloadFor(TypeToolCalled, typ, p.Validate()); err != nil {
		return nil, err
	}
	var scratch [eventScratch]byte
	raw, err := p.appendJSON(scratch[:0])
	if err != nil {
		return nil, marshalError(err)
	}
	return boxedEvent(runID, typ, raw, causationID, now), nil
}

// newReturnedEvent is NewEvent for a ToolReturned payload.
func newReturnedEvent(runID, typ string, p *ToolReturned, causationID string, now time.Time) (*Event, error) {
	err := p.Validate()
	if err == nil && causationID == "" && (p.status == StatusOK || p.status == StatusError) {
		err = invalid("causationId", "new event: agent.toolReturned with status %s needs the causationId of its agent.toolCalled", p.status)
	}
	if err := payloadFor(TypeToolReturned, typ, err); err != nil {
		return nil, err
	}
	var scratch [eventScratch]byte
	raw, err := p.appendJSON(scratch[:0])
	if err != nil {
		return nil, marshalError(err)
	}
	return boxedEvent(runID, typ, raw, causationID, now), nil
}

// eventScratch is the size of the stack buffer the call pair's payloads
// are encoded into before boxedEvent copies them.
const eventScratch = 512

// boxedEvent returns a new event (see buildEvent) around a copy of the JSON
// payload raw. A payload of up to 336 bytes (the call pair's are about 130
// to 250) shares one allocation with the Event, sized to a malloc size
// class (the Event is 144 bytes: 320, 384 or 480 bytes in all).
func boxedEvent(runID, typ string, raw []byte, causationID string, now time.Time) *Event {
	var (
		ev      *Event
		payload []byte
	)
	switch n := len(raw); {
	case n <= 176:
		b := new(struct {
			ev  Event
			buf [176]byte
		})
		ev, payload = &b.ev, b.buf[:n:n]
	case n <= 240:
		b := new(struct {
			ev  Event
			buf [240]byte
		})
		ev, payload = &b.ev, b.buf[:n:n]
	case n <= 336:
		b := new(struct {
			ev  Event
			buf [336]byte
		})
		ev, payload = &b.ev, b.buf[:n:n]
	default:
		ev, payload = new(Event), make([]byte, n)
	}
	copy(payload, raw)
	*ev = Event{
		EventID:     NewEventID(),
		RunID:       runID,
		Type:        typ,
		Payload:     payload,
		Timestamp:   now.UTC().Truncate(time.Millisecond),
		CausationID: causationID,
	}
	return ev
}

// checkEnvelope checks NewEvent's envelope arguments.
func checkEnvelope(runID, typ, causationID string, now time.Time) error {
	if err := checkID("runId", runID, 1, maxIDLen); err != nil {
		return err
	}
	if !ValidEventType(typ) {
		return invalid("type", "new event: type %q is neither an OpenWOP event type nor a vendor-prefixed one", typ)
	}
	if causationID != "" {
		if err := checkID("causationId", causationID, 1, maxIDLen); err != nil {
			return err
		}
	}
	if now.IsZero() {
		return invalid("timestamp", "new event: now is the zero time")
	}
	return nil
}

// buildEvent returns a new event with a fresh id around the JSON payload raw.
func buildEvent(runID, typ string, raw json.RawMessage, causationID string, now time.Time) *Event {
	return &Event{
		EventID:     NewEventID(),
		RunID:       runID,
		Type:        typ,
		Payload:     raw,
		Timestamp:   now.UTC().Truncate(time.Millisecond),
		CausationID: causationID,
	}
}

// marshalPayload validates toolgate's session payload types against typ and
// returns the JSON of payload. NewEvent handles ToolCalled and ToolReturned
// itself: toolgate's own encoders produce compact, valid JSON, so it calls
// them directly, skipping the re-scan json.Marshal does on a MarshalJSON
// result.
func marshalPayload(typ string, payload any) (json.RawMessage, error) {
	payload, err := derefPayload(payload)
	if err != nil {
		return nil, err
	}
	var raw []byte
	switch p := payload.(type) {
	case json.RawMessage:
		return compactJSON(p)
	case []byte:
		return compactJSON(p)
	case SessionOpened:
		if err := payloadFor(TypeSessionOpened, typ, p.Validate()); err != nil {
			return nil, err
		}
		raw, err = json.Marshal(p)
	case SessionClosed:
		if err := payloadFor(TypeSessionClosed, typ, p.Validate()); err != nil {
			return nil, err
		}
		raw, err = json.Marshal(p)
	default:
		raw, err = json.Marshal(payload)
	}
	if err != nil {
		return nil, marshalError(err)
	}
	return raw, nil
}

// marshalError is the error NewEvent returns when its payload does not
// marshal: an *errcode.Error as it is, anything else wrapped as
// InvalidArgument with details.field "payload".
func marshalError(err error) error {
	if e := errcode.As(err); e != nil {
		return e
	}
	return errcode.Wrap(errcode.InvalidArgument, err, "new event: marshal payload").
		WithDetails(map[string]any{"field": "payload"})
}

// payloadFor returns an error if a payload for event type want is used for
// an event of type typ, and validateErr otherwise.
func payloadFor(want, typ string, validateErr error) error {
	if want != typ {
		return invalid("type", "new event: a %s payload cannot be used for type %q", want, typ)
	}
	return validateErr
}

// derefPayload replaces a pointer to one of toolgate's session payload types
// by the value it points to; a nil one is an InvalidArgument error.
func derefPayload(payload any) (any, error) {
	switch p := payload.(type) {
	case *SessionOpened:
		return deref(p)
	case *SessionClosed:
		return deref(p)
	}
	return payload, nil
}

// deref returns *p, or an InvalidArgument error naming the payload when p
// is nil.
func deref[T any](p *T) (any, error) {
	if p == nil {
		return nil, nilPayload[T]()
	}
	return *p, nil
}

// nilPayload is the InvalidArgument error for a nil *T payload. It takes
// no pointer, so that its callers' payloads do not escape.
func nilPayload[T any]() error {
	var p *T
	return invalid("payload", "new event: payload is a nil %T", p)
}

// compactJSON checks that raw is JSON text and returns a compacted copy.
func compactJSON(raw []byte) (json.RawMessage, error) {
	if len(raw) == 0 {
		return json.RawMessage("null"), nil
	}
	raw, err := json.Marshal(json.RawMessage(raw))
	if err != nil {
		return nil, errcode.Wrap(errcode.InvalidArgument, err, "new event: payload is not valid JSON").
			WithDetails(map[string]any{"field": "payload"})
	}
	return raw, nil
}

// ReturnedEvent builds the agent.toolReturned event answering called: same
// RunID and Tenant, CausationID = called.EventID (RFC 0002 §B, CONTRACT §4),
// Timestamp now (as NewEvent). r must be for the same call: r.Ref() must
// equal the agentId, toolName, callId and parentCallId of called's payload.
//
// For a refusal that had no agent.toolCalled (forbidden-at-load, CONTRACT
// §1.5), use NewEvent(runID, TypeToolReturned, r, "", now) instead.
//
// Errors (*errcode.Error InvalidArgument): called is nil, is not an
// agent.toolCalled or its payload does not decode; r is for another call; r
// fails Validate; now is zero. Safe for concurrent use.
func ReturnedEvent(called *Event, r ToolReturned, now time.Time) (*Event, error) {
	if called == nil {
		return nil, invalid("causationId", "returned event: called event is nil")
	}
	if called.Type != TypeToolCalled {
		return nil, invalid("causationId", "returned event: causing event is %q, not %s", called.Type, TypeToolCalled)
	}
	if match, ok := matchCallRef(called.Payload, r.ref); !ok || !match {
		ref, err := callRefOf(called.Payload)
		if err != nil {
			return nil, errcode.Wrap(errcode.InvalidArgument, err, "returned event: decode agent.toolCalled payload")
		}
		if ref != r.ref {
			return nil, invalid("callId", "returned event: agent.toolReturned for call %q does not answer agent.toolCalled for call %q", r.ref.CallID, ref.CallID)
		}
	}
	if called.EventID == "" {
		return nil, invalid("causationId", "returned event: called event has no eventId")
	}
	if err := checkEnvelope(called.RunID, TypeToolReturned, called.EventID, now); err != nil {
		return nil, err
	}
	if err := r.Validate(); err != nil {
		return nil, err
	}
	var scratch [eventScratch]byte
	raw, err := r.appendJSON(scratch[:0])
	if err != nil { // error.details does not marshal
		return nil, err
	}
	ev := boxedEvent(called.RunID, TypeToolReturned, raw, called.EventID, now)
	ev.Tenant, ev.Principal = called.Tenant, called.Principal
	return ev, nil
}

// callRefOf returns the agentId, toolName, callId and parentCallId members
// of an agent.toolCalled payload: exact key match, "" for an absent member,
// the last value of a repeated key.
func callRefOf(payload []byte) (CallRef, error) {
	var members map[string]json.RawMessage
	if err := json.Unmarshal(payload, &members); err != nil {
		return CallRef{}, err
	}
	var ref CallRef
	for key, dst := range map[string]*string{
		"agentId": &ref.AgentID, "toolName": &ref.ToolName, "callId": &ref.CallID, "parentCallId": &ref.ParentCallID,
	} {
		if raw, ok := members[key]; ok {
			if err := json.Unmarshal(raw, dst); err != nil {
				return CallRef{}, fmt.Errorf("member %s: %w", key, err)
			}
		}
	}
	return ref, nil
}

// matchCallRef reports whether the payload p of an agent.toolCalled names
// call want, with callRefOf's semantics, without allocating: ReturnedEvent
// runs on every call. ok is false when the scan cannot decide — p is not an
// object, a key or one of the four values contains an escape, is not valid
// UTF-8 or is not a string, or p is cut short — and callRefOf must be used
// instead. It does not validate the other members (the called event's
// payload is validated where it is appended); it never panics.
func matchCallRef(p []byte, want CallRef) (match, ok bool) {
	i := skipSpace(p, 0)
	if i >= len(p) || p[i] != '{' {
		return false, false
	}
	i++
	agent, tool, call, parent := want.AgentID == "", want.ToolName == "", want.CallID == "", want.ParentCallID == ""
	for first := true; ; first = false {
		i = skipSpace(p, i)
		if i >= len(p) {
			return false, false
		}
		if p[i] == '}' {
			return agent && tool && call && parent, skipSpace(p, i+1) == len(p)
		}
		if !first {
			if p[i] != ',' {
				return false, false
			}
			i = skipSpace(p, i+1)
		}
		key, esc, next := scanString(p, i)
		if next < 0 || esc {
			return false, false
		}
		i = skipSpace(p, next)
		if i >= len(p) || p[i] != ':' {
			return false, false
		}
		i = skipSpace(p, i+1)
		var (
			dst   *bool
			wantV string
		)
		switch string(key) {
		case "agentId":
			dst, wantV = &agent, want.AgentID
		case "toolName":
			dst, wantV = &tool, want.ToolName
		case "callId":
			dst, wantV = &call, want.CallID
		case "parentCallId":
			dst, wantV = &parent, want.ParentCallID
		default:
			if i = skipValue(p, i); i < 0 {
				return false, false
			}
			continue
		}
		v, esc, next := scanString(p, i)
		if next < 0 || esc || !utf8.Valid(v) { // encoding/json would unescape or replace
			return false, false
		}
		*dst = string(v) == wantV
		i = next
	}
}

// skipSpace returns the index of the first non-whitespace byte at or after i.
func skipSpace(p []byte, i int) int {
	for i < len(p) && (p[i] == ' ' || p[i] == '\t' || p[i] == '\n' || p[i] == '\r') {
		i++
	}
	return i
}

// scanString reads the JSON string starting at p[i]. It returns its raw
// contents (escapes not decoded), whether it contains an escape, and the
// index just past it, or next < 0 when p[i] is not '"' or the string is
// not terminated.
func scanString(p []byte, i int) (raw []byte, escaped bool, next int) {
	if i >= len(p) || p[i] != '"' {
		return nil, false, -1
	}
	for j := i + 1; j < len(p); j++ {
		switch p[j] {
		case '\\':
			escaped = true
			j++
		case '"':
			return p[i+1 : j], escaped, j + 1
		}
	}
	return nil, false, -1
}

// skipValue returns the index just past the JSON value starting at p[i], or
// -1 when p ends first. It tracks only strings and nesting.
func skipValue(p []byte, i int) int {
	depth := 0
	for i < len(p) {
		switch p[i] {
		case '"':
			_, _, next := scanString(p, i)
			if next < 0 {
				return -1
			}
			if depth == 0 {
				return next
			}
			i = next
			continue
		case '{', '[':
			depth++
		case '}', ']':
			depth--
			if depth == 0 {
				return i + 1
			}
			if depth < 0 {
				return i // the enclosing object ends: a scalar ended
			}
		case ',', ' ', '\t', '\n', '\r':
			if depth == 0 {
				return i
			}
		}
		i++
	}
	if depth == 0 {
		return i
	}
	return -1
}

// ValidEventType reports whether typ may be written as an event type
// (run-event.schema.json "type", RFC 0094 §C): a value of the RunEventType
// enum, or a vendor type — two or more dot-separated segments of
// [a-zA-Z0-9_-], the first starting with [a-z] and not one of the reserved
// prefixes openwop, core, community, vendor, private, local. Allocation-free;
// safe for concurrent use.
func ValidEventType(typ string) bool {
	if typ == TypeToolCalled || typ == TypeToolReturned {
		return true // the pair written on every call
	}
	if _, ok := knownTypes[typ]; ok {
		return true
	}
	if typ == "" || typ[0] < 'a' || typ[0] > 'z' {
		return false
	}
	segments, segStart := 1, 0
	for i := 0; i < len(typ); i++ {
		c := typ[i]
		switch {
		case c == '.':
			if i == segStart {
				return false
			}
			if segments == 1 {
				switch typ[:i] {
				case "openwop", "core", "community", "vendor", "private", "local":
					return false
				}
			}
			segments++
			segStart = i + 1
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '_', c == '-':
		default:
			return false
		}
	}
	return segments >= 2 && segStart < len(typ)
}

// knownTypes is the RunEventType enum of the vendored run-event.schema.json
// (a test keeps the two equal).
var knownTypes = func() map[string]struct{} {
	names := []string{
		"run.started", "run.completed", "run.failed", "run.cancelled", "run.resuming",
		"run.paused", "run.resumed", "run.restored-from-snapshot", "run.dead_lettered",
		"node.started", "node.completed", "node.failed", "node.suspended",
		"node.suspend-failed", "node.resumed", "node.retried", "node.skipped",
		"node.cancelled", "approval.requested", "approval.received", "approval.granted",
		"approval.rejected", "approval.overridden", "clarification.requested",
		"clarification.resolved", "interrupt.requested", "interrupt.resolved",
		"channel.written", "artifact.created", "output.chunk", "variable.changed",
		"log.appended", "version.pinned", "workflow.restored", "workflow.loopback-limit",
		"workflow.stalled", "cap.breached", "lease.acquired", "lease.renewed",
		"lease.lost", "lease.handed-off", "replay.diverged", "replay.divergedAtRefusal",
		"agent.reasoned", "agent.reasoning.delta", "provider.usage", "prompt.composed",
		"agent.promptResolved", "model.capability.substituted",
		"model.capability.insufficient", "envelope.retry.attempted",
		"envelope.retry.exhausted", "envelope.refusal", "envelope.truncated",
		"envelope.nlToFormat.engaged", "envelope.recovery.applied", "agent.toolCalled",
		"agent.toolReturned", "agent.handoff", "agent.decided", "agent.verified",
		"agent.invocation.started", "agent.invocation.completed", "eval.started",
		"eval.scored", "eval.completed", "deployment.promoted", "deployment.rolled-back",
		"deployment.canary.adjusted", "deployment.state.changed", "roster.run.initiated",
		"tool.session.opened", "tool.session.closed", "egress.decided",
		"trigger.subscription.state.changed", "trigger.delivery.attempted",
		"budget.reserved", "budget.consumed", "budget.threshold.crossed",
		"budget.exhausted", "runOrchestrator.decided", "node.dispatched",
		"conversation.opened", "conversation.exchanged", "conversation.closed",
		"memory.compacted", "memory.written", "agent.memory.consolidated",
		"commitment.fired", "workspace.updated", "core.workflowChain.event",
		"core.workflowChain.confidence-escalated", "connector.authorized",
		"connector.auth_expired", "authorization.decided", "proposal.created",
		"proposal.activated", "goal.evaluated", "goal.closed", "import.applied",
		"voice.speech_start", "voice.transcript", "voice.endpoint_candidate",
		"voice.turn_commit", "voice.synthesis_chunk", "voice.barge_in", "voice.cancelled",
	}
	m := make(map[string]struct{}, len(names))
	for _, n := range names {
		m[n] = struct{}{}
	}
	return m
}()

// checkID checks that s is valid UTF-8 of min–max code points (JSON Schema
// minLength/maxLength count code points).
func checkID(field, s string, min, max int) error {
	if !utf8.ValidString(s) {
		return invalid(field, "%s is not valid UTF-8", field)
	}
	n := len(s) // bytes ≥ code points ≥ bytes/UTFMax: count only when it matters
	if n > max || n < min*utf8.UTFMax {
		n = utf8.RuneCountInString(s)
	}
	if n < min || n > max {
		return invalid(field, "%s must be %d–%d characters, got %d", field, min, max, n)
	}
	return nil
}

// invalid returns an InvalidArgument *errcode.Error whose details.field names
// the offending member.
func invalid(field, format string, args ...any) *errcode.Error {
	e := errcode.Errorf(errcode.InvalidArgument, format, args...)
	e.Details = map[string]any{"field": field}
	return e
}

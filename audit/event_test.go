package audit_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/internal/schematest"
)

const (
	envelopeSchema = "run-event.schema.json"
	payloadsSchema = "run-event-payloads.schema.json#/$defs/"
)

var (
	testNow  = time.Date(2026, 3, 14, 15, 9, 26, 535_897_932, time.FixedZone("CET", 3600))
	testHash = func() string { h := sha256.Sum256([]byte(`{"path":"/tmp/x"}`)); return hex.EncodeToString(h[:]) }()
	testRef  = audit.CallRef{AgentID: "agent-7", ToolName: "mcp:fs.read_file", CallID: "call-1"}
)

// checkEnvelope validates v (any value, marshalled to JSON) against
// run-event.schema.json.
func checkEnvelope(v any) error { return schematest.Check(envelopeSchema, v) }

// validateEnvelope fails t unless v validates against run-event.schema.json.
func validateEnvelope(t *testing.T, v any) {
	t.Helper()
	schematest.Validate(t, envelopeSchema, v)
}

// wantCode fails t unless err is an *errcode.Error with code.
func wantCode(t *testing.T, err error, code errcode.Code) {
	t.Helper()
	if got := errcode.CodeOf(err); got != code {
		t.Fatalf("error = %v (code %q), want code %q", err, got, code)
	}
	if errcode.As(err) == nil {
		t.Fatalf("error %v is not an *errcode.Error", err)
	}
}

// payloadMap decodes an event payload into a generic map.
func payloadMap(t *testing.T, ev *audit.Event) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(ev.Payload, &m); err != nil {
		t.Fatalf("payload %s: %v", ev.Payload, err)
	}
	return m
}

func mustCalled(t testing.TB, runID string, ref audit.CallRef) *audit.Event {
	t.Helper()
	ev, err := audit.NewEvent(runID, audit.TypeToolCalled, audit.NewToolCalled(ref, testHash, "alice", audit.TransportMCP), "", testNow)
	if err != nil {
		t.Fatalf("NewEvent(toolCalled): %v", err)
	}
	return ev
}

func must[T any](t testing.TB) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

// TestEventSchemas builds one event of every shape toolgate emits, appends
// them to a log and validates every payload against its $defs entry and every
// envelope against run-event.schema.json.
func TestEventSchemas(t *testing.T) {
	nested := testRef
	nested.CallID, nested.ParentCallID = "call-2", "call-1"
	system := audit.CallRef{ToolName: "http:weather", CallID: "call-3"}
	retry := true
	ret := must[audit.ToolReturned](t)
	toolErr := audit.ErrorObject{Code: "tool_execution_failed", Message: "tool failed", Details: map[string]any{"upstreamCode": 7}, Retryable: &retry}

	calledWith := func(ref audit.CallRef, mut func(*audit.ToolCalled)) audit.ToolCalled {
		c := audit.NewToolCalled(ref, testHash, "alice", audit.TransportMCP)
		if mut != nil {
			mut(&c)
		}
		return c
	}
	cases := []struct {
		name    string
		def     string
		typ     string
		payload any
		paired  bool // a toolReturned answering a toolCalled of the same ref
	}{
		{"called", "agentToolCalled", audit.TypeToolCalled, calledWith(testRef, nil), false},
		{"called/parentCallId", "agentToolCalled", audit.TypeToolCalled, calledWith(nested, nil), false},
		{"called/core.system", "agentToolCalled", audit.TypeToolCalled, calledWith(system, func(c *audit.ToolCalled) { c.Transport = audit.TransportHTTP; c.Principal = audit.AgentSystem }), false},
		{"called/full-content", "agentToolCalled", audit.TypeToolCalled, calledWith(testRef, func(c *audit.ToolCalled) {
			c.Inputs = json.RawMessage(`{"path":"/tmp/x"}`)
			c.ToolID = "mcp:fs.read_file"
		}), false},
		{"returned/ok", "agentToolReturned", audit.TypeToolReturned, audit.ReturnedOK(testRef, nil, 412*time.Millisecond), true},
		{"returned/ok+outcome", "agentToolReturned", audit.TypeToolReturned, audit.ReturnedOK(nested, json.RawMessage(`{"text":"[REDACTED:gh-token]"}`), time.Second), true},
		{"returned/error-ran", "agentToolReturned", audit.TypeToolReturned, ret(audit.ReturnedError(testRef, toolErr, 3*time.Millisecond, true)), true},
		{"returned/error-not-ran", "agentToolReturned", audit.TypeToolReturned, ret(audit.ReturnedError(testRef, audit.ErrorObject{Code: "upstream_unavailable", Message: "server fs is down"}, 0, false)), true},
		{"returned/forbidden", "agentToolReturned", audit.TypeToolReturned, ret(audit.ReturnedRefused(testRef, audit.StatusForbidden, audit.ErrorObject{Message: "missing scope fs:read", Details: map[string]any{"scope": "tool", "toolName": "mcp:fs.read_file", "requiredScopes": []string{"fs:read"}}})), true},
		{"returned/forbidden-at-load", "agentToolReturned", audit.TypeToolReturned, ret(audit.ReturnedRefused(testRef, audit.StatusForbidden, audit.ErrorObject{Code: "forbidden", Message: "denied by rule no-etc"})), false},
		{"returned/rate_limited", "agentToolReturned", audit.TypeToolReturned, ret(audit.ReturnedRefused(system, audit.StatusRateLimited, audit.ErrorObject{Message: "rate limit exceeded", Details: map[string]any{"scope": "tool", "retryAfterSeconds": 2}})), false},
		{"session/opened", "toolSessionOpened", audit.TypeSessionOpened, audit.SessionOpened{SessionID: "ses-1", ToolID: "mcp:fs.read_file"}, false},
		{"session/closed-completed", "toolSessionClosed", audit.TypeSessionClosed, must[audit.SessionClosed](t)(audit.NewSessionClosed("ses-1", "mcp:fs.read_file", audit.SessionCompleted)), false},
		{"session/closed-failed", "toolSessionClosed", audit.TypeSessionClosed, must[audit.SessionClosed](t)(audit.NewSessionClosed("ses-1", "mcp:fs.read_file", audit.SessionFailed)), false},
	}
	log := audit.NewMemoryLog()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			raw, err := json.Marshal(tc.payload)
			if err != nil {
				t.Fatal(err)
			}
			schematest.Validate(t, payloadsSchema+tc.def, json.RawMessage(raw))

			var ev *audit.Event
			if tc.paired {
				r := tc.payload.(audit.ToolReturned)
				called := mustCalled(t, "run-1", r.Ref())
				ev, err = audit.ReturnedEvent(called, r, testNow)
				if err == nil {
					err = log.Append(t.Context(), called, ev)
				}
			} else {
				ev, err = audit.NewEvent("run-1", tc.typ, tc.payload, "", testNow)
				if err == nil {
					err = log.Append(t.Context(), ev)
				}
			}
			if err != nil {
				t.Fatal(err)
			}
			if string(ev.Payload) != string(raw) {
				t.Errorf("event payload %s, want %s", ev.Payload, raw)
			}
			schematest.Validate(t, payloadsSchema+tc.def, ev.Payload)
			env, err := json.Marshal(ev)
			if err != nil {
				t.Fatal(err)
			}
			validateEnvelope(t, json.RawMessage(env))
			if tc.paired && ev.CausationID == "" {
				t.Error("paired toolReturned has no causationId")
			}
		})
	}
	// Every envelope of the log validates too, with sequences 0..n-1.
	for i, ev := range log.Events("", "run-1") {
		if ev.Sequence != int64(i) {
			t.Errorf("event %d has sequence %d", i, ev.Sequence)
		}
		validateEnvelope(t, ev)
	}
}

func TestEventContentFreeCalled(t *testing.T) {
	ev := mustCalled(t, "run-1", audit.CallRef{ToolName: "native:echo", CallID: "c"})
	m := payloadMap(t, ev)
	if _, ok := m["inputs"]; ok {
		t.Errorf("content-free toolCalled carries inputs: %s", ev.Payload)
	}
	want := map[string]any{"agentId": audit.AgentSystem, "toolName": "native:echo", "callId": "c", "argsHash": testHash, "principal": "alice", "transport": "mcp"}
	for k, v := range want {
		if m[k] != v {
			t.Errorf("payload[%q] = %v, want %v", k, m[k], v)
		}
	}
	if len(m) != len(want) {
		t.Errorf("payload has extra members: %s", ev.Payload)
	}
}

func TestEventTimestampUTC(t *testing.T) {
	ev := mustCalled(t, "run-1", testRef)
	if ev.Timestamp.Location() != time.UTC {
		t.Errorf("timestamp location %v, want UTC", ev.Timestamp.Location())
	}
	if want := testNow.UTC().Truncate(time.Millisecond); !ev.Timestamp.Equal(want) {
		t.Errorf("timestamp %v, want %v", ev.Timestamp, want)
	}
	var env map[string]any
	raw, _ := json.Marshal(ev)
	if err := json.Unmarshal(raw, &env); err != nil {
		t.Fatal(err)
	}
	if env["timestamp"] != "2026-03-14T14:09:26.535Z" {
		t.Errorf("wire timestamp %v, want 2026-03-14T14:09:26.535Z", env["timestamp"])
	}
	if _, ok := env["Tenant"]; ok {
		t.Error("tenant is on the wire")
	}
}

func TestEventJSONRoundTrip(t *testing.T) {
	ev := mustCalled(t, "run-1", testRef)
	ev.Sequence, ev.CausationID, ev.SchemaVersion, ev.Tenant = 41, "ev_cause", 2, "acme"
	raw, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	var got audit.Event
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatal(err)
	}
	want := *ev
	want.Tenant = "" // not on the wire
	if got.EventID != want.EventID || got.RunID != want.RunID || got.Type != want.Type ||
		string(got.Payload) != string(want.Payload) || !got.Timestamp.Equal(want.Timestamp) ||
		got.Timestamp.Location() != time.UTC || got.Sequence != want.Sequence ||
		got.CausationID != want.CausationID || got.SchemaVersion != want.SchemaVersion || got.Tenant != "" {
		t.Errorf("round trip:\n got %+v\nwant %+v", got, want)
	}
	// A nanosecond timestamp from another writer is accepted.
	if err := json.Unmarshal([]byte(`{"eventId":"e","runId":"r","type":"x.y","payload":1,"timestamp":"2026-01-02T03:04:05.123456789+02:00","sequence":0}`), &got); err != nil {
		t.Fatal(err)
	}
	if got.Timestamp.Nanosecond() != 123456789 || got.Timestamp.Location() != time.UTC || got.Timestamp.Hour() != 1 {
		t.Errorf("decoded timestamp %v", got.Timestamp)
	}
}

func TestEventUnmarshalRejects(t *testing.T) {
	base := map[string]any{"eventId": "e", "runId": "r", "type": "agent.toolCalled", "payload": map[string]any{}, "timestamp": "2026-01-02T03:04:05.000Z", "sequence": 0}
	for _, drop := range []string{"eventId", "runId", "type", "payload", "timestamp", "sequence"} {
		m := map[string]any{}
		for k, v := range base {
			if k != drop {
				m[k] = v
			}
		}
		raw, _ := json.Marshal(m)
		var ev audit.Event
		wantCode(t, json.Unmarshal(raw, &ev), errcode.InvalidArgument)
	}
	for _, bad := range []string{
		`{"eventId":"e","runId":"r","type":"t.x","payload":1,"timestamp":"yesterday","sequence":0}`,
		`{"eventId":"e","runId":"r","type":"t.x","payload":1,"timestamp":"2026-01-02T03:04:05Z","sequence":-1}`,
		`{"eventId":"e","runId":"r","type":"t.x","payload":1,"timestamp":"2026-01-02T03:04:05Z","sequence":1.5}`,
		`[]`,
	} {
		var ev audit.Event
		wantCode(t, json.Unmarshal([]byte(bad), &ev), errcode.InvalidArgument)
	}
}

func TestNewEventErrors(t *testing.T) {
	called := audit.NewToolCalled(testRef, testHash, "alice", audit.TransportMCP)
	okRet := audit.ReturnedOK(testRef, nil, time.Millisecond)
	badHash := called
	badHash.ArgsHash = strings.ToUpper(testHash)
	noTransport := called
	noTransport.Transport = ""
	shortAgent := called
	shortAgent.AgentID = "ab"
	badInputs := called
	badInputs.Inputs = json.RawMessage(`{"a":`)
	cases := []struct {
		name      string
		runID     string
		typ       string
		payload   any
		causation string
		now       time.Time
		field     string
	}{
		{"empty runId", "", audit.TypeToolCalled, called, "", testNow, "runId"},
		{"long runId", strings.Repeat("r", 129), audit.TypeToolCalled, called, "", testNow, "runId"},
		{"non-UTF-8 runId", "run\xff", audit.TypeToolCalled, called, "", testNow, "runId"},
		{"unknown type", "run", "toolCalled", called, "", testNow, "type"},
		{"reserved vendor prefix", "run", "core.mything", called, "", testNow, "type"},
		{"long causationId", "run", audit.TypeToolCalled, called, strings.Repeat("c", 129), testNow, "causationId"},
		{"zero now", "run", audit.TypeToolCalled, called, "", time.Time{}, "timestamp"},
		{"payload for another type", "run", audit.TypeToolReturned, called, "ev_x", testNow, "type"},
		{"pointer payload for another type", "run", audit.TypeSessionOpened, &called, "", testNow, "type"},
		{"uppercase argsHash", "run", audit.TypeToolCalled, badHash, "", testNow, "argsHash"},
		{"no transport", "run", audit.TypeToolCalled, noTransport, "", testNow, "transport"},
		{"short agentId", "run", audit.TypeToolCalled, shortAgent, "", testNow, "agentId"},
		{"invalid inputs", "run", audit.TypeToolCalled, badInputs, "", testNow, "inputs"},
		{"ok without causation", "run", audit.TypeToolReturned, okRet, "", testNow, "causationId"},
		{"zero ToolReturned", "run", audit.TypeToolReturned, audit.ToolReturned{}, "ev_x", testNow, "status"},
		{"session without id", "run", audit.TypeSessionOpened, audit.SessionOpened{ToolID: "native:x"}, "", testNow, "sessionId"},
		{"session closed cancelled", "run", audit.TypeSessionClosed, audit.SessionClosed{SessionID: "s", ToolID: "native:x", Outcome: "cancelled"}, "", testNow, "outcome"},
		{"raw payload not JSON", "run", "acme.custom", json.RawMessage(`{`), "", testNow, "payload"},
		{"nil *ToolCalled", "run", audit.TypeToolCalled, (*audit.ToolCalled)(nil), "", testNow, "payload"},
		{"nil *SessionClosed", "run", audit.TypeSessionClosed, (*audit.SessionClosed)(nil), "", testNow, "payload"},
		{"unmarshalable payload", "run", "acme.custom", map[string]any{"f": func() {}}, "", testNow, "payload"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ev, err := audit.NewEvent(tc.runID, tc.typ, tc.payload, tc.causation, tc.now)
			if ev != nil {
				t.Errorf("got event %+v with error %v", ev, err)
			}
			wantCode(t, err, errcode.InvalidArgument)
			if f := errcode.As(err).Details["field"]; f != tc.field {
				t.Errorf("details.field = %v, want %q (%v)", f, tc.field, err)
			}
		})
	}
}

func TestNewEventAccepts(t *testing.T) {
	refused := must[audit.ToolReturned](t)(audit.ReturnedRefused(testRef, audit.StatusRateLimited, audit.ErrorObject{Message: "slow down"}))
	called := audit.NewToolCalled(testRef, testHash, "alice", audit.TransportNative)
	for name, c := range map[string]struct {
		typ     string
		payload any
	}{
		"refusal without causation": {audit.TypeToolReturned, refused},
		"pointer payload":           {audit.TypeToolCalled, &called},
		"vendor type, raw payload":  {"acme.canvas.published", json.RawMessage(` { "a" : [1, 2] } `)},
		"other OpenWOP type, map":   {"approval.requested", map[string]any{"approvalId": "a1"}},
		"max-length runId":          {"core.workflowChain.event", nil},
	} {
		t.Run(name, func(t *testing.T) {
			runID := "run"
			if name == "max-length runId" {
				runID = strings.Repeat("é", 128) // 128 code points, 256 bytes
			}
			ev, err := audit.NewEvent(runID, c.typ, c.payload, "", testNow)
			if err != nil {
				t.Fatal(err)
			}
			if err := ev.Validate(); err != nil {
				t.Fatal(err)
			}
			validateEnvelope(t, ev)
		})
	}
	ev, _ := audit.NewEvent("run", "acme.x", json.RawMessage(` { "a" : [1, 2] } `), "", testNow)
	if string(ev.Payload) != `{"a":[1,2]}` {
		t.Errorf("raw payload not compacted: %s", ev.Payload)
	}
}

// TestValidEventType checks ValidEventType against the schema's own "type"
// rule on every enum value and on hand-picked vendor spellings.
func TestValidEventType(t *testing.T) {
	cases := []string{
		"agent.toolCalled", "tool.session.closed", "core.workflowChain.event",
		"acme.canvas.published", "acme.x", "a.b", "com-acme.tool_v2.Done", "toolgate.policy.reloaded",
		"", "acme", "Acme.x", "1acme.x", "acme.", ".acme", "acme..x", "acme.x.", "acme.x y",
		"core.custom", "openwop.x", "community.x", "vendor.x", "private.x", "local.x", "corex.y",
		"acme.é", "acme.x/y", "agent.toolcalled",
	}
	cases = append(cases, schemaEventTypes(t)...)
	for _, typ := range cases {
		env := map[string]any{"eventId": "e", "runId": "r", "type": typ, "payload": nil, "timestamp": "2026-01-02T03:04:05.000Z", "sequence": 0}
		schemaOK := checkEnvelope(env) == nil
		if got := audit.ValidEventType(typ); got != schemaOK {
			t.Errorf("ValidEventType(%q) = %v, schema says %v", typ, got, schemaOK)
		}
	}
}

// schemaEventTypes returns the RunEventType enum of the vendored schema.
func schemaEventTypes(t *testing.T) []string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(schematest.Dir(), envelopeSchema))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Defs struct {
			RunEventType struct {
				Enum []string `json:"enum"`
			} `json:"RunEventType"`
		} `json:"$defs"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Defs.RunEventType.Enum) < 100 {
		t.Fatalf("schema enum has only %d types", len(doc.Defs.RunEventType.Enum))
	}
	return doc.Defs.RunEventType.Enum
}

func TestEventTypeConstants(t *testing.T) {
	enum := schemaEventTypes(t)
	for _, typ := range []string{audit.TypeToolCalled, audit.TypeToolReturned, audit.TypeSessionOpened, audit.TypeSessionClosed} {
		if !slices.Contains(enum, typ) {
			t.Errorf("%q is not in the schema's RunEventType enum", typ)
		}
	}
}

func TestNewEventIDUnique(t *testing.T) {
	const n = 100_000
	format := regexp.MustCompile(`^ev_[0-9a-f]{32}$`)
	seen := make(map[string]struct{}, n)
	for i := range n {
		id := audit.NewEventID()
		if i < 1000 && !format.MatchString(id) {
			t.Fatalf("id %q does not match %v", id, format)
		}
		if _, dup := seen[id]; dup {
			t.Fatalf("duplicate event id %q after %d ids", id, i)
		}
		seen[id] = struct{}{}
	}
	ev := mustCalled(t, "run", testRef)
	if !format.MatchString(ev.EventID) {
		t.Errorf("NewEvent id %q", ev.EventID)
	}
}

func TestEventValidate(t *testing.T) {
	good := *mustCalled(t, "run", testRef)
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, mut := range map[string]func(*audit.Event){
		"eventId":     func(e *audit.Event) { e.EventID = "" },
		"runId":       func(e *audit.Event) { e.RunID = strings.Repeat("x", 129) },
		"type":        func(e *audit.Event) { e.Type = "local.thing" },
		"payload":     func(e *audit.Event) { e.Payload = nil },
		"timestamp":   func(e *audit.Event) { e.Timestamp = time.Time{} },
		"sequence":    func(e *audit.Event) { e.Sequence = -1 },
		"causationId": func(e *audit.Event) { e.CausationID = "c\xff" },
	} {
		ev := good
		mut(&ev)
		err := ev.Validate()
		if name == "payload" {
			// Absent and malformed payloads are both rejected.
			bad := good
			bad.Payload = json.RawMessage(`{"a":`)
			if errcode.CodeOf(bad.Validate()) != errcode.InvalidArgument {
				t.Error("malformed payload validated")
			}
			if _, err := json.Marshal(bad); err == nil {
				t.Error("malformed payload marshalled")
			}
		}
		wantCode(t, err, errcode.InvalidArgument)
		if f := errcode.As(err).Details["field"]; f != name {
			t.Errorf("%s: details.field = %v", name, f)
		}
	}
}

// TestNewCalledEvent checks that NewCalledEvent is NewEvent for a
// *ToolCalled: same event (but its fresh id), same errors.
func TestNewCalledEvent(t *testing.T) {
	valid := audit.NewToolCalled(testRef, testHash, "alice", audit.TransportMCP)
	withInputs := valid
	withInputs.Inputs = json.RawMessage(` {"q" : "<b>"} `)
	withInputs.ParentCallID = "call-0"
	badHash := valid
	badHash.ArgsHash = "x"
	badInputs := valid
	badInputs.Inputs = json.RawMessage(`{"a":`)
	for _, tc := range []struct {
		name  string
		runID string
		c     *audit.ToolCalled
		now   time.Time
	}{
		{"valid", "run", &valid, testNow},
		{"inputs", "run", &withInputs, testNow},
		{"bad hash", "run", &badHash, testNow},
		{"bad inputs", "run", &badInputs, testNow},
		{"nil", "run", nil, testNow},
		{"empty runId", "", &valid, testNow},
		{"zero now", "run", &valid, time.Time{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, gerr := audit.NewCalledEvent(tc.runID, tc.c, tc.now)
			want, werr := audit.NewEvent(tc.runID, audit.TypeToolCalled, tc.c, "", tc.now)
			if (gerr == nil) != (werr == nil) || (gerr != nil && (gerr.Error() != werr.Error() ||
				errcode.As(gerr).Details["field"] != errcode.As(werr).Details["field"])) {
				t.Fatalf("NewCalledEvent error %v, NewEvent error %v", gerr, werr)
			}
			if gerr != nil {
				if got != nil {
					t.Fatalf("event %+v with error %v", got, gerr)
				}
				return
			}
			if got.EventID == want.EventID || !strings.HasPrefix(got.EventID, "ev_") {
				t.Errorf("event ids %s, %s", got.EventID, want.EventID)
			}
			got.EventID = want.EventID
			if !reflect.DeepEqual(got, want) {
				t.Errorf("NewCalledEvent = %+v\nNewEvent       = %+v", got, want)
			}
			if err := got.Validate(); err != nil {
				t.Error(err)
			}
		})
	}
}

// TestNewReturnedEvent checks that NewReturnedEvent is NewEvent for a
// *ToolReturned: same event (but its fresh id), same errors.
func TestNewReturnedEvent(t *testing.T) {
	ok := audit.ReturnedOK(testRef, json.RawMessage(`{"n": 1}`), 3*time.Millisecond)
	failed := must[audit.ToolReturned](t)(audit.ReturnedError(testRef, audit.ErrorObject{Code: "timeout", Message: "slow",
		Details: map[string]any{"after": "60s"}}, time.Second, true))
	refused := must[audit.ToolReturned](t)(audit.ReturnedRefused(testRef, audit.StatusForbidden, audit.ErrorObject{Message: "no"}))
	badRef := audit.ReturnedOK(audit.CallRef{AgentID: "ab", ToolName: "t", CallID: "c"}, nil, 0)
	var zero audit.ToolReturned
	for _, tc := range []struct {
		name      string
		runID     string
		r         *audit.ToolReturned
		causation string
		now       time.Time
	}{
		{"ok", "run", &ok, "ev_1", testNow},
		{"error", "run", &failed, "ev_1", testNow},
		{"refused, no causation", "run", &refused, "", testNow},
		{"ok without causation", "run", &ok, "", testNow},
		{"invalid ref", "run", &badRef, "ev_1", testNow},
		{"zero", "run", &zero, "ev_1", testNow},
		{"nil", "run", nil, "ev_1", testNow},
		{"long causation", "run", &ok, strings.Repeat("c", 129), testNow},
		{"zero now", "run", &ok, "ev_1", time.Time{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, gerr := audit.NewReturnedEvent(tc.runID, tc.r, tc.causation, tc.now)
			want, werr := audit.NewEvent(tc.runID, audit.TypeToolReturned, tc.r, tc.causation, tc.now)
			if (gerr == nil) != (werr == nil) || (gerr != nil && (gerr.Error() != werr.Error() ||
				errcode.As(gerr).Details["field"] != errcode.As(werr).Details["field"])) {
				t.Fatalf("NewReturnedEvent error %v, NewEvent error %v", gerr, werr)
			}
			if gerr != nil {
				if got != nil {
					t.Fatalf("event %+v with error %v", got, gerr)
				}
				return
			}
			got.EventID = want.EventID
			if !reflect.DeepEqual(got, want) {
				t.Errorf("NewReturnedEvent = %+v\nNewEvent         = %+v", got, want)
			}
		})
	}
}

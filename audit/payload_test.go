package audit_test

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/internal/schematest"
)

func TestToolCalledDefaults(t *testing.T) {
	c := audit.NewToolCalled(audit.CallRef{ToolName: "http:weather", CallID: "c1", ParentCallID: "c0"}, testHash, audit.AgentSystem, audit.TransportHTTP)
	if c.AgentID != audit.AgentSystem {
		t.Errorf("agentId %q, want %q", c.AgentID, audit.AgentSystem)
	}
	if c.Inputs != nil || c.ToolID != "" {
		t.Errorf("content-free toolCalled has inputs %s / toolId %q", c.Inputs, c.ToolID)
	}
	if want := (audit.CallRef{AgentID: audit.AgentSystem, ToolName: "http:weather", CallID: "c1", ParentCallID: "c0"}); c.Ref() != want {
		t.Errorf("Ref() = %+v, want %+v", c.Ref(), want)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestReturnedDurationMs(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want int64
	}{
		{0, 0},
		{300 * time.Microsecond, 0},
		{999_999 * time.Nanosecond, 0},
		{time.Millisecond, 1},
		{1999 * time.Microsecond, 1},
		{412 * time.Millisecond, 412},
		{90 * time.Second, 90_000},
		{-time.Second, 0},
	} {
		r := audit.ReturnedOK(testRef, nil, tc.d)
		got, ran := r.DurationMs()
		if got != tc.want || !ran {
			t.Errorf("ReturnedOK(%v).DurationMs() = %d, %v; want %d, true", tc.d, got, ran, tc.want)
		}
		e, err := audit.ReturnedError(testRef, audit.ErrorObject{Code: "timeout", Message: "deadline exceeded"}, tc.d, true)
		if err != nil {
			t.Fatal(err)
		}
		if got, ran := e.DurationMs(); got != tc.want || !ran {
			t.Errorf("ReturnedError(%v, ran).DurationMs() = %d, %v; want %d, true", tc.d, got, ran, tc.want)
		}
	}
}

func TestReturnedOKOutcome(t *testing.T) {
	none := audit.ReturnedOK(testRef, nil, time.Millisecond)
	empty := audit.ReturnedOK(testRef, json.RawMessage{}, time.Millisecond)
	for _, r := range []audit.ToolReturned{none, empty} {
		raw, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		m := decodeMap(t, raw)
		if _, ok := m["outcome"]; ok {
			t.Errorf("content-free ok carries outcome: %s", raw)
		}
		if _, ok := m["error"]; ok {
			t.Errorf("ok carries error: %s", raw)
		}
		if m["status"] != "ok" || m["durationMs"] != 1.0 {
			t.Errorf("ok payload %s", raw)
		}
		if r.Outcome() != nil || r.Error() != nil || r.Status() != audit.StatusOK {
			t.Errorf("accessors: outcome %s, error %v, status %q", r.Outcome(), r.Error(), r.Status())
		}
	}
	full := audit.ReturnedOK(testRef, json.RawMessage(`{"n":1}`), time.Millisecond)
	out := full.Outcome()
	if string(out) != `{"n":1}` {
		t.Fatalf("Outcome() = %s", out)
	}
	out[1] = 'X'
	if string(full.Outcome()) != `{"n":1}` {
		t.Error("Outcome() shares memory with the value")
	}
}

func TestReturnedErrorRequiresErrorObject(t *testing.T) {
	for name, tc := range map[string]struct {
		e     audit.ErrorObject
		field string
	}{
		"empty":               {audit.ErrorObject{}, "error.code"},
		"no code":             {audit.ErrorObject{Message: "boom"}, "error.code"},
		"no message":          {audit.ErrorObject{Code: "tool_execution_failed"}, "error.message"},
		"code outside set":    {audit.ErrorObject{Code: "invalid_args", Message: "boom"}, "error.code"},
		"gate code forbidden": {audit.ErrorObject{Code: "forbidden", Message: "boom"}, "error.code"},
		"gate code limited":   {audit.ErrorObject{Code: "rate_limited", Message: "boom"}, "error.code"},
	} {
		for _, ran := range []bool{true, false} {
			r, err := audit.ReturnedError(testRef, tc.e, time.Second, ran)
			wantCode(t, err, errcode.InvalidArgument)
			if f := errcode.As(err).Details["field"]; f != tc.field {
				t.Errorf("%s: details.field = %v, want %s", name, f, tc.field)
			}
			if r.Status() != "" {
				t.Errorf("%s: failed constructor returned status %q", name, r.Status())
			}
		}
	}
	_, err := audit.ReturnedError(audit.CallRef{AgentID: "a", ToolName: "t", CallID: "c"}, audit.ErrorObject{Code: "timeout", Message: "m"}, 0, false)
	wantCode(t, err, errcode.InvalidArgument)
}

func TestReturnedErrorFromErrcode(t *testing.T) {
	e := errcode.New(errcode.UpstreamUnavailable, "server fs is down").WithDetails(map[string]any{"server": "fs"})
	r, err := audit.ReturnedError(testRef, audit.ErrorObjectFrom(e), 0, false)
	if err != nil {
		t.Fatal(err)
	}
	got := r.Error()
	if got.Code != "upstream_unavailable" || got.Message != "server fs is down" || got.Details["server"] != "fs" {
		t.Errorf("Error() = %+v", got)
	}
	got.Details["server"] = "changed"
	if r.Error().Details["server"] != "fs" {
		t.Error("Error() shares its details map with the value")
	}
	if d, ran := r.DurationMs(); ran || d != 0 {
		t.Errorf("not-ran error has durationMs %d", d)
	}
	raw, _ := json.Marshal(r)
	if m := decodeMap(t, raw); m["durationMs"] != nil || m["outcome"] != nil || m["status"] != "error" {
		t.Errorf("payload %s", raw)
	}
	if _, err := audit.ReturnedError(testRef, audit.ErrorObjectFrom(nil), 0, false); err == nil {
		t.Error("ErrorObjectFrom(nil) accepted")
	}
}

func TestReturnedRefused(t *testing.T) {
	for _, status := range []audit.Status{audit.StatusForbidden, audit.StatusRateLimited} {
		r, err := audit.ReturnedRefused(audit.CallRef{ToolName: "mcp:db.delete", CallID: "c"}, status, audit.ErrorObject{Message: "refused"})
		if err != nil {
			t.Fatal(err)
		}
		if r.Status() != status || r.Error().Code != string(status) || r.Ref().AgentID != audit.AgentSystem {
			t.Errorf("%s: status %q, error %+v, ref %+v", status, r.Status(), r.Error(), r.Ref())
		}
		if _, ran := r.DurationMs(); ran {
			t.Errorf("%s: refusal has durationMs", status)
		}
		raw, _ := json.Marshal(r)
		m := decodeMap(t, raw)
		if _, ok := m["durationMs"]; ok {
			t.Errorf("%s: refusal payload has durationMs: %s", status, raw)
		}
		if _, ok := m["outcome"]; ok {
			t.Errorf("%s: refusal payload has outcome: %s", status, raw)
		}
		schematest.Validate(t, payloadsSchema+"agentToolReturned", json.RawMessage(raw))
	}
	approval, err := audit.ReturnedRefused(testRef, audit.StatusForbidden, audit.ErrorObject{Code: "approval_denied", Message: "denied by bob"})
	if err != nil || approval.Error().Code != "approval_denied" {
		t.Errorf("approval denial: %v, %+v", err, approval.Error())
	}
	for name, tc := range map[string]struct {
		status audit.Status
		e      audit.ErrorObject
	}{
		"status ok":                   {audit.StatusOK, audit.ErrorObject{Message: "m"}},
		"status error":                {audit.StatusError, audit.ErrorObject{Code: "timeout", Message: "m"}},
		"status empty":                {"", audit.ErrorObject{Message: "m"}},
		"no message":                  {audit.StatusForbidden, audit.ErrorObject{}},
		"rate_limited, other code":    {audit.StatusRateLimited, audit.ErrorObject{Code: "forbidden", Message: "m"}},
		"forbidden, rate_limited":     {audit.StatusForbidden, audit.ErrorObject{Code: "rate_limited", Message: "m"}},
		"forbidden, code outside set": {audit.StatusForbidden, audit.ErrorObject{Code: "nope", Message: "m"}},
	} {
		_, err := audit.ReturnedRefused(testRef, tc.status, tc.e)
		if errcode.CodeOf(err) != errcode.InvalidArgument {
			t.Errorf("%s: error %v, want invalid_argument", name, err)
		}
	}
}

// TestReturnedFailureHonesty checks the RFC 0064 §F invariants on every kind
// of ToolReturned the constructors can build.
func TestReturnedFailureHonesty(t *testing.T) {
	var all []audit.ToolReturned
	for _, outcome := range []json.RawMessage{nil, json.RawMessage(`null`), json.RawMessage(`"x"`)} {
		all = append(all, audit.ReturnedOK(testRef, outcome, time.Millisecond))
	}
	for _, code := range errcode.Codes() {
		for _, ran := range []bool{false, true} {
			if r, err := audit.ReturnedError(testRef, audit.ErrorObject{Code: string(code), Message: "m"}, time.Millisecond, ran); err == nil {
				all = append(all, r)
			}
		}
		for _, s := range []audit.Status{audit.StatusForbidden, audit.StatusRateLimited} {
			if r, err := audit.ReturnedRefused(testRef, s, audit.ErrorObject{Code: string(code), Message: "m"}); err == nil {
				all = append(all, r)
			}
		}
	}
	statuses := map[audit.Status]int{}
	for _, r := range all {
		statuses[r.Status()]++
		raw, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		schematest.Validate(t, payloadsSchema+"agentToolReturned", json.RawMessage(raw))
		m := decodeMap(t, raw)
		_, hasOutcome := m["outcome"]
		_, hasError := m["error"]
		_, hasDuration := m["durationMs"]
		if hasOutcome && hasError {
			t.Errorf("error and outcome together: %s", raw)
		}
		switch r.Status() {
		case audit.StatusOK:
			if hasError || !hasDuration {
				t.Errorf("ok: %s", raw)
			}
		case audit.StatusError:
			if !hasError || hasOutcome {
				t.Errorf("error: %s", raw)
			}
		case audit.StatusForbidden, audit.StatusRateLimited:
			if hasDuration || hasOutcome || !hasError {
				t.Errorf("refusal: %s", raw)
			}
		default:
			t.Errorf("status %q: %s", r.Status(), raw)
		}
		// Not a success ⇒ a failure discriminator is present.
		if r.Status() != audit.StatusOK && !hasError {
			t.Errorf("failure without discriminator: %s", raw)
		}
	}
	if statuses[audit.StatusRateLimited] != 1 || statuses[audit.StatusError] < 10 || statuses[audit.StatusForbidden] < 5 {
		t.Errorf("statuses built: %v", statuses)
	}
}

func TestReturnedJSONRoundTrip(t *testing.T) {
	retry := false
	nested := testRef
	nested.ParentCallID = "call-0"
	for _, r := range []audit.ToolReturned{
		audit.ReturnedOK(nested, json.RawMessage(`[1,{"a":"b"}]`), 1500*time.Millisecond),
		audit.ReturnedOK(testRef, nil, 0),
		must[audit.ToolReturned](t)(audit.ReturnedError(testRef, audit.ErrorObject{Code: "cancelled", Message: "m", Details: map[string]any{"k": "v"}, Retryable: &retry}, 5*time.Millisecond, true)),
		must[audit.ToolReturned](t)(audit.ReturnedRefused(testRef, audit.StatusRateLimited, audit.ErrorObject{Message: "m"})),
	} {
		raw, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		var got audit.ToolReturned
		if err := json.Unmarshal(raw, &got); err != nil {
			t.Fatalf("%s: %v", raw, err)
		}
		if !reflect.DeepEqual(got, r) {
			t.Errorf("round trip of %s:\n got %#v\nwant %#v", raw, got, r)
		}
	}
}

// TestReturnedUnmarshalRejects feeds hand-written payloads that break RFC
// 0064 §F or the schema.
func TestReturnedUnmarshalRejects(t *testing.T) {
	const ids = `"agentId":"agent-7","toolName":"mcp:fs.read_file","callId":"call-1"`
	for name, tc := range map[string]struct {
		json  string
		field string
	}{
		"ok with error":              {`{` + ids + `,"status":"ok","durationMs":1,"error":{"code":"timeout","message":"m"}}`, "error"},
		"ok without durationMs":      {`{` + ids + `,"status":"ok"}`, "durationMs"},
		"error without error":        {`{` + ids + `,"status":"error","durationMs":1}`, "error"},
		"error with null error":      {`{` + ids + `,"status":"error","error":null}`, "error"},
		"error with outcome":         {`{` + ids + `,"status":"error","error":{"code":"timeout","message":"m"},"outcome":{"partial":true}}`, "outcome"},
		"error with null outcome":    {`{` + ids + `,"status":"error","error":{"code":"timeout","message":"m"},"outcome":null}`, "outcome"},
		"error without code":         {`{` + ids + `,"status":"error","error":{"message":"m"}}`, "error.code"},
		"error without message":      {`{` + ids + `,"status":"error","error":{"code":"timeout","message":""}}`, "error.message"},
		"forbidden with durationMs":  {`{` + ids + `,"status":"forbidden","durationMs":0,"error":{"code":"forbidden","message":"m"}}`, "durationMs"},
		"forbidden with outcome":     {`{` + ids + `,"status":"forbidden","outcome":1,"error":{"code":"forbidden","message":"m"}}`, "outcome"},
		"forbidden without error":    {`{` + ids + `,"status":"forbidden"}`, "error"},
		"rate_limited with duration": {`{` + ids + `,"status":"rate_limited","durationMs":3,"error":{"code":"rate_limited","message":"m"}}`, "durationMs"},
		"rate_limited, forbidden":    {`{` + ids + `,"status":"rate_limited","error":{"code":"forbidden","message":"m"}}`, "error.code"},
		"no status":                  {`{` + ids + `,"outcome":1,"durationMs":1}`, "status"},
		"unknown status":             {`{` + ids + `,"status":"failed","durationMs":1}`, "status"},
		"negative durationMs":        {`{` + ids + `,"status":"ok","durationMs":-1}`, "durationMs"},
		"short agentId":              {`{"agentId":"ab","toolName":"t","callId":"c","status":"ok","durationMs":1}`, "agentId"},
		"no callId":                  {`{"agentId":"agent-7","toolName":"t","status":"ok","durationMs":1}`, "callId"},
	} {
		t.Run(name, func(t *testing.T) {
			r := audit.ReturnedOK(testRef, nil, time.Millisecond)
			err := json.Unmarshal([]byte(tc.json), &r)
			wantCode(t, err, errcode.InvalidArgument)
			if f := errcode.As(err).Details["field"]; f != tc.field {
				t.Errorf("details.field = %v, want %q (%v)", f, tc.field, err)
			}
			if r.Status() != audit.StatusOK {
				t.Error("rejected unmarshal modified the value")
			}
		})
	}
	var r audit.ToolReturned
	for _, bad := range []string{`{` + ids + `,"status":"ok","durationMs":1.5}`, `[1]`, `"ok"`} {
		wantCode(t, json.Unmarshal([]byte(bad), &r), errcode.InvalidArgument)
	}
	// Unknown members (RFC 0040 causationHostId) are tolerated.
	if err := json.Unmarshal([]byte(`{`+ids+`,"status":"ok","durationMs":1,"causationHostId":"h1"}`), &r); err != nil {
		t.Error(err)
	}
}

func TestReturnedZeroValueInvalid(t *testing.T) {
	var r audit.ToolReturned
	wantCode(t, r.Validate(), errcode.InvalidArgument)
	if _, err := json.Marshal(r); errcode.CodeOf(err) != errcode.InvalidArgument {
		t.Errorf("marshal of zero ToolReturned: %v", err)
	}
	bad := audit.ReturnedOK(audit.CallRef{ToolName: "", CallID: "c"}, nil, 0)
	if _, err := json.Marshal(bad); errcode.CodeOf(err) != errcode.InvalidArgument {
		t.Errorf("marshal of ToolReturned without toolName: %v", err)
	}
}

// TestReturnedEventCausation checks RFC 0002 §B pairing.
func TestReturnedEventCausation(t *testing.T) {
	called := mustCalled(t, "run-9", testRef)
	called.Tenant = "acme"
	ret, err := audit.ReturnedEvent(called, audit.ReturnedOK(testRef, nil, 2*time.Millisecond), testNow.Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if ret.CausationID != called.EventID || ret.RunID != "run-9" || ret.Tenant != "acme" || ret.Type != audit.TypeToolReturned || ret.EventID == called.EventID {
		t.Errorf("returned event %+v for called %+v", ret, called)
	}
	var p audit.ToolReturned
	if err := json.Unmarshal(ret.Payload, &p); err != nil || p.Ref() != testRef {
		t.Errorf("payload %s: %v", ret.Payload, err)
	}

	other := testRef
	other.CallID = "call-2"
	parent := testRef
	parent.ParentCallID = "call-0"
	session, _ := audit.NewEvent("run-9", audit.TypeSessionOpened, audit.SessionOpened{SessionID: "s", ToolID: "native:x"}, "", testNow)
	for name, tc := range map[string]struct {
		called *audit.Event
		r      audit.ToolReturned
	}{
		"nil called":             {nil, audit.ReturnedOK(testRef, nil, 0)},
		"not a toolCalled":       {session, audit.ReturnedOK(testRef, nil, 0)},
		"other callId":           {called, audit.ReturnedOK(other, nil, 0)},
		"other parentCallId":     {called, audit.ReturnedOK(parent, nil, 0)},
		"other agent":            {called, audit.ReturnedOK(audit.CallRef{ToolName: testRef.ToolName, CallID: testRef.CallID}, nil, 0)},
		"zero ToolReturned":      {called, audit.ToolReturned{}},
		"undecodable payload":    {&audit.Event{Type: audit.TypeToolCalled, RunID: "r", EventID: "e", Payload: json.RawMessage(`[`)}, audit.ReturnedOK(testRef, nil, 0)},
		"called without eventId": {&audit.Event{Type: audit.TypeToolCalled, RunID: "r", Payload: called.Payload}, audit.ReturnedOK(testRef, nil, 0)},
		"zero now":               {called, audit.ReturnedOK(testRef, nil, 0)},
	} {
		now := testNow
		if name == "zero now" {
			now = time.Time{}
		}
		ev, err := audit.ReturnedEvent(tc.called, tc.r, now)
		if ev != nil || errcode.CodeOf(err) != errcode.InvalidArgument {
			t.Errorf("%s: event %v, error %v", name, ev, err)
		}
	}
	// A refusal before any toolCalled (forbidden-at-load) has no causation.
	refused := must[audit.ToolReturned](t)(audit.ReturnedRefused(testRef, audit.StatusForbidden, audit.ErrorObject{Message: "m"}))
	ev, err := audit.NewEvent("run-9", audit.TypeToolReturned, refused, "", testNow)
	if err != nil || ev.CausationID != "" {
		t.Errorf("forbidden-at-load: %+v, %v", ev, err)
	}
	if m := payloadMap(t, ev); m["status"] != "forbidden" {
		t.Errorf("payload %s", ev.Payload)
	}
}

func TestSessionClosedOutcome(t *testing.T) {
	for _, o := range []string{audit.SessionCompleted, audit.SessionFailed} {
		s, err := audit.NewSessionClosed("s1", "mcp:fs.read_file", o)
		if err != nil || s.Outcome != o {
			t.Errorf("NewSessionClosed(%q) = %+v, %v", o, s, err)
		}
	}
	for _, o := range []string{"cancelled", "aborted", "expired", "", "Completed"} {
		_, err := audit.NewSessionClosed("s1", "mcp:fs.read_file", o)
		wantCode(t, err, errcode.InvalidArgument)
	}
	for _, ids := range [][2]string{{"", "t"}, {"s", ""}} {
		_, err := audit.NewSessionClosed(ids[0], ids[1], audit.SessionCompleted)
		wantCode(t, err, errcode.InvalidArgument)
	}
}

func TestSessionEventsContentFree(t *testing.T) {
	open, err := audit.NewEvent("run", audit.TypeSessionOpened, audit.SessionOpened{SessionID: "s1", ToolID: "mcp:fs.read_file"}, "", testNow)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(open.Payload); got != `{"sessionId":"s1","toolId":"mcp:fs.read_file"}` {
		t.Errorf("opened payload %s", got)
	}
	closed := must[audit.SessionClosed](t)(audit.NewSessionClosed("s1", "mcp:fs.read_file", audit.SessionFailed))
	ev, err := audit.NewEvent("run", audit.TypeSessionClosed, &closed, open.EventID, testNow)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(ev.Payload); got != `{"sessionId":"s1","toolId":"mcp:fs.read_file","outcome":"failed"}` {
		t.Errorf("closed payload %s", got)
	}
}

func TestCalledTransportAndReturnedStatusValid(t *testing.T) {
	for _, s := range []audit.Status{"ok", "error", "forbidden", "rate_limited"} {
		if !s.Valid() {
			t.Errorf("%q invalid", s)
		}
	}
	for _, s := range []audit.Status{"", "OK", "denied"} {
		if s.Valid() {
			t.Errorf("%q valid", s)
		}
	}
	for _, tr := range []audit.Transport{"mcp", "http", "native"} {
		if !tr.Valid() {
			t.Errorf("%q invalid", tr)
		}
	}
	if audit.Transport("grpc").Valid() || audit.Transport("").Valid() {
		t.Error("unknown transport valid")
	}
}

func decodeMap(t *testing.T, raw []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("%s: %v", raw, err)
	}
	return m
}

// trickyStrings exercise every escaping rule of encoding/json.
var trickyStrings = []string{
	"", "plain", `quote " and \ backslash`, "ctl \x00\x01\x1f \b\f\n\r\t", "html <a href='x'>&amp;</a>",
	"line\u2028para\u2029", "unicode é ✓ 😀", "bad utf8 \xff\xfe end", "trunc \xe2\x80", "del \x7f",
}

// calledMirror is ToolCalled's wire shape, encoded by encoding/json's
// reflection: the reference ToolCalled.MarshalJSON must match byte for byte.
type calledMirror struct {
	AgentID      string          `json:"agentId"`
	ToolName     string          `json:"toolName"`
	CallID       string          `json:"callId"`
	ArgsHash     string          `json:"argsHash"`
	Principal    string          `json:"principal"`
	Transport    string          `json:"transport"`
	ToolID       string          `json:"toolId,omitempty"`
	ParentCallID string          `json:"parentCallId,omitempty"`
	Inputs       json.RawMessage `json:"inputs,omitempty"`
}

func checkCalledJSON(t *testing.T, c audit.ToolCalled) {
	t.Helper()
	got, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	want, err := json.Marshal(calledMirror{c.AgentID, c.ToolName, c.CallID, c.ArgsHash, c.Principal, string(c.Transport), c.ToolID, c.ParentCallID, c.Inputs})
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Errorf("ToolCalled JSON\n got %s\nwant %s", got, want)
	}
}

func TestToolCalledJSONMatchesEncodingJSON(t *testing.T) {
	for _, s := range trickyStrings {
		checkCalledJSON(t, audit.ToolCalled{AgentID: s, ToolName: s, CallID: s, ArgsHash: s, Principal: s, Transport: audit.Transport(s), ToolID: s, ParentCallID: s})
	}
	for _, in := range []string{`{"a": [1, 2.5e3, true, null]}`, ` "x<y>&z\u2028" `, `{"html":"<b>&</b>","ls":"` + "\u2028" + `"}`, `[]`, `0`} {
		checkCalledJSON(t, audit.ToolCalled{AgentID: "a-1", ToolName: "t", CallID: "c", Inputs: json.RawMessage(in)})
	}
	if _, err := json.Marshal(audit.ToolCalled{Inputs: json.RawMessage(`{"a":`)}); err == nil {
		t.Error("invalid inputs marshalled")
	}
}

func FuzzToolCalledJSON(f *testing.F) {
	for _, s := range trickyStrings {
		f.Add(s, `{"k":"v"}`)
	}
	f.Fuzz(func(t *testing.T, s, inputs string) {
		c := audit.ToolCalled{AgentID: s, ToolName: "t" + s, CallID: s, ArgsHash: s, Principal: s, Transport: "mcp", ParentCallID: s}
		if json.Valid([]byte(inputs)) {
			c.Inputs = json.RawMessage(inputs)
		}
		checkCalledJSON(t, c)
	})
}

// returnedMirror is ToolReturned's wire shape for encoding/json.
type returnedMirror struct {
	AgentID      string             `json:"agentId"`
	ToolName     string             `json:"toolName"`
	CallID       string             `json:"callId"`
	ParentCallID string             `json:"parentCallId,omitempty"`
	Status       audit.Status       `json:"status"`
	Outcome      json.RawMessage    `json:"outcome,omitempty"`
	Error        *audit.ErrorObject `json:"error,omitempty"`
	DurationMs   *int64             `json:"durationMs,omitempty"`
}

func TestReturnedJSONMatchesEncodingJSON(t *testing.T) {
	yes := true
	var all []audit.ToolReturned
	for _, s := range trickyStrings {
		if !utf8Valid(s) {
			continue // not a valid ref or message: the constructors refuse it
		}
		ref := audit.CallRef{AgentID: "agent" + s, ToolName: "t" + s, CallID: "c" + s, ParentCallID: s}
		all = append(all,
			audit.ReturnedOK(ref, rawNoHTMLEscape(t, map[string]any{"s": "<" + s + ">", "n": []int{1, 2}}), 7*time.Millisecond),
			must[audit.ToolReturned](t)(audit.ReturnedError(ref, audit.ErrorObject{Code: "timeout", Message: "m" + s, Details: map[string]any{"k" + s: []any{s, 1.5, nil}}, Retryable: &yes}, time.Second, true)),
			must[audit.ToolReturned](t)(audit.ReturnedRefused(ref, audit.StatusForbidden, audit.ErrorObject{Message: "m" + s})),
		)
	}
	for _, r := range all {
		got, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		ref := r.Ref()
		m := returnedMirror{AgentID: ref.AgentID, ToolName: ref.ToolName, CallID: ref.CallID, ParentCallID: ref.ParentCallID, Status: r.Status(), Outcome: r.Outcome(), Error: r.Error()}
		if d, ran := r.DurationMs(); ran {
			m.DurationMs = &d
		}
		want, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Errorf("ToolReturned JSON\n got %s\nwant %s", got, want)
		}
	}
	bad := audit.ReturnedOK(testRef, json.RawMessage(`{"a":`), 0)
	if _, err := json.Marshal(bad); errcode.CodeOf(err) != errcode.InvalidArgument {
		t.Errorf("invalid outcome: %v", err)
	}
	unmarshalable, _ := audit.ReturnedError(testRef, audit.ErrorObject{Code: "timeout", Message: "m", Details: map[string]any{"f": func() {}}}, 0, false)
	if _, err := json.Marshal(unmarshalable); err == nil {
		t.Error("details with a func marshalled")
	}
}

// rawNoHTMLEscape encodes v with '<', '>', '&' left raw and an indent, so
// the encoder under test has to compact and escape it.
func rawNoHTMLEscape(t *testing.T, v any) json.RawMessage {
	t.Helper()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func utf8Valid(s string) bool { return strings.ToValidUTF8(s, "\uFFFD") == s }

// calledWithPayload returns an agent.toolCalled event with a hand-written
// payload, as another writer (or a store round trip) could produce.
func calledWithPayload(payload string) *audit.Event {
	return &audit.Event{EventID: "ev_called", RunID: "run", Type: audit.TypeToolCalled, Payload: json.RawMessage(payload), Timestamp: testNow}
}

// wantPairs decodes payload with exact-key JSON semantics (a repeated key's
// last value wins) and reports whether it names ref; ok is false when the
// payload is not a JSON object with string (or null) members for the four.
func wantPairs(payload []byte, ref audit.CallRef) (pairs, ok bool) {
	var members map[string]json.RawMessage
	if json.Unmarshal(payload, &members) != nil {
		return false, false
	}
	var got audit.CallRef
	for k, dst := range map[string]*string{"agentId": &got.AgentID, "toolName": &got.ToolName, "callId": &got.CallID, "parentCallId": &got.ParentCallID} {
		if raw, found := members[k]; found && json.Unmarshal(raw, dst) != nil {
			return false, false
		}
	}
	return got == ref, true
}

func TestReturnedEventPairingPayloads(t *testing.T) {
	const ids = `"agentId":"agent-7","toolName":"mcp:fs.read_file","callId":"call-1"`
	for _, tc := range []struct {
		payload string
		pairs   bool
	}{
		{`{` + ids + `}`, true},
		{` { "callId" : "call-1" , "toolName":"mcp:fs.read_file",` + "\n\t" + `"agentId":"agent-7" } `, true},
		{`{` + ids + `,"argsHash":"x","inputs":{"callId":"other","parentCallId":"p","a":[1,{"b":"}"}]}}`, true},
		{`{"inputs":{"callId":"call-1"},"agentId":"agent-7","toolName":"mcp:fs.read_file","n":-1.5e3,"t":true,"z":null}`, false},
		{`{"agentId":"agent-7","toolName":"mcp:fs.read_file","callId":"call\u002d1"}`, true},
		{`{"agentId":"agent-7","toolName":"mcp:fs.read_file","call\u0049d":"call-1"}`, true}, // an escaped key is the same key
		{`{"agentId":"agent-7","toolName":"mcp:fs.read_file","CallId":"call-1"}`, false},
		{`{"callId":"other",` + ids + `}`, true},
		{`{` + ids + `,"callId":"other"}`, false},
		{`{` + ids + `,"parentCallId":"call-0"}`, false},
		{`{` + ids + `,"parentCallId":null}`, true},
		{`{` + ids + `,"parentCallId":""}`, true},
		{`{"agentId":"agent-7","toolName":"mcp:fs.read_file","callId":1}`, false},
		{`{"a":"\"callId\":\"call-1\"",` + ids + `}`, true},
		{`[` + ids + `]`, false},
		{`{` + ids, false},
		{`{` + ids + `} x`, false},
		{`{` + ids + `,}`, false},
		{``, false},
	} {
		ev, err := audit.ReturnedEvent(calledWithPayload(tc.payload), audit.ReturnedOK(testRef, nil, 0), testNow)
		if tc.pairs != (err == nil) {
			t.Errorf("%s: pairs = %v, want %v (%v)", tc.payload, err == nil, tc.pairs, err)
		}
		if err != nil {
			wantCode(t, err, errcode.InvalidArgument)
		} else if ev.CausationID != "ev_called" {
			t.Errorf("%s: causationId %q", tc.payload, ev.CausationID)
		}
		if want, ok := wantPairs([]byte(tc.payload), testRef); ok && want != tc.pairs {
			t.Errorf("%s: table says %v, encoding/json says %v", tc.payload, tc.pairs, want)
		}
	}
}

// FuzzReturnedEventPairing checks that pairing never panics and, on valid
// JSON, agrees with encoding/json's exact-key reading of the payload.
func FuzzReturnedEventPairing(f *testing.F) {
	for _, p := range []string{
		`{"agentId":"agent-7","toolName":"mcp:fs.read_file","callId":"call-1"}`,
		`{"agentId":"agent-7","toolName":"mcp:fs.read_file","callId":"call-1","inputs":{"x":["}",{"y":"\""}]}}`,
		`{"agentId":"agent-7","toolName":"mcp:fs.read_file","callId":"call-1","parentCallId":"p"}`,
		`{"agentId" : "agent-7" , "toolName" : "mcp:fs.read_file" , "callId" : "call\u002d1" }`,
		`{"agentId":"agent-7","toolName":"mcp:fs.read_file","callId":"call-1"`, `{"a":[`, `"`, `{`, `{"`,
	} {
		f.Add([]byte(p))
	}
	f.Fuzz(func(t *testing.T, payload []byte) {
		_, err := audit.ReturnedEvent(calledWithPayload(string(payload)), audit.ReturnedOK(testRef, nil, 0), testNow)
		if !json.Valid(payload) {
			return // may pair or not; the called event itself cannot be appended
		}
		want, ok := wantPairs(payload, testRef)
		if got := err == nil; got != (ok && want) {
			t.Fatalf("%s: paired = %v, encoding/json says %v (%v)", payload, got, ok && want, err)
		}
	})
}

// TestReturnedRuleAndReceipt: WithRule and WithReceipt add the members
// ruleId and receiptId (after durationMs), which survive a round trip; ""
// removes them; an over-long rule id fails Validate.
func TestReturnedRuleAndReceipt(t *testing.T) {
	r := audit.ReturnedOK(testRef, nil, 3*time.Millisecond).WithReceipt("rcpt_1").WithRule("allow-ok")
	raw, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(string(raw), `,"durationMs":3,"receiptId":"rcpt_1","ruleId":"allow-ok"}`) {
		t.Errorf("JSON %s", raw)
	}
	var got audit.ToolReturned
	if err := json.Unmarshal(raw, &got); err != nil || got.RuleID() != "allow-ok" || got.ReceiptID() != "rcpt_1" || !reflect.DeepEqual(got, r) {
		t.Errorf("round trip: %v %#v", err, got)
	}
	if raw, _ := json.Marshal(r.WithRule("")); strings.Contains(string(raw), "ruleId") {
		t.Errorf("WithRule(\"\") kept it: %s", raw)
	}
	if err := r.WithRule(strings.Repeat("x", 257)).Validate(); errcode.CodeOf(err) != errcode.InvalidArgument {
		t.Errorf("a 257-byte rule id: %v", err)
	}
}

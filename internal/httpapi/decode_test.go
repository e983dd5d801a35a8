package httpapi

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/internal/schematest"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/store"
)

// goTypeName matches what a Go type name in a message looks like.
var goTypeName = regexp.MustCompile(`httpapi\.|\bGo (struct|value)\b|\bmap\[|\[\]|\binterface ?\{|json\.RawMessage|\bint64\b|\*[A-Z]|\bstruct\b`)

// quoted matches a quoted (%q) echo of the caller's input in a message.
var quoted = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)

// checkNoGoTypes fails when a decode error's message names a Go type
// (outside the quoted echoes of the caller's input).
func checkNoGoTypes(t *testing.T, body []byte, err error) {
	t.Helper()
	if e := errcode.As(err); e != nil && goTypeName.MatchString(quoted.ReplaceAllString(e.Message, `""`)) {
		t.Fatalf("decoding %q: the message names a Go type: %s", body, e.Message)
	}
}

// TestDecodeDuplicateKeys: a member given twice (also spelled with another
// case, which encoding/json would fold onto the same field) is refused at
// the top level and inside principal, with the member named; args are
// left to the pipeline's strict parse.
func TestDecodeDuplicateKeys(t *testing.T) {
	for _, c := range []struct {
		body, msg, field string
		explain          bool
	}{
		{`{"toolId":"a:b","toolId":"c:d"}`, "duplicate key toolId", "toolId", false},
		{`{"toolId":"a:b","args":{},"args":{"x":1}}`, "duplicate key args", "args", false},
		{`{"toolId":"a:b","runId":"r","runId":"r"}`, "duplicate key runId", "runId", false},
		{`{"toolId":"a:b","to\u006flId":"c:d"}`, "duplicate key toolId", "toolId", false},
		{`{"toolId":"a:b","ToolId":"c:d"}`, `unknown member "ToolId" (member names are case-sensitive: did you mean toolId?)`, "ToolId", false},
		{`{"TOOLID":"a:b"}`, `unknown member "TOOLID" (member names are case-sensitive: did you mean toolId?)`, "TOOLID", false},
		{`{"toolId":"a:b","toolId":"c:d"}`, "duplicate key toolId", "toolId", true},
		{`{"toolId":"a:b","principal":{"id":"x"},"principal":{"id":"y"}}`, "duplicate key principal", "principal", true},
		{`{"toolId":"a:b","principal":{"id":"x","id":"root"}}`, "duplicate key principal.id", "principal.id", true},
		{`{"toolId":"a:b","principal":{"id":"x","attributes":{"t":"1","t":"2"}}}`, "duplicate key principal.attributes.t", "principal.attributes.t", true},
		{`{"toolId":"a:b","principal":{"id":"x","ID":"y"}}`, `unknown member "principal.ID" (member names are case-sensitive: did you mean id?)`, "principal.ID", true},
	} {
		var err error
		if c.explain {
			_, err = decodeExplain([]byte(c.body))
		} else {
			_, err = decodeCall([]byte(c.body))
		}
		e := errcode.As(err)
		if e == nil || e.Code != errcode.InvalidArgument || e.Message != c.msg || e.Details["field"] != c.field {
			t.Errorf("%s: %v (details %v), want %q on %s", c.body, err, e.Details, c.msg, c.field)
		}
	}
	// Duplicates inside args are the pipeline's to refuse (it answers a
	// hidden tool's bad args as unknown): the decoder keeps them.
	if req, err := decodeCall([]byte(`{"toolId":"a:b","args":{"x":1,"x":2}}`)); err != nil || string(req.Args) != `{"x":1,"x":2}` {
		t.Errorf("args with a duplicate key: %v %s", err, req.Args)
	}
	// The lenient decoders (the seams) ignore unknown members but not a
	// member given twice.
	var inv InvokeRequest
	if err := decodeJSON([]byte(`{"principal":"p","toolName":"a","toolName":"b","x":1}`), &inv, false); errcode.As(err) == nil ||
		errcode.As(err).Message != "duplicate key toolName" {
		t.Errorf("seam duplicate: %v", err)
	}
	if err := decodeJSON([]byte(`{"principal":"p","toolName":"a","TOOLNAME":"b"}`), &inv, false); errcode.As(err) == nil ||
		errcode.As(err).Message != "duplicate key TOOLNAME" {
		t.Errorf("seam case-folded duplicate: %v", err)
	}
	if err := decodeJSON([]byte(`{"principal":"p","toolName":"a","extra":{"k":1,"k":2}}`), &inv, false); err != nil {
		t.Errorf("an ignored member is not looked into: %v", err)
	}
}

// TestDecodeErrorMessages: every decode error names the JSON member and the
// JSON type it must be, never a Go type.
func TestDecodeErrorMessages(t *testing.T) {
	for _, c := range []struct {
		body, msg, field string
		explain          bool
	}{
		{`{"principal":"bob","toolId":"a:b"}`, "principal must be an object", "principal", true},
		{`{"principal":[1],"toolId":"a:b"}`, "principal must be an object", "principal", true},
		{`{"principal":{"id":7},"toolId":"a:b"}`, "principal.id must be a string", "principal.id", true},
		{`{"principal":{"id":"x","scopes":"s"},"toolId":"a:b"}`, "principal.scopes must be an array of strings", "principal.scopes", true},
		{`{"principal":{"id":"x","scopes":[1]},"toolId":"a:b"}`, "principal.scopes must be an array of strings", "principal.scopes", true},
		{`{"principal":{"id":"x","attributes":[]},"toolId":"a:b"}`, "principal.attributes must be an object whose values are strings", "principal.attributes", true},
		{`{"principal":{"id":"x","attributes":{"a":true}},"toolId":"a:b"}`, "principal.attributes must be an object whose values are strings", "principal.attributes", true},
		{`{"toolId":{}}`, "toolId must be a string", "toolId", true},
		{`{"toolId":7}`, "toolId must be a string", "toolId", false},
		{`{"toolId":"a:b","runId":null,"agentId":false}`, "agentId must be a string", "agentId", false},
		{`{"toolId":"a:b","x":1}`, `unknown member "x"`, "x", false},
	} {
		var err error
		if c.explain {
			_, err = decodeExplain([]byte(c.body))
		} else {
			_, err = decodeCall([]byte(c.body))
		}
		e := errcode.As(err)
		if e == nil || e.Code != errcode.InvalidArgument || e.Message != c.msg || e.Details["field"] != c.field {
			t.Errorf("%s: %v, want %q on %s", c.body, err, c.msg, c.field)
		}
	}
	var inv InvokeRequest
	for body, msg := range map[string]string{
		`{"principal":"p","toolName":"t","simulateToolError":"yes"}`: "simulateToolError must be a boolean",
		`{"principal":"p","toolName":"t","requiredScopes":{}}`:       "requiredScopes must be an array of strings",
		`{"principal":["p"],"toolName":"t"}`:                         "principal must be a string",
	} {
		if err := decodeJSON([]byte(body), &inv, false); errcode.As(err) == nil || errcode.As(err).Message != msg {
			t.Errorf("%s: %v, want %q", body, err, msg)
		}
	}
	// No message of any malformed body names a Go type.
	for _, body := range []string{
		`{"principal":"bob","toolId":"a:b"}`, `{"principal":1.5e999,"toolId":"a:b"}`, `{"toolId":[]}`, `{"toolId":"a","args":`,
		`{"toolId":"a" "args":{}}`, `{"toolId":"a"}}`, `{"toolId":"\x"}`, `{"toolId":"a","principal":{"scopes":[[]]}}`,
		`{"toolId":"a","principal":{"id":"x","attributes":{"a":{"b":1}}}}`, `{"toolId":"a","runId":1e400}`, `{`, `{"toolId":"a",}`,
	} {
		_, err := decodeExplain([]byte(body))
		checkDecodeError(t, []byte(body), err)
		checkNoGoTypes(t, []byte(body), err)
		_, err = decodeCall([]byte(body))
		checkDecodeError(t, []byte(body), err)
		checkNoGoTypes(t, []byte(body), err)
	}
}

func TestClip(t *testing.T) {
	if clip("short") != "short" || clip(strings.Repeat("a", maxEcho)) != strings.Repeat("a", maxEcho) {
		t.Error("a short value was clipped")
	}
	if got := clip(strings.Repeat("a", maxEcho+1)); got != strings.Repeat("a", maxEcho)+"…" {
		t.Errorf("clip: %q", got)
	}
	got := clip(strings.Repeat("é", maxEcho)) // 2 bytes each: cut at a rune boundary
	if !utf8.ValidString(got) || len(got) > maxEcho+len("…") || !strings.HasSuffix(got, "…") {
		t.Errorf("clip of multi-byte text: %q", got)
	}
	long := strings.Repeat("x", 1000) + "\x01"
	msg := scrubEchoes(fmt.Sprintf("tool name %q contains a control character; raw %s", long, long), long)
	if strings.Contains(msg, strings.Repeat("x", maxEcho+1)) || !strings.Contains(msg, "…") {
		t.Errorf("scrubEchoes: %q", msg)
	}
}

// fakeApprovals answers every Resolve as the stores do for an unknown id.
type fakeApprovals struct{}

func (fakeApprovals) List(context.Context, string, store.ApprovalStatus) ([]store.Approval, error) {
	return nil, nil
}

func (fakeApprovals) Resolve(_ context.Context, _ policy.Principal, id string, _ bool, _ string) (*store.Approval, error) {
	return nil, errcode.Errorf(errcode.NotFound, "approval %q not found", id)
}

// TestEchoClipped: a caller's value echoed in an error message (tool name,
// run id, query parameter, member name, path, approval id) is cut to
// maxEcho bytes, whichever endpoint answers.
func TestEchoClipped(t *testing.T) {
	f := newFixture(t, func(o *Options) { o.TestSeams, o.Approvals = true, fakeApprovals{} })
	big := strings.Repeat("z", 300<<10)         // fits a request line
	huge := strings.Repeat("z", 3<<20)          // fits a body only
	mid := "native:" + strings.Repeat("y", 400) // under catalog.MaxNameLen
	body := func(v any) string { raw, _ := json.Marshal(v); return string(raw) }
	for _, c := range []struct {
		method, path, body string
		status             int
	}{
		{"GET", "/v1/tools/" + big, "", 404},
		{"POST", "/v1/calls", body(map[string]any{"toolId": huge}), 400},
		{"POST", "/v1/calls", body(map[string]any{"toolId": mid}), 404},
		{"POST", "/v1/calls", body(map[string]any{"toolId": mid + "\x01"}), 400},
		{"POST", "/v1/calls", body(map[string]any{"toolId": mid + "%zz"}), 400},
		{"POST", "/v1/calls", `{"toolId":"native:echo","` + huge + `":1}`, 400},
		{"POST", "/v1/calls", `{"toolId":"native:echo","` + huge[:1<<20] + `":1,"` + huge[:1<<20] + `":2}`, 400},
		{"POST", "/v1/policy/explain", body(map[string]any{"toolId": huge}), 400},
		{"POST", "/v1/policy/explain", body(map[string]any{"toolId": mid}), 404},
		{"GET", "/v1/runs/" + big + "/events", "", 404},
		{"GET", "/v1/runs/r/events?after=" + big, "", 400},
		{"GET", "/v1/runs/r/events?limit=" + big, "", 400},
		{"GET", "/v1/runs/r/events?type=" + big, "", 400},
		{"GET", "/v1/events/stream?from=" + big, "", 400},
		{"GET", "/v1/tools?source=" + big, "", 400},
		{"GET", "/v1/tools?view=" + big, "", 400},
		{"GET", "/" + big, "", 404},
		{"DELETE", "/v1/tools?" + big, "", 405},
		{"POST", "/v1/host/sample/toolhooks/invoke", body(map[string]any{"principal": "p", "toolName": huge}), 400},
		{"POST", "/v1/host/sample/toolhooks/invoke", body(map[string]any{"principal": "p", "toolName": strings.Repeat("q", 400) + " !"}), 400},
		{"POST", "/v1/host/sample/toolhooks/invoke", body(map[string]any{"principal": "p", "toolName": "t", "transport": huge}), 400},
		{"POST", "/v1/host/sample/tools/session-run", body(map[string]any{"toolId": mid}), 404},
		{"POST", "/v1/approvals/" + big + "/approve", "", 404},
	} {
		resp, raw := f.do(t, "k-alice", c.method, c.path, c.body)
		if resp.StatusCode != c.status {
			t.Errorf("%s %.80s: %d %.300s, want %d", c.method, c.path, resp.StatusCode, raw, c.status)
			continue
		}
		schematest.Validate(t, "error-envelope.schema.json", json.RawMessage(raw))
		var env envelope
		json.Unmarshal(raw, &env)
		if strings.Contains(env.Message, strings.Repeat("z", maxEcho+1)) || strings.Contains(env.Message, strings.Repeat("y", maxEcho+1)) ||
			strings.Contains(env.Message, strings.Repeat("q", maxEcho+1)) || len(env.Message) > maxMessage+len("…") {
			t.Errorf("%s %.80s %.80s: the answer echoes the value unclipped (%d bytes): %.600s", c.method, c.path, c.body, len(raw), raw)
		}
	}
}

// rawRequest sends one request line as is and returns the answer.
func rawRequest(t *testing.T, srvURL, line string) *http.Response {
	t.Helper()
	u, _ := url.Parse(srvURL)
	conn, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	fmt.Fprintf(conn, "%s\r\nHost: %s\r\nAuthorization: Bearer k-alice\r\nConnection: close\r\n\r\n", line, u.Host)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// TestUndecodablePaths: the request target "*" answers the envelope; a
// path with malformed percent-encoding is refused by net/http's server
// while it parses the request line, before any handler runs (a bare
// text/plain 400 this package cannot reach).
func TestUndecodablePaths(t *testing.T) {
	f := newFixture(t, nil)
	resp := rawRequest(t, f.srv.URL, "GET * HTTP/1.1")
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 400 || resp.Header.Get("Content-Type") != "application/json" {
		t.Errorf("GET *: %d %v %s", resp.StatusCode, resp.Header, raw)
	} else {
		schematest.Validate(t, "error-envelope.schema.json", json.RawMessage(raw))
	}
	resp = rawRequest(t, f.srv.URL, "GET /v1/tools/%ZZ HTTP/1.1")
	raw, _ = io.ReadAll(resp.Body)
	if resp.StatusCode != 400 {
		t.Errorf("GET /v1/tools/%%ZZ: %d %s", resp.StatusCode, raw)
	}
}

// TestDuplicateKeysOverHTTP: POST /v1/calls and /v1/policy/explain answer
// a member given twice 400 invalid_argument naming it; explain refuses
// arguments with a duplicate key as a call does (400 for a visible tool,
// the unknown-tool 404 for a hidden one).
func TestDuplicateKeysOverHTTP(t *testing.T) {
	f := newFixture(t, nil)
	for _, c := range []struct {
		path, body, field string
		status            int
	}{
		{"/v1/calls", `{"toolId":"native:echo","toolId":"native:other"}`, "toolId", 400},
		{"/v1/policy/explain", `{"toolId":"native:echo","toolId":"native:other"}`, "toolId", 400},
		{"/v1/policy/explain", `{"toolId":"native:echo","args":{"a":1,"a":2}}`, "args", 400},
		{"/v1/policy/explain", `{"toolId":"native:other","args":{"a":1,"a":2}}`, "", 404},
		{"/v1/calls", `{"toolId":"native:echo","args":{"a":1,"a":2}}`, "args", 400},
		{"/v1/calls", `{"toolId":"native:other","args":{"a":1,"a":2}}`, "", 404},
	} {
		resp, raw := f.do(t, "k-alice", "POST", c.path, c.body)
		var env envelope
		json.Unmarshal(raw, &env)
		if resp.StatusCode != c.status || (c.field != "" && env.Details["field"] != c.field) {
			t.Errorf("%s %s: %d %s", c.path, c.body, resp.StatusCode, raw)
		}
		if c.field == "toolId" && env.Message != "duplicate key toolId" {
			t.Errorf("%s %s: message %q", c.path, c.body, env.Message)
		}
		schematest.Validate(t, "error-envelope.schema.json", json.RawMessage(raw))
	}
}

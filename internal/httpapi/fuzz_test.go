package httpapi

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/errcode"
)

// checkDecodeError asserts the decoders' error contract: an
// *errcode.Error invalid_argument whose envelope is non-empty.
func checkDecodeError(t *testing.T, body []byte, err error) {
	t.Helper()
	e := errcode.As(err)
	if e == nil || e.Code != errcode.InvalidArgument || e.Message == "" {
		t.Fatalf("decoding %q: error %v is not an invalid_argument *errcode.Error", body, err)
	}
	if _, merr := json.Marshal(envelope{Error: string(e.Code), Message: e.Message, Details: e.Details}); merr != nil {
		t.Fatalf("decoding %q: the error's envelope does not marshal: %v", body, merr)
	}
	checkNoGoTypes(t, body, err)
}

// checkNoDuplicates asserts that an accepted body has no top-level member
// twice, also up to case (encoding/json would fold the two together).
func checkNoDuplicates(t *testing.T, body []byte) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(body))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		t.Fatalf("decoding %q: accepted a body that is not an object", body)
	}
	var seen []string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			t.Fatalf("decoding %q: accepted a malformed body: %v", body, err)
		}
		key := tok.(string)
		for _, k := range seen {
			if strings.EqualFold(k, key) {
				t.Fatalf("decoding %q: accepted member %q twice", body, key)
			}
		}
		seen = append(seen, key)
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			t.Fatalf("decoding %q: accepted a malformed body: %v", body, err)
		}
	}
}

// checkArgs asserts that decoded args are one JSON object.
func checkArgs(t *testing.T, body, args []byte) {
	t.Helper()
	var m map[string]json.RawMessage
	if !json.Valid(args) || bytes.TrimSpace(args)[0] != '{' || json.Unmarshal(args, &m) != nil || m == nil {
		t.Fatalf("decoding %q: args %q are not a JSON object", body, args)
	}
}

// FuzzDecodeCall: decodeCall never panics; it either fails with
// invalid_argument or returns a request with a toolId and object args that
// re-encodes and decodes to the same request; no accepted body has a
// top-level member twice, and no error message names a Go type. Seed
// corpus: testdata/fuzz/FuzzDecodeCall.
func FuzzDecodeCall(f *testing.F) {
	f.Add([]byte(`{"toolId":"mcp:fs.read_file","args":{"path":"/tmp/x"},"runId":"r1","agentId":"agent-1","parentCallId":"c0"}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := decodeCall(body)
		if err != nil {
			checkDecodeError(t, body, err)
			return
		}
		if req.ToolID == "" {
			t.Fatalf("decoding %q: empty toolId accepted", body)
		}
		checkArgs(t, body, req.Args)
		checkNoDuplicates(t, body)
		again, err := json.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		req2, err := decodeCall(again)
		if err != nil {
			t.Fatalf("re-decoding %s: %v", again, err)
		}
		if req2.ToolID != req.ToolID || req2.RunID != req.RunID || req2.AgentID != req.AgentID || req2.ParentCallID != req.ParentCallID ||
			req2.Record != req.Record || req2.ReplayOf != req.ReplayOf {
			t.Fatalf("round trip changed %+v into %+v", req, req2)
		}
	})
}

// FuzzDecodeExplain: decodeExplain never panics; it either fails with
// invalid_argument or returns a request with a toolId, object args and,
// when a principal is given, a principal id; no accepted body has a
// top-level member twice, and no error message names a Go type. Seed
// corpus: testdata/fuzz/FuzzDecodeExplain.
func FuzzDecodeExplain(f *testing.F) {
	f.Add([]byte(`{"principal":{"id":"bob","tenant":"acme","scopes":["fs:read"],"attributes":{"team":"x"}},"toolId":"mcp:fs.read_file","args":{"path":"/etc/passwd"}}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := decodeExplain(body)
		if err != nil {
			checkDecodeError(t, body, err)
			return
		}
		if req.ToolID == "" || (req.Principal != nil && req.Principal.ID == "") {
			t.Fatalf("decoding %q: accepted %+v", body, req)
		}
		checkArgs(t, body, req.Args)
		checkNoDuplicates(t, body)
	})
}

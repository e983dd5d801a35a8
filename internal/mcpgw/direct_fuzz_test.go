package mcpgw

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// parseDirectTwoPass is parseDirect as it was before it read the request's
// members from one decode: it decoded the body a second time into a
// struct. FuzzParseDirect checks that the two agree on every input.
func parseDirectTwoPass(body []byte) (id json.RawMessage, params *mcp.CallToolParamsRaw, ok bool) {
	if !bytes.Contains(body, []byte(`"tools/call"`)) {
		return nil, nil, false
	}
	m, ok := members(body, directMembers)
	if !ok {
		return nil, nil, false
	}
	var req struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Method  string          `json:"method"`
		Params  json.RawMessage `json:"params"`
	}
	if json.Unmarshal(body, &req) != nil || req.JSONRPC != "2.0" || req.Method != "tools/call" ||
		string(m["jsonrpc"]) != `"2.0"` || !validID(m["id"]) || len(m["params"]) == 0 {
		return nil, nil, false
	}
	pm, ok := members(req.Params, directParams)
	if !ok {
		return nil, nil, false
	}
	params = &mcp.CallToolParamsRaw{}
	if raw, present := pm["name"]; !present || json.Unmarshal(raw, &params.Name) != nil || raw[0] != '"' {
		return nil, nil, false
	}
	params.Arguments = pm["arguments"]
	if raw, present := pm["_meta"]; present {
		mm, ok := members(raw, directMeta)
		if !ok {
			return nil, nil, false
		}
		params.Meta = mcp.Meta{}
		for k, v := range mm {
			var x any
			if json.Unmarshal(v, &x) != nil {
				return nil, nil, false
			}
			params.Meta[k] = x
		}
	}
	return m["id"], params, true
}

// directSeeds are tools/call bodies a client sends and near misses the
// direct path must refuse (and leave to the SDK).
var directSeeds = []string{
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hi"}}}`,
	`{"jsonrpc":"2.0","id":"a","method":"tools/call","params":{"name":"echo","arguments":{},"_meta":{"toolgate/runId":"r1"}}}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools\/call","params":{"name":"echo"}}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","METHOD":"tools/call","params":{"name":"echo"}}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","method":"tools/list","params":{"name":"echo"}}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/list","method":"tools/call","params":{"name":"echo"}}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":null}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/call"}`,
	`{"jsonrpc":"2.0","id":1.5,"method":"tools/call","params":{"name":"echo"}}`,
	`{"jsonrpc":"1.0","id":1,"method":"tools/call","params":{"name":"echo"}}`,
	`{"jsonrpc":"2.0","id":1,"method":7,"params":{"name":"tools/call"}}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","Name":"x"}}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo"}} trailing`,
	`[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo"}}]`,
	`{"jsonrpc":"2.0","id":null,"method":"tools/call","params":{"name":"echo"}}`,
}

// FuzzParseDirect checks that parseDirect, which faces every POST body of
// an MCP session, takes and refuses exactly what the two-pass parser did,
// with the same id and params.
func FuzzParseDirect(f *testing.F) {
	for _, s := range directSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		id, params, ok := parseDirect(body)
		wantID, wantParams, wantOK := parseDirectTwoPass(body)
		if ok != wantOK || !bytes.Equal(id, wantID) || !reflect.DeepEqual(params, wantParams) {
			t.Fatalf("parseDirect(%q) = %s, %+v, %v; the two-pass parser gave %s, %+v, %v", body, id, params, ok, wantID, wantParams, wantOK)
		}
	})
}

// BenchmarkParseDirect compares the one-decode parser with the two-pass
// one it replaced, on a typical call (issue 15 in BENCHMARKS.md).
func BenchmarkParseDirect(b *testing.B) {
	body := []byte(`{"jsonrpc":"2.0","id":17,"method":"tools/call","params":{"name":"echo","arguments":{"text":"` +
		string(bytes.Repeat([]byte("x"), 64)) + `"}}}`)
	if _, _, ok := parseDirect(body); !ok {
		b.Fatal("the direct path refuses the benchmark's call")
	}
	for _, p := range []struct {
		name string
		fn   func([]byte) (json.RawMessage, *mcp.CallToolParamsRaw, bool)
	}{{"one-decode", parseDirect}, {"two-pass", parseDirectTwoPass}} {
		b.Run(p.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				p.fn(body)
			}
		})
	}
}

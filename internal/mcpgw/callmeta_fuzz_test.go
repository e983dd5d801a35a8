package mcpgw

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolgate/toolgate/internal/pipeline"
)

// FuzzApplyCallMeta: a tools/call request's _meta (untrusted JSON) never
// panics applyCallMeta; it is either refused with a -32602 JSON-RPC error,
// or every id it set (runId, agentId, parentCallId, replayOf) is 1–128
// bytes of UTF-8 without control characters, taken from the _meta as is,
// and Record is the boolean toolgate/record carried (false when absent).
// Seed corpus: testdata/fuzz/FuzzApplyCallMeta.
func FuzzApplyCallMeta(f *testing.F) {
	f.Add([]byte(`{"toolgate/record":true,"toolgate/replayOf":"run-1","toolgate/runId":"r2","toolgate/parentCallId":"c1"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var m mcp.Meta
		if json.Unmarshal(data, &m) != nil {
			return
		}
		var c pipeline.Call
		err := applyCallMeta(m, &c)
		if err != nil {
			if je, ok := err.(*jsonrpc.Error); !ok || je.Code != jsonrpc.CodeInvalidParams {
				t.Fatalf("_meta %s: error %v, want a -32602 JSON-RPC error", data, err)
			}
			return
		}
		for key, v := range map[string]string{MetaRunID: c.RunID, MetaAgentID: c.AgentID, MetaParentCallID: c.ParentCallID, MetaReplayOf: c.ReplayOf} {
			if v == "" {
				if _, present := m[key]; present {
					t.Fatalf("_meta %s: %s present but not applied", data, key)
				}
				continue
			}
			if v != m[key] || len(v) > 128 || !utf8.ValidString(v) || strings.ContainsFunc(v, unicode.IsControl) {
				t.Fatalf("_meta %s: %s accepted as %q", data, key, v)
			}
		}
		if want, _ := m[MetaRecord].(bool); c.Record != want {
			t.Fatalf("_meta %s: Record %v", data, c.Record)
		}
	})
}

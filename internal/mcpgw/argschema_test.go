package mcpgw

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/internal/auth"
)

// Arguments are validated against the inputSchema toolgate advertises
// (issue 13 point 6): a go-sdk upstream whose handlers do not validate
// never sees a call its schema forbids; the caller gets an isError
// invalid_argument naming the offending path, the call is recorded, and the
// refusal takes no rate-limit token. validate_args: false on a tools:
// entry lets such calls through for an upstream with a wrong schema.
func TestArgumentsValidatedAgainstInputSchema(t *testing.T) {
	var calls atomic.Int64
	server := mcp.NewServer(&mcp.Implementation{Name: "up", Version: "1"}, nil)
	schema := map[string]any{"type": "object", "properties": map[string]any{
		"n":    map[string]any{"type": "integer", "maximum": 10},
		"tags": map[string]any{"type": "array", "items": map[string]any{"type": "string"}},
	}, "required": []any{"n"}}
	handler := func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		calls.Add(1)
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "ran with " + string(req.Params.Arguments)}}}, nil
	}
	server.AddTool(&mcp.Tool{Name: "count", InputSchema: schema}, handler) // a raw handler: the SDK does not validate
	server.AddTool(&mcp.Tool{Name: "lax", InputSchema: schema}, handler)
	up := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, nil))
	t.Cleanup(up.Close)

	e := startGateway(t, fmt.Sprintf(`auth:
  api_keys:
    - {id: alice, key_sha256: %q, tenant: %s}
servers:
  - {name: up, url: %s}
tools:
  - {match: "mcp:up.lax", validate_args: false}
policy:
  rules:
    - {id: all, effect: allow, tools: ["*"]}
  ratelimits:
    - {tools: ["mcp:up.count"], per: principal_tool, rate: 1/h, burst: 1}
`, auth.HashKey(keyAlice), tenant, yamlQuote(up.URL)))
	cs := e.connect(t, keyAlice)

	for _, c := range []struct {
		args any
		path string
	}{
		{map[string]any{}, "/n"},
		{map[string]any{"n": 11}, "/n"},
		{map[string]any{"n": "3"}, "/n"},
		{map[string]any{"n": 1, "tags": []any{"a", 2}}, "/tags/1"},
	} {
		res := callTool(t, cs, "up__count", c.args)
		if !res.IsError || gatewayErrorCode(res) != "invalid_argument" || !strings.Contains(resultText(res), c.path) {
			raw, _ := json.Marshal(res)
			t.Fatalf("args %v: want isError invalid_argument naming %s, got %s", c.args, c.path, raw)
		}
		types, ret := e.callEvents(t, res)
		if strings.Join(types, ",") != audit.TypeToolCalled+","+audit.TypeToolReturned || ret.Status != string(audit.StatusError) ||
			ret.Error == nil || ret.Error.Code != "invalid_argument" || ret.DurationMs != nil {
			t.Errorf("args %v: events %v, agent.toolReturned %+v; want a recorded status error invalid_argument without durationMs", c.args, types, ret)
		}
		if d := e.returnedDetails(t, res); d["path"] != c.path {
			t.Errorf("args %v: error.details %v; want path %s", c.args, d, c.path)
		}
	}
	if n := calls.Load(); n != 0 {
		t.Fatalf("the upstream ran %d calls with arguments its schema forbids", n)
	}
	// The refusals took no token of the burst of 1: a valid call runs.
	res := callTool(t, cs, "up__count", map[string]any{"n": 3})
	if res.IsError || resultText(res) != `ran with {"n":3}` {
		t.Fatalf("a valid call after the refusals: %+v (%s)", res, resultText(res))
	}
	// validate_args: false passes what the schema forbids.
	res = callTool(t, cs, "up__lax", map[string]any{"n": "not a number"})
	if res.IsError || calls.Load() != 2 {
		t.Fatalf("validate_args: false: %+v (%s), upstream calls %d", res, resultText(res), calls.Load())
	}
}

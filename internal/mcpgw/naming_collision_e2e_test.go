package mcpgw

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolgate/toolgate/internal/auth"
)

// TestNamingNeverCollision: under naming.prefix never, two servers that
// both expose greet (and fail, secret) no longer make the second tool
// vanish while the bare name goes to one of them (issue 13.11): the bare
// name is refused as an unknown tool on the MCP surface (and ambiguous in
// the catalog), each tool is served under its prefixed name and reaches its
// own server, and a tool only one server has stays bare.
func TestNamingNeverCollision(t *testing.T) {
	a, b := startRecordingUpstream(t), startRecordingUpstream(t)
	cfg := `naming: {prefix: never}
auth:
  api_keys:
    - {id: alice, key_sha256: ` + yamlQuote(auth.HashKey(keyAlice)) + `, tenant: ` + tenant + `}
servers:
  - {name: a, url: ` + yamlQuote(a.url) + `}
  - {name: b, url: ` + yamlQuote(b.url) + `}
policy:
  default: deny
  rules:
    - {id: all, effect: allow, tools: ["mcp:*"]}
`
	e := startGateway(t, cfg)
	cs := e.connect(t, keyAlice)
	names := toolNames(t, cs)
	for _, want := range []string{"a__greet", "b__greet", "a__fail", "b__fail"} {
		if !slices.Contains(names, want) {
			t.Errorf("tools/list %v lacks %s", names, want)
		}
	}
	for _, bare := range []string{"greet", "fail", "secret"} {
		if slices.Contains(names, bare) {
			t.Errorf("tools/list %v serves the ambiguous bare name %s", names, bare)
		}
		if res, err := tryCall(t, cs, bare, map[string]any{"name": "x"}); err == nil || !strings.Contains(err.Error(), "unknown tool") {
			raw, _ := json.Marshal(res)
			t.Errorf("bare %s was routed: %s (err %v)", bare, raw, err)
		}
	}
	if a.total()+b.total() != 0 {
		t.Fatalf("a bare call reached an upstream: a %d, b %d", a.total(), b.total())
	}
	mustOK(t, "a__greet", callTool(t, cs, "a__greet", map[string]any{"name": "x"}))
	if a.count("greet") != 1 || b.count("greet") != 0 {
		t.Errorf("a__greet: a %d, b %d calls", a.count("greet"), b.count("greet"))
	}
	mustOK(t, "b__greet", callTool(t, cs, "b__greet", map[string]any{"name": "x"}))
	if a.count("greet") != 1 || b.count("greet") != 1 {
		t.Errorf("b__greet: a %d, b %d calls", a.count("greet"), b.count("greet"))
	}
	// The catalog (GET /v1/tools, POST /v1/calls) holds both tools.
	snap := e.gw.pipe.State().Catalog
	if _, err := snap.Resolve("greet"); err == nil || !strings.Contains(err.Error(), "ambiguous") {
		t.Errorf("catalog resolves bare greet: %v", err)
	}
	for _, id := range []string{"mcp:a.greet", "mcp:b.greet"} {
		if _, err := snap.Resolve(id); err != nil {
			t.Errorf("catalog lacks %s: %v", id, err)
		}
	}
}

// TestNamingNeverCollisionSticky: once two servers have claimed a bare
// name, it stays refused after one of them drops the tool (or goes away),
// rather than being routed to the one that is left.
func TestNamingNeverCollisionSticky(t *testing.T) {
	a := startRecordingUpstream(t)
	bs := mcp.NewServer(&mcp.Implementation{Name: "b", Version: "1.0.0"}, nil)
	obj := map[string]any{"type": "object"}
	bs.AddTool(&mcp.Tool{Name: "greet", InputSchema: obj}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "from b"}}}, nil
	})
	bs.AddTool(&mcp.Tool{Name: "only_b", InputSchema: obj}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "b only"}}}, nil
	})
	bsrv := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return bs }, nil))
	t.Cleanup(bsrv.Close)
	cfg := `naming: {prefix: never}
auth:
  api_keys:
    - {id: alice, key_sha256: ` + yamlQuote(auth.HashKey(keyAlice)) + `, tenant: ` + tenant + `}
servers:
  - {name: a, url: ` + yamlQuote(a.url) + `}
  - {name: b, url: ` + yamlQuote(bsrv.URL) + `}
policy:
  default: deny
  rules:
    - {id: all, effect: allow, tools: ["mcp:*"]}
`
	e := startGateway(t, cfg)
	cs := e.connect(t, keyAlice)
	if names := toolNames(t, cs); !slices.Contains(names, "b__greet") || !slices.Contains(names, "only_b") || slices.Contains(names, "greet") {
		t.Fatalf("tools/list = %v", names)
	}
	bs.RemoveTools("greet") // b sends tools/list_changed
	deadline := time.Now().Add(e2eWait)
	for slices.Contains(toolNames(t, cs), "b__greet") {
		if time.Now().After(deadline) {
			t.Fatal("the gateway did not pick up b's new tool list")
		}
		time.Sleep(20 * time.Millisecond)
	}
	names := toolNames(t, cs)
	if slices.Contains(names, "greet") || !slices.Contains(names, "a__greet") || !slices.Contains(names, "only_b") {
		t.Errorf("after b dropped greet, tools/list = %v", names)
	}
	if _, err := tryCall(t, cs, "greet", map[string]any{"name": "x"}); err == nil || a.count("greet") != 0 {
		t.Errorf("bare greet was routed to a (err %v, a calls %d)", err, a.count("greet"))
	}
	mustOK(t, "a__greet", callTool(t, cs, "a__greet", map[string]any{"name": "x"}))
}

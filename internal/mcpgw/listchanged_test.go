package mcpgw

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolgate/toolgate/internal/auth"
	"github.com/toolgate/toolgate/internal/config"
)

// stormUpstream is a Go SDK MCP server over Streamable HTTP whose tools
// can change under the test, that can send one tools/list_changed as many
// copies, and that counts the tools/list requests it receives.
type stormUpstream struct {
	url    string
	s      *mcp.Server
	lists  atomic.Int64 // tools/list requests received
	copies atomic.Int64 // > 0: each tools/list_changed goes out this many times
	storms atomic.Int64 // tools/list_changed sent as copies
}

func startStormUpstream(t *testing.T) *stormUpstream {
	t.Helper()
	u := &stormUpstream{s: mcp.NewServer(&mcp.Implementation{Name: "storm", Version: "1.0.0"}, nil)}
	u.setTool("a", "tool a")
	u.setTool("b", "tool b")
	u.s.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if method == "tools/list" {
				u.lists.Add(1)
			}
			return next(ctx, method, req)
		}
	})
	u.s.AddSendingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if n := u.copies.Load(); method == "notifications/tools/list_changed" && n > 0 {
				for range n - 1 {
					if _, err := next(ctx, method, req); err != nil {
						return nil, err
					}
				}
				defer u.storms.Add(1)
			}
			return next(ctx, method, req)
		}
	})
	srv := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return u.s }, nil))
	t.Cleanup(srv.Close)
	u.url = srv.URL
	return u
}

// setTool adds or replaces tool name (the SDK then announces
// tools/list_changed to every session).
func (u *stormUpstream) setTool(name, description string) {
	u.s.AddTool(&mcp.Tool{Name: name, Description: description, InputSchema: map[string]any{"type": "object"}},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: name}}}, nil
		})
}

// stormConfig lets ops (alice) use every storm tool and everyone tool b,
// plus the extra rules.
func stormConfig(url, extraRules string) string {
	return fmt.Sprintf(`auth:
  api_keys:
    - {id: alice, key_sha256: %q, tenant: %s, scopes: [ops]}
    - {id: bob, key_sha256: %q, tenant: %s}
servers:
  - {name: storm, url: %s}
policy:
  default: deny
  rules:
    - {id: ops, effect: allow, scopes: [ops], tools: ["mcp:storm.*"]}
    - {id: everyone, effect: allow, tools: ["mcp:storm.b"]}
%s`, auth.HashKey(keyAlice), tenant, auth.HashKey(keyBob), tenant, yamlQuote(url), extraRules)
}

// listChangedClient connects with key and counts the tools/list_changed
// notifications it receives.
func listChangedClient(t *testing.T, e *e2eGateway, key string) (*mcp.ClientSession, *atomic.Int64) {
	t.Helper()
	var n atomic.Int64
	cs := e.connectWith(t, key, &mcp.ClientOptions{ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { n.Add(1) }})
	return cs, &n
}

// waitNotified waits until n reaches want and cs lists tool, then checks n
// is exactly want: the notifications due before the one awaited arrived
// before it, on the same stream.
func waitNotified(t *testing.T, who string, n *atomic.Int64, want int64, cs *mcp.ClientSession, tool string) {
	t.Helper()
	waitUntil(t, who+"'s tools/list_changed", func() bool { return n.Load() >= want })
	if got := n.Load(); got != want {
		t.Fatalf("%s got %d tools/list_changed, want %d", who, got, want)
	}
	if names := toolNames(t, cs); !slices.Contains(names, tool) {
		t.Fatalf("%s's tools/list after the notification = %v, want %s in it", who, names, tool)
	}
}

// 50 no-op tools/list_changed from an upstream cause one or two re-lists
// and no notification; a session is told of a change only when a tool it
// may see, or the definition of one, changed; a reload that changes no
// session's view tells none (issue 13 §14).
func TestListChangedStormIsDebounced(t *testing.T) {
	up := startStormUpstream(t)
	e := startGateway(t, stormConfig(up.url, ""))
	alice, aliceN := listChangedClient(t, e, keyAlice)
	bob, bobN := listChangedClient(t, e, keyBob)
	if got := toolNames(t, alice); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("alice's tools = %v", got)
	}
	if got := toolNames(t, bob); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("bob's tools = %v", got)
	}
	base := up.lists.Load()

	// The storm: tool b replaced by itself, announced 50 times.
	up.copies.Store(50)
	up.setTool("b", "tool b")
	waitUntil(t, "the storm to be sent", func() bool { return up.storms.Load() >= 1 })
	up.copies.Store(0)
	// Then a change alice sees (bob does not): a new tool.
	up.setTool("late", "a late tool")
	waitNotified(t, "alice", aliceN, 1, alice, "late")
	if n := up.lists.Load() - base; n > 3 {
		t.Errorf("the gateway listed the upstream's tools %d times for 51 tools/list_changed, want at most 3", n)
	}

	// A definition change of a tool alice sees, after a reload that
	// changes nobody's view (SIGHUP with the same file).
	same, err := config.Parse("same.yaml", []byte(stormConfig(up.url, "")))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.gw.Reload(same); err != nil {
		t.Fatal(err)
	}
	up.setTool("a", "tool a, now described otherwise")
	waitNotified(t, "alice", aliceN, 2, alice, "a")

	// A reload that shows bob the late tool; bob was told of nothing before.
	more, err := config.Parse("more.yaml", []byte(stormConfig(up.url, `    - {id: bob-late, effect: allow, tools: ["mcp:storm.late"]}`+"\n")))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.gw.Reload(more); err != nil {
		t.Fatal(err)
	}
	waitNotified(t, "bob", bobN, 1, bob, "late")
	// alice was not told of bob's change: her next notification is her 3rd.
	up.setTool("a", "tool a, described a third way")
	waitNotified(t, "alice", aliceN, 3, alice, "a")
}

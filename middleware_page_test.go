package toolgate_test

import (
	"context"
	"encoding/base64"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolgate/toolgate"
	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/policy"
)

// cursorText is everything a client could read out of a cursor: the
// cursor itself and its base64 decodings (std and URL, padded or not).
func cursorText(c string) string {
	out := c
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding, base64.RawStdEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(c); err == nil {
			out += "\x00" + string(b)
		}
	}
	return out
}

// TestServerMiddlewarePaginationHidesTools: a go-sdk server paginating one
// tool per page, behind the middleware, lists exactly the visible tools,
// each once, never an empty page, and no cursor names a hidden tool.
func TestServerMiddlewarePaginationHidesTools(t *testing.T) {
	prog, err := policy.Load("policy.yaml", []byte(`
default: deny
rules:
  - {id: some, effect: allow, tools: ["native:echo", "native:zzz"]}
`), policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	gw, err := toolgate.New(toolgate.Options{Policy: prog, Events: audit.NewMemoryLog()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gw.Close() })
	server := mcp.NewServer(&mcp.Implementation{Name: "paged", Version: "1"}, &mcp.ServerOptions{PageSize: 1})
	for _, name := range []string{"echo", "admin_secret", "zzz", "a.b"} {
		mcp.AddTool(server, &mcp.Tool{Name: name}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "ok"}}}, nil, nil
		})
	}
	server.AddReceivingMiddleware(toolgate.ServerMiddleware(gw, toolgate.ServerOptions{
		Principal: func(context.Context, mcp.Request) (toolgate.Principal, error) {
			return toolgate.Principal{ID: "alice", Tenant: "acme"}, nil
		},
	}))
	ctx := context.Background()
	ct, st := mcp.NewInMemoryTransports()
	ss, err := server.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "c", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })

	hidden := []string{"admin_secret", "a.b"}
	seen := map[string]int{}
	cursor := ""
	for page := 0; ; page++ {
		if page > 10 {
			t.Fatal("tools/list never ends")
		}
		res, err := cs.ListTools(ctx, &mcp.ListToolsParams{Cursor: cursor})
		if err != nil {
			t.Fatalf("page %d: %v", page, err)
		}
		if len(res.Tools) == 0 {
			t.Fatalf("page %d is empty (cursor %q): an empty page tells hidden tools exist", page, cursor)
		}
		for _, tl := range res.Tools {
			seen[tl.Name]++
		}
		for _, h := range hidden {
			if strings.Contains(cursorText(res.NextCursor), h) {
				t.Fatalf("page %d cursor %q reveals hidden tool %q", page, res.NextCursor, h)
			}
		}
		if res.NextCursor == "" {
			break
		}
		cursor = res.NextCursor
	}
	if len(seen) != 2 || seen["echo"] != 1 || seen["zzz"] != 1 {
		t.Fatalf("listed %v; want echo and zzz exactly once", seen)
	}
	// Every tool through the public iterator, too.
	var all []string
	for tl, err := range cs.Tools(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, tl.Name)
	}
	if strings.Join(all, ",") != "echo,zzz" {
		t.Fatalf("Tools() = %v; want echo,zzz", all)
	}
	// A forged cursor is an invalid-params error, not a page.
	_, err = cs.ListTools(ctx, &mcp.ListToolsParams{Cursor: "garbage!"})
	if err == nil || !strings.Contains(err.Error(), "invalid cursor") {
		t.Fatalf("forged cursor: err = %v; want invalid cursor", err)
	}
}

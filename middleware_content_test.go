package toolgate_test

import (
	"context"
	"errors"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolgate/toolgate"
)

// newContentServer is a go-sdk server with a tool, a resource and a prompt.
func newContentServer() *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "content", Version: "1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "get"}, func(context.Context, *mcp.CallToolRequest, map[string]any) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "ok"}}}, nil, nil
	})
	s.AddResource(&mcp.Resource{URI: "notes://secret", Name: "secret", MIMEType: "text/plain"},
		func(context.Context, *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: "notes://secret", Text: "the secret note"}}}, nil
		})
	s.AddPrompt(&mcp.Prompt{Name: "greet"}, func(context.Context, *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
		return &mcp.GetPromptResult{Messages: []*mcp.PromptMessage{{Role: "user", Content: &mcp.TextContent{Text: "hi"}}}}, nil
	})
	return s
}

// wantMethodNotFound fails unless err is the JSON-RPC error -32601.
func wantMethodNotFound(t *testing.T, what string, err error) {
	t.Helper()
	var je *jsonrpc.Error
	if !errors.As(err, &je) || je.Code != jsonrpc.CodeMethodNotFound {
		t.Errorf("%s: err %v, want JSON-RPC -32601", what, err)
	}
}

// The middlewares gate tools only, so the other doors through which a
// server's content reaches a client (resources, prompts, completions) are
// shut unless the embedder opens them: refused, and not advertised at
// initialize. Before this, resources/read reached the server ungated.
func TestMiddlewareContentMethodsFailClosed(t *testing.T) {
	ctx := context.Background()
	alice := func(context.Context, mcp.Request) (toolgate.Principal, error) {
		return toolgate.Principal{ID: "alice", Tenant: "acme", Scopes: []string{"notes:read"}}, nil
	}
	serve := func(ungated []string) *mcp.ClientSession {
		server := newContentServer()
		gw, _ := newMWGateway(t)
		server.AddReceivingMiddleware(toolgate.ServerMiddleware(gw, toolgate.ServerOptions{Principal: alice, Ungated: ungated}))
		ct, st := mcp.NewInMemoryTransports()
		ss, err := server.Connect(ctx, st, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ss.Close() })
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "alice", Version: "1"}, nil).Connect(ctx, ct, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cs.Close() })
		return cs
	}

	shut := serve(nil)
	if c := shut.InitializeResult().Capabilities; c.Resources != nil || c.Prompts != nil {
		t.Errorf("initialize advertises ungated doors: resources %v, prompts %v", c.Resources, c.Prompts)
	}
	_, err := shut.ReadResource(ctx, &mcp.ReadResourceParams{URI: "notes://secret"})
	wantMethodNotFound(t, "server resources/read", err)
	_, err = shut.ListResources(ctx, nil)
	wantMethodNotFound(t, "server resources/list", err)
	_, err = shut.GetPrompt(ctx, &mcp.GetPromptParams{Name: "greet"})
	wantMethodNotFound(t, "server prompts/get", err)

	open := serve([]string{"resources/read", "resources/list"})
	if c := open.InitializeResult().Capabilities; c.Resources == nil || c.Prompts != nil {
		t.Errorf("with resources opened: resources %v, prompts %v", c.Resources, c.Prompts)
	}
	if r, err := open.ReadResource(ctx, &mcp.ReadResourceParams{URI: "notes://secret"}); err != nil || len(r.Contents) != 1 {
		t.Errorf("opened resources/read = %v, %v", r, err)
	}
	_, err = open.GetPrompt(ctx, &mcp.GetPromptParams{Name: "greet"})
	wantMethodNotFound(t, "server prompts/get with resources opened", err)

	// The client side: refused before it is sent.
	server := newContentServer()
	var reads int
	server.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if method == "resources/read" || method == "prompts/get" {
				reads++
			}
			return next(ctx, method, req)
		}
	})
	gw, _ := newMWGateway(t)
	client := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil)
	client.AddSendingMiddleware(toolgate.ClientMiddleware(gw, toolgate.ClientOptions{Server: "notes",
		Principal: toolgate.Principal{ID: "agent-7", Tenant: "acme", Scopes: []string{"notes:read"}}}))
	ct, st := mcp.NewInMemoryTransports()
	ss, err := server.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()
	cs, err := client.Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if c := cs.InitializeResult().Capabilities; c.Resources != nil || c.Prompts != nil {
		t.Errorf("client sees ungated doors: resources %v, prompts %v", c.Resources, c.Prompts)
	}
	_, err = cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "notes://secret"})
	wantMethodNotFound(t, "client resources/read", err)
	_, err = cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "greet"})
	wantMethodNotFound(t, "client prompts/get", err)
	if reads != 0 {
		t.Errorf("%d refused requests reached the server", reads)
	}
}

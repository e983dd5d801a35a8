package toolgate_test

import (
	"context"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolgate/toolgate"
	"github.com/toolgate/toolgate/policy"
)

type echoIn struct {
	Text string `json:"text"`
}

func echoServer() *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "echo", Version: "1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "echo"}, func(_ context.Context, _ *mcp.CallToolRequest, in echoIn) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: in.Text}}}, nil, nil
	})
	return s
}

func exampleGateway() *toolgate.Gateway {
	prog, err := policy.Load("policy.yaml", []byte(`
default: deny
rules:
  - {id: echo, effect: allow, tools: ["native:echo", "mcp:echo.echo"], scopes: [echo:use]}
  - {id: no-secrets, effect: deny, tools: ["*"], when: 'has(args.text) && args.text.contains("secret")'}
`), policy.Options{})
	if err != nil {
		panic(err)
	}
	gw, err := toolgate.New(toolgate.Options{Policy: prog})
	if err != nil {
		panic(err)
	}
	return gw
}

func show(r *mcp.CallToolResult, err error) {
	if err != nil {
		fmt.Println("error:", err)
		return
	}
	fmt.Println(r.IsError, r.Content[0].(*mcp.TextContent).Text)
}

// An existing go-sdk server gains the gate in one line. Over HTTP the
// principal comes from the bearer token (auth.RequireBearerToken sets
// TokenInfo); here a stand-in sets it on the in-memory transport.
func ExampleServerMiddleware() {
	gw := exampleGateway()
	defer gw.Close()
	server := echoServer()
	server.AddReceivingMiddleware(toolgate.ServerMiddleware(gw, toolgate.ServerOptions{
		Principal: func(ctx context.Context, req mcp.Request) (toolgate.Principal, error) {
			// In-memory transports carry no token: give the request the
			// TokenInfo a bearer-token verifier would have set.
			return toolgate.PrincipalFromToken(ctx, &mcp.CallToolRequest{Extra: &mcp.RequestExtra{
				TokenInfo: &auth.TokenInfo{UserID: "alice", Scopes: []string{"echo:use"}}}})
		},
	}))
	ctx := context.Background()
	ct, st := mcp.NewInMemoryTransports()
	ss, _ := server.Connect(ctx, st, nil)
	defer ss.Close()
	cs, _ := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil).Connect(ctx, ct, nil)
	defer cs.Close()

	show(cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "hello"}}))
	show(cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "my secret"}}))
	// Output:
	// false hello
	// true forbidden: native:echo: denied by rule "no-secrets"
}

// An agent built on the go-sdk gates its own outbound calls: a refused
// call is never sent.
func ExampleClientMiddleware() {
	gw := exampleGateway()
	defer gw.Close()
	client := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil)
	client.AddSendingMiddleware(toolgate.ClientMiddleware(gw, toolgate.ClientOptions{
		Server: "echo", Principal: toolgate.Principal{ID: "agent-1", Scopes: []string{"echo:use"}}}))
	ctx := context.Background()
	ct, st := mcp.NewInMemoryTransports()
	ss, _ := echoServer().Connect(ctx, st, nil)
	defer ss.Close()
	cs, _ := client.Connect(ctx, ct, nil)
	defer cs.Close()

	tools, _ := cs.ListTools(ctx, nil)
	fmt.Println(len(tools.Tools), "tool(s) listed")
	show(cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "hi"}}))
	show(cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "a secret"}}))
	// Output:
	// 1 tool(s) listed
	// false hi
	// true forbidden: mcp:echo.echo: denied by rule "no-secrets"
}

package loadtest

import (
	"context"
	"net"
	"net/http"
	"runtime/pprof"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// echoIn is the echo tool's input.
type echoIn struct {
	Text string `json:"text" jsonschema:"the text to echo back"`
}

// echoServer is a Go SDK MCP server with one tool, echo, served over
// Streamable HTTP on 127.0.0.1.
type echoServer struct {
	url   string
	srv   *http.Server
	calls atomic.Int64 // echo calls served
}

// startEcho starts the echo server on a free loopback port. Its goroutines
// carry the pprof label role=echo.
func startEcho() (*echoServer, error) {
	e := &echoServer{}
	s := mcp.NewServer(&mcp.Implementation{Name: "echo", Version: "1.0.0"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "echo", Description: "Returns its text argument as text content."},
		func(_ context.Context, _ *mcp.CallToolRequest, in echoIn) (*mcp.CallToolResult, any, error) {
			e.calls.Add(1)
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: in.Text}}}, nil, nil
		})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil)
	e.url, e.srv = "http://"+ln.Addr().String()+"/mcp", &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go pprof.Do(context.Background(), pprof.Labels("role", "echo"), func(context.Context) {
		e.srv.Serve(ln) // ends with ErrServerClosed; a broken listener shows as failed calls
	})
	return e, nil
}

// close stops the server at once (its sessions hold long-lived GET streams).
func (e *echoServer) close() { e.srv.Close() }

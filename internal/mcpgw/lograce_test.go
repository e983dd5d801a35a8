package mcpgw_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// A tool that logs as soon as it starts must have its first message
// relayed (issue 13 point 21, conformance scenario tools-call-with-logging).
// The client sets its log level before its first call; that call opens the
// session's upstream session, and the gateway replays the level on it. The
// race: the call reached the upstream before the replayed
// logging/setLevel, the upstream (which sends nothing until a level is
// set) dropped the first message.
//
// To make the ordering deterministic, the upstream holds logging/setLevel
// until its tool has sent its first message (or, when the call never
// comes, for holdMax). A gateway that lets a call overtake the level thus
// always loses that message; one that applies the level before handing
// the upstream session to the call waits holdMax and loses nothing.
func TestLogLevelReachesUpstreamBeforeFirstCall(t *testing.T) {
	const holdMax = 2 * time.Second
	logged := make(chan struct{})
	var loggedOnce sync.Once
	server := mcp.NewServer(&mcp.Implementation{Name: "up", Version: "1"}, nil)
	server.AddTool(&mcp.Tool{Name: "logs", InputSchema: map[string]any{"type": "object"}},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			req.Session.Log(ctx, &mcp.LoggingMessageParams{Level: "info", Data: "Tool execution started"})
			loggedOnce.Do(func() { close(logged) })
			req.Session.Log(ctx, &mcp.LoggingMessageParams{Level: "info", Data: "Tool execution finished"})
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "done"}}}, nil
		})
	server.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if method == "logging/setLevel" {
				t := time.NewTimer(holdMax)
				select {
				case <-logged:
				case <-t.C:
				}
				t.Stop()
			}
			return next(ctx, method, req)
		}
	})
	up := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, nil))
	t.Cleanup(up.Close)
	gwURL, key := startAllowAllGateway(t, up.URL)

	msgs := make(chan string, 16)
	cs := relayClient(t, gwURL, key, &mcp.ClientOptions{
		LoggingMessageHandler: func(_ context.Context, req *mcp.LoggingMessageRequest) {
			s, _ := req.Params.Data.(string)
			msgs <- s
		},
	})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := cs.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: "debug"}); err != nil {
		t.Fatal(err)
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "logs"})
	if err != nil || res.IsError {
		t.Fatalf("call: %+v, %v", res, err)
	}
	// The messages precede the result on the call's stream; the client may
	// hand them to its handler a moment later.
	wait := time.NewTimer(10 * time.Second)
	defer wait.Stop()
	var got []string
	for len(got) == 0 || got[len(got)-1] != "Tool execution finished" {
		select {
		case m := <-msgs:
			got = append(got, m)
		case <-wait.C:
			t.Fatalf("log messages relayed: %q; the last one never came", got)
		}
	}
	if len(got) != 2 || got[0] != "Tool execution started" {
		t.Fatalf("log messages relayed: %q; want the tool's first message too", got)
	}
}

package mcpgw_test

import (
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// streamlessClient is a go-sdk client session to the gateway that opens no
// standalone SSE stream of its own (the test opens it).
func streamlessClient(t *testing.T, gwURL, key string) *mcp.ClientSession {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "stream-test", Version: "1"}, nil).
		Connect(ctx, &mcp.StreamableClientTransport{Endpoint: gwURL, HTTPClient: &http.Client{Transport: bearer{key: key}}, DisableStandaloneSSE: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// openStream opens the standalone SSE stream (GET /mcp) of session sid and
// returns its response once the headers arrived.
func openStream(t *testing.T, ctx context.Context, url, key, sid, protocol string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Mcp-Session-Id", sid)
	req.Header.Set("Mcp-Protocol-Version", protocol)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		t.Fatalf("GET stream: status %d", resp.StatusCode)
	}
	return resp
}

// CloseStreams (registered with http.Server.RegisterOnShutdown) ends every
// open standalone SSE stream at once, and a stream opened afterwards ends
// as soon as it opens, so that a shutdown never waits for idle agents.
func TestCloseStreamsEndsStandaloneStreams(t *testing.T) {
	up := startDirectUpstream(t)
	gwURL, key, gw := startAllowAllGatewayWith(t, up.url, "")
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	other := streamlessClient(t, gwURL, key)
	if _, err := other.ListTools(ctx, nil); err != nil {
		t.Fatal(err)
	}
	protocol := other.InitializeResult().ProtocolVersion
	resp := openStream(t, ctx, gwURL, key, other.ID(), protocol)
	defer resp.Body.Close()
	ended := make(chan error, 1)
	go func() {
		_, err := io.Copy(io.Discard, resp.Body)
		ended <- err
	}()
	select {
	case err := <-ended:
		t.Fatalf("the stream ended before CloseStreams: %v", err)
	default:
	}
	gw.CloseStreams()
	select {
	case err := <-ended:
		if err != nil {
			t.Errorf("the stream ended with %v, want a clean end", err)
		}
	case <-ctx.Done():
		t.Fatal("the standalone stream was still open after CloseStreams")
	}
	gw.CloseStreams() // idempotent
	third := streamlessClient(t, gwURL, key)
	if _, err := third.ListTools(ctx, nil); err != nil {
		t.Fatal(err)
	}
	late := openStream(t, ctx, gwURL, key, third.ID(), protocol)
	defer late.Body.Close()
	if _, err := io.Copy(io.Discard, late.Body); err != nil {
		t.Errorf("a stream opened after CloseStreams: %v", err)
	}
}

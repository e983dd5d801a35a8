package mcpgw

// wire.go tells, for a tools/call sent through the go-sdk client (stdio
// upstreams), whether the request reached the upstream and how the upstream
// failed to answer it, so that the call is recorded honestly (issue 13
// points 5 and 12, OpenWOP RFC 0064 §F): a request that was never written
// is upstream_unavailable (the tool did not run); one that was written and
// then got no valid answer is upstream_crashed (the process exited, the
// connection ended) or upstream_protocol_error (what came back is not a
// JSON-RPC response, or its result is not a CallToolResult), with
// durationMs and details.ran = "unknown".

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"sync"
	"sync/atomic"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolgate/toolgate/errcode"
)

// callWire follows one tools/call through a watchConn. Safe for concurrent
// use (the SDK writes and reads on its own goroutines).
type callWire struct {
	written atomic.Bool // the request was written to the upstream

	mu       sync.Mutex
	protocol string // why the upstream's answer is not a valid response ("" if none)
	ended    error  // the connection ended after the request was written
}

func (w *callWire) setProtocol(reason string) {
	w.mu.Lock()
	if w.protocol == "" {
		w.protocol = reason
	}
	w.mu.Unlock()
}

func (w *callWire) setEnded(err error) {
	w.mu.Lock()
	if w.ended == nil {
		w.ended = err
	}
	w.mu.Unlock()
}

// failure is the recorded error of a call whose SDK CallTool failed with
// err on server's upstream, or nil when the request was never written (or
// the failure is not the wire's: the caller then maps err as before).
func (w *callWire) failure(server string, err error) *errcode.Error {
	if w == nil || !w.written.Load() {
		return nil
	}
	w.mu.Lock()
	protocol, ended := w.protocol, w.ended
	w.mu.Unlock()
	switch {
	case protocol != "":
		return upstreamProtocolError(server, protocol)
	case ended != nil && !endOfStream(ended):
		return upstreamProtocolError(server, "the upstream sent a message that is not JSON-RPC: "+ended.Error())
	case ended != nil:
		return upstreamCrashed(server, "the upstream's connection ended before it answered: "+ended.Error())
	}
	return nil
}

// upstreamProtocolError and upstreamCrashed are the errors of a request that
// reached server without a valid answer: the tool may have run.
func upstreamProtocolError(server, reason string) *errcode.Error {
	return errcode.Errorf(errcode.UpstreamProtocolError, "upstream %s: %s", server, reason).WithDetails(map[string]any{"ran": "unknown"})
}

func upstreamCrashed(server, reason string) *errcode.Error {
	return errcode.Errorf(errcode.UpstreamCrashed, "upstream %s: %s", server, reason).WithDetails(map[string]any{"ran": "unknown"})
}

// endOfStream reports whether a read error means the peer went away (a
// process that exited, a closed pipe) rather than that it sent garbage.
func endOfStream(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.ErrClosedPipe) ||
		errors.Is(err, os.ErrClosed) || errors.Is(err, mcp.ErrConnectionClosed)
}

type wireKey struct{}

// withWire returns ctx carrying w: a tools/call the SDK writes with that
// context is followed by w.
func withWire(ctx context.Context, w *callWire) context.Context {
	return context.WithValue(ctx, wireKey{}, w)
}

// badResult is why raw, the "result" of a tools/call response, is not a
// CallToolResult, or "" when it is a JSON object.
func badResult(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	switch {
	case len(raw) == 0:
		return "the tools/call response has no result"
	case string(raw) == "null":
		return `the tools/call response's result is null`
	case raw[0] != '{':
		return "the tools/call response's result is not a JSON object"
	}
	return ""
}

// watchTransport wraps a client transport so that its connection follows
// the tools/call requests written with a callWire in their context. Only
// for transports whose connection has no optional SDK interface to keep
// (CommandTransport's).
type watchTransport struct {
	mcp.Transport
}

// Connect implements mcp.Transport.
func (t watchTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	c, err := t.Transport.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &watchConn{Connection: c, calls: map[jsonrpc.ID]*callWire{}}, nil
}

// watchConn is a client connection that follows tools/call requests.
type watchConn struct {
	mcp.Connection

	mu    sync.Mutex
	calls map[jsonrpc.ID]*callWire // written tools/call requests without an answer yet
}

// Write implements mcp.Connection.
func (c *watchConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	w, _ := ctx.Value(wireKey{}).(*callWire)
	req, ok := msg.(*jsonrpc.Request)
	if w == nil || !ok || !req.IsCall() || req.Method != "tools/call" {
		return c.Connection.Write(ctx, msg)
	}
	// Registered before the write: the answer may be read before Write
	// returns.
	c.mu.Lock()
	c.calls[req.ID] = w
	c.mu.Unlock()
	if err := c.Connection.Write(ctx, msg); err != nil {
		c.mu.Lock()
		delete(c.calls, req.ID)
		c.mu.Unlock()
		return err
	}
	w.written.Store(true)
	return nil
}

// Read implements mcp.Connection. A response to a followed tools/call whose
// result is not a CallToolResult is replaced by a JSON-RPC error (the SDK
// would decode "result": null as an empty success); a read error ends every
// followed call.
func (c *watchConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	msg, err := c.Connection.Read(ctx)
	if err != nil {
		if ctx.Err() == nil {
			c.mu.Lock()
			for id, w := range c.calls {
				w.setEnded(err)
				delete(c.calls, id)
			}
			c.mu.Unlock()
		}
		return msg, err
	}
	resp, ok := msg.(*jsonrpc.Response)
	if !ok {
		return msg, nil
	}
	c.mu.Lock()
	w := c.calls[resp.ID]
	delete(c.calls, resp.ID)
	c.mu.Unlock()
	if w == nil || resp.Error != nil {
		return msg, nil
	}
	if reason := badResult(resp.Result); reason != "" {
		w.setProtocol(reason)
		return &jsonrpc.Response{ID: resp.ID, Error: &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: reason}}, nil
	}
	return msg, nil
}

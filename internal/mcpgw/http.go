package mcpgw

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	mcpauth "github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolgate/toolgate/identity"
	"github.com/toolgate/toolgate/internal/auth"
	"github.com/toolgate/toolgate/internal/config"
)

// Handler returns the /mcp endpoint: Streamable HTTP, in this order:
//
//  1. The request is authenticated from its headers alone (a, API key or
//     JWT bearer token), before any of its body is read; a failure answers
//     401 with WWW-Authenticate (RFC 6750 §3, Authenticator.Challenge) and,
//     when the request has a body, closes the connection, so an
//     unauthenticated client cannot make the gateway hold its body.
//  2. A POST body over maxBody bytes is refused with 413, one that does
//     not arrive in time (the serve listener's read deadline, config
//     http.read_body_timeout) with 408, and a JSON-RPC batch (a body that
//     is a JSON array) with 400 and a JSON-RPC error -32600.
//  3. A plain tools/call on an established session is answered directly
//     (serveDirect, direct.go: same handler, JSON response, no SDK
//     transport hop).
//  4. A POST body that is not JSON answers 400 with JSON-RPC error -32700,
//     one that is JSON but not a JSON-RPC 2.0 message object 400 with -32600
//     (JSON-RPC 2.0 §5.1). A DELETE marks the session closing, so the direct
//     path leaves its later requests to the SDK (404). An initialize is not
//     refused for its Mcp-Protocol-Version header: the version is
//     negotiated in its body, so a header the gateway does not serve is
//     dropped.
//  5. An initialize that would open a session beyond mcp.max_sessions_per_principal
//     answers 429, beyond mcp.max_sessions 503, each with JSON-RPC error
//     CodeTooManySessions (limits.go).
//  6. The go-sdk Streamable HTTP handler serves the rest, with the principal as
//     the session's user: a session is bound to the principal that opened
//     it. A request of another principal on it is answered exactly like a
//     request on an unknown session (404 "session not found") and logged.
//     A request with a method the gateway does not serve answers JSON-RPC
//     -32601 (method not found) as application/json: HTTP 200 with the
//     request's id for a request, 400 with a null id for a notification.
//  7. A standalone SSE stream (GET) ends when CloseStreams is called (at
//     the start of shutdown), so an idle client does not hold shutdown.
func (g *Gateway) Handler(a Authenticator, maxBody int64) http.Handler {
	sdk := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return g.server },
		&mcp.StreamableHTTPOptions{Logger: g.log, MaxRequestBodyBytes: maxBody, SessionTimeout: g.sessionTimeout()})
	bearer := mcpauth.RequireBearerToken(func(ctx context.Context, _ string, r *http.Request) (*mcpauth.TokenInfo, error) {
		p, ok := auth.PrincipalFrom(r.Context())
		if !ok {
			return nil, mcpauth.ErrInvalidToken
		}
		return &mcpauth.TokenInfo{Scopes: p.Scopes, UserID: p.Tenant + "\x00" + p.ID,
			Extra: map[string]any{principalKey: p, slotExtraKey: slotFrom(r.Context())}}, nil
	}, &mcpauth.RequireBearerTokenOptions{AllowMissingExpiration: true})
	inner := bearer(sdk)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, err := a.Authenticate(r)
		if err != nil {
			if r.ContentLength != 0 {
				// Do not read (or let net/http drain) an unauthenticated body.
				w.Header().Set("Connection", "close")
			}
			a.Challenge(w, r, err)
			return
		}
		r = r.WithContext(auth.WithPrincipal(r.Context(), p))
		var body []byte
		if r.Method == http.MethodPost && r.Body != nil {
			var err error
			body, err = io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
			if err != nil {
				var mbe *http.MaxBytesError
				switch {
				case errors.As(err, &mbe):
					jsonRPCError(w, http.StatusRequestEntityTooLarge, -32600, fmt.Sprintf("request body exceeds %d bytes", maxBody))
				case errors.Is(err, os.ErrDeadlineExceeded):
					w.Header().Set("Connection", "close")
					jsonRPCError(w, http.StatusRequestTimeout, -32700, "the request body did not arrive in time")
				default:
					jsonRPCError(w, http.StatusBadRequest, -32700, "reading the request body: "+err.Error())
				}
				return
			}
			if t := bytes.TrimLeft(body, " \t\r\n"); len(t) > 0 && t[0] == '[' {
				jsonRPCError(w, http.StatusBadRequest, -32600, "JSON-RPC batches are not supported")
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
			r.ContentLength = int64(len(body))
		}
		if r.Method == http.MethodPost && g.serveDirect(w, r, body, p, inner) {
			return
		}
		var touch *dsession // the session whose SDK idle timer this POST restarts, if it succeeds
		if sid := r.Header.Get("Mcp-Session-Id"); sid != "" {
			if v, ok := g.sessions.Load(sid); ok {
				ds := v.(*dsession)
				same := ds.principal.Tenant == p.Tenant && ds.principal.ID == p.ID
				switch {
				case r.Method == http.MethodPost && same:
					touch = ds
				case r.Method == http.MethodDelete && same:
					// The SDK terminates the session: from now on the direct
					// path leaves its requests to the SDK (404).
					ds.closing.Store(true)
				}
			}
			if r.Method == http.MethodPost {
				g.cancelDirect(sid, p, body)
			}
		}
		var msg rpcHead
		if r.Method == http.MethodPost {
			// The go-sdk answers a body it cannot parse with a text/plain
			// 400; JSON-RPC 2.0 §5.1 has codes for both cases.
			if t := bytes.TrimSpace(body); !json.Valid(t) {
				jsonRPCError(w, http.StatusBadRequest, -32700, "parse error: the request body is not valid JSON")
				return
			} else if t[0] != '{' {
				jsonRPCError(w, http.StatusBadRequest, -32600, "invalid request: the body must be a JSON-RPC message (a JSON object)")
				return
			} else if !isJSONRPCMessage(t) {
				jsonRPCError(w, http.StatusBadRequest, -32600, `invalid request: not a JSON-RPC 2.0 message ("jsonrpc": "2.0" with a method, a result or an error)`)
				return
			}
			_ = json.Unmarshal(body, &msg)
			if pv := r.Header.Get("Mcp-Protocol-Version"); msg.Method == "initialize" && pv != "" && !slices.Contains(g.protocols, pv) {
				// MCP basic/transports §"Protocol Version Header": the header
				// carries the version negotiated by initialize, so it cannot
				// refuse the initialize itself.
				r.Header.Del("Mcp-Protocol-Version")
			}
		}
		if r.Method == http.MethodPost && r.Header.Get("Mcp-Session-Id") == "" && isInitialize(body) {
			// A new session: within the session caps (limits.go).
			slot := g.admitSession(w, body, p)
			if slot == nil {
				return
			}
			defer slot.releaseUnclaimed() // unless the session took it
			r = r.WithContext(withSlot(r.Context(), slot))
		}
		if r.Header.Get("Authorization") == "" {
			// Authenticated by X-API-Key; the SDK's bearer middleware only
			// carries the principal (the verifier above ignores the token).
			r.Header.Set("Authorization", "Bearer x-api-key")
		}
		if r.Method == http.MethodGet {
			ctx, stop := g.streamContext(r.Context())
			defer stop()
			r = r.WithContext(ctx)
		}
		sw := &sdkWriter{ResponseWriter: w}
		inner.ServeHTTP(sw, r)
		g.finishSDK(sw, r, p, msg)
		// The SDK restarts a session's idle timer when a POST of it ends
		// (keepAlive relies on knowing when); only a POST it accepted counts.
		if touch != nil && (sw.status == 0 || sw.status/100 == 2) {
			touch.touch()
		}
	})
}

// rpcHead is the part of a JSON-RPC message the HTTP layer looks at.
type rpcHead struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
}

// finishSDK writes the SDK's answer held back by sw, rewritten where the
// SDK's plain-text answer would tell the client more than an unknown
// session does, or is not the JSON-RPC error the protocol has for it.
func (g *Gateway) finishSDK(sw *sdkWriter, r *http.Request, p identity.Principal, msg rpcHead) {
	if !sw.held {
		return
	}
	w := sw.ResponseWriter
	text := strings.TrimSpace(sw.buf.String())
	switch {
	case sw.status == http.StatusForbidden && text == "session user mismatch":
		// Another principal's session: the same answer as an unknown
		// session, so its existence is not disclosed.
		sum := sha256.Sum256([]byte(r.Header.Get("Mcp-Session-Id")))
		g.log.Warn("request on another principal's MCP session refused as unknown",
			"principal", p.ID, "tenant", p.Tenant, "method", r.Method, "session_sha256", hex.EncodeToString(sum[:8]), "remote", r.RemoteAddr)
		http.Error(w, "session not found", http.StatusNotFound)
	case sw.status == http.StatusBadRequest && strings.HasPrefix(text, "JSON RPC not handled"):
		m := fmt.Sprintf("method not found: %q", clipMethod(msg.Method))
		if len(msg.ID) > 0 && string(msg.ID) != "null" {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Del("X-Content-Type-Options")
			b, _ := json.Marshal(rpcResponse{JSONRPC: "2.0", ID: msg.ID, Error: &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: m}})
			w.WriteHeader(http.StatusOK)
			w.Write(b)
			return
		}
		jsonRPCError(w, http.StatusBadRequest, jsonrpc.CodeMethodNotFound, m)
	default:
		w.WriteHeader(sw.status)
		w.Write(sw.buf.Bytes())
	}
}

// clipMethod bounds a method name echoed in an error.
func clipMethod(m string) string {
	if len(m) > 128 {
		return m[:128] + "…"
	}
	return m
}

// sdkWriter passes the SDK's answer through, except a plain-text 400 or
// 403 (the SDK's http.Error answers), which it holds back (up to
// maxHeld bytes) for finishSDK. It records the first status written, keeps
// http.Flusher (SSE responses) and unwraps for http.ResponseController.
type sdkWriter struct {
	http.ResponseWriter
	status int
	held   bool
	buf    bytes.Buffer
}

// maxHeld bounds the SDK error text sdkWriter holds back; a longer answer
// is passed through unchanged.
const maxHeld = 4 << 10

func (s *sdkWriter) WriteHeader(code int) {
	if s.status != 0 {
		return
	}
	s.status = code
	if (code == http.StatusBadRequest || code == http.StatusForbidden) && strings.HasPrefix(s.Header().Get("Content-Type"), "text/plain") {
		s.held = true
		return
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *sdkWriter) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.WriteHeader(http.StatusOK)
	}
	if s.held {
		if s.buf.Len()+len(b) <= maxHeld {
			return s.buf.Write(b)
		}
		s.release()
	}
	return s.ResponseWriter.Write(b)
}

// release writes the held status and text and stops holding.
func (s *sdkWriter) release() {
	s.held = false
	s.ResponseWriter.WriteHeader(s.status)
	s.ResponseWriter.Write(s.buf.Bytes())
	s.buf.Reset()
}

func (s *sdkWriter) Flush() {
	if s.held {
		return
	}
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (s *sdkWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// isJSONRPCMessage reports whether the JSON object b is a JSON-RPC 2.0
// request, notification or response by its shape: "jsonrpc": "2.0" and a
// method, a result or an error (the SDK checks the rest).
func isJSONRPCMessage(b []byte) bool {
	var m struct {
		JSONRPC string          `json:"jsonrpc"`
		Method  json.RawMessage `json:"method"`
		Result  json.RawMessage `json:"result"`
		Error   json.RawMessage `json:"error"`
	}
	if json.Unmarshal(b, &m) != nil || m.JSONRPC != "2.0" {
		return false
	}
	return len(m.Method) > 0 || len(m.Result) > 0 || len(m.Error) > 0
}

// DefaultSessionTimeout closes an MCP session (and its upstream sessions)
// after this long without a request (config mcp.session_timeout).
const DefaultSessionTimeout = 30 * time.Minute

func (g *Gateway) sessionTimeout() time.Duration {
	if g.cfg.MCP.SessionTimeout == "" {
		return DefaultSessionTimeout
	}
	if d, err := config.ParseDuration(g.cfg.MCP.SessionTimeout); err == nil {
		return d
	}
	return DefaultSessionTimeout
}

// Authenticator authenticates a request and writes the 401 answer of a
// failure (*auth.Authenticator, or a wrapper that swaps it on reload).
// Implementations must be safe for concurrent use.
type Authenticator interface {
	Authenticate(r *http.Request) (identity.Principal, error)
	Challenge(w http.ResponseWriter, r *http.Request, err error)
}

// jsonRPCError writes a JSON-RPC error response with a null id.
func jsonRPCError(w http.ResponseWriter, status, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	fmt.Fprintf(w, `{"jsonrpc":"2.0","id":null,"error":{"code":%d,"message":%q}}`, code, msg)
}

// streamCloser ends the standalone SSE streams (GET /mcp) at the start of
// shutdown. The zero value is ready; safe for concurrent use.
type streamCloser struct {
	once   sync.Once
	c      context.Context // done once CloseStreams is called
	cancel context.CancelFunc
}

// ctx is the context CloseStreams cancels; made on first use.
func (s *streamCloser) ctx() context.Context {
	s.once.Do(func() { s.c, s.cancel = context.WithCancel(context.Background()) })
	return s.c
}

// streamContext returns a context for a GET stream that ends with parent or
// when CloseStreams is called, and a func releasing it.
func (g *Gateway) streamContext(parent context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancel(parent)
	stop := context.AfterFunc(g.streams.ctx(), cancel)
	return ctx, func() { stop(); cancel() }
}

// CloseStreams ends every standalone SSE stream (GET /mcp) now and any
// opened later, at once (the SDK's stream returns when its request's
// context ends), so that http.Server.Shutdown does not wait for idle
// clients' streams; requests in flight, and their response streams, are not
// affected. Register it with http.Server.RegisterOnShutdown. Idempotent;
// safe for concurrent use.
func (g *Gateway) CloseStreams() {
	g.streams.ctx()
	g.streams.cancel()
}

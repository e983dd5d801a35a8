package mcpgw

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	mcpauth "github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolgate/toolgate/internal/auth"
	"github.com/toolgate/toolgate/internal/config"
	"github.com/toolgate/toolgate/policy"
)

// Handler returns the /mcp endpoint: Streamable HTTP, in this order:
//
//  1. A POST body over maxBody bytes is refused with 413, and a JSON-RPC
//     batch (a body that is a JSON array) with 400 and a JSON-RPC error
//     -32600, before anything else happens (authentication included).
//  2. The request is authenticated (a, API key or JWT bearer token); a
//     failure answers 401 with WWW-Authenticate (RFC 6750 §3).
//  3. A plain tools/call on an established session is answered directly
//     (serveDirect, direct.go: same handler, JSON response, no SDK
//     transport hop).
//  4. A POST body that is not JSON answers 400 with JSON-RPC error -32700,
//     one that is JSON but not a JSON-RPC 2.0 message object 400 with -32600
//     (JSON-RPC 2.0 §5.1). A DELETE marks the session closing, so the direct
//     path leaves its later requests to the SDK (404).
//  5. An initialize that would open a session beyond mcp.max_sessions_per_principal
//     answers 429, beyond mcp.max_sessions 503, each with JSON-RPC error
//     CodeTooManySessions (limits.go).
//  6. The go-sdk Streamable HTTP handler serves the rest, with the principal as
//     the session's user: a session is bound to the principal that opened
//     it (a request of another principal gets 403).
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
		var body []byte
		if r.Method == http.MethodPost && r.Body != nil {
			var err error
			body, err = io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
			if err != nil {
				var mbe *http.MaxBytesError
				if errors.As(err, &mbe) {
					jsonRPCError(w, http.StatusRequestEntityTooLarge, -32600, fmt.Sprintf("request body exceeds %d bytes", maxBody))
					return
				}
				jsonRPCError(w, http.StatusBadRequest, -32700, "reading the request body: "+err.Error())
				return
			}
			if t := bytes.TrimLeft(body, " \t\r\n"); len(t) > 0 && t[0] == '[' {
				jsonRPCError(w, http.StatusBadRequest, -32600, "JSON-RPC batches are not supported")
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
			r.ContentLength = int64(len(body))
		}
		p, err := a.Authenticate(r)
		if err != nil {
			a.Challenge(w, err)
			return
		}
		r = r.WithContext(auth.WithPrincipal(r.Context(), p))
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
		if touch == nil {
			inner.ServeHTTP(w, r)
			return
		}
		// The SDK restarts a session's idle timer when a POST of it ends
		// (keepAlive relies on knowing when); only a POST it accepted counts.
		sw := &statusWriter{ResponseWriter: w}
		inner.ServeHTTP(sw, r)
		if sw.status == 0 || sw.status/100 == 2 {
			touch.touch()
		}
	})
}

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

// statusWriter records the status of a response it passes through. It keeps
// http.Flusher (SSE responses) and unwraps for http.ResponseController.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (s *statusWriter) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

func (s *statusWriter) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

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
	Authenticate(r *http.Request) (policy.Principal, error)
	Challenge(w http.ResponseWriter, err error)
}

// jsonRPCError writes a JSON-RPC error response with a null id.
func jsonRPCError(w http.ResponseWriter, status, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	fmt.Fprintf(w, `{"jsonrpc":"2.0","id":null,"error":{"code":%d,"message":%q}}`, code, msg)
}

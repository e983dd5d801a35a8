package auth

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"

	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/identity"
)

// Challenge writes the 401 response for err, an error from Authenticate
// of r:
//
//	WWW-Authenticate: <challenge>
//	Content-Type: application/json
//
//	{"error":"unauthenticated","message":"<message>"}
//
// With auth.jwt (OAuth) the challenge is RFC 6750 §3 Bearer with the RFC
// 9728 §5.1 resource_metadata URL, as the MCP authorization spec
// (2025-06-18, 2025-11-25) asks, so an MCP client can discover the
// authorization server:
//
//	Bearer realm="<realm>", resource_metadata="<origin>/.well-known/oauth-protected-resource/mcp"[, error="invalid_token", error_description="<message>"]
//
// With API keys only there is no authorization server to send a client to,
// so the challenge is not Bearer (clients take a Bearer challenge for an
// OAuth one) and names the two headers a key is accepted in:
//
//	ApiKey realm="<realm>", header="Authorization: Bearer, X-API-Key"[, error="invalid_key", error_description="<message>"]
//
// The error attributes are present only when a credential was presented and
// rejected. For an error that is not an Unauthenticated *errcode.Error the
// message is "authentication failed". The metadata URL for a request to
// /v1 (or anything but /mcp) is the origin's,
// /.well-known/oauth-protected-resource. Challenge must be called before
// anything else is written to w.
func (a *Authenticator) Challenge(w http.ResponseWriter, r *http.Request, err error) {
	msg := "authentication failed"
	if e := errcode.As(err); e != nil && e.Code == errcode.Unauthenticated {
		msg = e.Message
	}
	_, presented := reasonOf(err)
	var ch string
	if a.jwt != nil {
		ch = `Bearer realm="` + a.realm + `", resource_metadata="` + quotable(a.metadataURL(r)) + `"`
		if presented {
			ch += `, error="invalid_token", error_description="` + quotable(msg) + `"`
		}
	} else {
		ch = `ApiKey realm="` + a.realm + `", header="Authorization: Bearer, X-API-Key"`
		if presented {
			ch += `, error="invalid_key", error_description="` + quotable(msg) + `"`
		}
	}
	body, _ := json.Marshal(struct {
		Error   errcode.Code `json:"error"`
		Message string       `json:"message"`
	}{errcode.Unauthenticated, msg})
	h := w.Header()
	h.Set("WWW-Authenticate", ch)
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusUnauthorized)
	_, _ = w.Write(append(body, '\n'))
}

// MetadataPath is the RFC 9728 §3 well-known path of protected-resource
// metadata; MetadataPath + "/mcp" is the MCP endpoint's.
const MetadataPath = "/.well-known/oauth-protected-resource"

// OAuth reports whether JWT bearer tokens (auth.jwt) are configured, so
// that protected-resource metadata is served.
func (a *Authenticator) OAuth() bool { return a.jwt != nil }

// origin is the scheme and host clients reach r's server at: those of
// auth.jwt.resource when set, else r's (https when r came over TLS).
func (a *Authenticator) origin(r *http.Request) string {
	if a.resource != "" {
		if u, err := url.Parse(a.resource); err == nil {
			return u.Scheme + "://" + u.Host
		}
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}

// mcpResource is the RFC 9728 resource identifier of the MCP endpoint.
func (a *Authenticator) mcpResource(r *http.Request) string {
	if a.resource != "" {
		return a.resource
	}
	return a.origin(r) + "/mcp"
}

// metadataURL is the protected-resource metadata URL for r's resource: the
// MCP endpoint's for /mcp, the origin's otherwise.
func (a *Authenticator) metadataURL(r *http.Request) string {
	if r.URL.Path != "/mcp" {
		return a.origin(r) + MetadataPath
	}
	res := a.mcpResource(r)
	path := "/mcp"
	if u, err := url.Parse(res); err == nil {
		path = u.EscapedPath()
	}
	return a.origin(r) + MetadataPath + path
}

// ProtectedResourceMetadata is the RFC 9728 §2 document toolgate serves
// with auth.jwt. A plain value.
type ProtectedResourceMetadata struct {
	Resource               string   `json:"resource"`
	AuthorizationServers   []string `json:"authorization_servers"`
	BearerMethodsSupported []string `json:"bearer_methods_supported"`
	ScopesSupported        []string `json:"scopes_supported,omitempty"`
	ResourceName           string   `json:"resource_name"`
}

// ServeMetadata answers GET MetadataPath (resource: the origin) and GET
// MetadataPath + the MCP endpoint's path (resource: the MCP endpoint) with
// the RFC 9728 protected-resource metadata naming auth.jwt.issuer as the
// authorization server. It reports false, writing nothing, when OAuth is
// not configured or the path is neither (the caller answers 404). The
// document is public (no credentials) and may be cached for 5 minutes.
func (a *Authenticator) ServeMetadata(w http.ResponseWriter, r *http.Request) bool {
	if a.jwt == nil {
		return false
	}
	md := ProtectedResourceMetadata{AuthorizationServers: []string{a.jwt.issuer},
		BearerMethodsSupported: []string{"header"}, ScopesSupported: a.scopes, ResourceName: "toolgate"}
	mcpPath := "/mcp"
	if u, err := url.Parse(a.mcpResource(r)); err == nil {
		mcpPath = u.EscapedPath()
	}
	switch r.URL.EscapedPath() {
	case MetadataPath, MetadataPath + "/":
		md.Resource = a.origin(r)
	case MetadataPath + mcpPath, MetadataPath + "/mcp":
		md.Resource = a.mcpResource(r)
	default:
		return false
	}
	body, _ := json.Marshal(md)
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "public, max-age=300")
	h.Set("Access-Control-Allow-Origin", "*")
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		_, _ = w.Write(append(body, '\n'))
	}
	return true
}

// quotable keeps only the characters RFC 6750 §3 allows in
// error_description, replacing others with '?'.
func quotable(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r > 0x7e || r == '"' || r == '\\' {
			return '?'
		}
		return r
	}, s)
}

// Middleware authenticates each request: on success it calls next with the
// principal in the request context (PrincipalFrom); on failure it writes
// Challenge and does not call next. The handler is safe for concurrent use.
func (a *Authenticator) Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, err := a.Authenticate(r)
		if err != nil {
			a.Challenge(w, r, err)
			return
		}
		next.ServeHTTP(w, r.WithContext(WithPrincipal(r.Context(), p)))
	})
}

type principalKey struct{}

// WithPrincipal returns a copy of ctx carrying p.
func WithPrincipal(ctx context.Context, p identity.Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// PrincipalFrom returns the principal stored by WithPrincipal (or
// Middleware) and whether there was one.
func PrincipalFrom(ctx context.Context) (identity.Principal, bool) {
	p, ok := ctx.Value(principalKey{}).(identity.Principal)
	return p, ok
}

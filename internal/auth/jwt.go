package auth

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"

	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/internal/config"
	"github.com/toolgate/toolgate/policy"
)

// Default claim names when config.JWT leaves them empty.
const (
	DefaultScopesClaim = "scope"
	DefaultTenantClaim = "tid"
)

// signingAlgs are the JWS algorithms accepted: asymmetric only, so neither
// "none" nor an HMAC keyed with a public key can pass.
var signingAlgs = []string{
	oidc.RS256, oidc.RS384, oidc.RS512,
	oidc.ES256, oidc.ES384, oidc.ES512,
	oidc.PS256, oidc.PS384, oidc.PS512,
	oidc.EdDSA,
}

// jwtVerifier checks signature, issuer, audience, expiry and not-before with
// go-oidc, then maps claims to a principal. Safe for concurrent use.
type jwtVerifier struct {
	v              *oidc.IDTokenVerifier
	scopesClaim    string
	tenantClaim    string
	tenantRequired bool
}

func newJWTVerifier(ctx context.Context, j config.JWT, opts Options) (*jwtVerifier, error) {
	if j.Issuer == "" || j.Audience == "" {
		return nil, errcode.New(errcode.InvalidConfig, "auth.jwt needs issuer and audience")
	}
	client := opts.HTTPClient
	if client == nil {
		client = &http.Client{Timeout: 10 * time.Second}
	}
	// go-oidc reads the HTTP client from this context and ignores its
	// cancellation for background key fetches.
	octx := oidc.ClientContext(ctx, client)
	oc := &oidc.Config{ClientID: j.Audience, SupportedSigningAlgs: signingAlgs, Now: opts.Now}
	jv := &jwtVerifier{scopesClaim: j.ScopesClaim, tenantClaim: j.TenantClaim, tenantRequired: j.TenantClaim != ""}
	if jv.scopesClaim == "" {
		jv.scopesClaim = DefaultScopesClaim
	}
	if jv.tenantClaim == "" {
		jv.tenantClaim = DefaultTenantClaim
	}
	if j.JWKSURL != "" {
		jv.v = oidc.NewVerifier(j.Issuer, oidc.NewRemoteKeySet(octx, j.JWKSURL), oc)
		return jv, nil
	}
	p, err := oidc.NewProvider(octx, j.Issuer)
	if err != nil {
		return nil, errcode.Wrap(errcode.InvalidConfig, err, "auth.jwt: OIDC discovery failed")
	}
	jv.v = p.VerifierContext(octx, oc)
	return jv, nil
}

// looksLikeJWT reports whether token has the JWS compact shape: three
// base64url segments, the first two non-empty (the signature may be empty,
// as with alg "none", so such tokens get a precise error).
func looksLikeJWT(token string) bool {
	parts := strings.Split(token, ".")
	if len(parts) != 3 || parts[0] == "" || parts[1] == "" {
		return false
	}
	for _, p := range parts {
		for i := 0; i < len(p); i++ {
			c := p[i]
			if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}

func (jv *jwtVerifier) verify(ctx context.Context, token string) (policy.Principal, error) {
	tok, err := jv.v.Verify(ctx, token)
	if err != nil {
		return policy.Principal{}, invalidToken(jwtFailure(ctx, err))
	}
	if tok.Subject == "" {
		return policy.Principal{}, invalidToken("token has no sub claim")
	}
	var claims map[string]json.RawMessage
	if err := tok.Claims(&claims); err != nil {
		return policy.Principal{}, invalidToken("token claims are not a JSON object")
	}
	p := policy.Principal{ID: tok.Subject}
	if raw, ok := claims[jv.tenantClaim]; ok && string(raw) != "null" {
		if err := json.Unmarshal(raw, &p.Tenant); err != nil {
			return policy.Principal{}, invalidToken("token tenant claim is not a string")
		}
	}
	if p.Tenant == "" && jv.tenantRequired {
		return policy.Principal{}, invalidToken("token has no tenant claim")
	}
	if raw, ok := claims[jv.scopesClaim]; ok && string(raw) != "null" {
		var s string
		if err := json.Unmarshal(raw, &s); err == nil {
			p.Scopes = strings.Fields(s)
		} else if err := json.Unmarshal(raw, &p.Scopes); err != nil {
			return policy.Principal{}, invalidToken("token scopes claim is neither a string nor an array of strings")
		}
	}
	return p, nil
}

// jwtFailure names why go-oidc rejected a token. go-oidc reports most
// failures as formatted strings, so this matches their stable parts; an
// unrecognised failure is "invalid token", still a rejection.
func jwtFailure(ctx context.Context, err error) string {
	var expired *oidc.TokenExpiredError
	msg := err.Error()
	switch {
	case errors.As(err, &expired):
		return "token expired"
	case strings.Contains(msg, "expected audience"):
		return "token audience mismatch"
	case strings.Contains(msg, "issued by a different provider"):
		return "token issuer mismatch"
	case strings.Contains(msg, "before the nbf"):
		return "token not yet valid"
	case strings.Contains(msg, "unexpected signature algorithm"):
		return "token signature algorithm not allowed"
	case strings.Contains(msg, "malformed jwt"):
		return "malformed token"
	case ctx.Err() != nil:
		return "request ended while fetching the issuer's signing keys"
	case strings.Contains(msg, "fetching keys"):
		return "cannot fetch the issuer's signing keys"
	case strings.Contains(msg, "failed to verify"):
		return "invalid token signature"
	}
	return "invalid token"
}

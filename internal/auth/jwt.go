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
	"github.com/toolgate/toolgate/identity"
	"github.com/toolgate/toolgate/internal/config"
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
	keys           *keySet
	issuer         string
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
	interval := DefaultJWKSRefreshInterval
	if j.JWKSRefreshInterval != "" {
		d, err := config.ParseDuration(j.JWKSRefreshInterval)
		if err != nil {
			return nil, errcode.Errorf(errcode.InvalidConfig, "auth.jwt.jwks_refresh_interval: %v", err)
		}
		interval = d
	}
	oc := &oidc.Config{ClientID: j.Audience, SupportedSigningAlgs: signingAlgs, Now: opts.Now}
	jv := &jwtVerifier{issuer: j.Issuer, scopesClaim: j.ScopesClaim, tenantClaim: j.TenantClaim, tenantRequired: j.TenantClaim != ""}
	if jv.scopesClaim == "" {
		jv.scopesClaim = DefaultScopesClaim
	}
	if jv.tenantClaim == "" {
		jv.tenantClaim = DefaultTenantClaim
	}
	jwksURL := j.JWKSURL
	if jwksURL == "" {
		// go-oidc reads the HTTP client from this context.
		p, err := oidc.NewProvider(oidc.ClientContext(ctx, client), j.Issuer)
		if err != nil {
			return nil, errcode.Wrap(errcode.InvalidConfig, err, "auth.jwt: OIDC discovery failed")
		}
		var doc struct {
			JWKSURI string `json:"jwks_uri"`
		}
		if err := p.Claims(&doc); err != nil || doc.JWKSURI == "" {
			return nil, errcode.New(errcode.InvalidConfig, "auth.jwt: the issuer's OIDC discovery document has no jwks_uri")
		}
		jwksURL = doc.JWKSURI
	}
	jv.keys = newKeySet(jwksURL, client, interval, opts.Now)
	jv.v = oidc.NewVerifier(j.Issuer, jv.keys, oc)
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

// verify checks token and returns its principal and expiry (exp).
func (jv *jwtVerifier) verify(ctx context.Context, token string) (identity.Principal, time.Time, error) {
	p, tok, err := jv.principal(ctx, token)
	if err != nil {
		return identity.Principal{}, time.Time{}, err
	}
	return p, tok.Expiry, nil
}

func (jv *jwtVerifier) principal(ctx context.Context, token string) (identity.Principal, *oidc.IDToken, error) {
	tok, err := jv.v.Verify(ctx, token)
	if err != nil {
		reason, msg := jwtFailure(ctx, err)
		return identity.Principal{}, nil, invalidToken(reason, msg)
	}
	if tok.Subject == "" {
		return identity.Principal{}, nil, invalidToken(ReasonClaims, "token has no sub claim")
	}
	var claims map[string]json.RawMessage
	if err := tok.Claims(&claims); err != nil {
		return identity.Principal{}, nil, invalidToken(ReasonClaims, "token claims are not a JSON object")
	}
	p := identity.Principal{ID: tok.Subject}
	if raw, ok := claims[jv.tenantClaim]; ok && string(raw) != "null" {
		if err := json.Unmarshal(raw, &p.Tenant); err != nil {
			return identity.Principal{}, nil, invalidToken(ReasonClaims, "token tenant claim is not a string")
		}
	}
	if p.Tenant == "" && jv.tenantRequired {
		return identity.Principal{}, nil, invalidToken(ReasonClaims, "token has no tenant claim")
	}
	if raw, ok := claims[jv.scopesClaim]; ok && string(raw) != "null" {
		var s string
		if err := json.Unmarshal(raw, &s); err == nil {
			p.Scopes = strings.Fields(s)
		} else if err := json.Unmarshal(raw, &p.Scopes); err != nil {
			return identity.Principal{}, nil, invalidToken(ReasonClaims, "token scopes claim is neither a string nor an array of strings")
		}
	}
	return p, tok, nil
}

// jwtFailure names why go-oidc (or keySet) rejected a token: a Reason and
// the message. go-oidc reports most failures as formatted strings, so this
// matches their stable parts; an unrecognised failure is "invalid token",
// still a rejection.
func jwtFailure(ctx context.Context, err error) (reason Reason, msg string) {
	var expired *oidc.TokenExpiredError
	text := err.Error()
	switch {
	case errors.As(err, &expired):
		return ReasonExpired, "token expired"
	case strings.Contains(text, "expected audience"):
		return ReasonAudience, "token audience mismatch"
	case strings.Contains(text, "issued by a different provider"):
		return ReasonIssuer, "token issuer mismatch"
	case strings.Contains(text, "before the nbf"):
		return ReasonNotYetValid, "token not yet valid"
	case strings.Contains(text, "unexpected signature algorithm"):
		return ReasonAlgorithm, "token signature algorithm not allowed"
	case strings.Contains(text, "malformed jwt"):
		return ReasonMalformed, "malformed token"
	case ctx.Err() != nil:
		return ReasonKeysUnavailable, "request ended while fetching the issuer's signing keys"
	case strings.Contains(text, "fetching keys"):
		return ReasonKeysUnavailable, "cannot fetch the issuer's signing keys"
	case strings.Contains(text, errUnknownKey.Error()):
		return ReasonUnknownKey, "token signing key (kid) is not in the issuer's key set"
	case strings.Contains(text, "failed to verify"):
		return ReasonSignature, "invalid token signature"
	}
	return ReasonInvalid, "invalid token"
}

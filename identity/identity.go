// Package identity names who a call is attributed to: the Principal (id,
// tenant, scopes, attributes; DESIGN.md vocabulary "principal", OpenWOP
// RFC 0064 `principal`) and the secret-free Credential record an
// authenticator returns with it so a session can be checked again later
// without keeping the secret.
//
// It is a leaf package (it imports only the standard library) so that the
// transports (internal/mcpgw, internal/httpapi), the console and the
// authenticators (internal/auth) can name a principal without depending on
// the decision engine: only the pipeline and the CLI's explain and validate
// import package policy, and the rule "only the pipeline decides" shows in
// the import graph (a test in this package enforces it).
package identity

import (
	"slices"
	"time"
)

// Principal is who a call is attributed to (DESIGN.md vocabulary
// "principal"; OpenWOP RFC 0064 `principal`). In policy conditions it is
// the typed object `principal` with fields id, tenant (string), scopes
// (list(string)) and attributes (map(string, string)). Plain data: the gate
// only reads it, so it may be shared by concurrent calls if nobody mutates
// it (Clone gives an independent copy).
type Principal struct {
	// ID identifies the principal within its tenant (API key id, JWT sub).
	ID string `json:"id"`
	// Tenant scopes everything the principal sees and records; "" is the
	// default tenant.
	Tenant string `json:"tenant,omitempty"`
	// Scopes are the granted scopes (e.g. fs:read, toolgate:approve).
	Scopes []string `json:"scopes,omitempty"`
	// Attributes are free-form string facts policy conditions may read.
	Attributes map[string]string `json:"attributes,omitempty"`
}

// HasScope reports whether p holds scope (exact match; "" is never held).
func (p Principal) HasScope(scope string) bool {
	return scope != "" && slices.Contains(p.Scopes, scope)
}

// Clone returns a copy of p whose Scopes slice and Attributes map are fresh
// (nil stays nil), so the copy may be handed out and mutated freely.
func (p Principal) Clone() Principal {
	if p.Scopes != nil {
		p.Scopes = append([]string(nil), p.Scopes...)
	}
	if p.Attributes != nil {
		m := make(map[string]string, len(p.Attributes))
		for k, v := range p.Attributes {
			m[k] = v
		}
		p.Attributes = m
	}
	return p
}

// Methods of a Credential: how the principal authenticated.
const (
	// MethodAPIKey: a configured API key (auth.api_keys).
	MethodAPIKey = "api_key"
	// MethodJWT: a JWT verified against the configured issuer's JWKS.
	MethodJWT = "jwt"
)

// Credential records what an authentication proved, without the secret: the
// method, for an API key its configured id and a keyed digest of its stored
// hash (an HMAC-SHA256 under a key private to the process, so it is neither
// the key nor the key_sha256 of the configuration and cannot be replayed as
// either), and the credential's expiry. An authenticator checks it again
// against its current key store (internal/auth Authenticator.Recheck): a key
// removed or rotated by a reload, or an expiry passed, is refused. A plain
// value; the zero Credential is never accepted.
type Credential struct {
	// Method is MethodAPIKey or MethodJWT.
	Method string `json:"method"`
	// KeyID is the API key's configured id ("" for a JWT).
	KeyID string `json:"keyId,omitempty"`
	// Digest is the API key's keyed digest (zero for a JWT).
	Digest [32]byte `json:"-"`
	// Expires is when the credential stops being valid (a JWT's exp); the
	// zero time means it does not expire by itself (API keys).
	Expires time.Time `json:"expires,omitzero"`
}

// Package auth authenticates callers of toolgate's HTTP surfaces and turns
// their credentials into a identity.Principal.
//
// Two kinds of credential are accepted:
//
//   - API keys, presented as "Authorization: Bearer <key>" or "X-API-Key: <key>".
//     The configuration stores only the lowercase hex SHA-256 of each key
//     (HashKey); a presented key is hashed and compared in constant time with
//     every configured hash.
//   - JWTs, presented as "Authorization: Bearer <jwt>" and verified against an
//     OIDC issuer's JWKS: signature (asymmetric algorithms only), issuer,
//     audience, expiry and not-before.
//
// Every failure is an *errcode.Error with code errcode.Unauthenticated whose
// message never contains the presented credential. An Authenticator with no
// configured method fails every request (fail closed).
package auth

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/identity"
	"github.com/toolgate/toolgate/internal/config"
)

// DefaultRealm is the realm of the WWW-Authenticate challenge when
// Options.Realm is empty.
const DefaultRealm = "toolgate"

// MaxCredentialLen bounds a presented credential (bytes, after the scheme);
// longer values are rejected before any hashing or parsing.
const MaxCredentialLen = 8 << 10

// Options tunes New. The zero value is valid.
type Options struct {
	// HTTPClient fetches the JWKS and, without a JWKS URL, the OIDC
	// discovery document. Default: a client with a 10 s timeout.
	HTTPClient *http.Client
	// Realm is the realm of the WWW-Authenticate challenge. Default
	// DefaultRealm. It must not contain '"' or '\'.
	Realm string
	// Now is the clock for JWT expiry and not-before and the JWKS refresh
	// interval. Default time.Now.
	Now func() time.Time
	// Refusals counts and logs refused requests. Share one across the
	// Authenticators of a process (reloads make new ones) so its counts
	// survive. Default: a private one that logs nowhere.
	Refusals *Refusals
}

// Authenticator checks request credentials. It is immutable after New and
// safe for concurrent use.
type Authenticator struct {
	realm    string
	keys     []apiKey
	jwt      *jwtVerifier // nil when JWT is not configured
	refusals *Refusals
	resource string   // config auth.jwt.resource ("" derives it from the request)
	scopes   []string // config auth.jwt.scopes_supported
}

type apiKey struct {
	hash      [sha256.Size]byte
	principal identity.Principal
}

// New builds an Authenticator from cfg. It returns an *errcode.Error with
// code errcode.InvalidConfig when an API key has an empty or duplicate id or
// a key_sha256 that is not 64 lowercase hex characters, when the JWT block
// lacks issuer or audience, or when Options.Realm holds a quote or backslash.
// With cfg.JWT set and no JWKS URL, New runs OIDC discovery against the
// issuer using ctx and fails with errcode.InvalidConfig if that fails. Keys
// are fetched lazily, on the first JWT presented.
func New(ctx context.Context, cfg config.Auth, opts Options) (*Authenticator, error) {
	a := &Authenticator{realm: opts.Realm, refusals: opts.Refusals}
	if a.refusals == nil {
		a.refusals = NewRefusals(nil)
	}
	if a.realm == "" {
		a.realm = DefaultRealm
	}
	if strings.ContainsAny(a.realm, "\"\\") || !printable(a.realm) {
		return nil, errcode.New(errcode.InvalidConfig, "auth: realm must be printable ASCII without '\"' or '\\'")
	}
	seen := make(map[string]bool, len(cfg.APIKeys))
	for i, k := range cfg.APIKeys {
		if k.ID == "" {
			return nil, errcode.Errorf(errcode.InvalidConfig, "auth.api_keys[%d].id is empty", i)
		}
		if seen[k.ID] {
			return nil, errcode.Errorf(errcode.InvalidConfig, "auth.api_keys[%d].id %q is a duplicate", i, k.ID)
		}
		seen[k.ID] = true
		var ak apiKey
		if n, err := hex.Decode(ak.hash[:], []byte(k.KeySHA256)); err != nil || n != sha256.Size ||
			len(k.KeySHA256) != 2*sha256.Size || strings.ToLower(k.KeySHA256) != k.KeySHA256 {
			return nil, errcode.Errorf(errcode.InvalidConfig, "auth.api_keys[%d].key_sha256: want 64 lowercase hex characters (the sha256 of the key)", i)
		}
		ak.principal = identity.Principal{ID: k.ID, Tenant: k.Tenant, Scopes: k.Scopes, Attributes: k.Attrs}
		a.keys = append(a.keys, ak)
	}
	if cfg.JWT != nil {
		v, err := newJWTVerifier(ctx, *cfg.JWT, opts)
		if err != nil {
			return nil, err
		}
		a.jwt = v
		a.resource = strings.TrimSuffix(cfg.JWT.Resource, "/")
		a.scopes = append([]string(nil), cfg.JWT.ScopesSupported...)
	}
	return a, nil
}

// Authenticate returns the principal for r's credentials:
// "Authorization: Bearer <token>" (an API key, or a JWT when JWT is
// configured) or "X-API-Key: <key>" (API keys only). The returned principal
// is the caller's to keep; its slices and map are fresh copies. Only r's
// headers are read, never its body.
//
// Every failure is an *errcode.Error with code errcode.Unauthenticated:
// "no credentials", "unsupported authorization scheme", "unknown API key",
// "token expired", "token audience mismatch", "token issuer mismatch",
// "invalid token signature", ... Each failure is counted by its Reason and
// logged (Options.Refusals). Safe for concurrent use; the JWKS fetch, if
// one is needed, is bounded by r's context.
func (a *Authenticator) Authenticate(r *http.Request) (identity.Principal, error) {
	p, _, err := a.AuthenticateCredential(r)
	return p, err
}

// AuthenticateCredential is Authenticate that also returns the
// secret-free identity.Credential of what it accepted (method; an API key's
// id and keyed digest; a JWT's expiry), for a caller that must check the
// same sign-in again later without keeping the secret (the web console's
// sessions: Recheck). Errors and refusal counting as Authenticate. Safe for
// concurrent use.
func (a *Authenticator) AuthenticateCredential(r *http.Request) (identity.Principal, identity.Credential, error) {
	p, c, err := a.authenticate(r)
	if err != nil {
		a.refusals.record(r, err)
		return identity.Principal{}, identity.Credential{}, err
	}
	return p, c, nil
}

func (a *Authenticator) authenticate(r *http.Request) (identity.Principal, identity.Credential, error) {
	var c identity.Credential
	p, err := a.authenticatePrincipal(r, &c)
	if err != nil {
		return identity.Principal{}, identity.Credential{}, err
	}
	return p, c, nil
}

func (a *Authenticator) authenticatePrincipal(r *http.Request, cred *identity.Credential) (identity.Principal, error) {
	if len(a.keys) == 0 && a.jwt == nil {
		return identity.Principal{}, refused(ReasonNoMethod, "no authentication method is configured")
	}
	authz := r.Header.Values("Authorization")
	xkey := r.Header.Values("X-API-Key")
	switch {
	case len(authz) == 0 && len(xkey) == 0:
		return identity.Principal{}, refused(ReasonNoCredentials, "no credentials")
	case len(authz)+len(xkey) > 1:
		return identity.Principal{}, refused(ReasonMultiple, "more than one credential presented (use one Authorization or X-API-Key header)")
	case len(xkey) == 1:
		key, err := credential(xkey[0])
		if err != nil {
			return identity.Principal{}, err
		}
		if p, ok := a.lookupKey(key, cred); ok {
			return p, nil
		}
		return identity.Principal{}, invalidToken(ReasonUnknownAPIKey, "unknown API key")
	}
	scheme, rest, _ := strings.Cut(authz[0], " ")
	if !strings.EqualFold(scheme, "Bearer") {
		return identity.Principal{}, refused(ReasonScheme, "unsupported authorization scheme (want Bearer)")
	}
	token, err := credential(rest)
	if err != nil {
		return identity.Principal{}, err
	}
	if p, ok := a.lookupKey(token, cred); ok {
		return p, nil
	}
	switch {
	case a.jwt != nil && looksLikeJWT(token):
		p, exp, err := a.jwt.verify(r.Context(), token)
		if err == nil {
			*cred = identity.Credential{Method: identity.MethodJWT, Expires: exp}
		}
		return p, err
	case len(a.keys) > 0:
		return identity.Principal{}, invalidToken(ReasonUnknownAPIKey, "unknown API key")
	default:
		return identity.Principal{}, invalidToken(ReasonMalformed, "malformed token (not a JWT)")
	}
}

// lookupKey hashes key and compares the hash with every configured hash in
// constant time, so neither the match nor its position shows in the timing.
// On a match it fills cred (method, key id, keyed digest).
func (a *Authenticator) lookupKey(key string, cred *identity.Credential) (identity.Principal, bool) {
	sum := sha256.Sum256([]byte(key))
	found := -1
	for i := range a.keys {
		eq := subtle.ConstantTimeCompare(sum[:], a.keys[i].hash[:])
		found = subtle.ConstantTimeSelect(eq, i, found)
	}
	if found < 0 {
		return identity.Principal{}, false
	}
	k := &a.keys[found]
	*cred = identity.Credential{Method: identity.MethodAPIKey, KeyID: k.principal.ID, Digest: keyDigest(k.hash)}
	return k.principal.Clone(), true
}

// digestKey keys the digests of API-key credentials (identity.Credential
// Digest): random per process, shared by the Authenticators a reload makes,
// never written anywhere.
var digestKey = func() []byte {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24+)
	return b
}()

// keyDigest is HMAC-SHA256(digestKey, the key's stored SHA-256).
func keyDigest(hash [sha256.Size]byte) [32]byte {
	m := hmac.New(sha256.New, digestKey)
	m.Write(hash[:])
	var out [32]byte
	m.Sum(out[:0])
	return out
}

// Recheck checks again a credential AuthenticateCredential accepted, for
// the principal p it returned, without the secret: an API key must still
// be configured under the same id with the same key (its keyed digest
// matches in constant time) and yields its current principal (scopes or
// tenant changed by a reload apply); a JWT must not have expired (at now)
// and JWT must still be configured, and yields p unchanged (a token cannot
// be re-verified without the token: a JWKS key rotated out does not end it
// before its exp). Errors: *errcode.Error unauthenticated, "API key revoked
// or rotated", "token expired", "JWT sign-in is no longer configured",
// "unknown credential". Refusals are not counted (no request was made).
// Safe for concurrent use.
func (a *Authenticator) Recheck(c identity.Credential, p identity.Principal, now time.Time) (identity.Principal, error) {
	switch c.Method {
	case identity.MethodAPIKey:
		found := -1
		for i := range a.keys {
			d := keyDigest(a.keys[i].hash)
			eq := subtle.ConstantTimeCompare(d[:], c.Digest[:]) & subtle.ConstantTimeEq(int32(len(a.keys[i].principal.ID)), int32(len(c.KeyID)))
			if eq == 1 && a.keys[i].principal.ID == c.KeyID {
				found = i
			}
		}
		if found < 0 {
			return identity.Principal{}, invalidToken(ReasonUnknownAPIKey, "API key revoked or rotated")
		}
		return a.keys[found].principal.Clone(), nil
	case identity.MethodJWT:
		if a.jwt == nil {
			return identity.Principal{}, invalidToken(ReasonNoMethod, "JWT sign-in is no longer configured")
		}
		if c.Expires.IsZero() || !now.Before(c.Expires) {
			return identity.Principal{}, invalidToken(ReasonExpired, "token expired")
		}
		return p.Clone(), nil
	}
	return identity.Principal{}, invalidToken(ReasonInvalid, "unknown credential")
}

// credential trims the optional whitespace around a header value's
// credential and rejects empty, oversized or non-printable ones.
func credential(v string) (string, error) {
	v = strings.Trim(v, " \t")
	switch {
	case v == "":
		return "", refused(ReasonMalformed, "empty credential")
	case len(v) > MaxCredentialLen:
		return "", invalidToken(ReasonMalformed, fmt.Sprintf("credential longer than %d bytes", MaxCredentialLen))
	case !printable(v) || strings.Contains(v, " "):
		return "", invalidToken(ReasonMalformed, "malformed credential (want printable ASCII without spaces)")
	}
	return v, nil
}

func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// refusal marks an Unauthenticated error with its Reason and whether a
// credential was presented and rejected, which Challenge reports as
// error="invalid_token" (RFC 6750 §3.1). Its message is empty so wrapping it
// adds nothing to the error text.
type refusal struct {
	reason    Reason
	presented bool
}

func (refusal) Error() string { return "" }

// refused is an Unauthenticated error for a request without a (usable)
// credential.
func refused(reason Reason, msg string) *errcode.Error {
	return errcode.Errorf(errcode.Unauthenticated, "%s%w", msg, refusal{reason: reason})
}

// invalidToken is an Unauthenticated error for a rejected credential.
func invalidToken(reason Reason, msg string) *errcode.Error {
	return errcode.Errorf(errcode.Unauthenticated, "%s%w", msg, refusal{reason: reason, presented: true})
}

// reasonOf returns err's Reason (ReasonInvalid for an error without one).
func reasonOf(err error) (Reason, bool) {
	var rf refusal
	if errors.As(err, &rf) {
		return rf.reason, rf.presented
	}
	return ReasonInvalid, false
}

// KeyPrefix starts every key made by NewKey.
const KeyPrefix = "tg_"

// HashKey returns the lowercase hex SHA-256 of key, the form stored in
// auth.api_keys[].key_sha256.
func HashKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// NewKey returns a fresh API key: KeyPrefix followed by 32 random bytes from
// crypto/rand in unpadded base64url (46 characters). Store only HashKey of
// it. The error is from the system random source.
func NewKey() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("generating API key: %w", err)
	}
	return KeyPrefix + base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// Principals returns the principals of the configured API keys, in
// configuration order (copies; JWT principals are not configured and so
// not listed). The web console shows an admin which of them may see each
// tool. Safe for concurrent use.
func (a *Authenticator) Principals() []identity.Principal {
	out := make([]identity.Principal, 0, len(a.keys))
	for _, k := range a.keys {
		p := k.principal
		p.Scopes = append([]string(nil), p.Scopes...)
		out = append(out, p)
	}
	return out
}

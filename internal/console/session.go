package console

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"sync"
	"time"

	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/identity"
)

// session is one signed-in browser: the principal the sign-in
// authenticated, the secret-free record of the credential it signed in
// with (checked again on every request by Authenticator.Recheck: an API
// key's id and keyed digest, a JWT's expiry; never the credential itself),
// its CSRF token and when it ends.
type session struct {
	principal identity.Principal
	cred      identity.Credential
	csrf      string
	expires   time.Time
}

// sessions is the in-memory session table: keyed by the SHA-256 of the
// cookie value (so the table holds no usable cookie), bounded by max,
// entries ending at their expiry. Safe for concurrent use.
type sessions struct {
	mu  sync.Mutex
	m   map[[32]byte]*session
	ttl time.Duration
	max int
	now func() time.Time
}

func newSessions(ttl time.Duration, max int) *sessions {
	return &sessions{m: map[[32]byte]*session{}, ttl: ttl, max: max, now: time.Now}
}

// randomToken returns 32 random bytes, base64url without padding.
func randomToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24+)
	return base64.RawURLEncoding.EncodeToString(b)
}

// create starts a session for p (signed in with the credential cred
// records) and returns its cookie value. A credential that expires before
// the session's TTL ends the session at its expiry. Errors:
// *errcode.Error rate_limited (429) when max live sessions exist (expired ones
// are dropped first).
func (s *sessions) create(p identity.Principal, cred identity.Credential) (string, *session, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if len(s.m) >= s.max {
		for k, v := range s.m {
			if !now.Before(v.expires) {
				delete(s.m, k)
			}
		}
	}
	if len(s.m) >= s.max {
		return "", nil, errcode.Errorf(errcode.RateLimited, "the console has %d open sessions (its cap); try again later", s.max)
	}
	id := randomToken()
	se := &session{principal: p, cred: cred, csrf: randomToken(), expires: now.Add(s.ttl)}
	if !cred.Expires.IsZero() && cred.Expires.Before(se.expires) {
		se.expires = cred.Expires
	}
	s.m[sha256.Sum256([]byte(id))] = se
	return id, se, nil
}

// get returns the live session of cookie value id (nil when unknown or
// expired; an expired one is removed).
func (s *sessions) get(id string) *session {
	if id == "" {
		return nil
	}
	k := sha256.Sum256([]byte(id))
	s.mu.Lock()
	defer s.mu.Unlock()
	se := s.m[k]
	if se == nil {
		return nil
	}
	if !s.now().Before(se.expires) {
		delete(s.m, k)
		return nil
	}
	return se
}

// remove ends the session of cookie value id (no-op when unknown).
func (s *sessions) remove(id string) {
	k := sha256.Sum256([]byte(id))
	s.mu.Lock()
	delete(s.m, k)
	s.mu.Unlock()
}

// count is the number of sessions in the table (expired ones not yet
// dropped included).
func (s *sessions) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.m)
}

// sameToken compares two tokens in constant time; an empty one never
// matches.
func sameToken(a, b string) bool {
	return a != "" && b != "" && subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1
}

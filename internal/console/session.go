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
	// seq orders a principal's sessions by sign-in (oldest evicted first).
	seq uint64
	// done is closed when the session ends (sign-out, expiry seen by the
	// table, eviction, a failed Recheck): the session's open event
	// streams end on it.
	done chan struct{}
}

// owner is the key of a session's principal for the per-principal cap.
type owner struct{ tenant, id string }

// sessions is the in-memory session table: keyed by the SHA-256 of the
// cookie value (so the table holds no usable cookie), bounded by max in
// all and perPrincipal for one principal (tenant and id), entries ending
// at their expiry. Safe for concurrent use.
type sessions struct {
	mu           sync.Mutex
	m            map[[32]byte]*session
	byOwner      map[owner]int // live entries of m per principal
	seq          uint64
	ttl          time.Duration
	max          int
	perPrincipal int
	now          func() time.Time
}

func newSessions(ttl time.Duration, max, perPrincipal int) *sessions {
	return &sessions{m: map[[32]byte]*session{}, byOwner: map[owner]int{}, ttl: ttl, max: max,
		perPrincipal: min(max, perPrincipal), now: time.Now}
}

func ownerOf(se *session) owner { return owner{se.principal.Tenant, se.principal.ID} }

// drop removes entry k (present in m) and closes its done channel. Callers
// hold mu.
func (s *sessions) drop(k [32]byte, se *session) {
	delete(s.m, k)
	o := ownerOf(se)
	if s.byOwner[o]--; s.byOwner[o] <= 0 {
		delete(s.byOwner, o)
	}
	close(se.done)
}

// evictOldest drops o's oldest session. Callers hold mu.
func (s *sessions) evictOldest(o owner) {
	var ok bool
	var oldK [32]byte
	var old *session
	for k, v := range s.m {
		if ownerOf(v) == o && (!ok || v.seq < old.seq) {
			ok, oldK, old = true, k, v
		}
	}
	if ok {
		s.drop(oldK, old)
	}
}

// randomToken returns 32 random bytes, base64url without padding.
func randomToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24+)
	return base64.RawURLEncoding.EncodeToString(b)
}

// create starts a session for p (signed in with the credential cred
// records) and returns its cookie value. A credential that expires before
// the session's TTL ends the session at its expiry. A principal (tenant
// and id) that already has perPrincipal live sessions, or any while the
// table is full, loses its oldest one to the new one, so one principal
// can never hold more than perPrincipal of the max. Errors: *errcode.Error
// rate_limited (429) when max live sessions of other principals exist
// (expired ones are dropped first).
func (s *sessions) create(p identity.Principal, cred identity.Credential) (string, *session, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	o := owner{p.Tenant, p.ID}
	if len(s.m) >= s.max || s.byOwner[o] >= s.perPrincipal {
		for k, v := range s.m {
			if !now.Before(v.expires) {
				s.drop(k, v)
			}
		}
	}
	if s.byOwner[o] >= s.perPrincipal || (len(s.m) >= s.max && s.byOwner[o] > 0) {
		s.evictOldest(o)
	}
	if len(s.m) >= s.max {
		return "", nil, errcode.Errorf(errcode.RateLimited, "the console has %d open sessions (its cap); try again later", s.max)
	}
	id := randomToken()
	s.seq++
	se := &session{principal: p, cred: cred, csrf: randomToken(), expires: now.Add(s.ttl),
		seq: s.seq, done: make(chan struct{})}
	if !cred.Expires.IsZero() && cred.Expires.Before(se.expires) {
		se.expires = cred.Expires
	}
	s.m[sha256.Sum256([]byte(id))] = se
	s.byOwner[o]++
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
		s.drop(k, se)
		return nil
	}
	return se
}

// remove ends the session of cookie value id (no-op when unknown).
func (s *sessions) remove(id string) {
	k := sha256.Sum256([]byte(id))
	s.mu.Lock()
	if se := s.m[k]; se != nil {
		s.drop(k, se)
	}
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

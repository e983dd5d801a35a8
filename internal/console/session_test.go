package console

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/identity"
	"github.com/toolgate/toolgate/internal/auth"
	"github.com/toolgate/toolgate/policy"
)

// Sessions end at their expiry, are capped (expired ones make room), end
// on remove, and the table keys hold no usable cookie value.
func TestSessions(t *testing.T) {
	now := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	s := newSessions(time.Hour, 2, 2)
	s.now = func() time.Time { return now }
	alice := policy.Principal{ID: "alice", Tenant: "t1"}

	id1, se1, err := s.create(alice, identity.Credential{Method: identity.MethodAPIKey, KeyID: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	if got := s.get(id1); got != se1 || got.principal.ID != "alice" || got.csrf == "" || got.csrf == id1 {
		t.Fatalf("get after create: %+v", got)
	}
	if s.get("") != nil || s.get(id1+"x") != nil {
		t.Error("an empty or unknown cookie value found a session")
	}
	bob := policy.Principal{ID: "bob", Tenant: "t1"}
	carol := policy.Principal{ID: "carol", Tenant: "t1"}
	id2, _, err := s.create(bob, identity.Credential{Method: identity.MethodAPIKey, KeyID: "bob"})
	if err != nil || id2 == id1 {
		t.Fatalf("second session: %q %v", id2, err)
	}
	if _, _, err := s.create(carol, identity.Credential{Method: identity.MethodAPIKey, KeyID: "carol"}); errcode.CodeOf(err) != errcode.RateLimited {
		t.Fatalf("a third session over the cap of 2: %v, want rate_limited", err)
	}
	s.remove(id2)
	if s.get(id2) != nil {
		t.Error("a removed session still answers")
	}
	id3, _, err := s.create(carol, identity.Credential{Method: identity.MethodAPIKey, KeyID: "carol"})
	if err != nil {
		t.Fatalf("a session after a removal: %v", err)
	}

	now = now.Add(time.Hour) // both live sessions end now
	if s.get(id1) != nil || s.get(id3) != nil {
		t.Error("a session answers at its expiry")
	}
	s.create(alice, identity.Credential{Method: identity.MethodAPIKey, KeyID: "alice"})
	s.create(bob, identity.Credential{Method: identity.MethodAPIKey, KeyID: "bob"}) // expired entries make room: the cap counts live ones
	if _, _, err := s.create(carol, identity.Credential{Method: identity.MethodAPIKey, KeyID: "carol"}); errcode.CodeOf(err) != errcode.RateLimited {
		t.Errorf("over the cap after expiry: %v", err)
	}
	if n := s.count(); n != 2 {
		t.Errorf("sessions in the table: %d, want 2", n)
	}
	for k := range s.m {
		if s.get(string(k[:])) != nil {
			t.Error("a table key works as a cookie value")
		}
	}
}

func TestSameToken(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want bool
	}{{"", "", false}, {"x", "", false}, {"", "x", false}, {"abc", "abd", false}, {"abc", "abc", true}} {
		if got := sameToken(c.a, c.b); got != c.want {
			t.Errorf("sameToken(%q, %q) = %v", c.a, c.b, got)
		}
	}
}

// The console keeps no secret: a session holds the principal and the
// credential's record (key id, keyed digest), neither the key nor its
// stored sha256; a reload that rotates the key under the same id ends the
// session at its next request.
func TestSessionKeepsNoSecretAndEndsOnRotation(t *testing.T) {
	f := newFixture(t, false, nil)
	cl := f.client(t)
	if a := f.signIn(t, cl, "k-alice"); a.status != http.StatusSeeOther {
		t.Fatalf("sign-in: %d", a.status)
	}
	f.c.sessions.mu.Lock()
	if len(f.c.sessions.m) != 1 {
		t.Fatalf("%d sessions", len(f.c.sessions.m))
	}
	for _, se := range f.c.sessions.m {
		dump := fmt.Sprintf("%#v %x", *se, se.cred.Digest)
		for _, secret := range []string{"k-alice", auth.HashKey("k-alice")} {
			if strings.Contains(dump, secret) {
				t.Errorf("the session holds %q: %s", secret, dump)
			}
		}
		if se.cred.Method != identity.MethodAPIKey || se.cred.KeyID != "alice" {
			t.Errorf("the session's credential record: %+v", se.cred)
		}
	}
	f.c.sessions.mu.Unlock()
	if a := f.get(t, cl, "/ui/api/v1/tools"); a.status != http.StatusOK {
		t.Fatalf("with the key: %d", a.status)
	}
	rotated := aliceKey
	rotated.KeySHA256 = auth.HashKey("k-alice-new")
	f.authn.cur.Store(newAuth(t, rotated))
	if a := f.get(t, cl, "/ui/api/v1/tools"); a.status != http.StatusUnauthorized {
		t.Errorf("after a reload rotated the key under the same id: %d", a.status)
	}
	if n := f.c.sessions.count(); n != 0 {
		t.Errorf("sessions after rotation: %d", n)
	}
}

// A credential that expires before the session's TTL (a JWT's exp) ends
// the session at its expiry.
func TestSessionEndsAtCredentialExpiry(t *testing.T) {
	s := newSessions(time.Hour, 10, 10)
	start := time.Now()
	clock := start
	s.now = func() time.Time { return clock }
	exp := start.Add(10 * time.Minute)
	id, se, err := s.create(identity.Principal{ID: "user-1"}, identity.Credential{Method: identity.MethodJWT, Expires: exp})
	if err != nil || !se.expires.Equal(exp) {
		t.Fatalf("create: %v, expires %v, want %v", err, se.expires, exp)
	}
	clock = exp.Add(-time.Second)
	if s.get(id) == nil {
		t.Fatal("the session ended before the credential's expiry")
	}
	clock = exp
	if s.get(id) != nil {
		t.Fatal("the session outlived its credential's expiry")
	}
}

// One principal can never fill the session cap: its sign-in beyond
// MaxSessionsPerPrincipal ends its own oldest session (whose done channel
// closes), so another principal can still sign in.
func TestSessionsPerPrincipalCap(t *testing.T) {
	s := newSessions(time.Hour, 1000, 16)
	alice := policy.Principal{ID: "alice", Tenant: "t1"}
	var ids []string
	var first *session
	for i := range 1000 {
		id, se, err := s.create(alice, identity.Credential{Method: identity.MethodAPIKey, KeyID: "alice"})
		if err != nil {
			t.Fatalf("alice's sign-in %d: %v (a principal's sign-in must evict its oldest session, never fail)", i, err)
		}
		if i == 0 {
			first = se
		}
		ids = append(ids, id)
	}
	if n := s.count(); n != 16 {
		t.Errorf("alice holds %d sessions after 1000 sign-ins, want 16", n)
	}
	select {
	case <-first.done:
	default:
		t.Error("the evicted session's done channel is open (its streams would go on)")
	}
	if s.get(ids[0]) != nil || s.get(ids[983]) != nil || s.get(ids[984]) == nil || s.get(ids[999]) == nil {
		t.Error("not the oldest sessions were evicted")
	}
	for _, p := range []string{"bob", "carol"} {
		if _, _, err := s.create(policy.Principal{ID: p, Tenant: "t1"}, identity.Credential{Method: identity.MethodAPIKey, KeyID: p}); err != nil {
			t.Errorf("%s's sign-in after alice's 1000: %v", p, err)
		}
	}
	// The same id in another tenant is another principal.
	if _, _, err := s.create(policy.Principal{ID: "alice", Tenant: "t2"}, identity.Credential{}); err != nil || s.count() != 19 {
		t.Errorf("alice of t2: %v, %d sessions", err, s.count())
	}
}

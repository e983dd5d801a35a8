package console

import (
	"testing"
	"time"

	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/policy"
)

// Sessions end at their expiry, are capped (expired ones make room), end
// on remove, and the table keys hold no usable cookie value.
func TestSessions(t *testing.T) {
	now := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	s := newSessions(time.Hour, 2)
	s.now = func() time.Time { return now }
	alice := policy.Principal{ID: "alice", Tenant: "t1"}

	id1, se1, err := s.create(alice, "k")
	if err != nil {
		t.Fatal(err)
	}
	if got := s.get(id1); got != se1 || got.principal.ID != "alice" || got.csrf == "" || got.csrf == id1 {
		t.Fatalf("get after create: %+v", got)
	}
	if s.get("") != nil || s.get(id1+"x") != nil {
		t.Error("an empty or unknown cookie value found a session")
	}
	id2, _, err := s.create(alice, "k")
	if err != nil || id2 == id1 {
		t.Fatalf("second session: %q %v", id2, err)
	}
	if _, _, err := s.create(alice, "k"); errcode.CodeOf(err) != errcode.RateLimited {
		t.Fatalf("a third session over the cap of 2: %v, want rate_limited", err)
	}
	s.remove(id2)
	if s.get(id2) != nil {
		t.Error("a removed session still answers")
	}
	id3, _, err := s.create(alice, "k")
	if err != nil {
		t.Fatalf("a session after a removal: %v", err)
	}

	now = now.Add(time.Hour) // both live sessions end now
	if s.get(id1) != nil || s.get(id3) != nil {
		t.Error("a session answers at its expiry")
	}
	s.create(alice, "k")
	s.create(alice, "k") // expired entries make room: the cap counts live ones
	if _, _, err := s.create(alice, "k"); errcode.CodeOf(err) != errcode.RateLimited {
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

package audit_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/audit"
)

// ArgsHashRemoved returns what the key-name rule removed (strings,
// numbers as written and keys inside a credential member), and nothing
// when it removed nothing; the hash is ArgsHash's.
func TestArgsHashRemoved(t *testing.T) {
	r := audit.NewRedactor()
	args := `{"to":"A","apiKey":"k-0123456789abcdef","auth":{"user":"bob","pin":12345678901},"nested":[{"password":["p4ssw0rd-one","x"]}],"note":"sk-not-a-key-value"}`
	h, obj, removed, err := r.ArgsHashRemoved([]byte(args), true)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := r.ArgsHash([]byte(args))
	if h != want || obj["to"] != "A" {
		t.Fatalf("hash %s (want %s), obj %v", h, want, obj)
	}
	slices.Sort(removed)
	if exp := []string{"12345678901", "bob", "k-0123456789abcdef", "p4ssw0rd-one", "pin", "user", "x"}; !slices.Equal(removed, exp) {
		t.Fatalf("removed %q, want %q", removed, exp)
	}
	for _, plain := range []string{`{"q":"hi"}`, `{"q":"[redacted]"}`, `{"max_tokens":100000000}`} {
		_, obj, removed, err := r.ArgsHashRemoved([]byte(plain), false)
		if err != nil || obj != nil || len(removed) != 0 {
			t.Errorf("%s: removed %q, obj %v, err %v", plain, removed, obj, err)
		}
	}
}

// WithValues scrubs the call's values, keeps the parent's secrets
// (including ones registered after it was made) and registers nothing on
// the parent.
func TestWithValues(t *testing.T) {
	parent := audit.NewRedactor()
	parent.AddSecret("gh-token", "parent-secret-value")
	if r := parent.WithValues(audit.CallSecretID, []string{"short", ""}); r != parent {
		t.Fatal("no value long enough, yet a new redactor")
	}
	call := parent.WithValues(audit.CallSecretID, []string{"k-0123456789abcdef", "tiny"})
	parent.AddSecret("later", "registered-after-the-call")
	msg := "upstream: bad key k-0123456789abcdef (tiny); parent-secret-value; registered-after-the-call"
	got := call.RedactString(msg)
	if want := "upstream: bad key [REDACTED:argument] (tiny); [REDACTED:gh-token]; [REDACTED:later]"; got != want {
		t.Fatalf("call scope: %q, want %q", got, want)
	}
	if got := parent.RedactString(msg); strings.Contains(got, "[REDACTED:argument]") || !strings.Contains(got, "k-0123456789abcdef") {
		t.Fatalf("the call's value leaked into the parent: %q", got)
	}
	red, err := call.RedactJSON([]byte(`{"content":[{"type":"text","text":"echo k-0123456789abcdef"}]}`))
	if err != nil || strings.Contains(string(red), "k-0123456789abcdef") {
		t.Fatalf("RedactJSON: %s %v", red, err)
	}
}

// RedactID scrubs registered secrets and credential shapes from a
// caller's identifier, but keeps hex ids (toolgate's own, trace ids).
func TestRedactID(t *testing.T) {
	r := audit.NewRedactor()
	r.AddSecret("gh-token", "s3cr3t-token-value")
	for in, want := range map[string]string{
		"run_0190a1b2c3d4e5f60718293a4b5c6d7e":     "run_0190a1b2c3d4e5f60718293a4b5c6d7e",
		"4bf92f3577b34da6a3ce929d0e0e4736":         "4bf92f3577b34da6a3ce929d0e0e4736",
		"run-s3cr3t-token-value":                   "run-[REDACTED:gh-token]",
		"agent ghp_abcdefghijklmnopqrstuvwxyz0123": "agent [redacted]",
		"plain-run": "plain-run",
	} {
		if got := r.RedactID(in); got != want {
			t.Errorf("RedactID(%q) = %q, want %q", in, got, want)
		}
	}
}

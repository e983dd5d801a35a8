package receipt

import (
	"bytes"
	"crypto/ed25519"
	"strings"
	"testing"
)

// A chain mixing receipts with toolDigest and receipts without it (written
// before the field existed) verifies; the digest is covered by the hash
// (changing it fails), and a malformed one is refused.
func TestToolDigest(t *testing.T) {
	const dig = "sha256:2c9b68e16cf69c8dff5938584825ceb15c81c132bd7657768a384186599de88c"
	old := call("call_old", StatusOK)
	pinned := call("call_new", StatusOK)
	pinned.ToolDigest = dig
	refused := call("call_held", StatusForbidden)
	refused.ToolDigest, refused.Error = dig, &ErrorRef{Code: "tool_changed"}
	file, _ := buildFile(t, []*Receipt{old, pinned, refused}, Options{})
	if !bytes.Contains(file, []byte(`"tenant":"acme","toolDigest":"`+dig+`","toolId":`)) {
		t.Fatalf("toolDigest not written in canonical key order:\n%s", file)
	}
	if n := bytes.Count(file, []byte(`"toolDigest"`)); n != 2 {
		t.Fatalf("%d receipts carry toolDigest, want 2 (the old one has none)", n)
	}
	rep, err := Verify(bytes.NewReader(file), testKey().Public().(ed25519.PublicKey), VerifyOptions{})
	if err != nil || rep.Receipts != 3 {
		t.Fatalf("Verify = %+v, %v", rep, err)
	}
	tampered := bytes.Replace(file, []byte(dig), []byte(strings.Replace(dig, "2c9b", "2c9c", 1)), 1)
	if _, err := Verify(bytes.NewReader(tampered), testKey().Public().(ed25519.PublicKey), VerifyOptions{}); err == nil {
		t.Fatal("a changed toolDigest verifies")
	}
	bad := call("call_bad", StatusOK)
	bad.ToolDigest = "md5:abc"
	c := NewChain(NewSigner(testKey()), Options{Now: fixedClock()})
	if err := c.AppendWith(bad, func(*Receipt) error { return nil }); err == nil {
		t.Fatal("a malformed toolDigest is accepted")
	}
}

package cli

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"testing"

	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/internal/config"
)

// Replicas with their own signing keys bind approvals alike only with a
// shared approvals.binding_secret; the secret is registered for redaction.
func TestApprovalBindingKeyShared(t *testing.T) {
	t.Setenv("TG_TEST_BIND", "a-shared-binding-secret-value")
	newKey := func() ed25519.PrivateKey {
		_, k, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	a, b := newKey(), newKey()
	cfg := &config.Config{Credentials: map[string]config.Credential{"bind": {Env: "TG_TEST_BIND"}}}
	alone := func(k ed25519.PrivateKey) []byte {
		key, err := approvalBindingKey(cfg, k, audit.NewRedactor())
		if err != nil {
			t.Fatal(err)
		}
		return key
	}
	if bytes.Equal(alone(a), alone(b)) {
		t.Fatal("without binding_secret two signing keys bind alike")
	}
	cfg.Approvals.BindingSecret = "{{credential:bind}}"
	if !bytes.Equal(alone(a), alone(b)) {
		t.Fatal("with one binding_secret two replicas bind differently")
	}
	red := audit.NewRedactor()
	if _, err := approvalBindingKey(cfg, a, red); err != nil {
		t.Fatal(err)
	}
	if got := red.RedactString("x a-shared-binding-secret-value y"); bytes.Contains([]byte(got), []byte("a-shared-binding-secret-value")) {
		t.Errorf("the binding secret is not redacted: %q", got)
	}
	cfg.Approvals.BindingSecret = "{{credential:missing}}"
	if _, err := approvalBindingKey(cfg, a, audit.NewRedactor()); err == nil {
		t.Error("an undeclared credential is accepted")
	}
}

// redactDSN masks a password given in the userinfo or, as libpq also
// accepts, in the query string.
func TestRedactDSN(t *testing.T) {
	for dsn, want := range map[string]string{
		"postgres://u:HUNTER2PW@h:5432/db":                     "postgres://u:xxxxx@h:5432/db",
		"postgres://u@h/db?password=HUNTER2PW&sslmode=disable": "postgres://u@h/db?password=xxxxx&sslmode=disable",
		"host=h password=HUNTER2PW":                            "postgres",
	} {
		if got := redactDSN(dsn); got != want {
			t.Errorf("redactDSN(%q) = %q, want %q", dsn, got, want)
		}
	}
}

package receipt

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/toolgate/toolgate/errcode"
)

func TestKeyID(t *testing.T) {
	pub := pubOf(testKey())
	id := KeyID(pub)
	if !strings.HasPrefix(id, "ed25519:") || len(id) != 24 || !isLowerHex(id[8:]) {
		t.Fatalf("KeyID = %q", id)
	}
	if KeyID(pubOf(otherKey())) == id || KeyID(pub[:31]) != "" {
		t.Fatal("key ids collide or a short key has an id")
	}
	if s := NewSigner(testKey()); s.KeyID() != id || !bytes.Equal(s.PublicKey(), pub) {
		t.Fatal("signer id or public key differs")
	}
}

func isLowerHex(s string) bool {
	_, err := hex.DecodeString(s)
	return err == nil && strings.ToLower(s) == s
}

func TestNewSignerPanicsOnBadKey(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("no panic")
		}
	}()
	NewSigner(make([]byte, 10))
}

func TestLoadOrCreateKey(t *testing.T) {
	path := filepath.Join(t.TempDir(), "toolgate.key")
	priv, created, err := LoadOrCreateKey(path)
	if err != nil || !created || len(priv) != ed25519.PrivateKeySize {
		t.Fatalf("create: created=%v err=%v", created, err)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if runtime.GOOS != "windows" && st.Mode().Perm() != 0o600 {
		t.Fatalf("mode %o, want 600", st.Mode().Perm())
	}
	data, _ := os.ReadFile(path)
	if block, _ := pem.Decode(data); block == nil || block.Type != "PRIVATE KEY" {
		t.Fatalf("file is not a PEM PRIVATE KEY:\n%s", data)
	}
	again, created, err := LoadOrCreateKey(path)
	if err != nil || created || !bytes.Equal(again, priv) {
		t.Fatalf("load: created=%v err=%v same=%v", created, err, bytes.Equal(again, priv))
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Fatalf("temporary files left behind: %v", entries)
	}

	if runtime.GOOS != "windows" {
		if err := os.Chmod(path, 0o640); err != nil {
			t.Fatal(err)
		}
		_, _, err = LoadOrCreateKey(path)
		if errcode.CodeOf(err) != errcode.InvalidConfig || !strings.Contains(err.Error(), "chmod 600") {
			t.Fatalf("group-readable key: %v", err)
		}
	}
}

func TestLoadOrCreateKeyRejectsBadFiles(t *testing.T) {
	dir := t.TempDir()
	ecKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ecDER, _ := x509.MarshalPKCS8PrivateKey(ecKey)
	for name, content := range map[string][]byte{
		"garbage":     []byte("not a key"),
		"wrong type":  pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: []byte{1}}),
		"bad der":     pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: []byte{1, 2, 3}}),
		"ecdsa":       pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: ecDER}),
		"two":         append(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: ecDER}), "junk"...),
		"empty":       {},
		"a directory": nil,
	} {
		path := filepath.Join(dir, strings.ReplaceAll(name, " ", "_"))
		if content == nil {
			if err := os.Mkdir(path, 0o700); err != nil {
				t.Fatal(err)
			}
		} else if err := os.WriteFile(path, content, 0o600); err != nil {
			t.Fatal(err)
		}
		_, created, err := LoadOrCreateKey(path)
		if created || errcode.CodeOf(err) != errcode.InvalidConfig {
			t.Errorf("%s: created=%v err=%v", name, created, err)
		}
	}
	if _, _, err := LoadOrCreateKey(filepath.Join(dir, "missing-dir", "k")); errcode.CodeOf(err) != errcode.Internal {
		t.Errorf("unwritable location: %v", err)
	}
}

// TestLoadOrCreateKeyRace: concurrent first starts agree on one key.
func TestLoadOrCreateKeyRace(t *testing.T) {
	path := filepath.Join(t.TempDir(), "k")
	const n = 8
	keys := make([]ed25519.PrivateKey, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { keys[i], _, errs[i] = LoadOrCreateKey(path) })
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil || !bytes.Equal(keys[i], keys[0]) {
			t.Fatalf("goroutine %d: err=%v same=%v", i, errs[i], bytes.Equal(keys[i], keys[0]))
		}
	}
}

func TestPublicKeyEncoding(t *testing.T) {
	pub := pubOf(testKey())
	pemBytes := EncodePublicKey(pub)
	if !bytes.HasPrefix(pemBytes, []byte("-----BEGIN PUBLIC KEY-----\n")) {
		t.Fatalf("PEM = %s", pemBytes)
	}
	for name, in := range map[string][]byte{
		"pem":           pemBytes,
		"pem+space":     append(append([]byte("\n  "), pemBytes...), "\n\n"...),
		"hex":           []byte(hex.EncodeToString(pub)),
		"base64":        []byte(base64.StdEncoding.EncodeToString(pub) + "\n"),
		"base64 raw":    []byte(base64.RawStdEncoding.EncodeToString(pub)),
		"base64url":     []byte(base64.URLEncoding.EncodeToString(pub)),
		"base64url raw": []byte(base64.RawURLEncoding.EncodeToString(pub)),
	} {
		got, err := ParsePublicKey(in)
		if err != nil || !bytes.Equal(got, pub) {
			t.Errorf("%s: %v", name, err)
		}
	}
	ecKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ecDER, _ := x509.MarshalPKIXPublicKey(&ecKey.PublicKey)
	for name, in := range map[string][]byte{
		"empty":       nil,
		"short hex":   []byte(hex.EncodeToString(pub[:31])),
		"long base64": []byte(base64.StdEncoding.EncodeToString(append(pub, 0))),
		"ecdsa":       pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: ecDER}),
		"private pem": pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: []byte{1}}),
		"trailing":    append(slicesClone(pemBytes), "x"...),
		"bad der":     pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: []byte{1, 2}}),
		"huge":        bytes.Repeat([]byte("A"), maxKeyFile+1),
	} {
		if _, err := ParsePublicKey(in); errcode.CodeOf(err) != errcode.InvalidArgument {
			t.Errorf("%s: err = %v, want invalid_argument", name, err)
		}
	}
	if EncodePublicKey(pub[:5]) != nil {
		t.Fatal("EncodePublicKey accepted a short key")
	}
}

func slicesClone(b []byte) []byte { return append([]byte(nil), b...) }

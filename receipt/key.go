package receipt

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"

	"github.com/toolgate/toolgate/errcode"
)

// keyIDPrefix starts every key id; the rest is 16 lowercase hex characters.
const keyIDPrefix = "ed25519:"

// sigEncoding encodes signatures: base64url without padding (RFC 4648 §5),
// 86 characters for a 64-byte Ed25519 signature.
var sigEncoding = base64.RawURLEncoding.Strict()

// KeyID returns the key id of an Ed25519 public key, which is also the
// chainId of every receipt that key's Signer chains (DESIGN.md §Receipts:
// "chainId = the gateway instance's key id"): "ed25519:" followed by
// the first 16 lowercase hex characters (8 bytes) of the SHA-256 of the raw
// 32-byte public key, e.g. "ed25519:3f9a0c1d2e4b5a69". The id names a key;
// it is not a security boundary (Verify checks signatures with the key
// itself). It returns "" if pub is not 32 bytes.
func KeyID(pub ed25519.PublicKey) string {
	if len(pub) != ed25519.PublicKeySize {
		return ""
	}
	sum := sha256.Sum256(pub)
	return string(appendHex([]byte(keyIDPrefix), sum[:8]))
}

// Signer signs receipt hashes and checkpoints with one Ed25519 key
// (RFC 8032). Safe for concurrent use.
type Signer struct {
	priv ed25519.PrivateKey
	pub  ed25519.PublicKey
	id   string
}

// NewSigner returns a Signer for priv. It copies priv. It panics if priv is
// not a 64-byte Ed25519 private key (a programming error: keys come from
// GenerateKey or LoadOrCreateKey).
func NewSigner(priv ed25519.PrivateKey) *Signer {
	if len(priv) != ed25519.PrivateKeySize {
		panic("receipt: NewSigner: the private key is not 64 bytes")
	}
	p := append(ed25519.PrivateKey(nil), priv...)
	pub := p.Public().(ed25519.PublicKey)
	return &Signer{priv: p, pub: pub, id: KeyID(pub)}
}

// KeyID returns the signer's key id (see KeyID), the chainId of its chains.
func (s *Signer) KeyID() string { return s.id }

// PublicKey returns a copy of the signer's 32-byte public key.
func (s *Signer) PublicKey() ed25519.PublicKey { return append(ed25519.PublicKey(nil), s.pub...) }

// sign returns the unpadded base64url signature of msg.
func (s *Signer) sign(msg []byte) string {
	return sigEncoding.EncodeToString(ed25519.Sign(s.priv, msg))
}

// verifySig checks an unpadded base64url signature of msg. It rejects any
// encoding of sig other than the canonical one, so a one-character change
// to sig can never verify.
func verifySig(pub ed25519.PublicKey, msg []byte, sig string) bool {
	if len(sig) != sigEncoding.EncodedLen(ed25519.SignatureSize) {
		return false
	}
	raw, err := sigEncoding.DecodeString(sig)
	if err != nil || len(raw) != ed25519.SignatureSize || sigEncoding.EncodeToString(raw) != sig {
		return false
	}
	return ed25519.Verify(pub, msg, raw)
}

// GenerateKey returns a new Ed25519 private key from crypto/rand.
// Errors: errcode.Internal if the system random source fails.
func GenerateKey() (ed25519.PrivateKey, error) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, errcode.Wrap(errcode.Internal, err, "receipt: generate key")
	}
	return priv, nil
}

// maxKeyFile bounds what LoadOrCreateKey and ParsePublicKey read.
const maxKeyFile = 64 << 10

// LoadOrCreateKey returns the Ed25519 private key stored at path as a PEM
// "PRIVATE KEY" block (PKCS#8, RFC 5958), creating the file with a new key
// and mode 0600 if it does not exist (created reports which). Creation is
// atomic: the key is written to a temporary file in the same directory,
// synced, then hard-linked into place, so a crash never leaves a partial key
// file and two processes racing to create it end up with the same key.
//
// An existing file must be a regular file that only its owner can access:
// on Unix a mode with any group or other bit set (mode&0o077 != 0) is
// refused, since anyone who can read the key can forge receipts.
//
// Errors: errcode.InvalidConfig for a file that is too open, not a regular
// file, not PEM, not PKCS#8 or not Ed25519; errcode.Internal for I/O
// failures (the cause is wrapped). Safe for concurrent use, including by
// several processes.
func LoadOrCreateKey(path string) (priv ed25519.PrivateKey, created bool, err error) {
	priv, err = loadKey(path)
	if err == nil {
		return priv, false, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, false, err
	}
	priv, err = GenerateKey()
	if err != nil {
		return nil, false, err
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return nil, false, errcode.Wrap(errcode.Internal, err, "receipt: encode private key")
	}
	data := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, ".toolgate-key-*") // mode 0600
	if err != nil {
		return nil, false, errcode.Wrap(errcode.Internal, err, "receipt: create key file")
	}
	tmpName := tmp.Name()
	defer os.Remove(tmpName)
	_, werr := tmp.Write(data)
	if werr == nil {
		werr = tmp.Chmod(0o600)
	}
	if werr == nil {
		werr = tmp.Sync()
	}
	if cerr := tmp.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		return nil, false, errcode.Wrap(errcode.Internal, werr, "receipt: write key file")
	}
	if err := os.Link(tmpName, path); err != nil {
		if errors.Is(err, fs.ErrExist) { // another process created it first: use its key
			priv, err = loadKey(path)
			return priv, false, err
		}
		return nil, false, errcode.Wrap(errcode.Internal, err, "receipt: create key file")
	}
	if d, err := os.Open(dir); err == nil { // make the new directory entry durable
		_ = d.Sync()
		_ = d.Close()
	}
	return priv, true, nil
}

// LoadKey reads an existing private key file written by LoadOrCreateKey
// (it never creates one). Errors: the file's read error (a missing file
// matches fs.ErrNotExist), or a plain error for a file that is not such a
// key. Safe for concurrent use.
func LoadKey(path string) (ed25519.PrivateKey, error) { return loadKey(path) }

// loadKey reads a private key file; a missing file yields an error that
// matches fs.ErrNotExist.
func loadKey(path string) (ed25519.PrivateKey, error) {
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		return nil, errcode.Wrap(errcode.Internal, err, "receipt: open key file")
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, errcode.Wrap(errcode.Internal, err, "receipt: stat key file")
	}
	if !st.Mode().IsRegular() {
		return nil, errcode.Errorf(errcode.InvalidConfig, "receipt: key file %s is not a regular file", path)
	}
	if runtime.GOOS != "windows" && st.Mode().Perm()&0o077 != 0 {
		return nil, errcode.Errorf(errcode.InvalidConfig,
			"receipt: key file %s is accessible by group or others (mode %04o); run chmod 600 %s",
			path, st.Mode().Perm(), path)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxKeyFile+1))
	if err != nil {
		return nil, errcode.Wrap(errcode.Internal, err, "receipt: read key file")
	}
	block, rest := pem.Decode(data)
	if block == nil || block.Type != "PRIVATE KEY" || len(bytes.TrimSpace(rest)) != 0 {
		return nil, errcode.Errorf(errcode.InvalidConfig, "receipt: key file %s is not one PEM PRIVATE KEY block", path)
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, errcode.Wrap(errcode.InvalidConfig, err, "receipt: key file "+path)
	}
	priv, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, errcode.Errorf(errcode.InvalidConfig, "receipt: key file %s holds a %T, not an Ed25519 key", path, k)
	}
	return priv, nil
}

// EncodePublicKey returns pub as a PEM "PUBLIC KEY" block (PKIX
// SubjectPublicKeyInfo, RFC 8410), the form `toolgate receipts verify
// --pubkey` reads. It returns nil if pub is not 32 bytes.
func EncodePublicKey(pub ed25519.PublicKey) []byte {
	if len(pub) != ed25519.PublicKeySize {
		return nil
	}
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
}

// ParsePublicKey parses an Ed25519 public key given as a PEM "PUBLIC KEY"
// block (PKIX), or as the raw 32 bytes in hex (64 characters) or base64
// (standard or URL alphabet, padded or not). Surrounding whitespace is
// ignored.
//
// Errors: errcode.InvalidArgument for anything else (including a PKIX key
// of another algorithm).
func ParsePublicKey(data []byte) (ed25519.PublicKey, error) {
	if len(data) > maxKeyFile {
		return nil, errcode.New(errcode.InvalidArgument, "receipt: public key input is too large")
	}
	t := bytes.TrimSpace(data)
	if bytes.HasPrefix(t, []byte("-----BEGIN")) {
		block, rest := pem.Decode(t)
		if block == nil || block.Type != "PUBLIC KEY" || len(bytes.TrimSpace(rest)) != 0 {
			return nil, errcode.New(errcode.InvalidArgument, "receipt: public key is not one PEM PUBLIC KEY block")
		}
		k, err := x509.ParsePKIXPublicKey(block.Bytes)
		if err != nil {
			return nil, errcode.Wrap(errcode.InvalidArgument, err, "receipt: public key")
		}
		pub, ok := k.(ed25519.PublicKey)
		if !ok {
			return nil, errcode.Errorf(errcode.InvalidArgument, "receipt: public key is a %T, not Ed25519", k)
		}
		return pub, nil
	}
	s := string(t)
	if len(s) == 2*ed25519.PublicKeySize {
		if raw, err := hex.DecodeString(s); err == nil {
			return ed25519.PublicKey(raw), nil
		}
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if raw, err := enc.Strict().DecodeString(s); err == nil && len(raw) == ed25519.PublicKeySize {
			return ed25519.PublicKey(raw), nil
		}
	}
	return nil, errcode.New(errcode.InvalidArgument,
		"receipt: not an Ed25519 public key (want PEM PUBLIC KEY, or 32 bytes in hex or base64)")
}

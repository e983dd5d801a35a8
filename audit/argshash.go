package audit

import (
	"crypto/sha256"
	"encoding/hex"
	"sync"
)

// ArgsHash returns the argsHash of a tool call's arguments (CONTRACT.md
// §2.3, OpenWOP replay.md §B steps 2-4 over SR-1-redacted arguments): the
// arguments are redacted by every rule of Redactor (registered secrets
// inside strings become "[REDACTED:<secretId>]"; key-name and shape matches
// become "[redacted]"), canonicalized per RFC 8785, hashed with SHA-256 and
// returned as 64 lowercase hex digits with no prefix.
//
// Absent arguments hash as the empty object "{}": nil or empty args, and the
// literal null (the reference in-memory host hashes {} for absent args).
// Arguments that are not a JSON object (an array, a string, a number...) are
// hashed as they are, the same way. {"q":"openwop"} hashes to
// 9458af8c77ede919beb4dd201de70ea7909225488c9e925190a9b4e585cb9d6f.
//
// Errors: *errcode.Error with code errcode.InvalidArgument when args is not
// canonicalizable JSON (syntax, invalid UTF-8, duplicate keys, lone
// surrogates, numbers out of double range; see canonjson.Canonicalize); the
// message is redacted. Safe for concurrent use.
func (r *Redactor) ArgsHash(args []byte) (string, error) {
	h, _, err := r.argsHash(args, false)
	return h, err
}

// ArgsHashDecode returns ArgsHash(args) and, from the same single parse,
// the arguments decoded as they are, unredacted: the hash covers the
// redacted arguments, obj holds the real values (for a policy to read). obj
// has the types encoding/json.Unmarshal gives an `any` (nested
// map[string]any, []any, string, float64, bool, nil; see
// canonjson.Decode); it is an empty map for nil or empty args, and nil when
// args is valid JSON but not an object (null, an array, a string...), which
// the caller must then refuse if it needs an object. The caller owns obj.
//
// Errors: those of ArgsHash (*errcode.Error InvalidArgument, message
// redacted), with an empty hash and a nil obj. Safe for concurrent use.
func (r *Redactor) ArgsHashDecode(args []byte) (hash string, obj map[string]any, err error) {
	h, v, err := r.argsHash(args, true)
	if err != nil {
		return "", nil, err
	}
	obj, _ = v.(map[string]any)
	return h, obj, nil
}

// argsHash is ArgsHash, also decoding args (unredacted) when decode is set.
func (r *Redactor) argsHash(args []byte, decode bool) (string, any, error) {
	bp := hashBufPool.Get().(*[]byte)
	buf, v, err := r.appendRedacted((*bp)[:0], args, true, decode)
	if err != nil {
		hashBufPool.Put(bp)
		return "", nil, err
	}
	h := hashHex(buf)
	if cap(buf) <= maxPooledHashBuf {
		*bp = buf[:0]
		hashBufPool.Put(bp)
	}
	return h, v, nil
}

// hashHex is the lowercase hex SHA-256 of b.
func hashHex(b []byte) string {
	sum := sha256.Sum256(b)
	var out [2 * sha256.Size]byte
	hex.Encode(out[:], sum[:])
	return string(out[:])
}

// defaultRedactor has the key-name and shape rules and no secrets.
var defaultRedactor = NewRedactor()

// ArgsHash is Redactor.ArgsHash with a Redactor that has no registered
// secrets (key-name and shape rules only). Safe for concurrent use.
func ArgsHash(args []byte) (string, error) {
	return defaultRedactor.ArgsHash(args)
}

// hashBufPool recycles the canonical-form buffers ArgsHash hashes.
var hashBufPool = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// maxPooledHashBuf is the largest buffer ArgsHash returns to the pool.
const maxPooledHashBuf = 64 << 10

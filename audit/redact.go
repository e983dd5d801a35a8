package audit

import (
	"bytes"
	"encoding/binary"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/internal/canonjson"
)

// RedactedPlaceholder replaces what the key-name and shape rules remove
// (CONTRACT.md §2.3, the reference in-memory host's marker).
const RedactedPlaceholder = "[redacted]"

// MinSecretLen is the shortest registered secret value that is redacted;
// AddSecret ignores shorter values (SR-1, CONTRACT.md §2.4: 8-character
// minimum), which would otherwise erase ordinary words.
const MinSecretLen = 8

// Redactor scrubs secrets from strings and JSON documents before they are
// hashed, written to events, receipts or logs (DESIGN.md decision 9). It
// applies, in this order:
//
//  1. SR-1 (CONTRACT.md §2.4): every registered secret value found in a
//     string, as a plain substring (no regexp, case-sensitive), becomes
//     "[REDACTED:<secretId>]"; longer values are replaced first.
//  2. Key-name rule, JSON only: an object member whose key names a credential
//     has its whole value, whatever its type, replaced by the string
//     "[redacted]". The key is lowercased (ASCII) with '-', '_', '.' and
//     spaces removed; it names a credential when it is "auth", "pass" or
//     "pwd", or contains apikey, accesskey, authorization, bearer, cookie,
//     credential, passphrase, passwd, password, privatekey, secret,
//     sessionid or token, except that a "token" preceded by max, min, num,
//     total, input, output, prompt, completion, reasoning or cached, or
//     followed (after an optional 's') by count, limit, iz, usage, budget,
//     type, url, uri or endpoint is a token count or setting
//     ("max_tokens", "token_count", "tokenizer"), not a credential.
//  3. Shape rules, in every string (keys too) after step 1: each shape
//     listed below becomes "[redacted]".
//
// The shapes are:
//   - "sk-" followed by 8 or more of [A-Za-z0-9_-] (OpenAI-style keys);
//   - "Bearer" (any case), spaces or tabs, and a token of 8 or more
//     non-space bytes: the token is replaced, "Bearer " is kept;
//   - 32 or more consecutive hex digits;
//   - GitHub tokens: ghp_, gho_, ghu_, ghs_ or ghr_ followed by 20 or more
//     [A-Za-z0-9], and github_pat_ followed by 20 or more [A-Za-z0-9_];
//   - Slack tokens: xoxa-, xoxb-, xoxo-, xoxp-, xoxr- or xoxs- followed by
//     10 or more [A-Za-z0-9-];
//   - AWS access key ids: AKIA or ASIA followed by exactly 16 [A-Z0-9];
//   - JWTs: "eyJ" starting three dot-separated base64url segments, the
//     first two of 10 or more characters;
//   - PEM private keys: from "-----BEGIN ...PRIVATE KEY-----" through the
//     next "-----END ...-----" (or the end of the string).
//
// A shape other than the hex run must start at the beginning of the string
// or after a byte that is not [A-Za-z0-9_-], so "task-manager" is not an
// "sk-" key.
//
// Numbers, booleans and null are never rewritten (except by the key-name
// rule). A secret whose value is part of a placeholder (for example
// "REDACTED") cannot be removed from output that contains placeholders.
//
// Create Redactors with NewRedactor (a zero Redactor behaves like a new
// one). A Redactor must not be copied after first use. All methods are safe
// for concurrent use; AddSecret may run at any time concurrently with
// redaction, which never takes a lock (registrations are published as
// immutable snapshots, copy-on-write).
type Redactor struct {
	mu   sync.Mutex // serializes AddSecret
	snap atomic.Pointer[redactSnapshot]

	// A call-scoped Redactor (WithValues) redacts with parent's current
	// secrets and its own (snap); merged caches the union.
	parent *Redactor
	merged atomic.Pointer[mergedSnapshot]
}

// mergedSnapshot is the union of a parent's snapshot and a call-scoped
// Redactor's own, valid while both are current.
type mergedSnapshot struct{ base, own, snap *redactSnapshot }

// NewRedactor returns a Redactor with the key-name and shape rules and no
// registered secrets.
func NewRedactor() *Redactor {
	r := &Redactor{}
	r.snap.Store(emptySnapshot)
	return r
}

// AddSecret registers a resolved credential value under secretID (SR-1,
// CONTRACT.md §2.4): from the time AddSecret returns, every redaction
// replaces value, wherever it appears inside a string, with
// "[REDACTED:<secretID>]". Values shorter than MinSecretLen bytes are
// ignored. Registering a value that is already registered keeps its first
// secretID. Registrations are never removed, so register credentials, not
// per-request data. AddSecret costs O(number of registered secrets); it is
// safe for concurrent use with itself and with every other method.
func (r *Redactor) AddSecret(secretID, value string) {
	if len(value) < MinSecretLen {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	old := r.own()
	if slices.ContainsFunc(old.secrets, func(s redactSecret) bool { return string(s.value) == value }) {
		return
	}
	secrets := make([]redactSecret, 0, len(old.secrets)+1)
	secrets = append(secrets, old.secrets...)
	secrets = append(secrets, redactSecret{value: []byte(value), marker: []byte("[REDACTED:" + secretID + "]")})
	sortSecrets(secrets)
	r.snap.Store(newRedactSnapshot(secrets))
}

// RedactString returns s with registered secrets, then shapes, redacted
// (rules 1 and 3 of Redactor), for error messages and log lines. It returns
// s itself when nothing matched. Safe for concurrent use.
func (r *Redactor) RedactString(s string) string {
	out, changed := r.snapshot().rewrite([]byte(s))
	if !changed {
		return s
	}
	return string(out)
}

// RedactID returns the identifier s (a runId, agentId, callId or
// parentCallId a caller chose) with registered secrets and every shape but
// the hex run redacted (rules 1 and 3 of Redactor): identifiers are often
// long hex strings (toolgate's own ids, W3C trace ids), which the hex-run
// shape would erase, but they must never carry a credential into a
// record. It returns s itself when nothing matched. Safe for concurrent
// use.
func (r *Redactor) RedactID(s string) string {
	sn := r.snapshot()
	b := []byte(s)
	changed := false
	if sn.containsSecret(b) {
		for _, sec := range sn.secrets {
			if bytes.Contains(b, sec.value) {
				b = bytes.ReplaceAll(b, sec.value, sec.marker)
			}
		}
		changed = true
	}
	if out, ok := redactShapes(b, false); ok {
		return string(out)
	}
	if !changed {
		return s
	}
	return string(b)
}

// RedactJSON returns the RFC 8785 canonical form of the JSON text data with
// every rule of Redactor applied, in a new slice owned by the caller; it is
// what `audit.content: full` records. nil or empty data is taken as absent
// arguments and gives "{}". For any data other than the literal null,
// hex(SHA-256(RedactJSON(data))) equals ArgsHash(data).
//
// Errors: *errcode.Error with code errcode.InvalidArgument when data is not
// canonicalizable JSON (see canonjson.Canonicalize); its message is itself
// redacted. Safe for concurrent use.
func (r *Redactor) RedactJSON(data []byte) ([]byte, error) {
	return r.appendRedactedJSON(nil, data, false)
}

// appendRedactedJSON appends the redacted canonical form of data to dst.
// Empty data is "{}"; with nullAsEmpty, so is null.
func (r *Redactor) appendRedactedJSON(dst, data []byte, nullAsEmpty bool) ([]byte, error) {
	out, _, err := r.appendRedacted(dst, data, nullAsEmpty, false)
	return out, err
}

// appendRedacted is appendRedactedJSON that, with decode, also returns the
// value of data as written (canonjson.Decode; an empty map for empty data).
func (r *Redactor) appendRedacted(dst, data []byte, nullAsEmpty, decode bool) ([]byte, any, error) {
	if len(data) == 0 {
		var v any
		if decode {
			v = map[string]any{}
		}
		return append(dst, "{}"...), v, nil
	}
	sn := r.snapshot()
	start := len(dst)
	var (
		out []byte
		v   any
		err error
	)
	if decode {
		out, v, err = sn.transformer.AppendDecode(dst, data)
	} else {
		out, err = sn.transformer.Append(dst, data)
	}
	if err != nil {
		msg := err.Error()
		if e := errcode.As(err); e != nil {
			msg = e.Message
		}
		return dst, nil, errcode.New(errcode.InvalidArgument, string(sn.redactText([]byte(msg))))
	}
	if nullAsEmpty && string(out[start:]) == "null" {
		out = append(out[:start], "{}"...)
	}
	return out, v, nil
}

// own returns the secrets registered on r itself.
func (r *Redactor) own() *redactSnapshot {
	if sn := r.snap.Load(); sn != nil {
		return sn
	}
	return emptySnapshot
}

// snapshot returns what r redacts with: its own secrets and, for a
// call-scoped Redactor, its parent's current ones (the parent's first).
func (r *Redactor) snapshot() *redactSnapshot {
	own := r.own()
	if r.parent == nil {
		return own
	}
	base := r.parent.snapshot()
	if m := r.merged.Load(); m != nil && m.base == base && m.own == own {
		return m.snap
	}
	secrets := slices.Clone(base.secrets)
	for _, sec := range own.secrets {
		if !slices.ContainsFunc(base.secrets, func(s redactSecret) bool { return bytes.Equal(s.value, sec.value) }) {
			secrets = append(secrets, sec)
		}
	}
	sortSecrets(secrets)
	sn := newRedactSnapshot(secrets)
	r.merged.Store(&mergedSnapshot{base: base, own: own, snap: sn})
	return sn
}

// sortSecrets orders secrets longest first, then by bytes.
func sortSecrets(secrets []redactSecret) {
	slices.SortFunc(secrets, func(a, b redactSecret) int {
		if len(a.value) != len(b.value) {
			return len(b.value) - len(a.value) // longest first
		}
		return bytes.Compare(a.value, b.value)
	})
}

// redactSecret is one registered secret.
type redactSecret struct {
	value  []byte
	marker []byte // "[REDACTED:<secretId>]"
}

// redactSnapshot is an immutable set of registered secrets with what
// redaction needs to use it without locks.
type redactSnapshot struct {
	secrets     []redactSecret // longest first, then by bytes
	transformer canonjson.Transformer

	// With more than redactFilterMin secrets, containsSecret slides an
	// 8-byte window over the text and tests a bitset of the hashes of every
	// secret's first 8 bytes, so its cost does not grow with the number of
	// secrets; buckets lists the secrets under each hash.
	filter  *[1 << 16 / 64]uint64
	buckets map[uint16][]int
}

// redactFilterMin is the number of secrets up to which containsSecret
// simply searches for each one.
const redactFilterMin = 4

var emptySnapshot = newRedactSnapshot(nil)

func newRedactSnapshot(secrets []redactSecret) *redactSnapshot {
	sn := &redactSnapshot{secrets: secrets}
	sn.transformer = canonjson.Transformer{
		ReplaceValue: isSensitiveKey,
		Replacement:  RedactedPlaceholder,
		Rewrite:      sn.rewrite,
	}
	if len(secrets) > redactFilterMin {
		sn.filter = new([1 << 16 / 64]uint64)
		sn.buckets = make(map[uint16][]int)
		for i, s := range secrets {
			h := windowHash(s.value)
			sn.filter[h>>6] |= 1 << (h & 63)
			sn.buckets[h] = append(sn.buckets[h], i)
		}
	}
	return sn
}

// windowHash hashes the first 8 bytes of b (len(b) >= 8) to 16 bits.
func windowHash(b []byte) uint16 {
	return uint16((binary.LittleEndian.Uint64(b) * 0x9E3779B97F4A7C15) >> 48)
}

// rewrite applies rules 1 and 3 to s. It never modifies s; when it reports
// true the returned text is newly allocated.
func (sn *redactSnapshot) rewrite(s []byte) ([]byte, bool) {
	changed := false
	if sn.containsSecret(s) {
		for _, sec := range sn.secrets {
			if bytes.Contains(s, sec.value) {
				s = bytes.ReplaceAll(s, sec.value, sec.marker)
			}
		}
		changed = true
	}
	if out, ok := redactShapes(s, true); ok {
		return out, true
	}
	return s, changed
}

// redactText is rewrite for text that is returned whether or not it changed.
func (sn *redactSnapshot) redactText(s []byte) []byte {
	out, _ := sn.rewrite(s)
	return out
}

// containsSecret reports whether any registered secret occurs in s.
func (sn *redactSnapshot) containsSecret(s []byte) bool {
	if len(s) < MinSecretLen || len(sn.secrets) == 0 {
		return false
	}
	if sn.filter == nil {
		for _, sec := range sn.secrets {
			if bytes.Contains(s, sec.value) {
				return true
			}
		}
		return false
	}
	for i := 0; i+8 <= len(s); i++ {
		h := windowHash(s[i:])
		if sn.filter[h>>6]&(1<<(h&63)) == 0 {
			continue
		}
		for _, j := range sn.buckets[h] {
			if bytes.HasPrefix(s[i:], sn.secrets[j].value) {
				return true
			}
		}
	}
	return false
}

// isSensitiveKey implements the key-name rule of Redactor.
func isSensitiveKey(key []byte) bool {
	var arr [64]byte
	norm := arr[:0]
	for _, c := range key {
		if f := keyFold[c]; f != 0 {
			norm = append(norm, f)
		}
	}
	switch string(norm) {
	case "auth", "pass", "pwd":
		return true
	}
	// Look for a credential word at each position, keyed by its first four
	// bytes (all words but "pwd"/"auth"/"pass", handled above, are longer).
	for i := 0; i+4 <= len(norm); i++ {
		rest := norm[i:]
		var words []string
		switch binary.LittleEndian.Uint32(rest) {
		case p4apik, p4acce, p4auth, p4bear, p4cook, p4cred, p4pass, p4priv, p4secr, p4sess:
			words = sensitiveWords
		case p4toke:
			if hasPrefix(rest, "token") && !isTokenSetting(norm, i) {
				return true
			}
			continue
		default:
			continue
		}
		for _, w := range words {
			if hasPrefix(rest, w) {
				return true
			}
		}
	}
	return false
}

// keyFold maps a key byte to its normalized form: ASCII letters lowercased,
// '-', '_', '.' and ' ' to 0 (dropped), everything else unchanged.
var keyFold = func() (t [256]byte) {
	for c := range t {
		t[c] = byte(c)
	}
	for c := 'A'; c <= 'Z'; c++ {
		t[c] = byte(c) + 'a' - 'A'
	}
	for _, c := range "-_. " {
		t[c] = 0
	}
	return t
}()

// The first four bytes of the credential words, as little-endian uint32s.
const (
	p4apik = 'a' | 'p'<<8 | 'i'<<16 | 'k'<<24
	p4acce = 'a' | 'c'<<8 | 'c'<<16 | 'e'<<24
	p4auth = 'a' | 'u'<<8 | 't'<<16 | 'h'<<24
	p4bear = 'b' | 'e'<<8 | 'a'<<16 | 'r'<<24
	p4cook = 'c' | 'o'<<8 | 'o'<<16 | 'k'<<24
	p4cred = 'c' | 'r'<<8 | 'e'<<16 | 'd'<<24
	p4pass = 'p' | 'a'<<8 | 's'<<16 | 's'<<24
	p4priv = 'p' | 'r'<<8 | 'i'<<16 | 'v'<<24
	p4secr = 's' | 'e'<<8 | 'c'<<16 | 'r'<<24
	p4sess = 's' | 'e'<<8 | 's'<<16 | 's'<<24
	p4toke = 't' | 'o'<<8 | 'k'<<16 | 'e'<<24
)

// The credential words of the key-name rule ("token" aside).
var (
	sensitiveWords = []string{"apikey", "accesskey", "authorization", "bearer", "cookie", "credential",
		"password", "passwd", "passphrase", "privatekey", "secret", "sessionid"}

	tokenSettingBefore = []string{"max", "min", "num", "total", "input", "output", "prompt", "completion", "reasoning", "cached"}
	tokenSettingAfter  = []string{"count", "limit", "iz", "usage", "budget", "type", "url", "uri", "endpoint"}
)

// isTokenSetting reports whether the "token" at norm[i:] names a token
// count or setting rather than a credential.
func isTokenSetting(norm []byte, i int) bool {
	before, after := norm[:i], norm[i+len("token"):]
	if hasPrefix(after, "s") {
		after = after[1:]
	}
	for _, w := range tokenSettingBefore {
		if len(before) >= len(w) && string(before[len(before)-len(w):]) == w {
			return true
		}
	}
	for _, w := range tokenSettingAfter {
		if hasPrefix(after, w) {
			return true
		}
	}
	return false
}

// hasPrefix is bytes.HasPrefix for a string prefix, without converting it.
func hasPrefix(b []byte, prefix string) bool {
	return len(b) >= len(prefix) && string(b[:len(prefix)]) == prefix
}

// Byte classes for the shape scanner.
const (
	classHex   = 1 << iota // [0-9A-Fa-f]
	classWord              // [A-Za-z0-9_-]
	classAlnum             // [A-Za-z0-9]
	classUpper             // [A-Z0-9], AWS key id characters
	classStart             // may start a non-hex shape: s b B g x A e -
)

var byteClass = func() (t [256]uint8) {
	for c := 0; c < 256; c++ {
		b := byte(c)
		alnum := b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9'
		if b >= '0' && b <= '9' || b >= 'a' && b <= 'f' || b >= 'A' && b <= 'F' {
			t[c] |= classHex
		}
		if alnum || b == '_' || b == '-' {
			t[c] |= classWord
		}
		if alnum {
			t[c] |= classAlnum
		}
		if b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' {
			t[c] |= classUpper
		}
		if strings.IndexByte("sbBgxAe-", b) >= 0 {
			t[c] |= classStart
		}
	}
	return t
}()

// run returns the end of the run of bytes of class cl starting at s[i].
func run(s []byte, i int, cl uint8) int {
	for i < len(s) && byteClass[s[i]]&cl != 0 {
		i++
	}
	return i
}

// minShapeLen is the length of the shortest text a shape rule matches
// ("sk-" and 8 characters).
const minShapeLen = 11

// shapeMatch is one shape match: s[start:end], of which s[start:start+keep]
// is kept.
type shapeMatch struct{ start, keep, end int }

// redactShapes applies the shape rules of Redactor to s. It never modifies
// s; when it reports true the returned text is newly allocated.
//
// It is equivalent to trying, at each position from left to right, a hex run
// of 32 or more that starts there, else a shape that starts there, and
// continuing after a match; it is organized for speed in two passes:
//   - shapes can only start at word starts (after a byte that is not
//     [A-Za-z0-9_-]), so the first pass jumps from word to word;
//   - a run of 32 or more hex digits covers two consecutive positions
//     congruent to 15 mod 16, so the second pass samples every 16th byte.
//     A hex run never overlaps a shape match except by lying inside it
//     (each shape ends at a non-hex byte or where the run ends), and no
//     shape starts with 32 hex digits (none has more than three), so the
//     passes cannot disagree about which match comes first.
//
// Without hexRuns the hex-run shape is not applied (RedactID).
func redactShapes(s []byte, hexRuns bool) ([]byte, bool) {
	if len(s) < minShapeLen {
		return s, false
	}
	var arr [8]shapeMatch
	matches := arr[:0]
	for i := 0; i < len(s); {
		cl := byteClass[s[i]]
		if cl&classWord == 0 {
			i++
			continue
		}
		if cl&classStart != 0 && (i == 0 || byteClass[s[i-1]]&classWord == 0) {
			if keep, end := matchShape(s, i); end >= 0 {
				matches = append(matches, shapeMatch{i, keep, end})
				i = end
				continue
			}
		}
		i = run(s, i+1, classWord)
	}
	shapes := len(matches)
	for m := 15; hexRuns && m+16 < len(s); m += 16 {
		if byteClass[s[m]]&classHex == 0 || byteClass[s[m+16]]&classHex == 0 {
			continue
		}
		p := m
		for p > 0 && byteClass[s[p-1]]&classHex != 0 {
			p--
		}
		q := run(s, m+1, classHex)
		if q-p >= 32 && !insideMatch(matches[:shapes], p) {
			matches = append(matches, shapeMatch{p, 0, q})
		}
		for m+16 < q {
			m += 16
		}
	}
	if len(matches) == 0 {
		return s, false
	}
	if len(matches) > shapes && shapes > 0 {
		slices.SortFunc(matches, func(a, b shapeMatch) int { return a.start - b.start })
	}
	out := make([]byte, 0, len(s))
	last := 0
	for _, m := range matches {
		out = append(out, s[last:m.start+m.keep]...)
		out = append(out, RedactedPlaceholder...)
		last = m.end
	}
	return append(out, s[last:]...), true
}

// insideMatch reports whether position p lies inside one of matches.
func insideMatch(matches []shapeMatch, p int) bool {
	for _, m := range matches {
		if m.start <= p && p < m.end {
			return true
		}
	}
	return false
}

// matchShape matches a non-hex shape starting at s[i]. It returns end < 0
// for no match, else the match s[i:end] of which the first keep bytes are
// kept.
func matchShape(s []byte, i int) (keep, end int) {
	rest := s[i:]
	has := func(p string) bool { return hasPrefix(rest, p) }
	switch s[i] {
	case 's':
		if has("sk-") {
			if j := run(s, i+3, classWord); j-(i+3) >= 8 {
				return 0, j
			}
		}
	case 'b', 'B':
		if len(rest) > 6 && bytes.EqualFold(rest[:6], []byte("bearer")) {
			t := i + 6
			for t < len(s) && (s[t] == ' ' || s[t] == '\t') {
				t++
			}
			j := t
			for j < len(s) && !isSpace(s[j]) {
				j++
			}
			tok := s[t:j]
			if t > i+6 && len(tok) >= 8 && !hasPrefix(tok, "[REDACTED:") && string(tok) != RedactedPlaceholder {
				return t - i, j
			}
		}
	case 'g':
		if has("ghp_") || has("gho_") || has("ghu_") || has("ghs_") || has("ghr_") {
			if j := run(s, i+4, classAlnum); j-(i+4) >= 20 {
				return 0, j
			}
		} else if has("github_pat_") {
			if j := runAlnumOr(s, i+11, '_'); j-(i+11) >= 20 {
				return 0, j
			}
		}
	case 'x':
		if len(rest) > 5 && has("xox") && strings.IndexByte("abopsr", rest[3]) >= 0 && rest[4] == '-' {
			if j := runAlnumOr(s, i+5, '-'); j-(i+5) >= 10 {
				return 0, j
			}
		}
	case 'A':
		if (has("AKIA") || has("ASIA")) && run(s, i+4, classUpper) >= i+20 &&
			(i+20 == len(s) || byteClass[s[i+20]]&classAlnum == 0) {
			return 0, i + 20
		}
	case 'e':
		if has("eyJ") {
			j := run(s, i, classWord)
			if j-i >= 10 && j < len(s) && s[j] == '.' {
				k := run(s, j+1, classWord)
				if k-(j+1) >= 10 && k < len(s) && s[k] == '.' {
					return 0, run(s, k+1, classWord)
				}
			}
		}
	case '-':
		if has("-----BEGIN ") {
			head := rest[:min(len(rest), 64)]
			if h := bytes.Index(head, []byte("PRIVATE KEY-----")); h >= 0 {
				body := i + h + len("PRIVATE KEY-----")
				e := bytes.Index(s[body:], []byte("-----END "))
				if e < 0 {
					return 0, len(s)
				}
				e += body + len("-----END ")
				if f := bytes.Index(s[e:], []byte("-----")); f >= 0 {
					return 0, e + f + len("-----")
				}
				return 0, len(s)
			}
		}
	}
	return 0, -1
}

// runAlnumOr returns the end of the run of [A-Za-z0-9] and extra bytes
// starting at s[i].
func runAlnumOr(s []byte, i int, extra byte) int {
	for i < len(s) && (byteClass[s[i]]&classAlnum != 0 || s[i] == extra) {
		i++
	}
	return i
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'
}

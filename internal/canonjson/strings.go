package canonjson

import (
	"strconv"
	"unicode/utf8"
	"unsafe"
)

// Escaping selects the JSON string form AppendString writes. Both forms
// escape the quotation mark, the reverse solidus and the control characters
// U+0000 to U+001F (as \b \t \n \f \r, else \u00xx with lowercase hex) and
// write DEL and '/' as they are; they differ in '<' '>' '&' U+2028 U+2029 and
// in invalid UTF-8.
type Escaping uint8

const (
	// Canonical is the string serialization of RFC 8785 §3.2.2.2 (JSON
	// Canonicalization Scheme), which canonical JSON requires: only the
	// characters above are escaped; everything else, including '<', '>',
	// '&', U+2028 and U+2029, is written as raw UTF-8. RFC 8785 has no form
	// for invalid UTF-8 (I-JSON forbids it); each maximal run of bytes that
	// is not valid UTF-8 is written as one raw U+FFFD, so the result is
	// always valid UTF-8. Receipts and Canonicalize use it.
	Canonical Escaping = iota

	// EncodingJSON is the form encoding/json.Marshal writes for a Go string
	// by default (HTML-safe): as Canonical, plus '<' '>' '&' as \u003c \u003e
	// \u0026 and U+2028 U+2029 as \u2028 \u2029; each byte that is not part
	// of valid UTF-8 is written as \ufffd. Audit event payloads use it: their
	// stored bytes (hashed into receipts) have always been json.Marshal's.
	EncodingJSON
)

// AppendString appends s as a JSON string in the form e selects (Canonical:
// RFC 8785 §3.2.2.2; EncodingJSON: as encoding/json) and returns the extended
// slice. It is the one JSON string escaper of the module. It cannot fail and
// is safe for concurrent use. An Escaping other than the two constants is
// treated as Canonical.
func AppendString(dst []byte, s string, e Escaping) []byte {
	html := e == EncodingJSON
	plain := &plainCanonical
	if html {
		plain = &plainEncodingJSON
	}
	// Fast path: plain printable ASCII (ids, hashes, names) is written as
	// it is, in one pass, 8 bytes at a time.
	i := 0
	if html {
		for i+8 <= len(s) && (load64(s, i)|escapeWordHTML(load64(s, i)))&highBits == 0 {
			i += 8
		}
	} else {
		for i+8 <= len(s) && (load64(s, i)|escapeWord(load64(s, i)))&highBits == 0 {
			i += 8
		}
	}
	for i < len(s) && s[i] < utf8.RuneSelf && plain[s[i]] {
		i++
	}
	if i == len(s) {
		dst = append(dst, '"')
		dst = append(dst, s...)
		return append(dst, '"')
	}
	if !utf8.ValidString(s[i:]) { // s[:i] is ASCII
		return appendInvalid(dst, s, plain, html)
	}
	dst = append(dst, '"')
	start := 0
	for {
		// After an escape, look at bytes one by one (escapes come in
		// clusters) until 8 in a row are plain, then 8 at a time.
		for n := 0; i < len(s) && plain[s[i]]; n++ {
			i++
			if n == 8 {
				if html { // stops at any non-ASCII byte too (0xE2 needs a look)
					for i+8 <= len(s) && (load64(s, i)|escapeWordHTML(load64(s, i)))&highBits == 0 {
						i += 8
					}
				} else { // valid UTF-8 is plain
					for i+8 <= len(s) && escapeWord(load64(s, i))&highBits == 0 {
						i += 8
					}
				}
			}
		}
		for i < len(s) && plain[s[i]] {
			i++
		}
		if i >= len(s) {
			break
		}
		c := s[i]
		if c == 0xE2 { // EncodingJSON only: U+2028 and U+2029 are E2 80 A8/A9
			if i+2 < len(s) && s[i+1] == 0x80 && s[i+2]&^1 == 0xA8 {
				dst = append(dst, s[start:i]...)
				dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[s[i+2]&0xF])
				i += 3
				start = i
			} else {
				i++
			}
			continue
		}
		dst = append(dst, s[start:i]...)
		dst = appendEscapedASCII(dst, c)
		i++
		start = i
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// appendBytes is AppendString for a byte slice, which must not change
// during the call (it is read as a string without a copy).
func appendBytes(dst, b []byte, e Escaping) []byte {
	return AppendString(dst, unsafe.String(unsafe.SliceData(b), len(b)), e)
}

// appendEscapedASCII appends the escape of the ASCII byte c: '"' or '\\'
// after a reverse solidus, \b \t \n \f \r, else \u00xx (control characters;
// '<' '>' '&' under EncodingJSON).
func appendEscapedASCII(dst []byte, c byte) []byte {
	switch c {
	case '"', '\\':
		return append(dst, '\\', c)
	case '\b':
		return append(dst, '\\', 'b')
	case '\t':
		return append(dst, '\\', 't')
	case '\n':
		return append(dst, '\\', 'n')
	case '\f':
		return append(dst, '\\', 'f')
	case '\r':
		return append(dst, '\\', 'r')
	}
	return append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
}

// appendInvalid is AppendString for s that is not valid UTF-8: Canonical
// writes each maximal run of invalid bytes as one raw U+FFFD, EncodingJSON
// (html) each invalid byte as \ufffd (as encoding/json does).
func appendInvalid(dst []byte, s string, plain *[256]bool, html bool) []byte {
	dst = append(dst, '"')
	start := 0
	afterBad := -1 // index just after the last invalid byte
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if plain[c] {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			dst = appendEscapedASCII(dst, c)
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			dst = append(dst, s[start:i]...)
			if html {
				dst = append(dst, `\ufffd`...)
			} else if i != afterBad {
				dst = append(dst, "\uFFFD"...)
			}
			i++
			start, afterBad = i, i
		case html && (r == '\u2028' || r == '\u2029'):
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
		default:
			i += size
		}
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// plainCanonical and plainEncodingJSON mark the bytes of valid UTF-8 each
// Escaping writes as they are: all but the control characters, '"' and
// '\\', and for EncodingJSON also '<' '>' '&' and 0xE2 (the lead byte of
// U+2028 and U+2029, looked at more closely). appendInvalid uses their
// ASCII half.
var plainCanonical, plainEncodingJSON = func() (c, h [256]bool) {
	for b := 0x20; b < 256; b++ {
		c[b] = b != '"' && b != '\\'
		h[b] = c[b] && b != '<' && b != '>' && b != '&' && b != 0xE2
	}
	return c, h
}()

// load64 returns the 8 bytes s[i:i+8] as a little-endian word.
func load64(s string, i int) uint64 {
	_ = s[i+7]
	return uint64(s[i]) | uint64(s[i+1])<<8 | uint64(s[i+2])<<16 | uint64(s[i+3])<<24 |
		uint64(s[i+4])<<32 | uint64(s[i+5])<<40 | uint64(s[i+6])<<48 | uint64(s[i+7])<<56
}

// highBits has the high bit of each byte of a word set.
const highBits = 0x8080808080808080

// escapeWord has the high bit of some byte set if a byte of w is a control
// character, '"' or '\\' (bytes RFC 8785 escapes), and no high bit set
// otherwise. It uses the "has a byte less than n" and "has a zero byte"
// word tricks, which are exact as booleans; bytes >= 0x80 never count.
func escapeWord(w uint64) uint64 {
	const ones = 0x0101010101010101
	return (w-0x20*ones)&^w | hasZeroByte(w^'"'*ones) | hasZeroByte(w^'\\'*ones)
}

// escapeWordHTML is escapeWord plus '<' '>' '&' (EncodingJSON); '<' and
// '>' (0x3C, 0x3E) are the bytes b with b|2 == 0x3E.
func escapeWordHTML(w uint64) uint64 {
	const ones = 0x0101010101010101
	return escapeWord(w) | hasZeroByte((w|0x02*ones)^'>'*ones) | hasZeroByte(w^'&'*ones)
}

// hasZeroByte has the high bit of some byte set if a byte of x is zero.
func hasZeroByte(x uint64) uint64 {
	const ones = 0x0101010101010101
	return (x - ones) &^ x
}

// appendValidUTF8 appends s, replacing each maximal run of invalid bytes
// with U+FFFD.
func appendValidUTF8[S ~string | ~[]byte](dst []byte, s S) []byte {
	invalid := false
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			dst = append(dst, c)
			invalid = false
			i++
			continue
		}
		r, size := decodeRune(s[i:])
		if r == utf8.RuneError && size == 1 {
			if !invalid {
				dst = append(dst, "\uFFFD"...)
			}
			invalid = true
			i++
			continue
		}
		dst = append(dst, s[i:i+size]...)
		invalid = false
		i += size
	}
	return dst
}

// decodeRune is utf8.DecodeRune for either string type.
func decodeRune[S ~string | ~[]byte](s S) (rune, int) {
	var b [utf8.UTFMax]byte
	n := copy(b[:], s)
	return utf8.DecodeRune(b[:n])
}

const hexDigits = "0123456789abcdef"

// compareUTF16 compares two valid UTF-8 strings by their UTF-16 code units
// (RFC 8785 §3.2.3) and returns -1, 0 or +1. UTF-8 byte order equals code
// point order, which differs from UTF-16 order only where a supplementary
// character (a surrogate pair, units 0xD800-0xDBFF first) meets a BMP
// character in U+E000-U+FFFF.
func compareUTF16(a, b []byte) int {
	if len(a) > 0 && len(b) > 0 && a[0] != b[0] && a[0] < utf8.RuneSelf && b[0] < utf8.RuneSelf {
		return cmpInt(int(a[0]), int(b[0])) // the common case
	}
	n := min(len(a), len(b))
	i := 0
	for i < n && a[i] == b[i] {
		i++
	}
	if i == n {
		switch {
		case len(a) < len(b):
			return -1
		case len(a) > len(b):
			return 1
		}
		return 0
	}
	if a[i] < utf8.RuneSelf && b[i] < utf8.RuneSelf {
		return cmpInt(int(a[i]), int(b[i]))
	}
	// Back up to the start of the differing rune (shared by both).
	for i > 0 && !utf8.RuneStart(a[i]) {
		i--
	}
	ra, _ := utf8.DecodeRune(a[i:])
	rb, _ := utf8.DecodeRune(b[i:])
	return cmpInt(utf16Order(ra), utf16Order(rb))
}

// utf16Order maps a code point to a key that orders like its first UTF-16
// code unit: supplementary characters (high surrogates 0xD800-0xDBFF) sort
// after U+D7FF and before U+E000, and among themselves by code point.
func utf16Order(r rune) int {
	if r >= 0xE000 && r <= 0xFFFF {
		return int(r) + 0x110000
	}
	return int(r)
}

func cmpInt(a, b int) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// quoteForError quotes s for an error message, truncated to 64 bytes.
func quoteForError(s []byte) string {
	const max = 64
	if len(s) > max {
		return strconv.Quote(string(s[:max])) + "..."
	}
	return strconv.Quote(string(s))
}

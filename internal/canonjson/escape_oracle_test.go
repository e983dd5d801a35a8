package canonjson

// escape_oracle_test.go keeps, as test oracles only, the three JSON string
// escapers main had before issue 15.4 made AppendString the only one, copied
// unchanged apart from their names: canonjson's own (oldCanonical*),
// receipt/encode.go's (oldReceipt*) and audit/payload.go's
// (oldAuditString). FuzzAppendString checks AppendString against them.

import "unicode/utf8"

// --- internal/canonjson/strings.go (main) ---

// oldCanonicalString escapes s, replacing invalid UTF-8 with U+FFFD.
func oldCanonicalString[S ~string | ~[]byte](dst []byte, s S) []byte {
	if oldCanonicalValid(s) {
		return oldCanonicalEscaped(dst, s)
	}
	return oldCanonicalEscaped(dst, oldCanonicalValidUTF8(nil, s))
}

// oldCanonicalValidUTF8 appends s, replacing each maximal run of invalid bytes
// with U+FFFD.
func oldCanonicalValidUTF8[S ~string | ~[]byte](dst []byte, s S) []byte {
	invalid := false
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			dst = append(dst, c)
			invalid = false
			i++
			continue
		}
		r, size := oldDecodeRune(s[i:])
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

func oldCanonicalValid[S ~string | ~[]byte](s S) bool {
	switch v := any(s).(type) {
	case []byte:
		return utf8.Valid(v)
	case string:
		return utf8.ValidString(v)
	}
	for i := 0; i < len(s); {
		if s[i] < utf8.RuneSelf {
			i++
			continue
		}
		r, size := oldDecodeRune(s[i:])
		if r == utf8.RuneError && size == 1 {
			return false
		}
		i += size
	}
	return true
}

// oldDecodeRune is utf8.DecodeRune for either string type.
func oldDecodeRune[S ~string | ~[]byte](s S) (rune, int) {
	var b [utf8.UTFMax]byte
	n := copy(b[:], s)
	return utf8.DecodeRune(b[:n])
}

// oldCanonicalEscaped appends s, which must be valid UTF-8, as a JSON string per
// RFC 8785 §3.2.2.2.
func oldCanonicalEscaped[S ~string | ~[]byte](dst []byte, s S) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		dst = append(dst, s[start:i]...)
		switch c {
		case '"', '\\':
			dst = append(dst, '\\', c)
		case '\b':
			dst = append(dst, '\\', 'b')
		case '\t':
			dst = append(dst, '\\', 't')
		case '\n':
			dst = append(dst, '\\', 'n')
		case '\f':
			dst = append(dst, '\\', 'f')
		case '\r':
			dst = append(dst, '\\', 'r')
		default:
			dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
		}
		start = i + 1
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// --- receipt/encode.go (main) ---

// oldReceiptString appends s as an RFC 8785 JSON string (§3.2.2.2): '"' and '\\'
// are escaped, control characters use \b \t \n \f \r or \u00xx (lowercase
// hex), and everything else, including U+2028/U+2029 and DEL, is written
// as-is. s must be valid UTF-8.
func oldReceiptString(b []byte, s string) []byte {
	b = append(b, '"')
	// Fast path: ids and hashes need no escaping.
	i := 0
	for i+8 <= len(s) && !oldReceiptHasEscapeByte(oldReceiptLoad64(s, i)) {
		i += 8
	}
	for i < len(s) && !oldReceiptNeedsEscape[s[i]] {
		i++
	}
	if i == len(s) {
		b = append(b, s...)
		return append(b, '"')
	}
	start := 0
	for ; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		b = append(b, s[start:i]...)
		switch c {
		case '"', '\\':
			b = append(b, '\\', c)
		case '\b':
			b = append(b, '\\', 'b')
		case '\t':
			b = append(b, '\\', 't')
		case '\n':
			b = append(b, '\\', 'n')
		case '\f':
			b = append(b, '\\', 'f')
		case '\r':
			b = append(b, '\\', 'r')
		default:
			b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
		}
		start = i + 1
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// oldReceiptNeedsEscape marks the bytes oldReceiptString escapes: control characters,
// '"' and '\\'.
var oldReceiptNeedsEscape = func() (t [256]bool) {
	for c := 0; c < 0x20; c++ {
		t[c] = true
	}
	t['"'], t['\\'] = true, true
	return t
}()

// oldReceiptLoad64 returns the 8 bytes s[i:i+8] as a little-endian word.
func oldReceiptLoad64(s string, i int) uint64 {
	_ = s[i+7]
	return uint64(s[i]) | uint64(s[i+1])<<8 | uint64(s[i+2])<<16 | uint64(s[i+3])<<24 |
		uint64(s[i+4])<<32 | uint64(s[i+5])<<40 | uint64(s[i+6])<<48 | uint64(s[i+7])<<56
}

// oldReceiptHasEscapeByte reports whether any of the 8 bytes in w is one oldReceiptString
// escapes (oldReceiptNeedsEscape), with the exact "has a byte less than n" and "has a
// zero byte" word tricks.
func oldReceiptHasEscapeByte(w uint64) bool {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	less20 := (w - 0x20*ones) &^ w
	quote := w ^ '"'*ones
	backslash := w ^ '\\'*ones
	return (less20|(quote-ones)&^quote|(backslash-ones)&^backslash)&highs != 0
}

// --- audit/payload.go (main) ---

// oldAuditString appends s as a JSON string exactly as encoding/json does
// by default: '"' and '\\' escaped, control characters as \b \f \n \r \t or
// \u00XX, '<' '>' '&' U+2028 U+2029 as \uXXXX, invalid UTF-8 as \ufffd.
func oldAuditString(b []byte, s string) []byte {
	const hexDigits = "0123456789abcdef"
	b = append(b, '"')
	// Fast path: ids, hashes and names are plain ASCII, written as they are.
	i := 0
	for i < len(s) && oldAuditPlain[s[i]] {
		i++
	}
	if i == len(s) {
		b = append(b, s...)
		return append(b, '"')
	}
	start := 0
	for i < len(s) {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// oldAuditPlain marks the bytes oldAuditString writes as they are: printable
// ASCII (and DEL) except '"', '\\', '<', '>' and '&'.
var oldAuditPlain = func() (t [256]bool) {
	for c := 0x20; c < 0x80; c++ {
		t[c] = c != '"' && c != '\\' && c != '<' && c != '>' && c != '&'
	}
	return t
}()

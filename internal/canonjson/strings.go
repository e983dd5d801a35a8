package canonjson

import (
	"strconv"
	"unicode/utf8"
)

// AppendString appends s as a JSON string in the form RFC 8785 §3.2.2.2
// prescribes and returns the extended slice: the quotation mark, the reverse
// solidus and the control characters U+0000 to U+001F are escaped (as \b \t
// \n \f \r, else \u00xx with lowercase hex); everything else, including '<',
// '>', '&', '/', U+2028 and U+2029, is written as raw UTF-8. Each maximal run
// of bytes that is not valid UTF-8 is written as one U+FFFD, so the result
// is always valid UTF-8. AppendString cannot fail and is safe for concurrent
// use.
func AppendString(dst []byte, s string) []byte {
	return appendValidString(dst, s)
}

// appendValidString escapes s, replacing invalid UTF-8 with U+FFFD.
func appendValidString[S ~string | ~[]byte](dst []byte, s S) []byte {
	if validUTF8(s) {
		return appendEscaped(dst, s)
	}
	return appendEscaped(dst, appendValidUTF8(nil, s))
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

func validUTF8[S ~string | ~[]byte](s S) bool {
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
		r, size := decodeRune(s[i:])
		if r == utf8.RuneError && size == 1 {
			return false
		}
		i += size
	}
	return true
}

// decodeRune is utf8.DecodeRune for either string type.
func decodeRune[S ~string | ~[]byte](s S) (rune, int) {
	var b [utf8.UTFMax]byte
	n := copy(b[:], s)
	return utf8.DecodeRune(b[:n])
}

const hexDigits = "0123456789abcdef"

// appendEscaped appends s, which must be valid UTF-8, as a JSON string per
// RFC 8785 §3.2.2.2.
func appendEscaped[S ~string | ~[]byte](dst []byte, s S) []byte {
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

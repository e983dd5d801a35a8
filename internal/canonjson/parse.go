package canonjson

import (
	"encoding/binary"
	"strconv"
	"unicode/utf8"
)

// document parses the whole input: one value with optional surrounding
// whitespace (RFC 8259 §2).
func (p *parser) document() error {
	p.skipSpace()
	if err := p.value(); err != nil {
		return err
	}
	p.skipSpace()
	if p.pos < len(p.data) {
		return p.errorf(p.pos, "trailing data")
	}
	return nil
}

// skipSpace skips the four whitespace bytes RFC 8259 §2 allows.
func (p *parser) skipSpace() {
	for p.pos < len(p.data) {
		switch p.data[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
}

// unexpected reports the byte at p.pos (or the end of input) as unexpected.
func (p *parser) unexpected(what string) error {
	if p.pos >= len(p.data) {
		return p.errorf(p.pos, "unexpected end of input, expected %s", what)
	}
	c := p.data[p.pos]
	if c >= 0x20 && c < 0x7f {
		return p.errorf(p.pos, "invalid character %q, expected %s", rune(c), what)
	}
	return p.errorf(p.pos, "invalid byte 0x%02x, expected %s", c, what)
}

// value parses one value at p.pos (no leading whitespace) and emits it.
func (p *parser) value() error {
	if p.pos >= len(p.data) {
		return p.unexpected("a value")
	}
	switch c := p.data[p.pos]; c {
	case '{':
		return p.object()
	case '[':
		return p.array()
	case '"':
		start := p.pos + 1
		s, verbatim, err := p.readString()
		if err != nil {
			return err
		}
		if p.decode {
			p.vals = append(p.vals, p.decodedString(start, s, verbatim))
		}
		p.emitString(s, verbatim)
		return nil
	case 't':
		return p.literal("true", true)
	case 'f':
		return p.literal("false", false)
	case 'n':
		return p.literal("null", nil)
	default:
		if c == '-' || (c >= '0' && c <= '9') {
			return p.number()
		}
		return p.unexpected("a value")
	}
}

// literal parses the literal lit, whose decoded value is v.
func (p *parser) literal(lit string, v any) error {
	if len(p.data)-p.pos < len(lit) || string(p.data[p.pos:p.pos+len(lit)]) != lit {
		return p.errorf(p.pos, "invalid literal, expected %s", lit)
	}
	p.pos += len(lit)
	p.buf = append(p.buf, lit...)
	if p.decode {
		p.vals = append(p.vals, v)
	}
	return nil
}

func (p *parser) enter() error {
	p.depth++
	if p.depth > MaxDepth {
		return p.errorf(p.pos, "nesting deeper than %d", MaxDepth)
	}
	return nil
}

func (p *parser) array() error {
	if err := p.enter(); err != nil {
		return err
	}
	vbase := len(p.vals)
	p.buf = append(p.buf, '[')
	p.pos++
	p.skipSpace()
	if p.pos < len(p.data) && p.data[p.pos] == ']' {
		p.pos++
		p.buf = append(p.buf, ']')
		p.depth--
		if p.decode {
			p.decodeArray(vbase)
		}
		return nil
	}
	for {
		if err := p.value(); err != nil {
			return err
		}
		p.skipSpace()
		if p.pos >= len(p.data) {
			return p.unexpected("',' or ']'")
		}
		switch p.data[p.pos] {
		case ',':
			p.pos++
			p.buf = append(p.buf, ',')
			p.skipSpace()
		case ']':
			p.pos++
			p.buf = append(p.buf, ']')
			p.depth--
			if p.decode {
				p.decodeArray(vbase)
			}
			return nil
		default:
			return p.unexpected("',' or ']'")
		}
	}
}

func (p *parser) object() error {
	if err := p.enter(); err != nil {
		return err
	}
	oi := len(p.objs)
	p.objs = append(p.objs, object{start: len(p.buf)})
	base, vbase := len(p.stack), len(p.vals)
	p.buf = append(p.buf, '{')
	p.pos++
	p.skipSpace()
	if p.pos < len(p.data) && p.data[p.pos] == '}' {
		p.pos++
		p.buf = append(p.buf, '}')
		p.depth--
		return p.finishObject(oi, base, vbase)
	}
	for {
		if p.pos >= len(p.data) || p.data[p.pos] != '"' {
			return p.unexpected("a string key")
		}
		if err := p.member(); err != nil {
			return err
		}
		p.skipSpace()
		if p.pos >= len(p.data) {
			return p.unexpected("',' or '}'")
		}
		switch p.data[p.pos] {
		case ',':
			p.pos++
			p.buf = append(p.buf, ',')
			p.skipSpace()
		case '}':
			p.pos++
			p.buf = append(p.buf, '}')
			p.depth--
			return p.finishObject(oi, base, vbase)
		default:
			return p.unexpected("',' or '}'")
		}
	}
}

// member parses `"key" : value` at p.pos and pushes it on p.stack. A comma
// before it, if any, is already in buf.
func (p *parser) member() error {
	m := member{off: p.pos, start: len(p.buf)}
	k, verbatim, err := p.readString()
	if err != nil {
		return err
	}
	if p.decode {
		p.vkeys = append(p.vkeys, p.decodedString(m.off+1, k, verbatim))
	}
	m.key0 = len(p.keys)
	p.keys = append(p.keys, k...)
	m.key1 = len(p.keys)
	m.sort0, m.sort1 = m.key0, m.key1
	replace := false
	if p.t != nil && p.skip == 0 {
		if p.t.ReplaceValue != nil {
			replace = p.t.ReplaceValue(p.keys[m.key0:m.key1])
		}
		if p.t.Rewrite != nil {
			if r, ok := p.t.Rewrite(p.keys[m.key0:m.key1]); ok {
				m.sort0 = len(p.keys)
				p.keys = appendValidUTF8(p.keys, r)
				m.sort1 = len(p.keys)
				verbatim = false
			}
		}
	}
	if verbatim {
		p.buf = append(p.buf, '"')
		p.buf = append(p.buf, k...)
		p.buf = append(p.buf, '"')
	} else {
		p.buf = appendBytes(p.buf, p.keys[m.sort0:m.sort1], Canonical)
	}
	p.skipSpace()
	if p.pos >= len(p.data) || p.data[p.pos] != ':' {
		return p.unexpected("':'")
	}
	p.pos++
	p.buf = append(p.buf, ':')
	p.skipSpace()
	m.obj = len(p.objs)
	if replace {
		mark, objMark, memMark := len(p.buf), len(p.objs), len(p.members)
		p.skip++
		err = p.value()
		p.skip--
		if err != nil {
			return err
		}
		p.buf, p.objs, p.members = p.buf[:mark], p.objs[:objMark], p.members[:memMark]
		p.buf = AppendString(p.buf, p.t.Replacement, Canonical)
	} else if err := p.value(); err != nil {
		return err
	}
	m.end = len(p.buf)
	p.stack = append(p.stack, m)
	return nil
}

// plain marks the bytes a JSON string may contain as they are and that
// RFC 8785 §3.2.2.2 emits as they are: printable ASCII except '"' and '\\'.
var plain = func() (t [256]bool) {
	for c := 0x20; c < 0x80; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// hasSpecialByte reports whether any of the 8 bytes in w is not plain: a
// control character (< 0x20), '"', '\\' or a non-ASCII byte (>= 0x80). It
// uses the exact "has a byte less than n" and "has a zero byte" word tricks.
func hasSpecialByte(w uint64) bool {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	less20 := (w - 0x20*ones) & ^w
	quote := w ^ '"'*ones
	backslash := w ^ '\\'*ones
	return (less20|(quote-ones)&^quote|(backslash-ones)&^backslash|w)&highs != 0
}

// readString parses the string at p.pos (which is '"') and returns its
// decoded UTF-8 text, which aliases p.data or p.str and is valid until the
// next readString. verbatim reports that the text needs no escaping, so its
// canonical form is the text between quotes.
func (p *parser) readString() (s []byte, verbatim bool, err error) {
	data := p.data
	start := p.pos + 1
	i := start
	// Fast path: no escapes, so the text is the raw bytes.
	for i < len(data) {
		for i+8 <= len(data) && !hasSpecialByte(binary.LittleEndian.Uint64(data[i:])) {
			i += 8
		}
		for i < len(data) && plain[data[i]] {
			i++
		}
		if i >= len(data) {
			break
		}
		c := data[i]
		if c == '"' {
			p.pos = i + 1
			return data[start:i], true, nil
		}
		if c == '\\' {
			break
		}
		if c < 0x20 {
			return nil, false, p.errorf(i, "control character 0x%02x in string", c)
		}
		r, size := utf8.DecodeRune(data[i:])
		if r == utf8.RuneError && size == 1 {
			return nil, false, p.errorf(i, "invalid UTF-8 in string")
		}
		i += size
	}
	buf := append(p.str[:0], data[start:i]...)
	for i < len(data) {
		c := data[i]
		switch {
		case c == '"':
			p.pos = i + 1
			p.str = buf
			return buf, false, nil
		case c == '\\':
			if i+1 >= len(data) {
				return nil, false, p.errorf(len(data), "unterminated string")
			}
			switch e := data[i+1]; e {
			case '"', '\\', '/':
				buf = append(buf, e)
			case 'b':
				buf = append(buf, '\b')
			case 'f':
				buf = append(buf, '\f')
			case 'n':
				buf = append(buf, '\n')
			case 'r':
				buf = append(buf, '\r')
			case 't':
				buf = append(buf, '\t')
			case 'u':
				r, n, err := p.unicodeEscape(i)
				if err != nil {
					return nil, false, err
				}
				buf = utf8.AppendRune(buf, r)
				i += n
				continue
			default:
				return nil, false, p.errorf(i, "invalid escape sequence")
			}
			i += 2
		case c < 0x20:
			return nil, false, p.errorf(i, "control character 0x%02x in string", c)
		case c < utf8.RuneSelf:
			buf = append(buf, c)
			i++
		default:
			r, size := utf8.DecodeRune(data[i:])
			if r == utf8.RuneError && size == 1 {
				return nil, false, p.errorf(i, "invalid UTF-8 in string")
			}
			buf = append(buf, data[i:i+size]...)
			i += size
		}
	}
	p.str = buf
	return nil, false, p.errorf(len(data), "unterminated string")
}

// unicodeEscape decodes the \uXXXX escape at data[i] (and, for a high
// surrogate, the low surrogate escape that must follow). It returns the code
// point and the number of input bytes used. Lone surrogates are errors:
// they cannot be represented in UTF-8 (RFC 8785 §3.2.2.2, RFC 7493 §2.1).
func (p *parser) unicodeEscape(i int) (rune, int, error) {
	r, ok := hex4(p.data, i+2)
	if !ok {
		return 0, 0, p.errorf(i, "invalid \\u escape")
	}
	switch {
	case r < 0xD800 || r > 0xDFFF:
		return r, 6, nil
	case r >= 0xDC00:
		return 0, 0, p.errorf(i, "lone low surrogate \\u%04x", r)
	}
	if i+12 > len(p.data) || p.data[i+6] != '\\' || p.data[i+7] != 'u' {
		return 0, 0, p.errorf(i, "lone high surrogate \\u%04x", r)
	}
	lo, ok := hex4(p.data, i+8)
	if !ok {
		return 0, 0, p.errorf(i+6, "invalid \\u escape")
	}
	if lo < 0xDC00 || lo > 0xDFFF {
		return 0, 0, p.errorf(i, "lone high surrogate \\u%04x", r)
	}
	return 0x10000 + (r-0xD800)<<10 + (lo - 0xDC00), 12, nil
}

// hex4 decodes the four hex digits at data[i:i+4].
func hex4(data []byte, i int) (rune, bool) {
	if i+4 > len(data) {
		return 0, false
	}
	var r rune
	for _, c := range data[i : i+4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// emitString emits a string value, applying Rewrite.
func (p *parser) emitString(s []byte, verbatim bool) {
	if p.t != nil && p.skip == 0 && p.t.Rewrite != nil {
		if r, ok := p.t.Rewrite(s); ok {
			p.buf = appendBytes(p.buf, r, Canonical)
			return
		}
	}
	if verbatim {
		p.buf = append(p.buf, '"')
		p.buf = append(p.buf, s...)
		p.buf = append(p.buf, '"')
		return
	}
	p.buf = appendBytes(p.buf, s, Canonical)
}

// number parses a number (RFC 8259 §6 grammar) and emits its RFC 8785
// §3.2.2.3 form.
func (p *parser) number() error {
	data := p.data
	start := p.pos
	i := start
	if data[i] == '-' {
		i++
	}
	switch {
	case i < len(data) && data[i] == '0':
		i++
	case i < len(data) && data[i] >= '1' && data[i] <= '9':
		for i < len(data) && data[i] >= '0' && data[i] <= '9' {
			i++
		}
	default:
		p.pos = i
		return p.unexpected("a digit")
	}
	intEnd := i
	if i < len(data) && data[i] == '.' {
		i++
		if i >= len(data) || data[i] < '0' || data[i] > '9' {
			p.pos = i
			return p.unexpected("a digit")
		}
		for i < len(data) && data[i] >= '0' && data[i] <= '9' {
			i++
		}
	}
	fracEnd := i
	if i < len(data) && (data[i] == 'e' || data[i] == 'E') {
		i++
		if i < len(data) && (data[i] == '+' || data[i] == '-') {
			i++
		}
		if i >= len(data) || data[i] < '0' || data[i] > '9' {
			p.pos = i
			return p.unexpected("a digit")
		}
		for i < len(data) && data[i] >= '0' && data[i] <= '9' {
			i++
		}
	}
	p.pos = i
	lit := data[start:i]
	// Integers of up to 15 digits are exact doubles below 1e21, so their
	// ES6 form is their own digits; only -0 changes.
	if i == intEnd && i-start <= 15 {
		if p.decode {
			p.vals = append(p.vals, smallInt(lit))
		}
		if len(lit) == 2 && lit[0] == '-' && lit[1] == '0' {
			lit = lit[1:]
		}
		p.buf = append(p.buf, lit...)
		return nil
	}
	if plainDecimal(lit, intEnd-start, fracEnd-start) {
		if p.decode {
			// At most 15 significant digits and no exponent: in range.
			f, _ := strconv.ParseFloat(string(lit), 64)
			p.vals = append(p.vals, f)
		}
		p.buf = append(p.buf, lit...)
		return nil
	}
	f, err := strconv.ParseFloat(string(lit), 64)
	if err != nil { // only ErrRange is possible after the grammar check
		return p.errorf(start, "number %s out of range", quoteForError(lit))
	}
	if p.decode {
		p.vals = append(p.vals, f)
	}
	p.buf, _ = AppendNumber(p.buf, f) // f is finite here
	return nil
}

// plainDecimal reports whether the number literal lit (grammar-checked;
// integer part lit[:intEnd], fraction lit[intEnd+1:fracEnd] if present, no
// exponent when fracEnd == len(lit)) is already in its ES6 form. That holds
// when it has a fraction not ending in '0', at most 15 significant digits
// and a magnitude of at least 1e-6: any decimal of at most 15 significant
// digits survives the round trip through a double (DBL_DIG), so its digits
// are the shortest round-trip digits, and ES6 writes such magnitudes below
// 1e21 without an exponent.
func plainDecimal(lit []byte, intEnd, fracEnd int) bool {
	if fracEnd != len(lit) || fracEnd == intEnd || lit[fracEnd-1] == '0' {
		return false
	}
	digitsStart := 0
	if lit[0] == '-' {
		digitsStart = 1
	}
	sig := intEnd - digitsStart + fracEnd - intEnd - 1
	if lit[digitsStart] == '0' { // 0.xxx: leading fraction zeros do not count
		z := intEnd + 1
		for lit[z] == '0' {
			z++
		}
		if z-(intEnd+1) > 5 { // below 1e-6
			return false
		}
		sig = fracEnd - z
	}
	return sig <= 15
}

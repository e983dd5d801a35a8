package canonjson

// Decode parses data exactly as Canonicalize does (one strict RFC 8259 JSON
// text, valid UTF-8, I-JSON) and returns its value with the Go types
// encoding/json.Unmarshal gives an `any`: map[string]any for an object,
// []any for an array, string, float64, bool, and nil for null. Empty arrays
// and objects are non-nil. Each number is the double strconv.ParseFloat
// gives for its literal (so -0 stays -0). For every input that both Decode
// and encoding/json accept, the two values are reflect.DeepEqual.
//
// Decode refuses whatever Canonicalize refuses, with the same error: an
// *errcode.Error with code errcode.InvalidArgument naming the byte offset
// and the problem (syntax, trailing data, invalid UTF-8, control character,
// bad escape, lone surrogate, duplicate key, number outside the double
// range, nesting deeper than MaxDepth). encoding/json is laxer: it keeps the
// last of duplicate keys and turns invalid UTF-8 and lone surrogates into
// U+FFFD.
//
// data is not modified or retained; the strings of the result may share one
// copy of it. The caller owns the result. Safe for concurrent use.
func Decode(data []byte) (any, error) {
	p := parserPool.Get().(*parser)
	p.reset(data, nil)
	p.decode = true
	var v any
	err := p.document()
	if err == nil {
		v = p.vals[0]
	}
	p.release()
	return v, err
}

// AppendDecode is Append that also decodes data: it appends the canonical
// form of data, transformed by t, to dst and returns the extended slice
// together with the value of data as Decode returns it. The value is data as
// written: t's ReplaceValue and Rewrite change only the canonical bytes, never
// the value. On error it returns dst unchanged, a nil value and the error
// Append returns (*errcode.Error, errcode.InvalidArgument). One pass over
// data does both, so AppendDecode costs less than Append and Decode. data is
// not modified or retained; the strings of the value may share one copy of
// it. Safe for concurrent use if t's functions are.
func (t *Transformer) AppendDecode(dst, data []byte) ([]byte, any, error) {
	p := parserPool.Get().(*parser)
	p.reset(data, t)
	p.decode = true
	var v any
	err := p.document()
	if err == nil {
		dst = p.appendCanonical(dst)
		v = p.vals[0]
	}
	p.release()
	return dst, v, err
}

// decodedString returns the string value of a string token whose text
// starts at input offset start: s, as readString returned it. Unescaped
// text is a substring of one shared copy of the input, so a document costs
// one string allocation however many such strings it has.
func (p *parser) decodedString(start int, s []byte, verbatim bool) string {
	if !verbatim {
		return string(s)
	}
	if p.text == "" {
		p.text = string(p.data)
	}
	return p.text[start : start+len(s)]
}

// decodeArray replaces the values from vals[vbase:] by one []any of them.
func (p *parser) decodeArray(vbase int) {
	a := make([]any, len(p.vals)-vbase)
	copy(a, p.vals[vbase:])
	clear(p.vals[vbase:])
	p.vals = append(p.vals[:vbase], a)
}

// finishObject closes the object that started at stack[base:] (closeObject)
// and, when decoding, replaces its member values vals[vbase:] and their keys
// (the last as many of vkeys) by one map[string]any. closeObject has refused
// duplicate keys, so no member is lost.
func (p *parser) finishObject(oi, base, vbase int) error {
	if err := p.closeObject(oi, base); err != nil {
		return err
	}
	if !p.decode {
		return nil
	}
	n := len(p.vals) - vbase
	kbase := len(p.vkeys) - n
	m := make(map[string]any, n)
	for i, k := range p.vkeys[kbase:] {
		m[k] = p.vals[vbase+i]
	}
	clear(p.vals[vbase:])
	clear(p.vkeys[kbase:])
	p.vkeys = p.vkeys[:kbase]
	p.vals = append(p.vals[:vbase], m)
	return nil
}

// smallInt returns the value of an integer literal of at most 15 digits
// (optionally preceded by '-'), exact as a double; "-0" gives -0, as
// strconv.ParseFloat does.
func smallInt(lit []byte) float64 {
	neg := lit[0] == '-'
	if neg {
		lit = lit[1:]
	}
	var n int64
	for _, c := range lit {
		n = n*10 + int64(c-'0')
	}
	f := float64(n)
	if neg {
		f = -f
	}
	return f
}

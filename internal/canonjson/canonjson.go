// Package canonjson implements the JSON Canonicalization Scheme (JCS) of
// RFC 8785 exactly, with a single-pass parser that emits canonical bytes
// directly.
//
// Canonicalize parses strict RFC 8259 JSON text and returns its canonical
// form: no insignificant whitespace, object members sorted by the UTF-16 code
// units of their keys (RFC 8785 §3.2.3), strings escaped as RFC 8785 §3.2.2.2
// requires and numbers serialized as ECMAScript's Number.prototype.toString
// does (RFC 8785 §3.2.2.3). Input that JCS cannot canonicalize (duplicate
// keys, lone surrogates, invalid UTF-8, numbers outside the IEEE-754 double
// range) is refused with an *errcode.Error of code errcode.InvalidArgument.
//
// A Transformer rewrites a document while it is canonicalized; the audit
// package uses it to redact secrets before hashing, without building a tree.
//
// Decode parses the same strict JSON into Go values (the ones
// encoding/json gives an `any`), and Transformer.AppendDecode canonicalizes
// and decodes in one pass, so that a caller who needs both the hash of the
// redacted arguments and their real values parses them once.
//
// Everything in the package is safe for concurrent use.
package canonjson

import (
	"slices"
	"sync"

	"github.com/toolgate/toolgate/errcode"
)

// MaxDepth is the deepest nesting of arrays and objects Canonicalize accepts;
// deeper input is refused with errcode.InvalidArgument. It bounds the stack
// the recursive parser uses.
const MaxDepth = 1000

// Canonicalize parses data, one JSON text per RFC 8259 (a single value with
// optional surrounding whitespace, valid UTF-8), and returns its RFC 8785
// canonical form in a newly allocated slice owned by the caller. data is not
// modified or retained.
//
// Errors are *errcode.Error with code errcode.InvalidArgument whose message
// names the byte offset into data and the problem: a syntax error, trailing
// data, invalid UTF-8, a control character or bad escape in a string, a lone
// surrogate in a \u escape, a duplicate object key (RFC 8785 §3.1 requires
// I-JSON, RFC 7493 §2.3), a number outside the double range (RFC 8785
// §3.2.2.3), or nesting deeper than MaxDepth.
//
// Canonicalize is safe for concurrent use.
func Canonicalize(data []byte) ([]byte, error) {
	return (*Transformer)(nil).Append(nil, data)
}

// Transformer rewrites a JSON document while canonicalizing it. A nil
// *Transformer, or one whose fields are all nil, canonicalizes unchanged.
// The functions must be safe for concurrent use when the Transformer is used
// concurrently; the Transformer itself holds no state between calls.
type Transformer struct {
	// ReplaceValue, if non-nil, is called with the decoded UTF-8 key of every
	// object member (before Rewrite); when it reports true the member's value,
	// whatever its type, is still fully validated but emitted as the JSON
	// string Replacement instead. ReplaceValue and Rewrite are not called for
	// anything inside a replaced value. The key slice is only valid during the
	// call and must not be modified or retained.
	ReplaceValue func(key []byte) bool

	// Replacement is the string emitted in place of a value ReplaceValue
	// selects (for example "[redacted]").
	Replacement string

	// Rewrite, if non-nil, is called with the decoded UTF-8 text of every
	// string, object keys included. It returns the text to emit instead and
	// true, or false to keep s. s is only valid during the call and must not
	// be modified or retained; the returned text is not retained after the
	// call either, so it may alias reusable memory. Invalid UTF-8 in the
	// returned text is emitted as U+FFFD.
	//
	// When rewriting makes two keys of one object equal, both members are
	// kept, ordered by their original keys (RFC 8785 §3.2.3 order); such
	// output is deterministic but no longer I-JSON. Error messages show keys
	// as rewritten.
	Rewrite func(s []byte) ([]byte, bool)
}

// Append canonicalizes data as Canonicalize does, applying t, and appends
// the result to dst, returning the extended slice; on error it returns dst
// unchanged and an error as Canonicalize does. data is not modified or
// retained. Append is safe for concurrent use if t's functions are. With a
// reused dst and no rewriting, Append does not allocate in the steady state.
func (t *Transformer) Append(dst, data []byte) ([]byte, error) {
	p := parserPool.Get().(*parser)
	p.reset(data, t)
	err := p.document()
	if err == nil {
		dst = p.appendCanonical(dst)
	}
	p.release()
	return dst, err
}

// appendCanonical appends the canonical form of the parsed document to dst.
func (p *parser) appendCanonical(dst []byte) []byte {
	dst = slices.Grow(dst, len(p.buf)) // the canonical form is exactly len(p.buf) bytes
	if p.reorder {
		return p.emit(dst, 0, len(p.buf), 0)
	}
	return append(dst, p.buf...)
}

// parserPool recycles parser scratch memory between calls.
var parserPool = sync.Pool{New: func() any { return new(parser) }}

// maxPooledBytes caps the scratch memory a pooled parser keeps, so one huge
// document does not pin its buffers forever.
const maxPooledBytes = 64 << 10

// parser holds the state of one canonicalization. Tokens are emitted in
// document order into buf; object members are recorded so that, after the
// whole document is parsed, emit can write each object's members in sorted
// order. Every input byte is therefore copied a bounded number of times,
// whatever the nesting depth.
type parser struct {
	data []byte
	pos  int
	t    *Transformer

	depth   int
	skip    int  // > 0 while inside a value ReplaceValue selected
	reorder bool // some object's members are not in canonical order in buf

	buf     []byte   // canonical tokens in document order
	keys    []byte   // decoded (and rewritten) keys, referenced by member
	str     []byte   // scratch for decoding escaped strings
	stack   []member // members of the objects being parsed
	order   []int32  // scratch for sorting one object's members
	members []member // members of finished objects, each object's sorted
	objs    []object // objects in order of their '{'

	// Decoding (Decode, AppendDecode) builds each value when it ends.
	decode bool
	text   string   // string(data), made on first use; unescaped strings are its substrings
	vals   []any    // finished values: elements and member values of open containers
	vkeys  []string // keys of the members of the open objects
}

// member is one object member: its key and where "key":value sits in buf.
type member struct {
	key0, key1   int // original decoded key: keys[key0:key1]
	sort0, sort1 int // key after Rewrite, used for ordering: keys[sort0:sort1]
	start, end   int // span of "key":value in buf (no separating comma)
	obj          int // len(objs) when the member started: its first nested object
	off          int // input offset of the key's opening quote
}

// object is one object: its span in buf and its sorted members.
type object struct {
	start, end int // span in buf from '{' to '}' inclusive
	m0, m1     int // its members, sorted: members[m0:m1]
	next       int // len(objs) when it closed: the first object after it
}

func (p *parser) reset(data []byte, t *Transformer) {
	p.data, p.pos, p.t = data, 0, t
	p.depth, p.skip, p.reorder, p.decode = 0, 0, false, false
	if t != nil && t.ReplaceValue == nil && t.Rewrite == nil {
		p.t = nil
	}
}

func (p *parser) release() {
	p.data, p.t, p.text = nil, nil, ""
	clear(p.vals) // drop references to decoded values (left over on error)
	clear(p.vkeys)
	p.vals, p.vkeys = p.vals[:0], p.vkeys[:0]
	if cap(p.buf)+cap(p.keys)+cap(p.str) > maxPooledBytes ||
		cap(p.stack)+cap(p.members)+cap(p.objs)+cap(p.order)+cap(p.vals)+cap(p.vkeys) > maxPooledBytes/32 {
		return // let the GC have it
	}
	p.buf, p.keys, p.str = p.buf[:0], p.keys[:0], p.str[:0]
	p.stack, p.members, p.objs, p.order = p.stack[:0], p.members[:0], p.objs[:0], p.order[:0]
	parserPool.Put(p)
}

// emit appends buf[s:e] to dst in canonical order. oi is the index of the
// first object that may start inside the span.
func (p *parser) emit(dst []byte, s, e, oi int) []byte {
	for oi < len(p.objs) && p.objs[oi].start < e {
		o := &p.objs[oi]
		dst = append(dst, p.buf[s:o.start]...)
		dst = append(dst, '{')
		for j, m := range p.members[o.m0:o.m1] {
			if j > 0 {
				dst = append(dst, ',')
			}
			dst = p.emit(dst, m.start, m.end, m.obj)
		}
		dst = append(dst, '}')
		s, oi = o.end, o.next
	}
	return append(dst, p.buf[s:e]...)
}

// closeObject sorts the members of the object that started at stack[base:],
// checks them for duplicates and files them under objs[oi].
func (p *parser) closeObject(oi, base int) error {
	seg := p.stack[base:]
	o := &p.objs[oi]
	o.end = len(p.buf)
	o.m0 = len(p.members)
	o.next = len(p.objs)
	sorted := true
	for i := 1; i < len(seg); i++ {
		if p.compareMembers(&seg[i-1], &seg[i]) >= 0 {
			sorted = false
			break
		}
	}
	if sorted {
		p.members = append(p.members, seg...)
	} else {
		// Sort indices rather than the (wide) members themselves.
		p.reorder = true
		order := p.order[:0]
		for i := range seg {
			order = append(order, int32(i))
		}
		cmp := func(a, b int32) int { return p.compareMembers(&seg[a], &seg[b]) }
		dup := -1 // some i with order[i-1], order[i] equal, once sorted
		if len(order) <= 12 {
			// Insertion sort compares every finally adjacent pair, so it
			// finds duplicates on the way.
			for i := 1; i < len(order) && dup < 0; i++ {
				j := i
				for ; j > 0; j-- {
					c := cmp(order[j-1], order[j])
					if c == 0 {
						dup = j
					}
					if c <= 0 {
						break
					}
					order[j-1], order[j] = order[j], order[j-1]
				}
			}
		} else {
			slices.SortFunc(order, cmp)
			for i := 1; i < len(order) && dup < 0; i++ {
				if cmp(order[i-1], order[i]) == 0 {
					dup = i
				}
			}
		}
		if dup >= 0 {
			a, b := &seg[order[dup-1]], &seg[order[dup]]
			if a.off > b.off {
				a, b = b, a
			}
			// Name the key as rewritten, so that an error message never
			// shows text Rewrite removes (such as a secret).
			return p.errorf(b.off, "duplicate key %s", quoteForError(p.keys[b.sort0:b.sort1]))
		}
		for _, i := range order {
			p.members = append(p.members, seg[i])
		}
		p.order = order
	}
	o.m1 = len(p.members)
	p.stack = p.stack[:base]
	return nil
}

// compareMembers orders members by their (rewritten) key, then by their
// original key, both in UTF-16 code unit order (RFC 8785 §3.2.3). It is 0
// only for members whose original keys are equal.
func (p *parser) compareMembers(a, b *member) int {
	if c := compareUTF16(p.keys[a.sort0:a.sort1], p.keys[b.sort0:b.sort1]); c != 0 {
		return c
	}
	if a.sort0 == a.key0 && b.sort0 == b.key0 {
		return 0 // neither key was rewritten
	}
	return compareUTF16(p.keys[a.key0:a.key1], p.keys[b.key0:b.key1])
}

// errorf returns an errcode.InvalidArgument error for the problem at input
// offset off.
func (p *parser) errorf(off int, format string, args ...any) error {
	return errcode.Errorf(errcode.InvalidArgument, "invalid JSON: "+format+" at offset %d", append(args, off)...)
}

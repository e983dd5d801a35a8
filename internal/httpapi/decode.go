package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"strconv"
	"strings"

	"github.com/toolgate/toolgate/errcode"
)

// decodeJSON decodes exactly one JSON object from body into v (a pointer to
// a struct): unknown members (when strict), a value that is not an object,
// wrong member types, a member given twice at any level of v's structure
// and trailing data are refused. "Twice" is also a second spelling of the
// same member that differs only in case, which encoding/json would
// otherwise fold onto the first (last one winning); when strict, such a
// spelling is refused even alone, as an unknown member. Members held as
// json.RawMessage (args) are not looked into: their own checks apply
// (the pipeline's strict argsHash parse refuses duplicate keys there).
//
// Errors: *errcode.Error invalid_argument, details.field naming the member
// (dotted path) when one is at fault. Messages name JSON members and JSON
// types only ("principal must be an object"), never Go types, and echo a
// caller's value clipped to maxEcho bytes.
func decodeJSON(body []byte, v any, strict bool) error {
	t := bytes.TrimLeft(body, " \t\r\n")
	if len(t) == 0 {
		return errcode.New(errcode.InvalidArgument, "the request body is empty; want a JSON object")
	}
	if t[0] != '{' {
		return errcode.New(errcode.InvalidArgument, "the request body must be a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if strict {
		dec.DisallowUnknownFields()
	}
	root := reflect.TypeOf(v)
	if err := dec.Decode(v); err != nil {
		return decodeError(err, root)
	}
	if _, err := dec.Token(); err != io.EOF {
		return errcode.New(errcode.InvalidArgument, "the request body holds data after the JSON object")
	}
	if err := checkMembers(json.NewDecoder(bytes.NewReader(body)), root, "", strict); err != nil {
		if e := errcode.As(err); e != nil {
			return e
		}
		// Unreachable: Decode accepted the same text.
		return errcode.New(errcode.InvalidArgument, "the request body is not valid JSON")
	}
	return nil
}

// decodeError maps an encoding/json decoding error into v's type root to
// the invalid_argument answer, without Go type names.
func decodeError(err error, root reflect.Type) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		if te.Field == "" {
			return errcode.New(errcode.InvalidArgument, "the request body must be a JSON object")
		}
		ft := fieldType(root, te.Field)
		if ft == nil {
			ft = te.Type
		}
		return invalid(clip(te.Field), "%s must be %s", keyName(te.Field), jsonType(ft))
	}
	if f, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		if u, uerr := strconv.Unquote(f); uerr == nil {
			f = u
		}
		return invalid(clip(f), "unknown member %q", clip(f))
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return errcode.Errorf(errcode.InvalidArgument, "the request body is not valid JSON: %s (at byte %d)", clip(se.Error()), se.Offset)
	}
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return errcode.New(errcode.InvalidArgument, "the request body is not valid JSON: unexpected end of input")
	}
	return errcode.New(errcode.InvalidArgument, "the request body is not valid JSON")
}

// rawMessageType is json.RawMessage: a member decodeJSON does not look into.
var rawMessageType = reflect.TypeFor[json.RawMessage]()

// checkMembers reads one JSON value from dec (valid JSON: decodeJSON's
// Decode accepted it) and checks its objects for members given twice,
// following type t (nil: a value v ignores, not looked into). In a struct,
// a key that names a member only up to case counts as that member (as
// encoding/json folds it); when strict, it is an unknown member. Errors:
// *errcode.Error invalid_argument with details.field, or dec's error.
func checkMembers(dec *json.Decoder, t reflect.Type, path string, strict bool) error {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil || t == rawMessageType {
		var skip json.RawMessage
		return dec.Decode(&skip)
	}
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	d, ok := tok.(json.Delim)
	if !ok {
		return nil // a scalar
	}
	switch d {
	case '[':
		var elem reflect.Type
		if k := t.Kind(); k == reflect.Slice || k == reflect.Array {
			elem = t.Elem()
		}
		for dec.More() {
			if err := checkMembers(dec, elem, path, strict); err != nil {
				return err
			}
		}
	case '{':
		var (
			fields map[string]reflect.Type
			elem   reflect.Type
		)
		switch t.Kind() {
		case reflect.Struct:
			fields = jsonMembers(t)
		case reflect.Map:
			elem = t.Elem()
		}
		seen := map[string]bool{}
		for dec.More() {
			tok, err := dec.Token()
			if err != nil {
				return err
			}
			key, _ := tok.(string)
			at := key
			if path != "" {
				at = path + "." + key
			}
			name, ft := key, elem
			if fields != nil {
				var known bool
				if ft, known = fields[key]; !known {
					for n, typ := range fields {
						if strings.EqualFold(n, key) {
							name, ft, known = n, typ, true
							break
						}
					}
					if known && strict {
						return invalid(clip(at), "unknown member %q (member names are case-sensitive: did you mean %s?)", clip(at), name)
					}
				}
			}
			if seen[name] {
				return invalid(clip(at), "duplicate key %s", keyName(at))
			}
			seen[name] = true
			if err := checkMembers(dec, ft, at, strict); err != nil {
				return err
			}
		}
	}
	_, err = dec.Token() // the closing ']' or '}'
	return err
}

// jsonMembers returns the JSON member names of struct type t (its exported
// fields, named by their json tag) and their types.
func jsonMembers(t reflect.Type) map[string]reflect.Type {
	m := make(map[string]reflect.Type, t.NumField())
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name := f.Name
		if tag, ok := f.Tag.Lookup("json"); ok {
			n, _, _ := strings.Cut(tag, ",")
			if n == "-" && !strings.HasPrefix(tag, "-,") {
				continue
			}
			if n != "" {
				name = n
			}
		}
		m[name] = f.Type
	}
	return m
}

// fieldType returns the type of the member at dotted path in root (a
// struct, or a pointer to one), matching names as encoding/json does
// (exactly, else up to case); nil when path does not lead to a member.
func fieldType(root reflect.Type, path string) reflect.Type {
	t := root
	for name := range strings.SplitSeq(path, ".") {
		for t != nil && t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		if t == nil || t.Kind() != reflect.Struct {
			return nil
		}
		fields := jsonMembers(t)
		ft, ok := fields[name]
		if !ok {
			for n, typ := range fields {
				if strings.EqualFold(n, name) {
					ft, ok = typ, true
					break
				}
			}
		}
		if !ok {
			return nil
		}
		t = ft
	}
	return t
}

// jsonType describes the JSON a value of Go type t must be, with an
// article: "a string", "an object", "an array of strings", "an object
// whose values are strings".
func jsonType(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == rawMessageType {
		return "a JSON value"
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Struct:
		return "an object"
	case reflect.Map:
		return "an object whose values are " + jsonTypes(t.Elem())
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 {
			return "a string" // []byte: base64
		}
		return "an array of " + jsonTypes(t.Elem())
	}
	return "a JSON value"
}

// jsonTypes is jsonType in the plural, without article: "strings",
// "objects", "arrays".
func jsonTypes(t reflect.Type) string {
	s := jsonType(t)
	s = strings.TrimPrefix(strings.TrimPrefix(s, "a "), "an ")
	if s == "JSON value" {
		return "JSON values"
	}
	kind, rest, _ := strings.Cut(s, " ")
	if rest != "" {
		rest = " " + rest
	}
	return kind + "s" + rest
}

// keyName renders a member name or dotted path for a message: as is when it
// is plain ([A-Za-z0-9_.-]+), else quoted; clipped to maxEcho bytes.
func keyName(s string) string {
	s = clip(s)
	plain := s != ""
	for i := 0; plain && i < len(s); i++ {
		c := s[i]
		plain = c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-'
	}
	if plain {
		return s
	}
	return strconv.Quote(s)
}

package canonjson

import (
	"bytes"
	"encoding/json"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/errcode"
)

// unmarshalAny decodes data as encoding/json does into an `any`.
func unmarshalAny(data []byte) (any, error) {
	var v any
	err := json.Unmarshal(data, &v)
	return v, err
}

// sameValue is reflect.DeepEqual that also tells -0 from 0 and requires
// empty arrays and objects to be non-nil on both sides alike.
func sameValue(a, b any) bool {
	switch x := a.(type) {
	case float64:
		y, ok := b.(float64)
		return ok && math.Float64bits(x) == math.Float64bits(y)
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) || (x == nil) != (y == nil) {
			return false
		}
		for i := range x {
			if !sameValue(x[i], y[i]) {
				return false
			}
		}
		return true
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) || (x == nil) != (y == nil) {
			return false
		}
		for k, v := range x {
			w, ok := y[k]
			if !ok || !sameValue(v, w) {
				return false
			}
		}
		return true
	}
	return reflect.DeepEqual(a, b)
}

// decodeCases are documents whose decoded value must equal encoding/json's.
var decodeCases = []string{
	`null`, `true`, `false`, `0`, `-0`, `-0.0`, `0e10`, `-0e-5`, `1`, `-1`, `10`, `255`, `256`,
	`123456789012345`, `-123456789012345`, `1234567890123456`, `9007199254740993`,
	`12345678901234567890`, `1.5`, `-2.25`, `0.1`, `0.000001`, `0.0000001`, `1e21`, `1E-7`,
	`1.7976931348623157e308`, `5e-324`, `1e-400`, `-1e-400`, `333333333.33333329`, `4.50`,
	`""`, `"a"`, `"\u00e9\u20ac\ud83d\ude00"`, `"\"\\\/\b\f\n\r\t"`, `"\u0000"`, "\"é€😀\u2028<&>\"",
	`[]`, `{}`, ` [ ] `, `[[]]`, `[{}]`, `{"a":[]}`, `{"a":{}}`,
	`[1,"x",true,false,null,{"k":[2.5]}]`,
	`{"b":[1,{"d":true,"c":null}],"a":"x"}`,
	`{"path":"/tmp/report.txt","limit":10,"q":"quarterly numbers"}`,
	`{"\u0061b":1,"a\u0062c":2,"":3}`,
	`{"x":{"y":{"z":[1,[2,[3,{"w":"deep"}]]]}}}`,
	rfcVectors[0].in, rfcVectors[1].in, rfcVectors[2].in, rfcVectors[3].in, rfcVectors[6].in,
	"{\n  \"password\": \"hunter2\",\n  \"nested\": {\"token\": [1, 2]}\n}\n",
}

func TestDecode(t *testing.T) {
	for _, in := range decodeCases {
		got, err := Decode([]byte(in))
		if err != nil {
			t.Errorf("Decode(%q): %v", in, err)
			continue
		}
		want, err := unmarshalAny([]byte(in))
		if err != nil {
			t.Fatalf("encoding/json refuses test case %q: %v", in, err)
		}
		if !reflect.DeepEqual(got, want) || !sameValue(got, want) {
			t.Errorf("Decode(%q) = %#v, encoding/json gives %#v", in, got, want)
		}
	}
}

// TestDecodeErrors checks that Decode refuses exactly what Canonicalize
// refuses, with the same *errcode.Error.
func TestDecodeErrors(t *testing.T) {
	inputs := []string{
		``, `   `, `{"a":1,"a":2}`, `{"b":{"a":1,"c":0,"a":2}}`, `{"\u0061":1,"a":2}`, `"\ud800"`,
		`"a\udc00"`, "\"a\xffb\"", "\"\xed\xa0\x80\"", "\"a\nb\"", `"\x"`, `"abc`, `{} {}`, `[1,]`,
		`{"a":1,}`, `{"a" 1}`, `[1 2]`, `tru`, `01`, `-`, `1.e5`, `1e400`, `[-1e309]`, "\xef\xbb\xbf{}",
		`{"a":[1,{"b":2,"b":3}]}`, `[{"a":"x"},{"a":"y","a":"z"}]`,
		strings.Repeat("[", MaxDepth+1) + strings.Repeat("]", MaxDepth+1),
	}
	for _, in := range inputs {
		v, err := Decode([]byte(in))
		_, cerr := Canonicalize([]byte(in))
		if err == nil || cerr == nil {
			t.Errorf("Decode(%q) = %#v, %v; Canonicalize error %v: want both to fail", in, v, err, cerr)
			continue
		}
		if v != nil || errcode.CodeOf(err) != errcode.InvalidArgument || err.Error() != cerr.Error() {
			t.Errorf("Decode(%q) = %#v, %v; want nil and Canonicalize's error %v", in, v, err, cerr)
		}
	}
}

// TestDecodeStringsNotShared checks that decoded values never alias the
// input or pooled scratch memory.
func TestDecodeStringsNotShared(t *testing.T) {
	in := []byte(`{"k":"value","e":"a\nb","l":["x"]}`)
	v, err := Decode(in)
	if err != nil {
		t.Fatal(err)
	}
	for i := range in {
		in[i] = 'z'
	}
	for i := 0; i < 10; i++ {
		if _, err := Decode([]byte(`{"zzzzzzzz":"yyyyyyyyyyyyyyyyyyyy","a":"q\tq"}`)); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]any{"k": "value", "e": "a\nb", "l": []any{"x"}}
	if !reflect.DeepEqual(v, want) {
		t.Fatalf("decoded value changed to %#v", v)
	}
}

// TestAppendDecode checks that AppendDecode returns Append's bytes and the
// untransformed value.
func TestAppendDecode(t *testing.T) {
	tr := &Transformer{
		ReplaceValue: func(key []byte) bool { return string(key) == "secret" },
		Replacement:  "[gone]",
		Rewrite: func(s []byte) ([]byte, bool) {
			if bytes.Contains(s, []byte("hide")) {
				return bytes.ReplaceAll(s, []byte("hide"), []byte("****")), true
			}
			return nil, false
		},
	}
	tests := []struct{ in, canon string }{
		{`{"secret":{"b":"hide","a":[1,{"secret":2}]},"x":"hide me"}`, `{"secret":"[gone]","x":"**** me"}`},
		{`{"hideB":2,"hideA":1,"****":0,"a":3}`, `{"****":0,"****A":1,"****B":2,"a":3}`},
		{`["secret","hide",{"secret":[{"hide":1}]}]`, `["secret","****",{"secret":"[gone]"}]`},
		{`{"b":{"d":1,"c":2},"a":"\u0068ide"}`, `{"a":"****","b":{"c":2,"d":1}}`},
	}
	for _, tc := range tests {
		got, v, err := tr.AppendDecode([]byte("prefix:"), []byte(tc.in))
		if err != nil || string(got) != "prefix:"+tc.canon {
			t.Errorf("AppendDecode(%q) = %q, %v; want %q", tc.in, got, err, tc.canon)
		}
		want, _ := unmarshalAny([]byte(tc.in))
		if !sameValue(v, want) {
			t.Errorf("AppendDecode(%q) value %#v, want the untransformed %#v", tc.in, v, want)
		}
	}
	dst := []byte("keep")
	got, v, err := tr.AppendDecode(dst, []byte(`{"secret":{"a":1,"a":2}}`))
	if err == nil || v != nil || string(got) != "keep" || errcode.CodeOf(err) != errcode.InvalidArgument {
		t.Errorf("AppendDecode of a duplicate key: %q, %#v, %v", got, v, err)
	}
}

// FuzzDecode checks Decode and AppendDecode differentially against
// encoding/json and against Canonicalize:
//   - Decode accepts exactly what Canonicalize (and a rewriting Transformer)
//     accepts, and fails with Canonicalize's error otherwise;
//   - whatever Decode accepts, encoding/json accepts too, and the values are
//     reflect.DeepEqual (and equal to the bit: -0 stays -0);
//   - valid JSON that Decode refuses is refused for a reason RFC 8785 gives
//     (as in FuzzCanonicalize);
//   - AppendDecode with a rewriting Transformer returns Decode's value and
//     the bytes Append returns.
func FuzzDecode(f *testing.F) {
	for _, s := range decodeCases {
		f.Add([]byte(s))
	}
	for _, s := range []string{`{"a":1,"a":2}`, `"\ud800"`, "\"\xff\"", `1e400`, `[1,]`, "\xef\xbb\xbf{}"} {
		f.Add([]byte(s))
	}
	tr := &Transformer{
		ReplaceValue: func(key []byte) bool { return len(key) == 1 && key[0] == 'a' },
		Replacement:  "[redacted]",
		Rewrite: func(s []byte) ([]byte, bool) {
			if bytes.IndexByte(s, 'x') >= 0 {
				return bytes.ReplaceAll(s, []byte("x"), []byte("<X>")), true
			}
			return nil, false
		},
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := Decode(data)
		_, cerr := Canonicalize(data)
		if (err == nil) != (cerr == nil) || (err != nil && err.Error() != cerr.Error()) {
			t.Fatalf("%q: Decode error %v, Canonicalize error %v", data, err, cerr)
		}
		// The transformer accepts the same inputs (its error messages name
		// keys as rewritten).
		canon, terr := tr.Append(nil, data)
		if (terr == nil) != (err == nil) {
			t.Fatalf("%q: Decode error %v, Transformer.Append error %v", data, err, terr)
		}
		if err != nil {
			if v != nil {
				t.Fatalf("%q: value %#v with error %v", data, v, err)
			}
			if json.Valid(data) && !acceptableRefusal(err.Error()) {
				t.Fatalf("refused valid JSON %q: %v", data, err)
			}
			return
		}
		want, jerr := unmarshalAny(data)
		if jerr != nil {
			t.Fatalf("accepted %q, which encoding/json refuses: %v", data, jerr)
		}
		if !reflect.DeepEqual(v, want) || !sameValue(v, want) {
			t.Fatalf("%q: Decode = %#v, encoding/json = %#v", data, v, want)
		}
		got, v2, err := tr.AppendDecode(nil, data)
		if err != nil || !bytes.Equal(got, canon) || !sameValue(v2, v) {
			t.Fatalf("%q: AppendDecode = %q, %#v, %v; Append %q, Decode %#v", data, got, v2, err, canon, v)
		}
	})
}

package canonjson

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"unicode/utf16"

	"github.com/gowebpki/jcs"

	"github.com/toolgate/toolgate/errcode"
)

// RFC 8785 Appendix B: IEEE-754 bit patterns and their ES6 serialization.
// An empty want means the value has no JSON form (NaN, Infinity).
var appendixB = []struct {
	bits uint64
	want string
}{
	{0x0000000000000000, "0"},
	{0x8000000000000000, "0"},
	{0x0000000000000001, "5e-324"},
	{0x8000000000000001, "-5e-324"},
	{0x7fefffffffffffff, "1.7976931348623157e+308"},
	{0xffefffffffffffff, "-1.7976931348623157e+308"},
	{0x4340000000000000, "9007199254740992"},
	{0xc340000000000000, "-9007199254740992"},
	{0x4430000000000000, "295147905179352830000"},
	{0x7fffffffffffffff, ""},
	{0x7ff0000000000000, ""},
	{0x44b52d02c7e14af5, "9.999999999999997e+22"},
	{0x44b52d02c7e14af6, "1e+23"},
	{0x44b52d02c7e14af7, "1.0000000000000001e+23"},
	{0x444b1ae4d6e2ef4e, "999999999999999700000"},
	{0x444b1ae4d6e2ef4f, "999999999999999900000"},
	{0x444b1ae4d6e2ef50, "1e+21"},
	{0x3eb0c6f7a0b5ed8c, "9.999999999999997e-7"},
	{0x3eb0c6f7a0b5ed8d, "0.000001"},
	{0x41b3de4355555553, "333333333.3333332"},
	{0x41b3de4355555554, "333333333.33333325"},
	{0x41b3de4355555555, "333333333.3333333"},
	{0x41b3de4355555556, "333333333.3333334"},
	{0x41b3de4355555557, "333333333.33333343"},
	{0xbecbf647612f3696, "-0.0000033333333333333333"},
	{0x43143ff3c1cb0959, "1424953923781206.2"},
	// Edges of the plain/exponent layout (ECMA-262 Number::toString).
	{math.Float64bits(1e21), "1e+21"},
	{math.Float64bits(1e-7), "1e-7"},
	{math.Float64bits(1e-6), "0.000001"},
	{math.Float64bits(123e-9), "1.23e-7"},
	{math.Float64bits(1.5e300), "1.5e+300"},
	{math.Float64bits(-1), "-1"},
	{math.Float64bits(0.1), "0.1"},
	{math.Float64bits(100), "100"},
	{math.Float64bits(1e20), "100000000000000000000"},
	{math.Float64bits(math.Inf(-1)), ""},
}

func TestAppendNumberAppendixB(t *testing.T) {
	for _, tc := range appendixB {
		f := math.Float64frombits(tc.bits)
		got, err := AppendNumber([]byte("x"), f)
		if tc.want == "" {
			if err == nil || errcode.CodeOf(err) != errcode.InvalidArgument {
				t.Errorf("%016x: got %q, %v; want an invalid_argument error", tc.bits, got, err)
			}
			if string(got) != "x" {
				t.Errorf("%016x: dst changed to %q on error", tc.bits, got)
			}
			continue
		}
		if err != nil || string(got) != "x"+tc.want {
			t.Errorf("%016x: got %q, %v; want %q", tc.bits, got, err, tc.want)
		}
		// The library is an independent implementation of the same rule.
		lib, err := jcs.NumberToJSON(f)
		if err != nil || lib != tc.want {
			t.Errorf("%016x: jcs.NumberToJSON = %q, %v; the vector says %q", tc.bits, lib, err, tc.want)
		}
	}
}

// TestAppendNumberRandom cross-checks AppendNumber against gowebpki/jcs and
// against round-tripping for random bit patterns and random "nice" decimals.
func TestAppendNumberRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 200000; i++ {
		var f float64
		switch i % 3 {
		case 0:
			f = math.Float64frombits(rng.Uint64())
		case 1:
			f = float64(rng.Int64N(1e12)) * math.Pow10(rng.IntN(60)-30)
		default:
			f = rng.NormFloat64() * math.Pow10(rng.IntN(40)-20)
		}
		if math.IsNaN(f) || math.IsInf(f, 0) {
			continue
		}
		got, err := AppendNumber(nil, f)
		if err != nil {
			t.Fatalf("%v: %v", f, err)
		}
		want, _ := jcs.NumberToJSON(f)
		if string(got) != want {
			t.Fatalf("%016x: got %q, jcs %q", math.Float64bits(f), got, want)
		}
		back, err := strconv.ParseFloat(string(got), 64)
		if err != nil || (back != f && !(f == 0 && back == 0)) {
			t.Fatalf("%016x: %q does not round-trip: %v %v", math.Float64bits(f), got, back, err)
		}
	}
}

// RFC 8785 §3.2.3 and Appendix (cyberphone/json-canonicalization test data).
var rfcVectors = []struct{ name, in, want string }{
	{
		"sorting §3.2.3",
		`{"\u20ac":"Euro Sign","\r":"Carriage Return","\ufb33":"Hebrew Letter Dalet With Dagesh","1":"One","\ud83d\ude00":"Emoji: Grinning Face","\u0080":"Control","\u00f6":"Latin Small Letter O With Diaeresis"}`,
		"{\"\\r\":\"Carriage Return\",\"1\":\"One\",\"\u0080\":\"Control\",\"ö\":\"Latin Small Letter O With Diaeresis\",\"€\":\"Euro Sign\",\"😀\":\"Emoji: Grinning Face\",\"\ufb33\":\"Hebrew Letter Dalet With Dagesh\"}",
	},
	{
		"values §3.2.2",
		`{"numbers":[333333333.33333329,1E30,4.50,2e-3,0.000000000000000000000000001],"string":"\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/","literals":[null,true,false]}`,
		`{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}`,
	},
	{
		"arrays",
		"[\n  56,\n  {\n    \"d\": true,\n    \"10\": null,\n    \"1\": [ ]\n  }\n]\n",
		`[56,{"1":[],"10":null,"d":true}]`,
	},
	{
		"structures",
		"{\n  \"1\": {\"f\": {\"f\": \"hi\",\"F\": 5} ,\"\\n\": 56.0},\n  \"10\": { },\n  \"\": \"empty\",\n  \"a\": { },\n  \"111\": [ {\"e\": \"yes\",\"E\": \"no\" } ],\n  \"A\": { }\n}",
		`{"":"empty","1":{"\n":56,"f":{"F":5,"f":"hi"}},"10":{},"111":[{"E":"no","e":"yes"}],"A":{},"a":{}}`,
	},
	{
		"french",
		`{"peach":"This sorting order","péché":"is wrong according to French","pêche":"but canonicalization MUST","sin":"ignore locale"}`,
		`{"peach":"This sorting order","péché":"is wrong according to French","pêche":"but canonicalization MUST","sin":"ignore locale"}`,
	},
	{
		"unicode (no normalization)",
		`{"Unnormalized Unicode":"A\u030a"}`,
		"{\"Unnormalized Unicode\":\"A\u030a\"}",
	},
	{
		"weird",
		`{"\u20ac":"Euro Sign","\r":"Carriage Return","\u000a":"Newline","1":"One","\u0080":"Control\u007f","\ud83d\ude02":"Smiley","\u00f6":"Latin Small Letter O With Diaeresis","\ufb33":"Hebrew Letter Dalet With Dagesh","</script>":"Browser Challenge"}`,
		"{\"\\n\":\"Newline\",\"\\r\":\"Carriage Return\",\"1\":\"One\",\"</script>\":\"Browser Challenge\",\"\u0080\":\"Control\u007f\",\"ö\":\"Latin Small Letter O With Diaeresis\",\"€\":\"Euro Sign\",\"😂\":\"Smiley\",\"\ufb33\":\"Hebrew Letter Dalet With Dagesh\"}",
	},
}

func TestCanonicalizeRFCVectors(t *testing.T) {
	for _, tc := range rfcVectors {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Canonicalize([]byte(tc.in))
			if err != nil || string(got) != tc.want {
				t.Fatalf("got %q, %v\nwant %q", got, err, tc.want)
			}
			lib, err := jcs.Transform([]byte(tc.in))
			if err != nil || string(lib) != tc.want {
				t.Fatalf("jcs.Transform disagrees with the vector: %q, %v", lib, err)
			}
		})
	}
}

func TestCanonicalize(t *testing.T) {
	tests := []struct{ in, want string }{
		{`null`, `null`},
		{" \t\r\n true \n", `true`},
		{`false`, `false`},
		{`"a"`, `"a"`},
		{`[]`, `[]`},
		{`{}`, `{}`},
		{`[ 1 , [ ] , { } ]`, `[1,[],{}]`},
		// Numbers.
		{`-0`, `0`},
		{`-0.0`, `0`},
		{`0e10`, `0`},
		{`1.0`, `1`},
		{`1E2`, `100`},
		{`1e-400`, `0`}, // underflows to zero, as in ECMAScript
		{`-1e-400`, `0`},
		{`123456789012345`, `123456789012345`},
		{`1234567890123456`, `1234567890123456`},
		{`12345678901234567890`, `12345678901234567000`},
		{`9007199254740993`, `9007199254740992`},
		{`1e21`, `1e+21`},
		{`100000000000000000000`, `100000000000000000000`},
		{`0.1e-5`, `0.000001`},
		{`1.7976931348623157e308`, `1.7976931348623157e+308`},
		// Strings: only '"', '\' and controls are escaped; nothing else.
		{`"\u0000\u001f\u0008\u0009\u000a\u000c\u000d"`, `"\u0000\u001f\b\t\n\f\r"`},
		{`"<>&\u003c\u003e\u0026"`, `"<>&<>&"`},
		{`"\u2028\u2029"`, "\"\u2028\u2029\""},
		{`"\/\u002f/"`, `"///"`},
		{`"\u007f\u00e9é"`, "\"\u007féé\""},
		{`"\uD83D\uDE00😀"`, `"😀😀"`},
		{`"\uFFFF\uffff"`, "\"\uffff\uffff\""},
		{`"\ufffd"`, "\"\ufffd\""},
		// Sorting by UTF-16 code units: U+10000 (D800 DC00) < U+E000 < U+FFFF.
		{`{"\uffff":1,"\ue000":2,"\ud800\udc00":3,"\ud7ff":4}`, "{\"\ud7ff\":4,\"\U00010000\":3,\"\ue000\":2,\"\uffff\":1}"},
		{`{"b":1,"a":{"d":[{"z":1,"y":2}],"c":3},"aa":0}`, `{"a":{"c":3,"d":[{"y":2,"z":1}]},"aa":0,"b":1}`},
		{`{"a":1,"a\u0000":2,"":3}`, `{"":3,"a":1,"a\u0000":2}`},
	}
	for _, tc := range tests {
		got, err := Canonicalize([]byte(tc.in))
		if err != nil || string(got) != tc.want {
			t.Errorf("Canonicalize(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
			continue
		}
		if lib, err := jcs.Transform([]byte(tc.in)); err != nil || !bytes.Equal(lib, got) {
			t.Errorf("Canonicalize(%q): jcs.Transform gives %q, %v", tc.in, lib, err)
		}
	}
}

func TestCanonicalizeErrors(t *testing.T) {
	tests := []struct{ in, want string }{
		{``, "unexpected end of input, expected a value at offset 0"},
		{`   `, "unexpected end of input, expected a value at offset 3"},
		{`{"a":1,"a":2}`, `duplicate key "a" at offset 7`},
		{`{"b":{"a":1,"c":0,"a":2}}`, `duplicate key "a" at offset 18`},
		{`{"\u0061":1,"a":2}`, `duplicate key "a" at offset 12`},
		{`"\ud800"`, `lone high surrogate \ud800 at offset 1`},
		{`"\ud800x"`, `lone high surrogate \ud800 at offset 1`},
		{`"\ud800\u0041"`, `lone high surrogate \ud800 at offset 1`},
		{`"\ud800\ud800"`, `lone high surrogate \ud800 at offset 1`},
		{`"a\udc00"`, `lone low surrogate \udc00 at offset 2`},
		{`"\ud800\uzzzz"`, `invalid \u escape at offset 7`},
		{`"\u12"`, `invalid \u escape at offset 1`},
		{"\"a\xffb\"", `invalid UTF-8 in string at offset 2`},
		{"\"\xed\xa0\x80\"", `invalid UTF-8 in string at offset 1`}, // UTF-8-encoded surrogate
		{"\"\xc0\xaf\"", `invalid UTF-8 in string at offset 1`},     // overlong
		{"\"\\n\xff\"", `invalid UTF-8 in string at offset 3`},
		{"\"a\nb\"", `control character 0x0a in string at offset 2`},
		{`"\x"`, `invalid escape sequence at offset 1`},
		{`"abc`, `unterminated string at offset 4`},
		{`"ab\"`, `unterminated string at offset 5`},
		{`{} {}`, `trailing data at offset 3`},
		{`1 2`, `trailing data at offset 2`},
		{`[1,]`, `invalid character ']', expected a value at offset 3`},
		{`{"a":1,}`, `invalid character '}', expected a string key at offset 7`},
		{`{"a" 1}`, `invalid character '1', expected ':' at offset 5`},
		{`{a:1}`, `invalid character 'a', expected a string key at offset 1`},
		{`[1 2]`, `invalid character '2', expected ',' or ']' at offset 3`},
		{`{"a":1 "b":2}`, `invalid character '"', expected ',' or '}' at offset 7`},
		{`[`, `unexpected end of input, expected a value at offset 1`},
		{`[1`, `unexpected end of input, expected ',' or ']' at offset 2`},
		{`tru`, `invalid literal, expected true at offset 0`},
		{`nul1`, `invalid literal, expected null at offset 0`},
		{`01`, `trailing data at offset 1`},
		{`-`, `unexpected end of input, expected a digit at offset 1`},
		{`-a`, `invalid character 'a', expected a digit at offset 1`},
		{`1.`, `unexpected end of input, expected a digit at offset 2`},
		{`1.e5`, `invalid character 'e', expected a digit at offset 2`},
		{`1e`, `unexpected end of input, expected a digit at offset 2`},
		{`1e+`, `unexpected end of input, expected a digit at offset 3`},
		{`+1`, `invalid character '+', expected a value at offset 0`},
		{`.5`, `invalid character '.', expected a value at offset 0`},
		{`NaN`, `invalid character 'N', expected a value at offset 0`},
		{`1e400`, `number "1e400" out of range at offset 0`},
		{`[-1e309]`, `number "-1e309" out of range at offset 1`},
		{"\xef\xbb\xbf{}", `invalid byte 0xef, expected a value at offset 0`}, // BOM
		{"[\x00]", `invalid byte 0x00, expected a value at offset 1`},
		{"{\"a\":1}\x00", `trailing data at offset 7`},
	}
	for _, tc := range tests {
		got, err := Canonicalize([]byte(tc.in))
		if err == nil {
			t.Errorf("Canonicalize(%q) = %q, want error %q", tc.in, got, tc.want)
			continue
		}
		var e *errcode.Error
		if !errors.As(err, &e) || e.Code != errcode.InvalidArgument {
			t.Errorf("Canonicalize(%q): error %v is not an invalid_argument *errcode.Error", tc.in, err)
			continue
		}
		if want := "invalid JSON: " + tc.want; e.Message != want {
			t.Errorf("Canonicalize(%q): message %q, want %q", tc.in, e.Message, want)
		}
	}
}

func TestCanonicalizeDepth(t *testing.T) {
	deep := func(n int, open, close string) []byte {
		return []byte(strings.Repeat(open, n) + "1" + strings.Repeat(close, n))
	}
	if _, err := Canonicalize(deep(MaxDepth, "[", "]")); err != nil {
		t.Fatalf("depth %d arrays: %v", MaxDepth, err)
	}
	if _, err := Canonicalize(deep(MaxDepth, `{"a":`, "}")); err != nil {
		t.Fatalf("depth %d objects: %v", MaxDepth, err)
	}
	_, err := Canonicalize(deep(MaxDepth+1, `[{"a":`, "}]"))
	if err == nil || !strings.Contains(err.Error(), "nesting deeper than 1000") {
		t.Fatalf("depth %d: got %v, want a nesting error", MaxDepth+1, err)
	}
}

// TestCanonicalizeDeepUnsorted checks that a deeply nested document whose
// every level must be reordered canonicalizes correctly, with members of
// each level emitted in order.
func TestCanonicalizeDeepUnsorted(t *testing.T) {
	const n = 300
	var in, want strings.Builder
	for i := 0; i < n; i++ {
		fmt.Fprintf(&in, `{"z%d":[%d,"%s"],"a":`, i, i, strings.Repeat("x", i%7))
		want.WriteString(`{"a":`)
	}
	in.WriteString(`null`)
	want.WriteString(`null`)
	for i := n - 1; i >= 0; i-- {
		in.WriteString(`}`)
		fmt.Fprintf(&want, `,"z%d":[%d,"%s"]}`, i, i, strings.Repeat("x", i%7))
	}
	got, err := Canonicalize([]byte(in.String()))
	if err != nil || string(got) != want.String() {
		t.Fatalf("got %.200q, %v", got, err)
	}
}

func TestCompareUTF16(t *testing.T) {
	pool := []rune{0, 'A', 'a', 0x7f, 0x80, 0xe9, 0x7ff, 0x800, 0xd7ff, 0xe000, 0xfb33, 0xfffd, 0xffff, 0x10000, 0x1f600, 0x10ffff}
	rng := rand.New(rand.NewPCG(3, 4))
	gen := func() []rune {
		r := make([]rune, rng.IntN(4))
		for i := range r {
			r[i] = pool[rng.IntN(len(pool))]
		}
		return r
	}
	for i := 0; i < 100000; i++ {
		a, b := gen(), gen()
		want := slices.Compare(utf16.Encode(a), utf16.Encode(b))
		if got := compareUTF16([]byte(string(a)), []byte(string(b))); got != want {
			t.Fatalf("compareUTF16(%q, %q) = %d, want %d", string(a), string(b), got, want)
		}
	}
}

func TestAppendString(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", `""`},
		{"a\"b\\c/", `"a\"b\\c/"`},
		{"\x00\x01\x1f\x7f", `"\u0000\u0001\u001f` + "\x7f\""},
		{"<&>\u2028", "\"<&>\u2028\""},
		{"a\xffb", "\"a\ufffdb\""},
		{"a\xff\xfe\xc3", "\"a\ufffd\""},
		{"\xed\xa0\x80x", "\"\ufffdx\""},
	}
	for _, tc := range tests {
		if got := AppendString([]byte("x"), tc.in, Canonical); string(got) != "x"+tc.want {
			t.Errorf("AppendString(%q) = %q, want %q", tc.in, got[1:], tc.want)
		}
	}
}

func TestTransformer(t *testing.T) {
	var seen []string
	tr := &Transformer{
		ReplaceValue: func(key []byte) bool { return string(key) == "secret" },
		Replacement:  "[gone]",
		Rewrite: func(s []byte) ([]byte, bool) {
			seen = append(seen, string(s))
			if bytes.Contains(s, []byte("hide")) {
				return bytes.ReplaceAll(s, []byte("hide"), []byte("****")), true
			}
			return nil, false
		},
	}
	tests := []struct {
		in, want string
		hidden   []string // strings Rewrite must not see
	}{
		{`{"secret":{"b":"hide","a":[1,{"secret":2}]},"x":"hide me"}`, `{"secret":"[gone]","x":"**** me"}`, []string{"b", "a", "hide"}},
		{`{"secret":1}`, `{"secret":"[gone]"}`, nil},
		{`["secret","hide"]`, `["secret","****"]`, nil},
		// A rewritten key is sorted by its new text, then by its original
		// text when two keys collide after rewriting.
		{`{"hideB":2,"hideA":1,"****":0,"a":3}`, `{"****":0,"****A":1,"****B":2,"a":3}`, nil},
		{`{"xhide":2,"x****":1}`, `{"x****":1,"x****":2}`, nil},
		{`{"x****":1,"xhide":2}`, `{"x****":1,"x****":2}`, nil},
		{`{"secret":[{"a":1}],"b":{"d":1,"c":2}}`, `{"b":{"c":2,"d":1},"secret":"[gone]"}`, []string{"a"}},
	}
	for _, tc := range tests {
		seen = nil
		got, err := tr.Append([]byte("prefix:"), []byte(tc.in))
		if err != nil || string(got) != "prefix:"+tc.want {
			t.Errorf("Append(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
		for _, h := range tc.hidden {
			if slices.Contains(seen, h) {
				t.Errorf("Append(%q): Rewrite called for %q inside a replaced value", tc.in, h)
			}
		}
	}
	// A replaced value is still validated.
	for _, in := range []string{`{"secret":{"a":1,"a":2}}`, `{"secret":[1,}`, `{"secret":"\ud800"}`} {
		if _, err := tr.Append(nil, []byte(in)); errcode.CodeOf(err) != errcode.InvalidArgument {
			t.Errorf("Append(%q): err %v, want invalid_argument", in, err)
		}
	}
	// A duplicate key is named as rewritten, never as written.
	_, err := tr.Append(nil, []byte(`{"a":{"hide":1,"hide":2}}`))
	if err == nil || !strings.Contains(err.Error(), `duplicate key "****" at offset 15`) || strings.Contains(err.Error(), "hide") {
		t.Errorf("duplicate rewritten key: %v", err)
	}
	// Rewritten text that is not valid UTF-8 is repaired.
	bad := &Transformer{Rewrite: func(s []byte) ([]byte, bool) { return []byte("\xff\"k"), true }}
	got, err := bad.Append(nil, []byte(`{"a":"b"}`))
	if err != nil || string(got) != "{\"\ufffd\\\"k\":\"\ufffd\\\"k\"}" {
		t.Errorf("invalid rewrite: got %q, %v", got, err)
	}
	// A zero Transformer canonicalizes unchanged.
	got, err = (&Transformer{}).Append(nil, []byte(`{"b":1,"a":2}`))
	if err != nil || string(got) != `{"a":2,"b":1}` {
		t.Errorf("zero Transformer: %q, %v", got, err)
	}
}

func TestAppendPreservesDstOnError(t *testing.T) {
	dst := []byte("keep")
	got, err := (*Transformer)(nil).Append(dst, []byte(`{"a":1,"a":2}`))
	if err == nil || string(got) != "keep" {
		t.Fatalf("got %q, %v", got, err)
	}
}

// TestCanonicalizeResultNotShared checks that results do not alias pooled
// scratch memory.
func TestCanonicalizeResultNotShared(t *testing.T) {
	a, err := Canonicalize([]byte(`{"b":[1,2],"a":"x"}`))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ {
		if _, err := Canonicalize([]byte(`{"zzzzzzzzzz":"yyyyyyyyyyyyyyyyyyyy","a":1}`)); err != nil {
			t.Fatal(err)
		}
	}
	if string(a) != `{"a":"x","b":[1,2]}` {
		t.Fatalf("earlier result changed to %q", a)
	}
}

func TestCanonicalizeConcurrent(t *testing.T) {
	inputs := []string{rfcVectors[0].in, rfcVectors[1].in, rfcVectors[3].in, `{"a":1,"a":2}`}
	wants := []string{rfcVectors[0].want, rfcVectors[1].want, rfcVectors[3].want, ""}
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 500; i++ {
				k := (g + i) % len(inputs)
				got, err := Canonicalize([]byte(inputs[k]))
				if wants[k] == "" {
					if err == nil {
						t.Errorf("input %d: no error", k)
					}
				} else if err != nil || string(got) != wants[k] {
					t.Errorf("input %d: %q, %v", k, got, err)
				}
			}
		}()
	}
	wg.Wait()
}

func ExampleCanonicalize() {
	out, err := Canonicalize([]byte(`{ "b": [1.50, 1e21, -0], "a": "\u00e9\/<" }`))
	if err != nil {
		panic(err)
	}
	fmt.Println(string(out))
	// Output: {"a":"é/<","b":[1.5,1e+21,0]}
}

func TestHasSpecialByte(t *testing.T) {
	slow := func(w uint64) bool {
		for i := 0; i < 8; i++ {
			if !plain[byte(w>>(8*i))] {
				return true
			}
		}
		return false
	}
	const filler = 0x6161616161616161 // "aaaaaaaa"
	for b := 0; b < 256; b++ {
		for pos := 0; pos < 8; pos++ {
			w := filler&^(0xff<<(8*pos)) | uint64(b)<<(8*pos)
			if got := hasSpecialByte(w); got != slow(w) {
				t.Fatalf("hasSpecialByte(%#x) = %v", w, got)
			}
		}
	}
	rng := rand.New(rand.NewPCG(5, 6))
	pick := []byte{0x00, 0x1f, 0x20, 0x21, '"', 0x23, 0x5b, '\\', 0x5d, 0x7e, 0x7f, 0x80, 0xff, 'a', 'Z'}
	for i := 0; i < 1000000; i++ {
		var w uint64
		for j := 0; j < 8; j++ {
			w |= uint64(pick[rng.IntN(len(pick))]) << (8 * j)
		}
		if got := hasSpecialByte(w); got != slow(w) {
			t.Fatalf("hasSpecialByte(%#x) = %v", w, got)
		}
	}
}

// TestEscapeWord checks the escaper's word tests against its byte tables:
// every byte value in every position of several base words, and random
// words over the interesting bytes. escapeWord flags the bytes
// plainCanonical does not mark; escapeWordHTML the ASCII bytes
// plainEncodingJSON does not mark.
func TestEscapeWord(t *testing.T) {
	for _, html := range []bool{false, true} {
		word, table := escapeWord, &plainCanonical
		if html {
			word, table = escapeWordHTML, &plainEncodingJSON
		}
		slow := func(w uint64) bool {
			for i := 0; i < 8; i++ {
				if c := byte(w >> (8 * i)); !table[c] && (!html || c < 0x80) {
					return true
				}
			}
			return false
		}
		check := func(w uint64) {
			t.Helper()
			if got := word(w)&highBits != 0; got != slow(w) {
				t.Fatalf("html %v: word test of %#x = %v", html, w, got)
			}
		}
		for _, base := range []uint64{0x6161616161616161, 0xffffffffffffffff, 0x8080808080808080, 0x2020202020202020, 0x3c3c3c3c3c3c3c3c, 0xe2e2e2e2e2e2e2e2} {
			for b := 0; b < 256; b++ {
				for pos := 0; pos < 8; pos++ {
					check(base&^(0xff<<(8*pos)) | uint64(b)<<(8*pos))
				}
			}
		}
		rng := rand.New(rand.NewPCG(5, 6))
		pick := []byte{0x00, 0x1f, 0x20, 0x21, '"', 0x23, 0x25, '&', 0x27, 0x3b, '<', 0x3d, '>', 0x3f, 0x5b, '\\', 0x5d, 0x7e, 0x7f, 0x80, 0xa8, 0xbc, 0xbe, 0xe2, 0xff, 'a', 'Z'}
		for i := 0; i < 1000000; i++ {
			var w uint64
			for j := 0; j < 8; j++ {
				w |= uint64(pick[rng.IntN(len(pick))]) << (8 * j)
			}
			check(w)
		}
		for range 1000000 {
			check(rng.Uint64())
		}
	}
	if s := "0123456789abcdef\x00x"; load64(s, 8) != 0x6665646362613938 {
		t.Fatalf("load64 = %x", load64(s, 8))
	}
}

// TestPlainDecimal checks the fast path for decimal literals against the
// full ParseFloat + AppendNumber path.
func TestPlainDecimal(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	digits := func(n int, noLeadingZero bool) string {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte('0' + rng.IntN(10))
		}
		if noLeadingZero && n > 0 && b[0] == '0' {
			b[0] = '1' + byte(rng.IntN(9))
		}
		return string(b)
	}
	fixed := []string{"0.5", "-0.5", "0.000001", "0.0000001", "0.0000012", "0.00000123", "1.5", "123456789012345.5",
		"12345678901234.5", "0.123456789012345", "0.1234567890123456", "1.10", "0.0", "-0.0", "9.999999999999999",
		"999999999999999.9", "0.3", "0.30000000000000004"}
	for i := 0; i < 200000; i++ {
		var lit string
		if i < len(fixed) {
			lit = fixed[i]
		} else {
			intPart := "0"
			if rng.IntN(2) == 0 {
				intPart = digits(1+rng.IntN(16), true)
			}
			lit = intPart + "." + strings.Repeat("0", rng.IntN(8)) + digits(1+rng.IntN(16), false)
			if rng.IntN(2) == 0 {
				lit = "-" + lit
			}
		}
		f, err := strconv.ParseFloat(lit, 64)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := AppendNumber(nil, f)
		got, err := Canonicalize([]byte(lit))
		if err != nil || string(got) != string(want) {
			t.Fatalf("Canonicalize(%s) = %s, %v; want %s", lit, got, err, want)
		}
	}
}

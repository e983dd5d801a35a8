package canonjson

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/gowebpki/jcs"
)

// escapeSeeds are inputs where the string forms differ or the fast path
// changes gear: the characters each form escapes, U+2028/U+2029, invalid
// UTF-8 (lone bytes, runs, truncated and overlong sequences, surrogates),
// a literal U+FFFD, and specials on both sides of an 8-byte word boundary.
var escapeSeeds = []string{
	"", "a", "plain ascii text, 123 ok", "0123456789abcdef0123456789abcdef",
	`"\`, "\b\t\n\f\r", "\x00\x01\x0b\x1f\x7f/", "<&>", "a<b>c&d", "1234567<", "12345678<", "123456789&",
	"\u2028\u2029", "abcdefg\u2028", "\u2027\u202a\u2030", "\U0001F600\u00e9\ufeff",
	"a\xffb", "a\xff\xfe\xc3", "\xed\xa0\x80x", "\xc0\xaf", "\xe2\x80", "\xe2\x80\xa8\xe2\x80", "\ufffd\xff",
	"\xff\ufffd", "abcdefgh\xffabcdefgh", "\xf4\x90\x80\x80", "éé\"éé\\\n",
}

// FuzzAppendString checks AppendString against the three escapers main had
// (escape_oracle_test.go) and against independent references:
//   - Canonical equals main's canonjson.AppendString for every input, for
//     string and []byte alike, and main's receipt appendString for valid
//     UTF-8 (receipts refuse invalid UTF-8 before encoding: checkEncodable;
//     main's receipt escaper copied invalid bytes through, unreachably);
//   - for valid UTF-8, Canonical equals gowebpki/jcs applied to
//     json.Marshal(s) (RFC 8785), and decodes back to s; for invalid UTF-8
//     it decodes to strings.ToValidUTF8(s, "\uFFFD");
//   - EncodingJSON equals json.Marshal(s) and main's audit appendJSONString
//     for every input (stored event payloads stay byte-identical).
func FuzzAppendString(f *testing.F) {
	for _, s := range escapeSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := AppendString([]byte("x"), s, Canonical)
		if !bytes.HasPrefix(got, []byte("x")) {
			t.Fatalf("AppendString dropped dst: %q", got)
		}
		got = got[1:]
		if old := oldCanonicalString(nil, s); !bytes.Equal(got, old) {
			t.Fatalf("Canonical(%q) = %q, main's canonjson %q", s, got, old)
		}
		if b := appendBytes(nil, []byte(s), Canonical); !bytes.Equal(b, got) {
			t.Fatalf("Canonical([]byte %q) = %q, string %q", s, b, got)
		}
		if !utf8.Valid(got) || !json.Valid(got) {
			t.Fatalf("Canonical(%q) = %q is not valid UTF-8 JSON", s, got)
		}
		var back string
		if err := json.Unmarshal(got, &back); err != nil || back != strings.ToValidUTF8(s, "\uFFFD") {
			t.Fatalf("Canonical(%q) = %q decodes to %q, %v", s, got, back, err)
		}
		if utf8.ValidString(s) {
			if old := oldReceiptString(nil, s); !bytes.Equal(got, old) {
				t.Fatalf("Canonical(%q) = %q, main's receipt %q", s, got, old)
			}
			m, err := json.Marshal(s)
			if err != nil {
				t.Fatal(err)
			}
			lib, err := jcs.Transform(m)
			if err != nil {
				t.Fatalf("jcs refuses %s: %v", m, err)
			}
			if !bytes.Equal(got, lib) {
				t.Fatalf("Canonical(%q) = %q, jcs %q", s, got, lib)
			}
		}

		html := AppendString(nil, s, EncodingJSON)
		m, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(html, m) {
			t.Fatalf("EncodingJSON(%q) = %q, json.Marshal %q", s, html, m)
		}
		if old := oldAuditString(nil, s); !bytes.Equal(html, old) {
			t.Fatalf("EncodingJSON(%q) = %q, main's audit %q", s, html, old)
		}
		if b := appendBytes(nil, []byte(s), EncodingJSON); !bytes.Equal(b, html) {
			t.Fatalf("EncodingJSON([]byte %q) = %q, string %q", s, b, html)
		}
	})
}

// TestEscapingForms pins where the two forms differ (what main's three
// escapers did differently: audit payloads are json.Marshal's, receipts and
// canonjson RFC 8785's).
func TestEscapingForms(t *testing.T) {
	tests := []struct{ in, canonical, encodingJSON string }{
		{"<&>", `"<&>"`, `"\u003c\u0026\u003e"`},
		{"a\u2028b\u2029", "\"a\u2028b\u2029\"", `"a\u2028b\u2029"`},
		{"a\xff\xfeb", "\"a\ufffdb\"", `"a\ufffd\ufffdb"`},
		{"\x00\x1f\x7f\"\\/\b\t\n\f\r", `"\u0000\u001f` + "\x7f" + `\"\\/\b\t\n\f\r"`, `"\u0000\u001f` + "\x7f" + `\"\\/\b\t\n\f\r"`},
		{"é\U0001F600", "\"é\U0001F600\"", "\"é\U0001F600\""},
	}
	for _, tc := range tests {
		if got := string(AppendString(nil, tc.in, Canonical)); got != tc.canonical {
			t.Errorf("Canonical(%q) = %s, want %s", tc.in, got, tc.canonical)
		}
		if got := string(AppendString(nil, tc.in, EncodingJSON)); got != tc.encodingJSON {
			t.Errorf("EncodingJSON(%q) = %s, want %s", tc.in, got, tc.encodingJSON)
		}
	}
}

package canonjson

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/gowebpki/jcs"
)

// FuzzCanonicalize checks Canonicalize differentially against
// github.com/gowebpki/jcs and against encoding/json as a strict RFC 8259
// parser:
//   - whatever we accept, jcs accepts too, with byte-identical output;
//   - whatever we accept is valid JSON (json.Valid), and whatever valid JSON
//     we refuse is refused for a reason RFC 8785 gives (duplicate key, lone
//     surrogate, number out of double range) or for nesting beyond MaxDepth;
//   - our output is valid UTF-8, valid JSON and canonical (idempotent).
//
// jcs may accept input we refuse (for example nesting beyond MaxDepth); that
// is not compared. No disagreement where jcs is wrong per the RFC has been
// found, so nothing is excluded.
func FuzzCanonicalize(f *testing.F) {
	for _, tc := range rfcVectors {
		f.Add([]byte(tc.in))
	}
	for _, s := range []string{
		`{"a":1,"a":2}`, `"\ud800"`, `"\udc00\ud800"`, `1e400`, `-0`, `1e-400`,
		`[5e-324,1e21,1e-7,0.000001,9007199254740993]`, "\"\xe2\x80\xa8<&>\"",
		`{"\ud83d\ude00":1,"\ufb33":2,"\ue000":3}`, "\xef\xbb\xbf{}", " [ ] ",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		out, err := Canonicalize(data)
		if err != nil {
			if json.Valid(data) && !acceptableRefusal(err.Error()) {
				t.Fatalf("refused valid JSON %q: %v", data, err)
			}
			return
		}
		if !json.Valid(data) {
			t.Fatalf("accepted invalid JSON %q, output %q", data, out)
		}
		if !utf8.Valid(out) || !json.Valid(out) {
			t.Fatalf("output %q of %q is not valid UTF-8 JSON", out, data)
		}
		again, err := Canonicalize(out)
		if err != nil || !bytes.Equal(again, out) {
			t.Fatalf("not idempotent: %q -> %q -> %q, %v", data, out, again, err)
		}
		lib, err := jcs.Transform(data)
		if err != nil {
			t.Fatalf("jcs refuses %q (%v); we give %q", data, err, out)
		}
		if !bytes.Equal(lib, out) {
			t.Fatalf("differs from jcs for %q:\nours %q\njcs  %q", data, out, lib)
		}
	})
}

// acceptableRefusal reports whether an error message is one of the reasons
// RFC 8785 (or our depth limit) gives for refusing JSON that encoding/json
// accepts; json.Valid does not check UTF-8, which RFC 8259 §8.1 requires.
func acceptableRefusal(msg string) bool {
	for _, reason := range []string{"duplicate key", "lone high surrogate", "lone low surrogate", "out of range", "nesting deeper", "invalid UTF-8"} {
		if strings.Contains(msg, reason) {
			return true
		}
	}
	return false
}

package canonjson

import "testing"

// escapeInputs are the string shapes the escaper sees: ids and hashes
// (most receipt and payload strings), a tool error message, a string with
// JSON escapes, non-ASCII text, and HTML-significant characters.
var escapeInputs = []struct{ name, s string }{
	{"id36", "0193a7c2-5e1f-7b3d-9a4e-2f6c8d1b0e57"},
	{"hash64", "9f2c1e0b7a6d5c4b3a29180f7e6d5c4b3a29180f7e6d5c4b3a29180f7e6d5c4b"},
	{"message80", "upstream refused the call: permission denied for tool read_file on /var/data"},
	{"escapes40", "line one\nline \"two\"\ttabbed\\path\r\n end"},
	{"unicode60", "Grüße aus Zürich — naïve café, 東京タワー, emoji 😀 done"},
	{"html40", "<script>alert(1)</script> & a > b < c"},
}

func BenchmarkEscapeString(b *testing.B) {
	for _, in := range escapeInputs {
		b.Run(in.name, func(b *testing.B) {
			dst := make([]byte, 0, 256)
			b.SetBytes(int64(len(in.s)))
			for b.Loop() {
				dst = AppendString(dst[:0], in.s, Canonical)
			}
		})
	}
}

// BenchmarkEscapeVsMain runs AppendString beside main's three escapers
// (escape_oracle_test.go) on the same inputs in one binary, so machine
// drift affects both alike: old=main's, new=AppendString.
func BenchmarkEscapeVsMain(b *testing.B) {
	impls := []struct {
		name string
		f    func([]byte, string) []byte
	}{
		{"canonjson/old", func(d []byte, s string) []byte { return oldCanonicalString(d, s) }},
		{"canonjson/new", func(d []byte, s string) []byte { return AppendString(d, s, Canonical) }},
		{"receipt/old", oldReceiptString},
		{"receipt/new", func(d []byte, s string) []byte { return AppendString(d, s, Canonical) }},
		{"audit/old", oldAuditString},
		{"audit/new", func(d []byte, s string) []byte { return AppendString(d, s, EncodingJSON) }},
	}
	for _, in := range escapeInputs {
		for _, impl := range impls {
			b.Run(in.name+"/"+impl.name, func(b *testing.B) {
				dst := make([]byte, 0, 256)
				b.SetBytes(int64(len(in.s)))
				for b.Loop() {
					dst = impl.f(dst[:0], in.s)
				}
			})
		}
	}
}

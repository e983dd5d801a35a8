package canonjson

import (
	"encoding/json"
	"testing"

	"github.com/gowebpki/jcs"
)

// args300B is a realistic ~300-byte tool-call argument object: unsorted keys,
// a nested object and arrays, integers, a fraction and a few strings.
const args300B = `{"query":"SELECT name, email FROM users WHERE team = ? AND active","params":[42,"platform",true,null],` +
	`"options":{"timeout_ms":1500,"retries":3,"ratio":0.75,"tags":["prod","eu-west-1"]},` +
	`"dsn":"postgres://app:S3cr3t-Passw0rd-XYZ@db.internal:5432/main","path":"/var/data/reports/2024/q3.csv","limit":100}`

func BenchmarkCanonicalize300B(b *testing.B) {
	data := []byte(args300B)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Canonicalize(data); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkTransformerAppend300B is Canonicalize without the result
// allocation, as the audit package uses it.
func BenchmarkTransformerAppend300B(b *testing.B) {
	data := []byte(args300B)
	var t Transformer
	dst := make([]byte, 0, 512)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		var err error
		if dst, err = t.Append(dst[:0], data); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkJCSLibTransform300B(b *testing.B) {
	data := []byte(args300B)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := jcs.Transform(data); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecode300B decodes into Go values, as encoding/json.Unmarshal
// into an `any` does (BenchmarkUnmarshalAny300B).
func BenchmarkDecode300B(b *testing.B) {
	data := []byte(args300B)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Decode(data); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAppendDecode300B canonicalizes and decodes in one pass.
func BenchmarkAppendDecode300B(b *testing.B) {
	data := []byte(args300B)
	var t Transformer
	dst := make([]byte, 0, 512)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		var err error
		if dst, _, err = t.AppendDecode(dst[:0], data); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkUnmarshalAny300B(b *testing.B) {
	data := []byte(args300B)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		var v any
		if err := json.Unmarshal(data, &v); err != nil {
			b.Fatal(err)
		}
	}
}

package audit

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"testing"

	"github.com/gowebpki/jcs"
)

// benchArgs300B is a realistic ~300-byte tool-call argument object: unsorted
// keys, a nested object, arrays, integers, a fraction and a few strings, one
// of which carries the registered secret benchSecret.
const benchArgs300B = `{"query":"SELECT name, email FROM users WHERE team = ? AND active","params":[42,"platform",true,null],` +
	`"options":{"timeout_ms":1500,"retries":3,"ratio":0.75,"tags":["prod","eu-west-1"]},` +
	`"dsn":"postgres://app:S3cr3t-Passw0rd-XYZ@db.internal:5432/main","path":"/var/data/reports/2024/q3.csv","limit":100}`

const benchSecret = "S3cr3t-Passw0rd-XYZ"

func benchRedactor() *Redactor {
	r := NewRedactor()
	r.AddSecret("db-password", benchSecret)
	return r
}

func BenchmarkArgsHash300B(b *testing.B) {
	r := benchRedactor()
	args := []byte(benchArgs300B)
	want, _ := baselineArgsHash(r, args)
	if got, err := r.ArgsHash(args); err != nil || got != want {
		b.Fatalf("ArgsHash = %s, %v; baseline %s", got, err, want)
	}
	b.SetBytes(int64(len(args)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := r.ArgsHash(args); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkArgsHashBaselineJCSLib300B is the straightforward alternative:
// encoding/json decode, redact the map, gowebpki/jcs.Transform, SHA-256.
func BenchmarkArgsHashBaselineJCSLib300B(b *testing.B) {
	r := benchRedactor()
	args := []byte(benchArgs300B)
	b.SetBytes(int64(len(args)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := baselineArgsHash(r, args); err != nil {
			b.Fatal(err)
		}
	}
}

func baselineArgsHash(r *Redactor, args []byte) (string, error) {
	var v any
	if err := json.Unmarshal(args, &v); err != nil {
		return "", err
	}
	data, err := json.Marshal(baselineRedact(r, v))
	if err != nil {
		return "", err
	}
	canon, err := jcs.Transform(data)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(canon)
	return hex.EncodeToString(sum[:]), nil
}

func baselineRedact(r *Redactor, v any) any {
	switch v := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, x := range v {
			if isSensitiveKey([]byte(k)) {
				out[r.RedactString(k)] = RedactedPlaceholder
			} else {
				out[r.RedactString(k)] = baselineRedact(r, x)
			}
		}
		return out
	case []any:
		for i, x := range v {
			v[i] = baselineRedact(r, x)
		}
		return v
	case string:
		return r.RedactString(v)
	}
	return v
}

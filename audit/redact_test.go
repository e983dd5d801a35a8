package audit

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/errcode"
)

func TestRedactStringShapes(t *testing.T) {
	tests := []struct{ in, want string }{
		// sk- keys.
		{"key sk-canary-rfc0064-do-not-leak-xyz789 end", "key [redacted] end"},
		{"sk-abcdefgh", "[redacted]"},
		{"sk-abcdefg", "sk-abcdefg"}, // 7 characters: too short
		{"task-management-system", "task-management-system"},
		{"ask-questionsabout", "ask-questionsabout"},
		{"(sk-proj_AbC-123456)", "([redacted])"},
		// Bearer tokens.
		{"Authorization: Bearer abc.def-ghi_jkl", "Authorization: Bearer [redacted]"},
		{"bearer\t\tZZZZZZZZ, next", "bearer\t\t[redacted] next"},
		{"BEARER 12345678", "BEARER [redacted]"},
		{"Bearer short", "Bearer short"},
		{"Bearer", "Bearer"},
		{"Bearerxxxxxxxxxx", "Bearerxxxxxxxxxx"},
		{"Bearer [REDACTED:gh]", "Bearer [REDACTED:gh]"},
		{"Bearer [redacted]", "Bearer [redacted]"},
		// Hex runs.
		{"sha a94a8fe5ccb19ba61c4c0873d391e987982fbbd3!", "sha [redacted]!"},
		{strings.Repeat("f", 31), strings.Repeat("f", 31)},
		{strings.Repeat("A", 32), "[redacted]"},
		{"x" + strings.Repeat("0", 40) + "y", "x[redacted]y"},
		// GitHub, Slack, AWS, JWT, PEM.
		{"ghp_abcdefghijklmnopqrstuvwxyz0123456789", "[redacted]"},
		{"ghp_short", "ghp_short"},
		{"github_pat_11ABCDEFG0123456789_abcdefghijklmnop", "[redacted]"},
		{"xoxb-123456789012-abcdefghijk", "[redacted]"},
		{"xoxz-123456789012-abcdefghijk", "xoxz-123456789012-abcdefghijk"},
		{"id=AKIAIOSFODNN7EXAMPLE;", "id=[redacted];"},
		{"AKIAIOSFODNN7EXAMPLEX", "AKIAIOSFODNN7EXAMPLEX"}, // 17 characters: not a key id
		{"jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U ok", "jwt [redacted] ok"},
		{"eyJhbGciOiJIUzI1NiJ9 only", "eyJhbGciOiJIUzI1NiJ9 only"},
		{"k=-----BEGIN RSA PRIVATE KEY-----\nMIIEow\n-----END RSA PRIVATE KEY-----\nrest", "k=[redacted]\nrest"},
		{"-----BEGIN PRIVATE KEY-----\nMIIEow", "[redacted]"},
		{"-----BEGIN CERTIFICATE-----\nMIIB", "-----BEGIN CERTIFICATE-----\nMIIB"},
		// Nothing to do.
		{"", ""},
		{"just a normal sentence about tokens and keys", "just a normal sentence about tokens and keys"},
		{"naïve café ✓", "naïve café ✓"},
	}
	r := NewRedactor()
	for _, tc := range tests {
		if got := r.RedactString(tc.in); got != tc.want {
			t.Errorf("RedactString(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestIsSensitiveKey(t *testing.T) {
	yes := []string{
		"apiKey", "api_key", "X-API-Key", "x_api_key", "token", "accessToken", "refresh_token", "id-token",
		"tokens", "secret", "client_secret", "clientSecret", "password", "PASSWORD", "db.password", "passwd",
		"passphrase", "Authorization", "cookie", "Set-Cookie", "credentials", "credential", "private_key",
		"privateKey", "aws_access_key_id", "accessKey", "session_id", "sessionId", "auth", "pass", "pwd",
		"bearer", "github_token", "csrfToken", "max_tokens_secret",
	}
	no := []string{
		"q", "query", "name", "key", "path", "author", "authority", "max_tokens", "maxTokens", "max-tokens",
		"token_count", "tokenCount", "tokenizer", "total_tokens", "prompt_tokens", "completion_tokens",
		"input_tokens", "output_tokens", "token_type", "token_url", "tokenEndpoint", "session", "cwd",
		"passage", "", "keyboard",
	}
	for _, k := range yes {
		if !isSensitiveKey([]byte(k)) {
			t.Errorf("isSensitiveKey(%q) = false, want true", k)
		}
	}
	for _, k := range no {
		if isSensitiveKey([]byte(k)) {
			t.Errorf("isSensitiveKey(%q) = true, want false", k)
		}
	}
	// Substring matching is deliberate: a credential word anywhere counts.
	if !isSensitiveKey([]byte("stoken")) {
		t.Errorf(`isSensitiveKey("stoken") = false, want true (contains "token")`)
	}
	long := strings.Repeat("x", 100) + "Password"
	if !isSensitiveKey([]byte(long)) {
		t.Errorf("isSensitiveKey(long key) = false")
	}
}

func TestRedactJSONKeyRule(t *testing.T) {
	r := NewRedactor()
	tests := []struct{ in, want string }{
		{`{"apiKey":"sk-canary-rfc0064-do-not-leak-xyz789","q":"openwop"}`, `{"apiKey":"[redacted]","q":"openwop"}`},
		{`{"headers":{"Authorization":"Basic dXNlcjpwYXNz","Accept":"text/plain"}}`, `{"headers":{"Accept":"text/plain","Authorization":"[redacted]"}}`},
		{`{"password":12345678,"token":null,"secret":{"a":[1,"x"]},"credentials":[true]}`, `{"credentials":"[redacted]","password":"[redacted]","secret":"[redacted]","token":"[redacted]"}`},
		{`{"max_tokens":1024,"token_count":3}`, `{"max_tokens":1024,"token_count":3}`},
		{`[{"pwd":"x"},"password"]`, `[{"pwd":"[redacted]"},"password"]`},
		{`{"note":"use Bearer abcdefghijkl please"}`, `{"note":"use Bearer [redacted] please"}`},
		{`{"sk-abcdefghijkl":1}`, `{"[redacted]":1}`},
		{`{"q":"\u003cscript\u003e\u2028"}`, "{\"q\":\"<script>\u2028\"}"},
	}
	for _, tc := range tests {
		got, err := r.RedactJSON([]byte(tc.in))
		if err != nil || string(got) != tc.want {
			t.Errorf("RedactJSON(%s) = %s, %v; want %s", tc.in, got, err, tc.want)
		}
	}
}

func TestRedactSecretInLongerString(t *testing.T) {
	r := NewRedactor()
	r.AddSecret("db-pass", "S3cr3t-Passw0rd-XYZ")
	if got, want := r.RedactString("postgres://app:S3cr3t-Passw0rd-XYZ@db:5432/x?p=S3cr3t-Passw0rd-XYZ"),
		"postgres://app:[REDACTED:db-pass]@db:5432/x?p=[REDACTED:db-pass]"; got != want {
		t.Errorf("RedactString = %q, want %q", got, want)
	}
	got, err := r.RedactJSON([]byte(`{"dsn":"postgres://app:S3cr3t-Passw0rd-XYZ@db","list":["S3cr3t-Passw0rd-XYZ"]}`))
	if want := `{"dsn":"postgres://app:[REDACTED:db-pass]@db","list":["[REDACTED:db-pass]"]}`; err != nil || string(got) != want {
		t.Errorf("RedactJSON = %s, %v; want %s", got, err, want)
	}
	// Secrets are matched exactly: case matters.
	if got := r.RedactString("s3cr3t-passw0rd-xyz"); got != "s3cr3t-passw0rd-xyz" {
		t.Errorf("case-insensitive match: %q", got)
	}
}

func TestRedactLongestFirst(t *testing.T) {
	for _, order := range [][2]int{{0, 1}, {1, 0}} {
		secrets := [][2]string{{"short", "abcdefgh"}, {"long", "abcdefghijkl"}}
		r := NewRedactor()
		for _, i := range order {
			r.AddSecret(secrets[i][0], secrets[i][1])
		}
		if got, want := r.RedactString("x abcdefghijkl y abcdefgh z"), "x [REDACTED:long] y [REDACTED:short] z"; got != want {
			t.Errorf("order %v: %q, want %q", order, got, want)
		}
		// Overlapping occurrences: the longer value wins where both match.
		if got, want := r.RedactString("abcdefghabcdefghijkl"), "[REDACTED:short][REDACTED:long]"; got != want {
			t.Errorf("order %v: %q, want %q", order, got, want)
		}
	}
}

func TestAddSecretRules(t *testing.T) {
	r := NewRedactor()
	r.AddSecret("short", "1234567") // 7 bytes: ignored
	r.AddSecret("first", "same-value-123")
	r.AddSecret("second", "same-value-123") // already registered: keeps "first"
	if got := r.RedactString("1234567 same-value-123"); got != "1234567 [REDACTED:first]" {
		t.Errorf("got %q", got)
	}
	var zero Redactor // behaves like NewRedactor
	zero.AddSecret("z", "zero-value-secret")
	if got := zero.RedactString("a zero-value-secret b sk-abcdefghijk"); got != "a [REDACTED:z] b [redacted]" {
		t.Errorf("zero Redactor: %q", got)
	}
}

// TestRedactManySecrets exercises the windowed filter used beyond
// redactFilterMin secrets, including near misses that share a prefix.
func TestRedactManySecrets(t *testing.T) {
	r := NewRedactor()
	const n = 200
	for i := range n {
		r.AddSecret(fmt.Sprintf("s%d", i), fmt.Sprintf("credential-value-%04d", i))
	}
	for _, i := range []int{0, 1, 57, n - 1} {
		in := fmt.Sprintf("pre credential-value-%04d post", i)
		if got, want := r.RedactString(in), fmt.Sprintf("pre [REDACTED:s%d] post", i); got != want {
			t.Errorf("RedactString(%q) = %q, want %q", in, got, want)
		}
	}
	for _, in := range []string{"credential-value-9999", "credential-value-", "credential", "xredential-value-0001"} {
		if got := r.RedactString(in); got != in {
			t.Errorf("RedactString(%q) = %q, want it unchanged", in, got)
		}
	}
	got, err := r.RedactJSON([]byte(`{"a":["credential-value-0003",{"b":"xcredential-value-0150x"}]}`))
	if want := `{"a":["[REDACTED:s3]",{"b":"x[REDACTED:s150]x"}]}`; err != nil || string(got) != want {
		t.Errorf("RedactJSON = %s, %v; want %s", got, err, want)
	}
}

// TestRedactJSONNeverLeaks feeds a registered secret in every position and
// spelling JSON allows and checks it appears nowhere in the output, raw or
// decoded.
func TestRedactJSONNeverLeaks(t *testing.T) {
	const secret = "hunter2-Secret/Value"
	r := NewRedactor()
	r.AddSecret("vault-1", secret)
	docs := []string{
		`{"x":"hunter2-Secret/Value"}`,
		`{"hunter2-Secret/Value":"k"}`,
		`{"a":{"b":["pre hunter2-Secret/Value post",{"c":"hunter2-Secret/Valuehunter2-Secret/Value"}]}}`,
		`{"x":"hunter2-\u0053ecret\/Value"}`,
		`{"x":"\u0068\u0075\u006e\u0074\u0065\u0072\u0032\u002dSecret\/Value"}`,
		`["hunter2-Secret/Value"]`,
		`"hunter2-Secret/Value"`,
		`{"password":"hunter2-Secret/Value","hunter2-Secret/Valu":"e"}`,
	}
	for _, d := range docs {
		out, err := r.RedactJSON([]byte(d))
		if err != nil {
			t.Fatalf("RedactJSON(%s): %v", d, err)
		}
		if bytes.Contains(out, []byte(secret)) || bytes.Contains(out, []byte(`hunter2-Secret\/Value`)) {
			t.Errorf("RedactJSON(%s) = %s leaks the secret", d, out)
		}
		for _, s := range jsonStrings(t, out) {
			if strings.Contains(s, secret) {
				t.Errorf("RedactJSON(%s) = %s leaks the secret in %q", d, out, s)
			}
		}
	}
}

func TestRedactJSONErrorsAreRedacted(t *testing.T) {
	r := NewRedactor()
	r.AddSecret("db", "S3cr3t-Passw0rd-XYZ")
	for _, in := range []string{
		`{"S3cr3t-Passw0rd-XYZ":1,"S3cr3t-Passw0rd-XYZ":2}`,
		`{"S3cr3t-Passw0rd-XYZ\u0009":1,"S3cr3t-Passw0rd-XYZ\t":2}`,
		`{"` + strings.Repeat("a", 50) + `S3cr3t-Passw0rd-XYZ":1,"` + strings.Repeat("a", 50) + `S3cr3t-Passw0rd-XYZ":2}`,
	} {
		_, err := r.RedactJSON([]byte(in))
		e := errcode.As(err)
		if e == nil || e.Code != errcode.InvalidArgument {
			t.Fatalf("RedactJSON(%s): err %v, want invalid_argument", in, err)
		}
		if strings.Contains(e.Message, "S3cr3t") || !strings.Contains(e.Message, "duplicate key") {
			t.Errorf("RedactJSON(%s): message %q", in, e.Message)
		}
	}
}

// jsonStrings returns every key and string value in a JSON text, in order
// (duplicate keys included).
func jsonStrings(t testing.TB, data []byte) []string {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var out []string
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatalf("output %q is not JSON: %v", data, err)
		}
		if s, ok := tok.(string); ok {
			out = append(out, s)
		}
	}
}

// referenceShapes is the plain statement of the shape scan that
// redactShapes optimizes: at each position, a hex run of 32 or more starting
// there, else a shape starting there at a word start; continue after a
// match.
func referenceShapes(s []byte) []byte {
	var out []byte
	last := 0
	for i := 0; i < len(s); {
		end, keep := -1, 0
		if byteClass[s[i]]&classHex != 0 && (i == 0 || byteClass[s[i-1]]&classHex == 0) {
			if j := run(s, i, classHex); j-i >= 32 {
				end = j
			}
		}
		if end < 0 && (i == 0 || byteClass[s[i-1]]&classWord == 0) {
			keep, end = matchShape(s, i)
		}
		if end < 0 {
			i++
			continue
		}
		out = append(out, s[last:i+keep]...)
		out = append(out, RedactedPlaceholder...)
		last, i = end, end
	}
	return append(out, s[last:]...)
}

// shapePieces build strings dense in shape prefixes, hex runs and
// boundaries.
var shapePieces = []string{
	"sk-", "Bearer ", "bearer\t", "BEARER  ", "ghp_", "github_pat_", "xoxb-", "AKIA", "ASIA", "eyJ", ".",
	"-----BEGIN RSA PRIVATE KEY-----", "-----END RSA PRIVATE KEY-----", "-----", "_", "-", " ", "\n", "=",
	"0123456789abcdef", "ABCDEF0123456789", "deadbeef", "a", "Z", "é", "xyz", "ABCDEFGHIJKLMNOP", "q",
}

func TestRedactShapesMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	for n := 0; n < 200000; n++ {
		var b []byte
		for k := rng.IntN(24); k > 0; k-- {
			b = append(b, shapePieces[rng.IntN(len(shapePieces))]...)
		}
		got, _ := redactShapes(b, true)
		if want := referenceShapes(b); !bytes.Equal(got, want) {
			t.Fatalf("redactShapes(%q)\n got %q\nwant %q", b, got, want)
		}
	}
}

// FuzzRedactShapes checks redactShapes against referenceShapes.
func FuzzRedactShapes(f *testing.F) {
	for _, s := range shapePieces {
		f.Add([]byte("x " + s + "0123456789abcdef0123456789abcdef0123 " + s + "abcdefghijklmnopqrstuvwxyz012345"))
	}
	f.Fuzz(func(t *testing.T, s []byte) {
		got, changed := redactShapes(s, true)
		want := referenceShapes(s)
		if !bytes.Equal(got, want) || changed == bytes.Equal(want, s) {
			t.Fatalf("redactShapes(%q) = %q, %v; want %q", s, got, changed, want)
		}
	})
}

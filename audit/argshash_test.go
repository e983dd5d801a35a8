package audit

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"unicode/utf8"

	"github.com/toolgate/toolgate/errcode"
)

// CONTRACT.md §2.3 golden vectors.
const (
	hashQOpenwop = "9458af8c77ede919beb4dd201de70ea7909225488c9e925190a9b4e585cb9d6f"
	hashEmpty    = "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"
	hashQX       = "a69fbbcf7209c6f659a75067c9fa03037c2ae23f55a6f854d5994209129bbbf6"
	hashCanary   = "4523bd8dca6136d5d21a419163f6e56d13f99f0889fd5b9da834390b15121e48"
)

func TestArgsHashGolden(t *testing.T) {
	tests := []struct {
		args []byte
		want string
	}{
		{[]byte(`{"q":"openwop"}`), hashQOpenwop},
		{[]byte(" {\n \"q\" : \"openwop\" } "), hashQOpenwop},
		{[]byte(`{"q":"\u006fpenwop"}`), hashQOpenwop},
		{[]byte(`{}`), hashEmpty},
		{[]byte(`{ }`), hashEmpty},
		{nil, hashEmpty},
		{[]byte{}, hashEmpty},
		{[]byte(`null`), hashEmpty},
		{[]byte(" null\n"), hashEmpty},
		{[]byte(`{"q":"x"}`), hashQX},
		{[]byte(`{"apiKey":"sk-canary-rfc0064-do-not-leak-xyz789","q":"openwop"}`), hashCanary},
		{[]byte(`{"q":"openwop","apiKey":"sk-canary-rfc0064-do-not-leak-xyz789"}`), hashCanary},
		{[]byte(`{"apiKey":"[redacted]","q":"openwop"}`), hashCanary},
	}
	withSecret := NewRedactor()
	withSecret.AddSecret("unrelated", "not-in-these-args")
	for _, tc := range tests {
		for name, hash := range map[string]func([]byte) (string, error){
			"ArgsHash": ArgsHash, "Redactor.ArgsHash": withSecret.ArgsHash,
		} {
			got, err := hash(tc.args)
			if err != nil || got != tc.want {
				t.Errorf("%s(%q) = %s, %v; want %s", name, tc.args, got, err, tc.want)
			}
		}
	}
	// The canonical bytes behind the canary vector.
	got, err := NewRedactor().RedactJSON([]byte(`{"apiKey":"sk-canary-rfc0064-do-not-leak-xyz789","q":"openwop"}`))
	if err != nil || string(got) != `{"apiKey":"[redacted]","q":"openwop"}` {
		t.Errorf("RedactJSON(canary) = %s, %v", got, err)
	}
}

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

func TestArgsHashIsSHA256OfRedactedCanonicalJSON(t *testing.T) {
	r := NewRedactor()
	r.AddSecret("db", "S3cr3t-Passw0rd-XYZ")
	tests := []struct{ args, canonical string }{
		{`{"dsn":"postgres://app:S3cr3t-Passw0rd-XYZ@db","n":1.50}`, `{"dsn":"postgres://app:[REDACTED:db]@db","n":1.5}`},
		{`[3,{"b":1,"a":2}]`, `[3,{"a":2,"b":1}]`}, // not an object: hashed as is
		{`"S3cr3t-Passw0rd-XYZ"`, `"[REDACTED:db]"`},
		{`1E2`, `100`},
		{`{"token":{"x":1},"q":"Bearer abcdefghij"}`, `{"q":"Bearer [redacted]","token":"[redacted]"}`},
	}
	for _, tc := range tests {
		got, err := r.ArgsHash([]byte(tc.args))
		if want := sha256Hex(tc.canonical); err != nil || got != want {
			t.Errorf("ArgsHash(%s) = %s, %v; want sha256(%s) = %s", tc.args, got, err, tc.canonical, want)
		}
		red, err := r.RedactJSON([]byte(tc.args))
		if err != nil || string(red) != tc.canonical {
			t.Errorf("RedactJSON(%s) = %s, %v; want %s", tc.args, red, err, tc.canonical)
		}
	}
	// RedactJSON keeps null (tool results may be null); ArgsHash takes it as {}.
	if red, err := r.RedactJSON([]byte(`null`)); err != nil || string(red) != `null` {
		t.Errorf("RedactJSON(null) = %s, %v", red, err)
	}
	if red, err := r.RedactJSON(nil); err != nil || string(red) != `{}` {
		t.Errorf("RedactJSON(nil) = %s, %v", red, err)
	}
}

func TestArgsHashKeyOrderIndependent(t *testing.T) {
	a := `{"b":[1,{"y":true,"x":null}],"a":{"d":"é","c":1e3},"\ud83d\ude00":0,"\ue000":1}`
	b := `{"\ue000":1,"a":{"c":1000,"d":"\u00e9"},"\ud83d\ude00":0,"b":[1,{"x":null,"y":true}]}`
	ha, err1 := ArgsHash([]byte(a))
	hb, err2 := ArgsHash([]byte(b))
	if err1 != nil || err2 != nil || ha != hb {
		t.Fatalf("reordered keys hash differently: %s %v, %s %v", ha, err1, hb, err2)
	}
	// Array order is significant.
	hc, _ := ArgsHash([]byte(`{"b":[{"y":true,"x":null},1],"a":{"d":"é","c":1e3},"\ud83d\ude00":0,"\ue000":1}`))
	if hc == ha {
		t.Fatalf("array order ignored")
	}
}

func TestArgsHashErrors(t *testing.T) {
	for _, in := range []string{`{`, `{"a":1,"a":2}`, `"\ud800"`, "\"\xff\"", `1e400`, `{} x`, ` `} {
		h, err := ArgsHash([]byte(in))
		if h != "" || errcode.CodeOf(err) != errcode.InvalidArgument {
			t.Errorf("ArgsHash(%q) = %q, %v; want an invalid_argument error", in, h, err)
		}
		h, obj, derr := defaultRedactor.ArgsHashDecode([]byte(in))
		if h != "" || obj != nil || derr == nil || derr.Error() != err.Error() {
			t.Errorf("ArgsHashDecode(%q) = %q, %v, %v; want ArgsHash's error %v", in, h, obj, derr, err)
		}
	}
}

// checkDecodedArgs checks that obj is what encoding/json decodes from args
// when they are an object (an empty map for empty args), and nil otherwise.
func checkDecodedArgs(t *testing.T, args []byte, obj map[string]any) {
	t.Helper()
	if len(args) == 0 {
		if obj == nil || len(obj) != 0 {
			t.Fatalf("ArgsHashDecode(%q): obj %#v, want an empty map", args, obj)
		}
		return
	}
	var want any
	if err := json.Unmarshal(args, &want); err != nil {
		t.Fatalf("ArgsHashDecode accepted %q, which encoding/json refuses: %v", args, err)
	}
	wantObj, isObj := want.(map[string]any)
	if !isObj {
		if obj != nil {
			t.Fatalf("ArgsHashDecode(%q): obj %#v for a non-object", args, obj)
		}
		return
	}
	if obj == nil || !reflect.DeepEqual(obj, wantObj) {
		t.Fatalf("ArgsHashDecode(%q): obj %#v, encoding/json gives %#v", args, obj, wantObj)
	}
}

// TestArgsHashDecode checks that ArgsHashDecode hashes as ArgsHash does
// (redacted) while decoding the real, unredacted arguments.
func TestArgsHashDecode(t *testing.T) {
	r := NewRedactor()
	r.AddSecret("db", "S3cr3t-Passw0rd-XYZ")
	tests := []struct {
		args string
		obj  map[string]any
	}{
		{`{"q":"openwop"}`, map[string]any{"q": "openwop"}},
		{``, map[string]any{}},
		{` { } `, map[string]any{}},
		{`{"dsn":"postgres://app:S3cr3t-Passw0rd-XYZ@db","n":1.50,"password":{"x":[1,"y"]}}`,
			map[string]any{"dsn": "postgres://app:S3cr3t-Passw0rd-XYZ@db", "n": 1.5, "password": map[string]any{"x": []any{1.0, "y"}}}},
		{`{"apiKey":"sk-canary-rfc0064-do-not-leak-xyz789","q":"\u006fpenwop"}`,
			map[string]any{"apiKey": "sk-canary-rfc0064-do-not-leak-xyz789", "q": "openwop"}},
		{`null`, nil},
		{`[1,{"a":2}]`, nil},
		{`"S3cr3t-Passw0rd-XYZ"`, nil},
	}
	for _, tc := range tests {
		h, obj, err := r.ArgsHashDecode([]byte(tc.args))
		want, werr := r.ArgsHash([]byte(tc.args))
		if err != nil || werr != nil || h != want {
			t.Errorf("ArgsHashDecode(%s) hash %s, %v; ArgsHash %s, %v", tc.args, h, err, want, werr)
		}
		if !reflect.DeepEqual(obj, tc.obj) || (obj == nil) != (tc.obj == nil) {
			t.Errorf("ArgsHashDecode(%s) obj %#v, want %#v", tc.args, obj, tc.obj)
		}
	}
	canary := []byte(`{"apiKey":"sk-canary-rfc0064-do-not-leak-xyz789","q":"openwop"}`)
	if h, _, _ := defaultRedactor.ArgsHashDecode(canary); h != hashCanary {
		t.Errorf("canary vector: %s, want %s", h, hashCanary)
	}
}

// TestArgsHashConcurrentAddSecret registers secrets while other goroutines
// hash documents containing them: every hash is the one before or after
// registration, and once AddSecret has returned, always the one after.
func TestArgsHashConcurrentAddSecret(t *testing.T) {
	r := NewRedactor()
	const n = 40
	type item struct {
		doc           []byte
		before, after string
		registered    atomic.Bool
	}
	items := make([]*item, n)
	for i := range items {
		value := fmt.Sprintf("resolved-credential-%03d", i)
		items[i] = &item{
			doc:    []byte(fmt.Sprintf(`{"note":"x %s y","i":%d}`, value, i)),
			before: sha256Hex(fmt.Sprintf(`{"i":%d,"note":"x %s y"}`, i, value)),
			after:  sha256Hex(fmt.Sprintf(`{"i":%d,"note":"x [REDACTED:c%d] y"}`, i, i)),
		}
	}
	var done atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer done.Store(true)
		for i, it := range items {
			r.AddSecret(fmt.Sprintf("c%d", i), fmt.Sprintf("resolved-credential-%03d", i))
			it.registered.Store(true)
		}
	}()
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for last := false; !last; {
				last = done.Load()
				for _, it := range items {
					reg := it.registered.Load()
					h, err := r.ArgsHash(it.doc)
					switch {
					case err != nil:
						t.Errorf("ArgsHash: %v", err)
						return
					case reg && h != it.after:
						t.Errorf("hash %s after registration, want %s", h, it.after)
						return
					case h != it.before && h != it.after:
						t.Errorf("hash %s is neither before nor after registration", h)
						return
					}
					if s := r.RedactString(string(it.doc)); reg && strings.Contains(s, "resolved-credential") {
						t.Errorf("RedactString after registration: %s", s)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
}

// fuzzSecrets are registered in FuzzArgsHash; none is part of a placeholder.
var fuzzSecrets = [][2]string{
	{"db", "S3cr3t-Passw0rd-XYZ"},
	{"gh", "hunter2hunter2"},
	{"k1", "abcdefgh"},
	{"k2", "abcdefghijkl"},
	{"uni", "pässwörd-✓-1234"},
}

// fuzzPlaceholders holds every placeholder text redaction can produce in
// FuzzArgsHash; a secret inside it cannot be guaranteed absent.
const fuzzPlaceholders = "[REDACTED:db] [REDACTED:gh] [REDACTED:k1] [REDACTED:k2] [REDACTED:uni] [REDACTED:fz] [redacted]"

// FuzzArgsHash checks that ArgsHash and RedactJSON never panic, are
// deterministic and agree with each other, that errors are invalid_argument
// and leak no secret, and that no registered secret survives in any string of
// the redacted canonical output.
func FuzzArgsHash(f *testing.F) {
	for _, s := range []string{
		`{"q":"openwop"}`, `{}`, `null`, ``,
		`{"apiKey":"sk-canary-rfc0064-do-not-leak-xyz789","q":"openwop"}`,
		`{"dsn":"postgres://app:S3cr3t-Passw0rd-XYZ@db","k":"abcdefghijklabcdefgh"}`,
		`{"S3cr3t-Passw0rd-XYZ":1,"S3cr3t-Passw0rd-XYZ":2}`,
		`{"x":"hunter2hunter2hunter2","hunter\u0032hunter2":[1,{"password":"p"}]}`,
		`["Bearer abcdefghijkl","ghp_abcdefghijklmnopqrstuvwxyz012345"]`,
	} {
		f.Add([]byte(s), "fuzzed-secret-1")
	}
	f.Fuzz(func(t *testing.T, data []byte, extra string) {
		r := NewRedactor()
		secrets := []string{}
		for _, s := range fuzzSecrets {
			r.AddSecret(s[0], s[1])
			secrets = append(secrets, s[1])
		}
		if len(extra) >= MinSecretLen && utf8.ValidString(extra) && !strings.ContainsAny(extra, "[]") &&
			!strings.Contains(fuzzPlaceholders, extra) {
			r.AddSecret("fz", extra)
			secrets = append(secrets, extra)
		}
		h1, err1 := r.ArgsHash(data)
		h2, err2 := r.ArgsHash(data)
		if h1 != h2 || (err1 == nil) != (err2 == nil) {
			t.Fatalf("not deterministic: %s %v / %s %v", h1, err1, h2, err2)
		}
		h3, obj, err3 := r.ArgsHashDecode(data)
		if h3 != h1 || (err3 == nil) != (err1 == nil) || (err3 != nil && err3.Error() != err1.Error()) {
			t.Fatalf("ArgsHashDecode = %s, %v; ArgsHash = %s, %v", h3, err3, h1, err1)
		}
		if err3 == nil {
			checkDecodedArgs(t, data, obj)
		}
		out, err := r.RedactJSON(data)
		if (err == nil) != (err1 == nil) {
			t.Fatalf("RedactJSON err %v, ArgsHash err %v", err, err1)
		}
		if err != nil {
			e := errcode.As(err)
			if e == nil || e.Code != errcode.InvalidArgument {
				t.Fatalf("error %v is not invalid_argument", err)
			}
			for _, s := range secrets {
				if strings.Contains(e.Message, s) {
					t.Fatalf("error message %q leaks %q", e.Message, s)
				}
			}
			return
		}
		if len(h1) != 64 || strings.ToLower(h1) != h1 {
			t.Fatalf("bad hash %q", h1)
		}
		if string(out) != "null" && sha256Hex(string(out)) != h1 {
			t.Fatalf("ArgsHash %s is not sha256 of RedactJSON %q", h1, out)
		}
		for _, str := range jsonStrings(t, out) {
			for _, s := range secrets {
				if strings.Contains(str, s) {
					t.Fatalf("output %q of %q leaks %q", out, data, s)
				}
			}
		}
	})
}

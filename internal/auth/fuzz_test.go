package auth

import (
	"strings"
	"testing"
)

// FuzzTokenInfo: reading the kid, alg and iss of an untrusted token for a
// log line never panics and yields only clipped printable ASCII.
func FuzzTokenInfo(f *testing.F) {
	f.Add("eyJhbGciOiJFUzI1NiIsImtpZCI6ImsxIn0.eyJpc3MiOiJodHRwczovL2kuZXhhbXBsZSJ9.AAAA")
	f.Add("e30.e30.")
	f.Add("a.b.c")
	f.Fuzz(func(t *testing.T, tok string) {
		kid, alg, iss, _ := tokenInfo(tok)
		for _, v := range []string{kid, alg, iss} {
			if len(v) > maxLogField+len("…") || strings.ContainsAny(v, "\n\r\x00") {
				t.Fatalf("unsafe log value %q", v)
			}
		}
	})
}

// FuzzParseJWKS: an untrusted JWKS document never panics the parser, and
// every key it keeps is a valid public key.
func FuzzParseJWKS(f *testing.F) {
	f.Add([]byte(`{"keys":[{"kty":"EC","crv":"P-256","x":"f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU","y":"x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0","kid":"k1","alg":"ES256","use":"sig"}]}`))
	f.Add([]byte(`{"keys":[{"kty":"oct","k":"AAAA"}]}`))
	f.Add([]byte(`{"keys":null}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		keys, err := parseJWKS(b)
		if err != nil {
			return
		}
		for _, k := range keys {
			if !k.Valid() || !k.IsPublic() {
				t.Fatalf("kept key %+v", k)
			}
		}
	})
}

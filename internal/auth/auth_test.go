package auth_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/identity"
	"github.com/toolgate/toolgate/internal/auth"
	"github.com/toolgate/toolgate/internal/config"
	"github.com/toolgate/toolgate/policy"
)

const (
	aliceKey = "tg_alice-secret-key"
	bobKey   = "tg_bob-secret-key"
	audience = "toolgate"
)

var now = time.Unix(1_800_000_000, 0)

func clock() time.Time { return now }

// issuer is a fake OIDC issuer on 127.0.0.1 serving a JWKS with one ES256
// key ("k1") and, for discovery, /.well-known/openid-configuration.
type issuer struct {
	srv       *httptest.Server
	key       *ecdsa.PrivateKey
	jwksHits  atomic.Int64
	issuerURL string
}

func newIssuer(t testing.TB) *issuer {
	t.Helper()
	is := &issuer{key: genKey(t)}
	mux := http.NewServeMux()
	mux.HandleFunc("/jwks", func(w http.ResponseWriter, r *http.Request) {
		is.jwksHits.Add(1)
		set := jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &is.key.PublicKey, KeyID: "k1", Algorithm: "ES256", Use: "sig"}}}
		_ = json.NewEncoder(w).Encode(set)
	})
	mux.HandleFunc("/.well-known/openid-configuration", func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(map[string]any{
			"issuer": is.issuerURL, "jwks_uri": is.issuerURL + "/jwks",
			"authorization_endpoint": is.issuerURL + "/authorize", "token_endpoint": is.issuerURL + "/token",
			"id_token_signing_alg_values_supported": []string{"ES256"},
		})
	})
	is.srv = httptest.NewServer(mux)
	t.Cleanup(is.srv.Close)
	is.issuerURL = is.srv.URL
	return is
}

func genKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// sign returns an ES256 JWT over claims with header kid.
func sign(t testing.TB, key *ecdsa.PrivateKey, kid string, claims map[string]any) string {
	t.Helper()
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: key}, (&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", kid))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := jwt.Signed(s).Claims(claims).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// claims returns valid claims for is, with extra merged over them (a nil
// value deletes the claim).
func (is *issuer) claims(extra map[string]any) map[string]any {
	c := map[string]any{
		"iss": is.issuerURL, "aud": audience, "sub": "user-1",
		"iat": now.Add(-time.Minute).Unix(), "exp": now.Add(time.Hour).Unix(),
	}
	for k, v := range extra {
		if v == nil {
			delete(c, k)
		} else {
			c[k] = v
		}
	}
	return c
}

func authCfg(is *issuer, j *config.JWT) config.Auth {
	cfg := config.Auth{APIKeys: []config.APIKey{
		{ID: "alice", KeySHA256: auth.HashKey(aliceKey), Tenant: "acme", Scopes: []string{"fs:read"}, Attrs: map[string]string{"team": "red"}},
		{ID: "bob", KeySHA256: auth.HashKey(bobKey)},
	}}
	if is != nil {
		cfg.JWT = &config.JWT{Issuer: is.issuerURL, Audience: audience, JWKSURL: is.issuerURL + "/jwks"}
		if j != nil {
			cfg.JWT.ScopesClaim, cfg.JWT.TenantClaim = j.ScopesClaim, j.TenantClaim
		}
	}
	return cfg
}

func newAuth(t testing.TB, cfg config.Auth) *auth.Authenticator {
	t.Helper()
	a, err := auth.New(t.Context(), cfg, auth.Options{Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func request(headers ...string) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "/v1/calls", nil)
	for i := 0; i+1 < len(headers); i += 2 {
		r.Header.Add(headers[i], headers[i+1])
	}
	return r
}

// wantUnauth checks err is Unauthenticated with message msg and that the
// challenge carries error="invalid_token" exactly when invalid is set.
func wantUnauth(t *testing.T, a *auth.Authenticator, err error, msg string, invalid bool) {
	t.Helper()
	e := errcode.As(err)
	if e == nil || e.Code != errcode.Unauthenticated || e.Message != msg {
		t.Fatalf("err = %v, want unauthenticated: %s", err, msg)
	}
	rec := httptest.NewRecorder()
	a.Challenge(rec, request(), err)
	ch := rec.Header().Get("WWW-Authenticate")
	if rec.Code != http.StatusUnauthorized || (strings.Contains(ch, `error="invalid_token"`) || strings.Contains(ch, `error="invalid_key"`)) != invalid {
		t.Fatalf("challenge %d %q, want invalid_token=%v", rec.Code, ch, invalid)
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	good := auth.HashKey("k")
	cases := map[string]struct {
		cfg  config.Auth
		opts auth.Options
	}{
		"uppercase hash":   {cfg: config.Auth{APIKeys: []config.APIKey{{ID: "a", KeySHA256: strings.ToUpper(good)}}}},
		"short hash":       {cfg: config.Auth{APIKeys: []config.APIKey{{ID: "a", KeySHA256: good[:62]}}}},
		"non-hex hash":     {cfg: config.Auth{APIKeys: []config.APIKey{{ID: "a", KeySHA256: "zz" + good[2:]}}}},
		"plaintext key":    {cfg: config.Auth{APIKeys: []config.APIKey{{ID: "a", KeySHA256: "tg_secret"}}}},
		"empty id":         {cfg: config.Auth{APIKeys: []config.APIKey{{KeySHA256: good}}}},
		"duplicate id":     {cfg: config.Auth{APIKeys: []config.APIKey{{ID: "a", KeySHA256: good}, {ID: "a", KeySHA256: auth.HashKey("j")}}}},
		"jwt no audience":  {cfg: config.Auth{JWT: &config.JWT{Issuer: "https://id.example.com", JWKSURL: "https://id.example.com/jwks"}}},
		"jwt no issuer":    {cfg: config.Auth{JWT: &config.JWT{Audience: "a", JWKSURL: "https://id.example.com/jwks"}}},
		"realm with quote": {opts: auth.Options{Realm: `to"olgate`}},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			a, err := auth.New(t.Context(), c.cfg, c.opts)
			if a != nil || errcode.CodeOf(err) != errcode.InvalidConfig {
				t.Fatalf("New = %v, %v; want invalid_config", a, err)
			}
			if strings.Contains(err.Error(), "tg_secret") {
				t.Errorf("error echoes the configured value: %v", err)
			}
		})
	}
}

func TestAPIKey(t *testing.T) {
	a := newAuth(t, authCfg(nil, nil))
	alice := policy.Principal{ID: "alice", Tenant: "acme", Scopes: []string{"fs:read"}, Attributes: map[string]string{"team": "red"}}
	for name, r := range map[string]*http.Request{
		"bearer":           request("Authorization", "Bearer "+aliceKey),
		"bearer lowercase": request("Authorization", "bearer "+aliceKey),
		"x-api-key":        request("X-API-Key", aliceKey),
	} {
		t.Run(name, func(t *testing.T) {
			p, err := a.Authenticate(r)
			if err != nil || !reflect.DeepEqual(p, alice) {
				t.Fatalf("Authenticate = %+v, %v; want %+v", p, err, alice)
			}
			p.Scopes[0], p.Attributes["team"] = "x", "x" // the caller owns the copy
		})
	}
	if p, err := a.Authenticate(request("X-API-Key", bobKey)); err != nil || p.ID != "bob" || p.Scopes != nil {
		t.Fatalf("bob: %+v, %v", p, err)
	}

	for _, c := range []struct {
		name    string
		r       *http.Request
		msg     string
		invalid bool
	}{
		{"missing", request(), "no credentials", false},
		{"wrong bearer", request("Authorization", "Bearer tg_wrong"), "unknown API key", true},
		{"wrong x-api-key", request("X-API-Key", "tg_wrong"), "unknown API key", true},
		{"jwt without jwt config", request("Authorization", "Bearer a.b.c"), "unknown API key", true},
		{"basic scheme", request("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte("u:"+aliceKey))), "unsupported authorization scheme (want Bearer)", false},
		{"empty bearer", request("Authorization", "Bearer "), "empty credential", false},
		{"both headers", request("Authorization", "Bearer "+aliceKey, "X-API-Key", aliceKey), "more than one credential presented (use one Authorization or X-API-Key header)", false},
		{"two authorization", request("Authorization", "Bearer "+aliceKey, "Authorization", "Bearer "+bobKey), "more than one credential presented (use one Authorization or X-API-Key header)", false},
		{"space in key", request("Authorization", "Bearer tg_a b"), "malformed credential (want printable ASCII without spaces)", true},
		{"too long", request("X-API-Key", strings.Repeat("k", auth.MaxCredentialLen+1)), "credential longer than 8192 bytes", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := a.Authenticate(c.r)
			wantUnauth(t, a, err, c.msg, c.invalid)
		})
	}
}

func TestNoMethodsFailsClosed(t *testing.T) {
	a := newAuth(t, config.Auth{})
	for _, r := range []*http.Request{request(), request("Authorization", "Bearer "+aliceKey), request("X-API-Key", "")} {
		_, err := a.Authenticate(r)
		wantUnauth(t, a, err, "no authentication method is configured", false)
	}
}

func TestJWT(t *testing.T) {
	is := newIssuer(t)
	a := newAuth(t, authCfg(is, nil))
	withTenant := newAuth(t, authCfg(is, &config.JWT{ScopesClaim: "scp", TenantClaim: "org"}))

	t.Run("scopes string and tid", func(t *testing.T) {
		tok := sign(t, is.key, "k1", is.claims(map[string]any{"scope": "fs:read  web:read", "tid": "acme"}))
		p, err := a.Authenticate(request("Authorization", "Bearer "+tok))
		want := policy.Principal{ID: "user-1", Tenant: "acme", Scopes: []string{"fs:read", "web:read"}}
		if err != nil || !reflect.DeepEqual(p, want) {
			t.Fatalf("Authenticate = %+v, %v; want %+v", p, err, want)
		}
	})
	t.Run("scopes array and configured claims", func(t *testing.T) {
		tok := sign(t, is.key, "k1", is.claims(map[string]any{"scp": []string{"fs:read", "fs:write"}, "org": "globex", "tid": "ignored"}))
		p, err := withTenant.Authenticate(request("Authorization", "Bearer "+tok))
		want := policy.Principal{ID: "user-1", Tenant: "globex", Scopes: []string{"fs:read", "fs:write"}}
		if err != nil || !reflect.DeepEqual(p, want) {
			t.Fatalf("Authenticate = %+v, %v; want %+v", p, err, want)
		}
	})
	t.Run("no tenant claim by default", func(t *testing.T) {
		p, err := a.Authenticate(request("Authorization", "Bearer "+sign(t, is.key, "k1", is.claims(nil))))
		if err != nil || p.ID != "user-1" || p.Tenant != "" || p.Scopes != nil {
			t.Fatalf("Authenticate = %+v, %v", p, err)
		}
	})
	t.Run("api key still works", func(t *testing.T) {
		if p, err := a.Authenticate(request("Authorization", "Bearer "+aliceKey)); err != nil || p.ID != "alice" {
			t.Fatalf("Authenticate = %+v, %v", p, err)
		}
	})

	other := genKey(t)
	header := base64.RawURLEncoding.EncodeToString
	payload, _ := json.Marshal(is.claims(nil))
	algNone := header([]byte(`{"alg":"none","typ":"JWT"}`)) + "." + header(payload) + "."
	hs, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.HS256, Key: []byte("0123456789abcdef0123456789abcdef")}, (&jose.SignerOptions{}).WithHeader("kid", "k1"))
	if err != nil {
		t.Fatal(err)
	}
	algHS, err := jwt.Signed(hs).Claims(is.claims(nil)).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	valid := sign(t, is.key, "k1", is.claims(nil))
	tampered := valid[:strings.LastIndex(valid, ".")] + "." + header(make([]byte, 64))

	for _, c := range []struct {
		name, token, msg string
		a                *auth.Authenticator
	}{
		{"expired", sign(t, is.key, "k1", is.claims(map[string]any{"exp": now.Add(-time.Second).Unix()})), "token expired", a},
		{"no exp", sign(t, is.key, "k1", is.claims(map[string]any{"exp": nil})), "token expired", a},
		{"not yet valid", sign(t, is.key, "k1", is.claims(map[string]any{"nbf": now.Add(time.Hour).Unix()})), "token not yet valid", a},
		{"wrong audience", sign(t, is.key, "k1", is.claims(map[string]any{"aud": "someone-else"})), "token audience mismatch", a},
		{"wrong issuer", sign(t, is.key, "k1", is.claims(map[string]any{"iss": "https://evil.example.com"})), "token issuer mismatch", a},
		{"other key", sign(t, other, "k1", is.claims(nil)), "invalid token signature", a},
		{"unknown kid", sign(t, other, "k9", is.claims(nil)), "token signing key (kid) is not in the issuer's key set", a},
		{"tampered signature", tampered, "invalid token signature", a},
		{"alg none", algNone, "token signature algorithm not allowed", a},
		{"alg HS256", algHS, "token signature algorithm not allowed", a},
		{"malformed", "bm90anNvbg.e30.AAAA", "malformed token", a},
		{"no sub", sign(t, is.key, "k1", is.claims(map[string]any{"sub": nil})), "token has no sub claim", a},
		{"tenant not a string", sign(t, is.key, "k1", is.claims(map[string]any{"tid": 7})), "token tenant claim is not a string", a},
		{"scopes bad type", sign(t, is.key, "k1", is.claims(map[string]any{"scope": []any{"a", 1}})), "token scopes claim is neither a string nor an array of strings", a},
		{"required tenant missing", sign(t, is.key, "k1", is.claims(nil)), "token has no tenant claim", withTenant},
	} {
		t.Run(c.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			c.a.Middleware(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
				t.Error("next called for a rejected token")
			})).ServeHTTP(rec, request("Authorization", "Bearer "+c.token))
			want := `Bearer realm="toolgate", resource_metadata="http://example.com/.well-known/oauth-protected-resource", error="invalid_token", error_description="` + c.msg + `"`
			if rec.Code != http.StatusUnauthorized || rec.Header().Get("WWW-Authenticate") != want {
				t.Fatalf("got %d %q\nwant 401 %q", rec.Code, rec.Header().Get("WWW-Authenticate"), want)
			}
			if strings.Contains(rec.Body.String(), c.token) {
				t.Error("response echoes the token")
			}
		})
	}
}

func TestJWTDiscovery(t *testing.T) {
	is := newIssuer(t)
	a, err := auth.New(t.Context(), config.Auth{JWT: &config.JWT{Issuer: is.issuerURL, Audience: audience}},
		auth.Options{Now: clock, HTTPClient: is.srv.Client()})
	if err != nil {
		t.Fatal(err)
	}
	if p, err := a.Authenticate(request("Authorization", "Bearer "+sign(t, is.key, "k1", is.claims(nil)))); err != nil || p.ID != "user-1" {
		t.Fatalf("Authenticate = %+v, %v", p, err)
	}
	_, err = a.Authenticate(request("Authorization", "Bearer not-a-jwt"))
	wantUnauth(t, a, err, "malformed token (not a JWT)", true)

	_, err = auth.New(t.Context(), config.Auth{JWT: &config.JWT{Issuer: is.issuerURL + "/nope", Audience: audience}}, auth.Options{})
	if errcode.CodeOf(err) != errcode.InvalidConfig {
		t.Fatalf("discovery failure: %v, want invalid_config", err)
	}
}

func TestJWKSUnavailable(t *testing.T) {
	is := newIssuer(t)
	cfg := authCfg(is, nil)
	cfg.JWT.JWKSURL = is.issuerURL + "/missing"
	a := newAuth(t, cfg)
	_, err := a.Authenticate(request("Authorization", "Bearer "+sign(t, is.key, "k1", is.claims(nil))))
	wantUnauth(t, a, err, "cannot fetch the issuer's signing keys", true)
}

func TestChallenge(t *testing.T) {
	a, err := auth.New(t.Context(), authCfg(nil, nil), auth.Options{Realm: "acme gateway"})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name        string
		r           *http.Request
		www, body   string
		contentType string
	}{
		{"no credentials", request(),
			`ApiKey realm="acme gateway", header="Authorization: Bearer, X-API-Key"`,
			`{"error":"unauthenticated","message":"no credentials"}` + "\n", "application/json"},
		{"bad key", request("Authorization", "Bearer tg_nope"),
			`ApiKey realm="acme gateway", header="Authorization: Bearer, X-API-Key", error="invalid_key", error_description="unknown API key"`,
			`{"error":"unauthenticated","message":"unknown API key"}` + "\n", "application/json"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := a.Authenticate(c.r)
			rec := httptest.NewRecorder()
			a.Challenge(rec, c.r, err)
			if rec.Code != 401 || rec.Header().Get("WWW-Authenticate") != c.www ||
				rec.Header().Get("Content-Type") != c.contentType || rec.Body.String() != c.body {
				t.Fatalf("got %d\n%v\n%q", rec.Code, rec.Header(), rec.Body.String())
			}
		})
	}
	rec := httptest.NewRecorder()
	a.Challenge(rec, request(), errors.New("boom \"secret\""))
	if rec.Header().Get("WWW-Authenticate") != `ApiKey realm="acme gateway", header="Authorization: Bearer, X-API-Key"` ||
		rec.Body.String() != `{"error":"unauthenticated","message":"authentication failed"}`+"\n" {
		t.Fatalf("foreign error: %v %q", rec.Header(), rec.Body.String())
	}
}

func TestMiddlewareAndContext(t *testing.T) {
	a := newAuth(t, authCfg(nil, nil))
	var got policy.Principal
	h := a.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var ok bool
		if got, ok = auth.PrincipalFrom(r.Context()); !ok {
			t.Error("no principal in context")
		}
	}))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, request("X-API-Key", aliceKey))
	if rec.Code != http.StatusOK || got.ID != "alice" {
		t.Fatalf("got %d %+v", rec.Code, got)
	}
	if _, ok := auth.PrincipalFrom(t.Context()); ok {
		t.Error("PrincipalFrom on a bare context reported a principal")
	}
	if p, ok := auth.PrincipalFrom(auth.WithPrincipal(t.Context(), policy.Principal{ID: "x"})); !ok || p.ID != "x" {
		t.Errorf("WithPrincipal round trip: %+v %v", p, ok)
	}
}

func TestConcurrent(t *testing.T) {
	is := newIssuer(t)
	a := newAuth(t, authCfg(is, nil))
	tok := sign(t, is.key, "k1", is.claims(nil))
	var wg sync.WaitGroup
	for i := range 64 {
		wg.Go(func() {
			cred := aliceKey
			if i%2 == 0 {
				cred = tok
			}
			if _, err := a.Authenticate(request("Authorization", "Bearer "+cred)); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if n := is.jwksHits.Load(); n != 1 {
		t.Errorf("JWKS fetched %d times, want 1 (cached)", n)
	}
}

func TestHashKeyAndNewKey(t *testing.T) {
	// sha256("abc"), FIPS 180-2 test vector.
	if got := auth.HashKey("abc"); got != "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad" {
		t.Errorf("HashKey = %s", got)
	}
	shape := regexp.MustCompile(`^tg_[A-Za-z0-9_-]{43}$`)
	seen := map[string]bool{}
	for range 100 {
		k, err := auth.NewKey()
		if err != nil || !shape.MatchString(k) || seen[k] {
			t.Fatalf("NewKey = %q, %v", k, err)
		}
		seen[k] = true
	}
	k, _ := auth.NewKey()
	a := newAuth(t, config.Auth{APIKeys: []config.APIKey{{ID: "new", KeySHA256: auth.HashKey(k)}}})
	if p, err := a.Authenticate(request("Authorization", "Bearer "+k)); err != nil || p.ID != "new" {
		t.Fatalf("fresh key: %+v, %v", p, err)
	}
}

// FuzzAuthenticate feeds arbitrary Authorization values: Authenticate must
// not panic, must fail with an Unauthenticated error that does not echo the
// value, and must succeed only for the configured key.
func FuzzAuthenticate(f *testing.F) {
	is := newIssuer(f)
	a := newAuth(f, authCfg(is, nil))
	for _, s := range []string{"", "Bearer", "Bearer " + aliceKey, "bearer  x", "Basic dTpw", "Bearer a.b.c",
		"Bearer " + sign(f, genKey(f), "k1", is.claims(nil)), "Bearer eyJhbGciOiJub25lIn0.e30.", "Bearer \x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, h string) {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.Header["Authorization"] = []string{h}
		p, err := a.Authenticate(r)
		if err == nil {
			if p.ID != "alice" || !strings.Contains(h, aliceKey) {
				t.Fatalf("authenticated %q as %+v", h, p)
			}
			return
		}
		if errcode.CodeOf(err) != errcode.Unauthenticated {
			t.Fatalf("error code %v", err)
		}
		if tok := strings.TrimSpace(strings.TrimPrefix(h, "Bearer")); len(tok) > 8 && strings.Contains(err.Error(), tok) {
			t.Fatalf("error %q echoes the credential", err)
		}
		a.Challenge(httptest.NewRecorder(), request(), err)
	})
}

// Recheck checks a credential record without the secret: an API key by id
// and keyed digest against the current keys (removed, rotated or forged:
// refused; changed scopes: the new principal), a JWT by its exp.
func TestRecheck(t *testing.T) {
	is := newIssuer(t)
	a := newAuth(t, authCfg(is, nil))
	p, c, err := a.AuthenticateCredential(request("Authorization", "Bearer "+aliceKey))
	if err != nil || c.Method != identity.MethodAPIKey || c.KeyID != "alice" || c.Digest == ([32]byte{}) || !c.Expires.IsZero() {
		t.Fatalf("AuthenticateCredential = %+v %+v %v", p, c, err)
	}
	if got, err := a.Recheck(c, p, now); err != nil || got.ID != "alice" || got.Tenant != "acme" {
		t.Errorf("Recheck of a current key = %+v, %v", got, err)
	}
	cfg := authCfg(is, nil)
	cfg.APIKeys[0].Scopes = []string{"fs:write"}
	if got, err := newAuth(t, cfg).Recheck(c, p, now); err != nil || !reflect.DeepEqual(got.Scopes, []string{"fs:write"}) {
		t.Errorf("Recheck after a scope change = %+v, %v", got, err)
	}
	cfg = authCfg(is, nil)
	cfg.APIKeys[0].KeySHA256 = auth.HashKey("tg_rotated")
	if _, err := newAuth(t, cfg).Recheck(c, p, now); errcode.CodeOf(err) != errcode.Unauthenticated {
		t.Errorf("Recheck after rotation: %v", err)
	}
	cfg = authCfg(is, nil)
	cfg.APIKeys = cfg.APIKeys[1:]
	if _, err := newAuth(t, cfg).Recheck(c, p, now); errcode.CodeOf(err) != errcode.Unauthenticated {
		t.Errorf("Recheck after removal: %v", err)
	}
	forged := c
	forged.KeyID = "bob"
	if _, err := a.Recheck(forged, p, now); errcode.CodeOf(err) != errcode.Unauthenticated {
		t.Errorf("Recheck of alice's digest under bob's id: %v", err)
	}
	if _, err := a.Recheck(identity.Credential{}, p, now); errcode.CodeOf(err) != errcode.Unauthenticated {
		t.Errorf("Recheck of the zero credential: %v", err)
	}

	tok := sign(t, is.key, "k1", is.claims(nil))
	jp, jc, err := a.AuthenticateCredential(request("Authorization", "Bearer "+tok))
	if err != nil || jc.Method != identity.MethodJWT || !jc.Expires.Equal(now.Add(time.Hour)) {
		t.Fatalf("AuthenticateCredential(JWT) = %+v %+v %v", jp, jc, err)
	}
	if got, err := a.Recheck(jc, jp, now.Add(time.Hour-time.Second)); err != nil || got.ID != "user-1" {
		t.Errorf("Recheck of a JWT before exp = %+v, %v", got, err)
	}
	if _, err := a.Recheck(jc, jp, now.Add(time.Hour)); errcode.CodeOf(err) != errcode.Unauthenticated || !strings.Contains(err.Error(), "expired") {
		t.Errorf("Recheck of a JWT at exp: %v", err)
	}
	if _, err := newAuth(t, authCfg(nil, nil)).Recheck(jc, jp, now); errcode.CodeOf(err) != errcode.Unauthenticated {
		t.Errorf("Recheck of a JWT once JWT is no longer configured: %v", err)
	}
}

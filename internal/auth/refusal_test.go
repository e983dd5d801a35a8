package auth_test

import (
	"bytes"
	"crypto/ecdsa"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/toolgate/toolgate/internal/auth"
	"github.com/toolgate/toolgate/internal/config"
	"github.com/toolgate/toolgate/internal/metrics"
)

// rotatingIssuer is a JWKS endpoint on 127.0.0.1 whose key set can change
// (a key rotation) and that counts its fetches.
type rotatingIssuer struct {
	srv     *httptest.Server
	mu      sync.Mutex
	keys    map[string]*ecdsa.PrivateKey
	fetches atomic.Int64
}

func newRotatingIssuer(t *testing.T) *rotatingIssuer {
	ri := &rotatingIssuer{keys: map[string]*ecdsa.PrivateKey{"k1": genKey(t)}}
	ri.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ri.fetches.Add(1)
		ri.mu.Lock()
		defer ri.mu.Unlock()
		var set jose.JSONWebKeySet
		for kid, k := range ri.keys {
			set.Keys = append(set.Keys, jose.JSONWebKey{Key: &k.PublicKey, KeyID: kid, Algorithm: "ES256", Use: "sig"})
		}
		_ = json.NewEncoder(w).Encode(set)
	}))
	t.Cleanup(ri.srv.Close)
	return ri
}

func (ri *rotatingIssuer) add(t *testing.T, kid string) *ecdsa.PrivateKey {
	k := genKey(t)
	ri.mu.Lock()
	ri.keys[kid] = k
	ri.mu.Unlock()
	return k
}

func (ri *rotatingIssuer) claims() map[string]any {
	return map[string]any{"iss": ri.srv.URL, "aud": audience, "sub": "user-1",
		"iat": now.Add(-time.Minute).Unix(), "exp": now.Add(time.Hour).Unix()}
}

// Issue 12 point 10: tokens naming unknown kids refetch the issuer's JWKS
// at most once per auth.jwt.jwks_refresh_interval (here the default, 60s),
// and a newly rotated key is accepted after one refetch once the interval
// has passed.
func TestJWKSRefetchLimited(t *testing.T) {
	ri := newRotatingIssuer(t)
	var mu sync.Mutex
	clockNow := now
	tick := func() time.Time { mu.Lock(); defer mu.Unlock(); return clockNow }
	advance := func(d time.Duration) { mu.Lock(); clockNow = clockNow.Add(d); mu.Unlock() }
	a, err := auth.New(t.Context(), config.Auth{JWT: &config.JWT{Issuer: ri.srv.URL, Audience: audience, JWKSURL: ri.srv.URL}},
		auth.Options{Now: tick, HTTPClient: ri.srv.Client()})
	if err != nil {
		t.Fatal(err)
	}
	ri.mu.Lock()
	k1 := ri.keys["k1"]
	ri.mu.Unlock()
	if _, err := a.Authenticate(request("Authorization", "Bearer "+sign(t, k1, "k1", ri.claims()))); err != nil {
		t.Fatal(err)
	}
	if n := ri.fetches.Load(); n != 1 {
		t.Fatalf("%d JWKS fetches for the first token, want 1", n)
	}
	forger := genKey(t)
	for i := range 10 {
		_, err := a.Authenticate(request("Authorization", "Bearer "+sign(t, forger, "forged-"+string(rune('a'+i)), ri.claims())))
		wantUnauth(t, a, err, "token signing key (kid) is not in the issuer's key set", true)
	}
	if n := ri.fetches.Load(); n != 1 {
		t.Fatalf("%d JWKS fetches after ten forged kids within the interval, want 1 (no refetch)", n)
	}
	// The issuer rotates to k2; once the interval has passed since the last
	// fetch, the first k2 token refetches once and is accepted, and so are
	// the next ones without a fetch.
	k2 := ri.add(t, "k2")
	advance(61 * time.Second)
	for range 3 {
		if p, err := a.Authenticate(request("Authorization", "Bearer "+sign(t, k2, "k2", ri.claims()))); err != nil || p.ID != "user-1" {
			t.Fatalf("a rotated key's token: %+v %v", p, err)
		}
	}
	if n := ri.fetches.Load(); n != 2 {
		t.Fatalf("%d JWKS fetches after the rotation, want 2", n)
	}
	// A forged kid right after that refetch does not fetch again.
	_, err = a.Authenticate(request("Authorization", "Bearer "+sign(t, forger, "forged-z", ri.claims())))
	wantUnauth(t, a, err, "token signing key (kid) is not in the issuer's key set", true)
	if n := ri.fetches.Load(); n != 2 {
		t.Fatalf("%d JWKS fetches, want 2", n)
	}
	// A token of a known kid with a bad signature never refetches.
	advance(time.Hour)
	_, err = a.Authenticate(request("Authorization", "Bearer "+sign(t, forger, "k1", ri.claims())))
	wantUnauth(t, a, err, "invalid token signature", true)
	if n := ri.fetches.Load(); n != 2 {
		t.Fatalf("%d JWKS fetches after a bad signature on a known kid, want 2", n)
	}
}

// A bad jwks_refresh_interval is a config error.
func TestJWKSRefreshIntervalConfig(t *testing.T) {
	_, err := config.Parse("t.yaml", []byte("auth:\n  jwt: {issuer: https://i.example, audience: a, jwks_url: https://i.example/jwks, jwks_refresh_interval: soon}\n"))
	if err == nil || !strings.Contains(err.Error(), "t.yaml:2:") || !strings.Contains(err.Error(), "jwks_refresh_interval") {
		t.Fatalf("err = %v", err)
	}
}

// Issue 12 point 9: every refusal is counted by reason and logged (rate
// limited) with the reason and the token's kid and iss, never the token.
func TestRefusalsCountedAndLogged(t *testing.T) {
	is := newIssuer(t)
	var logs bytes.Buffer
	var logMu sync.Mutex
	refusals := auth.NewRefusals(slog.New(slog.NewTextHandler(lockedWriter{&logMu, &logs}, &slog.HandlerOptions{Level: slog.LevelDebug})))
	a, err := auth.New(t.Context(), authCfg(is, nil), auth.Options{Now: clock, Refusals: refusals})
	if err != nil {
		t.Fatal(err)
	}
	expired := sign(t, is.key, "k1", is.claims(map[string]any{"exp": now.Add(-time.Second).Unix()}))
	foreign := sign(t, is.key, "k1", is.claims(map[string]any{"aud": "someone-else"}))
	for _, h := range [][]string{
		{"Authorization", "Bearer " + expired},
		{"Authorization", "Bearer " + foreign},
		{"Authorization", "Bearer tg_not-a-key"},
		{},
	} {
		if _, err := a.Authenticate(request(h...)); err == nil {
			t.Fatalf("%v authenticated", h)
		}
	}
	for r, want := range map[auth.Reason]int64{auth.ReasonExpired: 1, auth.ReasonAudience: 1, auth.ReasonUnknownAPIKey: 1, auth.ReasonNoCredentials: 1, auth.ReasonSignature: 0} {
		if got := refusals.Count(r); got != want {
			t.Errorf("Count(%s) = %d, want %d", r, got, want)
		}
	}
	logMu.Lock()
	out := logs.String()
	logMu.Unlock()
	for _, want := range []string{"reason=expired", "reason=audience", "reason=unknown_api_key", "reason=no_credentials", "kid=k1", "iss=" + is.issuerURL, "alg=ES256"} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
	for _, secret := range []string{expired, foreign, "tg_not-a-key", expired[strings.LastIndex(expired, ".")+1:]} {
		if strings.Contains(out, secret) {
			t.Errorf("log holds a presented credential %.20q…", secret)
		}
	}
	// Rate limited: a burst of refusals logs at most a burst of lines; the
	// next line reports how many were left out. Counting is not limited.
	logMu.Lock()
	logs.Reset()
	logMu.Unlock()
	for range 50 {
		a.Authenticate(request("X-API-Key", "tg_wrong"))
	}
	logMu.Lock()
	lines := strings.Count(logs.String(), "refused credentials")
	logMu.Unlock()
	if lines < 1 || lines > 11 {
		t.Errorf("%d log lines for 50 refusals in a burst, want at most 11", lines)
	}
	if got := refusals.Count(auth.ReasonUnknownAPIKey); got != 51 {
		t.Errorf("Count(unknown_api_key) = %d, want 51", got)
	}
	m, err := metrics.Text(refusals.Collector())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(m, `toolgate_auth_refused_total{reason="unknown_api_key"} 51`) ||
		!strings.Contains(m, `toolgate_auth_refused_total{reason="expired"} 1`) ||
		!strings.Contains(m, "# TYPE toolgate_auth_refused_total counter") {
		t.Errorf("metrics:\n%s", m)
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	b  *bytes.Buffer
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// Issue 12 point 13: with auth.jwt, the challenge names the RFC 9728
// metadata URL and the metadata names the issuer; with API keys only the
// challenge is not Bearer (no OAuth flow) and no metadata is served.
func TestProtectedResourceMetadata(t *testing.T) {
	is := newIssuer(t)
	cfg := authCfg(is, nil)
	cfg.JWT.ScopesSupported = []string{"fs:read"}
	a := newAuth(t, cfg)
	r := httptest.NewRequest(http.MethodPost, "http://gw.test:7070/mcp", nil)
	_, err := a.Authenticate(r)
	rec := httptest.NewRecorder()
	a.Challenge(rec, r, err)
	if got, want := rec.Header().Get("WWW-Authenticate"), `Bearer realm="toolgate", resource_metadata="http://gw.test:7070/.well-known/oauth-protected-resource/mcp"`; got != want {
		t.Fatalf("challenge %q, want %q", got, want)
	}
	for path, resource := range map[string]string{
		"/.well-known/oauth-protected-resource/mcp": "http://gw.test:7070/mcp",
		"/.well-known/oauth-protected-resource":     "http://gw.test:7070",
	} {
		rec := httptest.NewRecorder()
		if !a.ServeMetadata(rec, httptest.NewRequest(http.MethodGet, "http://gw.test:7070"+path, nil)) {
			t.Fatalf("%s not served", path)
		}
		var md map[string]any
		if err := json.Unmarshal(rec.Body.Bytes(), &md); err != nil || rec.Header().Get("Content-Type") != "application/json" {
			t.Fatalf("%s: %v %q", path, err, rec.Body.String())
		}
		if md["resource"] != resource || len(md["authorization_servers"].([]any)) != 1 || md["authorization_servers"].([]any)[0] != is.issuerURL ||
			md["scopes_supported"].([]any)[0] != "fs:read" || md["bearer_methods_supported"].([]any)[0] != "header" {
			t.Errorf("%s: %v", path, md)
		}
	}
	if a.ServeMetadata(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/.well-known/oauth-protected-resource/other", nil)) {
		t.Error("metadata served for an unknown resource path")
	}
	// auth.jwt.resource overrides the request's origin.
	cfg.JWT.Resource = "https://gw.example.com/mcp"
	a = newAuth(t, cfg)
	rec = httptest.NewRecorder()
	a.Challenge(rec, r, err)
	if got := rec.Header().Get("WWW-Authenticate"); !strings.Contains(got, `resource_metadata="https://gw.example.com/.well-known/oauth-protected-resource/mcp"`) {
		t.Errorf("challenge with auth.jwt.resource: %q", got)
	}
	// API keys only.
	keys := newAuth(t, authCfg(nil, nil))
	_, err = keys.Authenticate(r)
	rec = httptest.NewRecorder()
	keys.Challenge(rec, r, err)
	if got := rec.Header().Get("WWW-Authenticate"); strings.HasPrefix(got, "Bearer") || strings.Contains(got, "resource_metadata") {
		t.Errorf("API-key-only challenge %q sends clients into OAuth", got)
	}
	if keys.ServeMetadata(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/.well-known/oauth-protected-resource/mcp", nil)) {
		t.Error("metadata served without OAuth")
	}
}

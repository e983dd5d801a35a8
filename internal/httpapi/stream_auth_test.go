package httpapi

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/identity"
	"github.com/toolgate/toolgate/internal/auth"
	"github.com/toolgate/toolgate/internal/config"
)

// reloadable is an authenticator replaced as serve's reload replaces its
// own (swapAuth): a CredentialAuthenticator.
type reloadable struct {
	cur atomic.Pointer[auth.Authenticator]
}

func (s *reloadable) Authenticate(r *http.Request) (identity.Principal, error) {
	return s.cur.Load().Authenticate(r)
}
func (s *reloadable) AuthenticateCredential(r *http.Request) (identity.Principal, identity.Credential, error) {
	return s.cur.Load().AuthenticateCredential(r)
}
func (s *reloadable) Recheck(c identity.Credential, p identity.Principal, now time.Time) (identity.Principal, error) {
	return s.cur.Load().Recheck(c, p, now)
}
func (s *reloadable) Challenge(w http.ResponseWriter, r *http.Request, err error) {
	s.cur.Load().Challenge(w, r, err)
}

var _ CredentialAuthenticator = (*reloadable)(nil)

// jwtIssuer is an OIDC issuer on 127.0.0.1 serving one ES256 key's JWKS.
type jwtIssuer struct {
	url string
	key *ecdsa.PrivateKey
}

func newJWTIssuer(t *testing.T) *jwtIssuer {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	is := &jwtIssuer{key: k}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &k.PublicKey, KeyID: "k1", Algorithm: "ES256", Use: "sig"}}})
	}))
	t.Cleanup(srv.Close)
	is.url = srv.URL
	return is
}

func (is *jwtIssuer) token(t *testing.T, exp time.Time) string {
	t.Helper()
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: is.key}, (&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", "k1"))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := jwt.Signed(s).Claims(map[string]any{"iss": is.url, "aud": "toolgate", "sub": "user-1",
		"iat": time.Now().Add(-time.Minute).Unix(), "exp": exp.Unix()}).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// streamFixture is an API handler whose authenticator takes API key
// k-alice (tenant a) and JWTs of a test issuer.
type streamFixture struct {
	*fixture
	authn  *reloadable
	issuer *jwtIssuer
}

func (f *streamFixture) authCfg(keys ...config.APIKey) config.Auth {
	return config.Auth{APIKeys: keys, JWT: &config.JWT{Issuer: f.issuer.url, Audience: "toolgate", JWKSURL: f.issuer.url + "/jwks"}}
}

func newStreamFixture(t *testing.T) *streamFixture {
	t.Helper()
	f := &streamFixture{authn: &reloadable{}, issuer: newJWTIssuer(t)}
	f.load(t, config.APIKey{ID: "alice", Tenant: "a", KeySHA256: auth.HashKey("k-alice")})
	f.fixture = newFixture(t, func(o *Options) { o.Auth = f.authn })
	return f
}

func (f *streamFixture) load(t *testing.T, keys ...config.APIKey) {
	t.Helper()
	a, err := auth.New(context.Background(), f.authCfg(keys...), auth.Options{})
	if err != nil {
		t.Fatal(err)
	}
	f.authn.cur.Store(a)
}

// open opens GET /v1/events/stream with credential; lines arrive on the
// channel, closed at the stream's end.
func (f *streamFixture) open(t *testing.T, credential string) <-chan string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, f.srv.URL+"/v1/events/stream", nil)
	req.Header.Set("Authorization", "Bearer "+credential)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("stream: %d", resp.StatusCode)
	}
	ch := make(chan string, 64)
	go func() {
		defer close(ch)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			ch <- sc.Text()
		}
	}()
	if l := <-ch; !strings.HasPrefix(l, ": toolgate event stream") {
		t.Fatalf("stream opened with %q", l)
	}
	return ch
}

// nextData returns the next data line, or ended with the comments seen.
func nextData(lines <-chan string) (data string, ended bool, comments string) {
	for l := range lines {
		if strings.HasPrefix(l, "data: ") {
			return l, false, comments
		}
		comments += l + "\n"
	}
	return "", true, comments
}

func (f *streamFixture) append(t *testing.T, run, principal string) {
	t.Helper()
	ev, err := audit.NewEvent(run, audit.TypeSessionOpened, map[string]any{}, "", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	ev.Principal = principal
	ev.Tenant = "a"
	if principal == "user-1" {
		ev.Tenant = ""
	}
	if err := f.h.events.AppendEvents(context.Background(), ev); err != nil {
		t.Fatal(err)
	}
}

// Review defect 1: a stream opened with a JWT ends at the token's exp.
func TestAPIStreamEndsAtJWTExpiry(t *testing.T) {
	f := newStreamFixture(t)
	exp := time.Now().Add(2 * time.Second).Truncate(time.Second).Add(time.Second)
	lines := f.open(t, f.issuer.token(t, exp))
	f.append(t, "run-before", "user-1")
	if d, ended, _ := nextData(lines); ended || !strings.Contains(d, "run-before") {
		t.Fatalf("the event before exp: %q ended=%v", d, ended)
	}
	d, ended, comments := nextData(lines)
	if !ended || d != "" {
		t.Fatalf("the stream went on past its token's exp: %q", d)
	}
	if time.Now().Before(exp) || !strings.Contains(comments, "credential expired") {
		t.Errorf("the stream ended %v before exp, comments %q", time.Until(exp), comments)
	}
}

// Review defect 1: a stream opened with an API key that a reload then
// removes ends before it delivers another event.
func TestAPIStreamEndsWhenKeyRemoved(t *testing.T) {
	f := newStreamFixture(t)
	lines := f.open(t, "k-alice")
	f.append(t, "run-before", "alice")
	if d, ended, _ := nextData(lines); ended || !strings.Contains(d, "run-before") {
		t.Fatalf("the event before the reload: %q ended=%v", d, ended)
	}
	f.load(t, config.APIKey{ID: "bob", Tenant: "a", KeySHA256: auth.HashKey("k-bob")})
	f.append(t, "run-after", "alice")
	d, ended, comments := nextData(lines)
	if !ended || d != "" {
		t.Fatalf("after the key was removed the stream delivered %q", d)
	}
	if !strings.Contains(comments, "no longer accepted") {
		t.Errorf("comments %q", comments)
	}
}

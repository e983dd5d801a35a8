package console

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolgate/toolgate/catalog"
	"github.com/toolgate/toolgate/identity"
	"github.com/toolgate/toolgate/internal/auth"
	"github.com/toolgate/toolgate/internal/config"
	"github.com/toolgate/toolgate/internal/httpapi"
	"github.com/toolgate/toolgate/internal/pipeline"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/ratelimit"
	"github.com/toolgate/toolgate/store"
	"github.com/toolgate/toolgate/store/memstore"
)

// swappable is an authenticator the test replaces (as serve's reload
// does).
type swappable struct {
	cur atomic.Pointer[auth.Authenticator]
}

func (s *swappable) Authenticate(r *http.Request) (policy.Principal, error) {
	return s.cur.Load().Authenticate(r)
}
func (s *swappable) AuthenticateCredential(r *http.Request) (identity.Principal, identity.Credential, error) {
	return s.cur.Load().AuthenticateCredential(r)
}
func (s *swappable) Recheck(c identity.Credential, p identity.Principal, now time.Time) (identity.Principal, error) {
	return s.cur.Load().Recheck(c, p, now)
}
func (s *swappable) Challenge(w http.ResponseWriter, r *http.Request, err error) {
	s.cur.Load().Challenge(w, r, err)
}

func newAuth(t *testing.T, keys ...config.APIKey) *auth.Authenticator {
	t.Helper()
	a, err := auth.New(context.Background(), config.Auth{APIKeys: keys}, auth.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

var (
	aliceKey = config.APIKey{ID: "alice", Tenant: "a", KeySHA256: auth.HashKey("k-alice")}
	bobKey   = config.APIKey{ID: "bob", Tenant: "a", KeySHA256: auth.HashKey("k-bob")}
)

// fixture is a console over a memstore and a pipeline with the native
// tools echo (allowed) and hidden (no rule), signed in with API key
// "k-alice".
type fixture struct {
	c      *Console
	srv    *httptest.Server
	authn  *swappable
	events store.Events
}

func newFixture(t *testing.T, tls bool, mutate func(*Options)) *fixture {
	t.Helper()
	return newFixtureServer(t, tls, mutate, nil)
}

// newFixtureServer is newFixture with serverConfig, when not nil, applied
// to the test server's http.Server before it starts (a read deadline).
func newFixtureServer(t *testing.T, tls bool, mutate func(*Options), serverConfig func(*http.Server)) *fixture {
	t.Helper()
	st, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	pipe, err := pipeline.New(pipeline.Options{Limiter: ratelimit.NewMemory(ratelimit.MemoryOptions{}),
		Events: store.EventLog(st), Receipts: store.ReceiptLog(st)})
	if err != nil {
		t.Fatal(err)
	}
	snap, err := catalog.NewSnapshot([]catalog.Tool{
		{Descriptor: catalog.ToolDescriptor{ToolID: "native:echo", Title: "<b>echo</b>", Source: catalog.SourceHostExtension, SafetyTier: catalog.TierPure},
			Transport: catalog.TransportNative, Name: "echo"},
		{Descriptor: catalog.ToolDescriptor{ToolID: "native:hidden", Source: catalog.SourceHostExtension, SafetyTier: catalog.TierRead},
			Transport: catalog.TransportNative, Name: "hidden"},
	}, catalog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	prg, err := policy.Load("p.yaml", []byte(`rules: [{id: all, effect: allow, tools: ["native:echo"]}]`), policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	pipe.Swap(&pipeline.State{Catalog: snap, Policy: prg})
	authn := &swappable{}
	authn.cur.Store(newAuth(t, aliceKey))
	opts := Options{API: httpapi.Options{Pipeline: pipe, Auth: authn, Events: st, Sessions: st, Receipts: store.ReceiptLog(st)}, SignIn: authn}
	if mutate != nil {
		mutate(&opts)
	}
	c, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(Prefix, c)
	srv := httptest.NewUnstartedServer(mux)
	if serverConfig != nil {
		serverConfig(srv.Config)
	}
	if tls {
		srv.StartTLS()
	} else {
		srv.Start()
	}
	t.Cleanup(func() { c.Close(); srv.Close() })
	return &fixture{c: c, srv: srv, authn: authn, events: st}
}

// client returns a browser-like client of f: a cookie jar, no redirects
// followed.
func (f *fixture) client(t *testing.T) *http.Client {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	cl := f.srv.Client()
	return &http.Client{Transport: cl.Transport, Jar: jar,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

type answer struct {
	status int
	header http.Header
	body   string
	resp   *http.Response
}

func do(t *testing.T, cl *http.Client, req *http.Request) answer {
	t.Helper()
	resp, err := cl.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return answer{resp.StatusCode, resp.Header, string(b), resp}
}

func (f *fixture) get(t *testing.T, cl *http.Client, path string) answer {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, f.srv.URL+path, nil)
	return do(t, cl, req)
}

func (f *fixture) post(t *testing.T, cl *http.Client, path, contentType, body string, header http.Header) answer {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, f.srv.URL+path, strings.NewReader(body))
	req.Header.Set("Content-Type", contentType)
	for k, v := range header {
		req.Header[k] = v
	}
	return do(t, cl, req)
}

var (
	signinCSRF = regexp.MustCompile(`name="csrf" value="([^"]+)"`)
	pageCSRF   = regexp.MustCompile(`data-csrf="([^"]+)"`)
)

// signIn signs cl in with key and returns the page CSRF token.
func (f *fixture) signIn(t *testing.T, cl *http.Client, key string) answer {
	t.Helper()
	page := f.get(t, cl, "/ui/signin")
	m := signinCSRF.FindStringSubmatch(page.body)
	if m == nil {
		t.Fatalf("sign-in page without a CSRF field: %s", page.body)
	}
	return f.post(t, cl, "/ui/signin", "application/x-www-form-urlencoded", url.Values{"credential": {key}, "csrf": {m[1]}}.Encode(), nil)
}

func (f *fixture) csrf(t *testing.T, cl *http.Client) string {
	t.Helper()
	m := pageCSRF.FindStringSubmatch(f.get(t, cl, "/ui/catalog").body)
	if m == nil {
		t.Fatal("the catalog page has no CSRF token")
	}
	return m[1]
}

func sessionCookieOf(a answer) *http.Cookie {
	for _, c := range a.resp.Cookies() {
		if c.Name == sessionCookie {
			return c
		}
	}
	return nil
}

// Security headers on every kind of answer; every route but the sign-in
// page and the assets needs a session.
func TestHeadersAndAuthentication(t *testing.T) {
	f := newFixture(t, false, nil)
	cl := f.client(t)
	for _, path := range []string{"/ui/signin", "/ui/static/console.js", "/ui/catalog", "/ui/api/v1/tools", "/ui/nope"} {
		a := f.get(t, cl, path)
		if a.header.Get("Content-Security-Policy") != ContentSecurityPolicy || a.header.Get("X-Frame-Options") != "DENY" ||
			a.header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("GET %s: headers %v", path, a.header)
		}
	}
	if a := f.get(t, cl, "/ui/static/console.js"); a.status != http.StatusOK || !strings.Contains(a.body, "X-CSRF-Token") {
		t.Errorf("the script without a session: %d", a.status)
	}
	for _, path := range []string{"/ui/", "/ui/catalog", "/ui/audit", "/ui/approvals", "/ui/policy"} {
		if a := f.get(t, cl, path); a.status != http.StatusSeeOther || a.header.Get("Location") != "/ui/signin" {
			t.Errorf("GET %s without a session: %d %q", path, a.status, a.header.Get("Location"))
		}
	}
	if a := f.get(t, cl, "/ui/api/v1/tools"); a.status != http.StatusUnauthorized || !strings.Contains(a.body, `"unauthenticated"`) {
		t.Errorf("API without a session: %d %s", a.status, a.body)
	}
	// A bearer credential does not open the console's API: only a session does.
	req, _ := http.NewRequest(http.MethodGet, f.srv.URL+"/ui/api/v1/tools", nil)
	req.Header.Set("Authorization", "Bearer k-alice")
	if a := do(t, cl, req); a.status != http.StatusUnauthorized {
		t.Errorf("API with a bearer key and no session: %d", a.status)
	}
	if strings.Contains(ContentSecurityPolicy, "unsafe-inline") || !strings.Contains(ContentSecurityPolicy, "frame-ancestors 'none'") {
		t.Errorf("CSP %q", ContentSecurityPolicy)
	}
}

// Sign-in: CSRF double submit, refused credentials never echoed, cookie
// flags (Secure over TLS), the catalog is Disclose's answer and escaped,
// the API needs the CSRF token to change state, sign-out ends the session.
func TestSignInSessionSignOut(t *testing.T) {
	for _, tls := range []bool{false, true} {
		f := newFixture(t, tls, nil)
		cl := f.client(t)
		if a := f.post(t, cl, "/ui/signin", "application/x-www-form-urlencoded", "credential=k-alice", nil); a.status != http.StatusForbidden {
			t.Errorf("sign-in without the CSRF token: %d", a.status)
		}
		if a := f.signIn(t, cl, "k-wrong-secret"); a.status != http.StatusUnauthorized || strings.Contains(a.body, "k-wrong-secret") || sessionCookieOf(a) != nil {
			t.Errorf("a wrong key: %d, echoed %v", a.status, strings.Contains(a.body, "k-wrong-secret"))
		}
		a := f.signIn(t, cl, "k-alice")
		ck := sessionCookieOf(a)
		if a.status != http.StatusSeeOther || ck == nil || !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode || ck.Path != "/ui/" || ck.Secure != tls {
			t.Fatalf("tls=%v sign-in: %d cookie %+v", tls, a.status, ck)
		}
		page := f.get(t, cl, "/ui/catalog")
		if page.status != http.StatusOK || !strings.Contains(page.body, `data-tool-id="native:echo"`) || strings.Contains(page.body, "native:hidden") {
			t.Errorf("catalog: %d %s", page.status, page.body)
		}
		if strings.Contains(page.body, "<b>echo</b>") || !strings.Contains(page.body, "&lt;b&gt;echo&lt;/b&gt;") {
			t.Error("the catalog does not escape a tool title")
		}
		if strings.Contains(page.body, "k-alice") || strings.Contains(page.body, ck.Value) {
			t.Error("a page holds the credential or the session cookie")
		}
		csrf := f.csrf(t, cl)
		explain := `{"toolId":"native:echo"}`
		if a := f.post(t, cl, "/ui/api/v1/policy/explain", "application/json", explain, nil); a.status != http.StatusForbidden || !strings.Contains(a.body, "CSRF") {
			t.Errorf("explain without the CSRF token: %d %s", a.status, a.body)
		}
		if a := f.post(t, cl, "/ui/api/v1/policy/explain", "application/json", explain, http.Header{CSRFHeader: {"x" + csrf}}); a.status != http.StatusForbidden {
			t.Errorf("explain with a wrong CSRF token: %d", a.status)
		}
		a = f.post(t, cl, "/ui/api/v1/policy/explain", "application/json", explain, http.Header{CSRFHeader: {csrf}})
		var ex httpapi.ExplainResponse
		if a.status != http.StatusOK || json.Unmarshal([]byte(a.body), &ex) != nil || ex.Decision != policy.EffectAllow || ex.Principal != "alice" {
			t.Errorf("explain with the CSRF token: %d %s", a.status, a.body)
		}
		if a := f.get(t, cl, "/ui/api/v1/tools"); a.status != http.StatusOK || !strings.Contains(a.body, "native:echo") || strings.Contains(a.body, "native:hidden") {
			t.Errorf("GET tools through the console: %d %s", a.status, a.body)
		}
		if a := f.post(t, cl, "/ui/signout", "application/x-www-form-urlencoded", "", nil); a.status != http.StatusForbidden {
			t.Errorf("sign-out without the CSRF token: %d", a.status)
		}
		if a := f.post(t, cl, "/ui/signout", "application/x-www-form-urlencoded", "csrf="+url.QueryEscape(csrf), nil); a.status != http.StatusSeeOther {
			t.Errorf("sign-out: %d", a.status)
		}
		if f.c.sessions.count() != 0 {
			t.Errorf("sessions after sign-out: %d", f.c.sessions.count())
		}
		// The old cookie no longer works, even replayed.
		req, _ := http.NewRequest(http.MethodGet, f.srv.URL+"/ui/api/v1/tools", nil)
		req.AddCookie(ck)
		if a := do(t, f.client(t), req); a.status != http.StatusUnauthorized {
			t.Errorf("the signed-out cookie replayed: %d", a.status)
		}
	}
}

// A credential the authenticator no longer accepts (a reload removed the
// key) ends its sessions at their next request; changed scopes apply at
// once. The session cap refuses sign-ins beyond it.
func TestRevocationAndCap(t *testing.T) {
	f := newFixture(t, false, func(o *Options) { o.MaxSessions = 1 })
	f.authn.cur.Store(newAuth(t, aliceKey, bobKey))
	cl := f.client(t)
	if a := f.signIn(t, cl, "k-alice"); a.status != http.StatusSeeOther {
		t.Fatalf("sign-in: %d", a.status)
	}
	if a := f.signIn(t, f.client(t), "k-bob"); a.status != http.StatusTooManyRequests {
		t.Errorf("another principal's sign-in over MaxSessions 1: %d", a.status)
	}
	f.authn.cur.Store(newAuth(t, aliceKey))
	if strings.Contains(f.get(t, cl, "/ui/policy").body, `id="rules"`) {
		t.Error("the rules are shown without toolgate:admin")
	}
	admin := aliceKey
	admin.Scopes = []string{httpapi.AdminScope}
	f.authn.cur.Store(newAuth(t, admin))
	if p := f.get(t, cl, "/ui/policy").body; !strings.Contains(p, `id="rules"`) || !strings.Contains(p, "p.yaml:1") {
		t.Errorf("after a reload granting toolgate:admin, the policy page: %s", p)
	}
	f.authn.cur.Store(newAuth(t, config.APIKey{ID: "bob", Tenant: "a", KeySHA256: auth.HashKey("k-bob")}))
	if a := f.get(t, cl, "/ui/api/v1/tools"); a.status != http.StatusUnauthorized {
		t.Errorf("after a reload removed the key: %d", a.status)
	}
	if a := f.get(t, cl, "/ui/catalog"); a.status != http.StatusSeeOther {
		t.Errorf("a page after the key was removed: %d", a.status)
	}
	if n := f.c.sessions.count(); n != 0 {
		t.Errorf("sessions after revocation: %d", n)
	}
}

// A session ends at Options.SessionTTL after sign-in.
func TestSessionExpiry(t *testing.T) {
	var clock atomic.Int64
	start := time.Now()
	f := newFixture(t, false, func(o *Options) {
		o.SessionTTL = time.Hour
		o.Now = func() time.Time { return start.Add(time.Duration(clock.Load())) }
	})
	cl := f.client(t)
	if a := f.signIn(t, cl, "k-alice"); a.status != http.StatusSeeOther || sessionCookieOf(a).MaxAge != 3600 {
		t.Fatalf("sign-in: %d %+v", a.status, sessionCookieOf(a))
	}
	clock.Store(int64(time.Hour - time.Second))
	if a := f.get(t, cl, "/ui/api/v1/tools"); a.status != http.StatusOK {
		t.Errorf("a second before expiry: %d", a.status)
	}
	clock.Store(int64(time.Hour))
	if a := f.get(t, cl, "/ui/api/v1/tools"); a.status != http.StatusUnauthorized {
		t.Errorf("at expiry: %d", a.status)
	}
	if a := f.post(t, cl, "/ui/signout", "application/x-www-form-urlencoded", "", nil); a.status != http.StatusForbidden || !strings.HasPrefix(a.body, "forbidden: ") {
		t.Errorf("a POST page without a session: %d %q", a.status, a.body)
	}
}

// The Policy page's explain form sends {toolId, principal: {id}} (the
// form's principal id alone, console.js): an admin gets the answer for
// that configured principal of its tenant (its scopes), and 404 for an id
// that is no principal of its tenant, such as another tenant's.
func TestPolicyPageExplainsConfiguredPrincipal(t *testing.T) {
	reader := config.APIKey{ID: "alice", Tenant: "a", KeySHA256: auth.HashKey("k-alice"), Scopes: []string{"notes:read"}}
	root := config.APIKey{ID: "root", Tenant: "a", KeySHA256: auth.HashKey("k-root"), Scopes: []string{httpapi.AdminScope, "notes:read"}}
	bea := config.APIKey{ID: "bea", Tenant: "b", KeySHA256: auth.HashKey("k-bea"), Scopes: []string{httpapi.AdminScope, "notes:read"}}
	f := newFixture(t, false, func(o *Options) {
		sw := o.SignIn.(*swappable)
		sw.cur.Store(newAuth(t, reader, root, bea))
		o.API.Principals = func() []identity.Principal { return sw.cur.Load().Principals() }
		prg, err := policy.Load("p.yaml", []byte(`rules: [{id: readers, effect: allow, tools: ["native:echo"], scopes: [notes:read]}]`), policy.Options{})
		if err != nil {
			t.Fatal(err)
		}
		st := o.API.Pipeline.State()
		o.API.Pipeline.Swap(&pipeline.State{Catalog: st.Catalog, Policy: prg})
	})
	form := `{"toolId":"native:echo","args":{},"principal":{"id":"alice"}}`
	cl := f.client(t)
	f.signIn(t, cl, "k-root")
	a := f.post(t, cl, "/ui/api/v1/policy/explain", "application/json", form, http.Header{CSRFHeader: {f.csrf(t, cl)}})
	var ex httpapi.ExplainResponse
	if a.status != http.StatusOK || json.Unmarshal([]byte(a.body), &ex) != nil || ex.Principal != "alice" || ex.Decision != policy.EffectAllow || ex.Rule != "readers" {
		t.Errorf("root explains for alice: %d %s", a.status, a.body)
	}
	cl = f.client(t)
	f.signIn(t, cl, "k-bea")
	if a := f.post(t, cl, "/ui/api/v1/policy/explain", "application/json", form, http.Header{CSRFHeader: {f.csrf(t, cl)}}); a.status != http.StatusNotFound || !strings.Contains(a.body, "principal.id") {
		t.Errorf("tenant b's admin explains for tenant a's alice: %d %s", a.status, a.body)
	}
}

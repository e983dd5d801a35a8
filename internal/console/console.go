// Package console serves toolgate's web console under /ui/ (issue 16
// point 4): server-rendered pages (html/template, embedded assets, one
// small script of our own, no build step) for the catalog, the live audit
// feed, the approval inbox and the policy.
//
// The console is a client of the same internal functions as the HTTP API,
// never a second implementation: every data read and every state change
// goes through an httpapi.Handler built from the gateway's own
// httpapi.Options (pipeline, store, approvals, scopes), mounted at
// /ui/api/ and authenticated by the console's session instead of a bearer
// credential. So the catalog is pipeline.Disclose's answer (what tools/list
// shows), the live audit is GET /v1/events/stream with its tenant scoping
// and visibility filter, the approval inbox and its decisions are GET
// /v1/approvals and POST /v1/approvals/{id}/approve|deny with their scope
// checks, and the explain form is POST /v1/policy/explain.
//
// Sign-in takes an API key or a JWT and checks it with the API's own
// authenticator (Options.SignIn). The console does not keep the credential:
// a session holds the authenticated principal and the secret-free
// identity.Credential the authenticator returned (an API key's id and a
// keyed digest of its stored hash, a JWT's expiry), which SignIn.Recheck
// checks again on every later request, so a key removed or rotated by a
// reload, or a JWT past its exp, ends the session at once, and changed
// scopes apply. The credential is never in a page, a cookie or a log;
// the browser holds an HttpOnly,
// SameSite=Strict session cookie (Secure when served over TLS) scoped to
// /ui/. Sessions live in memory, end at Options.SessionTTL, are capped at
// Options.MaxSessions in all and Options.MaxSessionsPerPrincipal for one
// principal (its newest sign-in ends its oldest session), and end at
// sign-out. An open live audit stream ends with its session (sign-out,
// expiry, eviction) and when its credential fails the recheck made before
// every event it sends and at every heartbeat. Every state-changing request
// (sign-in, sign-out, any /ui/api/ method but GET and HEAD) carries a CSRF
// token: the session's, in the X-CSRF-Token header or the csrf field of
// a form body; the sign-in form a double-submit token (cookie and field).
// A form body that does not arrive before the connection's read deadline
// is answered 408 timeout. A
// request without it is refused 403 forbidden before it reaches the API.
//
// Every /ui/ route but the sign-in page and the static assets needs a
// session (pages redirect to the sign-in page, /ui/api/ answers 401).
// Every answer carries a Content-Security-Policy without inline script or
// style, X-Frame-Options DENY, X-Content-Type-Options nosniff,
// Referrer-Policy no-referrer and Cache-Control no-store (assets: a short
// cache). No credential is ever written into a page.
package console

import (
	"bytes"
	"context"
	"embed"
	"encoding/json"
	"errors"
	"html/template"
	"io"
	"io/fs"
	"log/slog"
	"mime"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/toolgate/toolgate/catalog"
	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/identity"
	"github.com/toolgate/toolgate/internal/httpapi"
	"github.com/toolgate/toolgate/internal/pipeline"
)

// Prefix is the path the console is served under.
const Prefix = "/ui/"

// DefaultSessionTTL is a session's lifetime when Options.SessionTTL is 0.
const DefaultSessionTTL = 8 * time.Hour

// DefaultMaxSessions caps the live sessions when Options.MaxSessions is 0.
const DefaultMaxSessions = 1000

// DefaultMaxSessionsPerPrincipal caps one principal's live sessions when
// Options.MaxSessionsPerPrincipal is 0.
const DefaultMaxSessionsPerPrincipal = 16

// CSRFHeader is the request header that carries the session's CSRF token
// on /ui/api/ requests that change state.
const CSRFHeader = "X-CSRF-Token"

const (
	sessionCookie = "toolgate_session"
	signinCookie  = "toolgate_signin"
	// maxCredential bounds the sign-in form's credential (bytes).
	maxCredential = 16 << 10
)

// ContentSecurityPolicy is the CSP of every console answer: only the
// console's own origin for scripts, styles, images and connections; no
// inline script or style, no framing, no plugins, forms post only to the
// console.
const ContentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; " +
	"form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Options configures New. API and SignIn are required.
type Options struct {
	// API is the HTTP API's configuration, the same value the gateway
	// builds its /v1 surface from; the console builds its own
	// httpapi.Handler from a copy with Auth replaced by its sessions and
	// TestSeams off.
	API httpapi.Options
	// SignIn checks a sign-in credential (API key or JWT) as the API
	// does, and checks the session's credential record again on every
	// request: the gateway's authenticator (*auth.Authenticator, or a
	// wrapper following its reloads).
	SignIn Authenticator
	// SessionTTL is a session's lifetime from sign-in; 0 means
	// DefaultSessionTTL.
	SessionTTL time.Duration
	// MaxSessions caps the live sessions; a sign-in beyond it by a
	// principal without a session is refused (429 rate_limited). 0 means
	// DefaultMaxSessions.
	MaxSessions int
	// MaxSessionsPerPrincipal caps one principal's (tenant and id) live
	// sessions: its sign-in beyond it ends its oldest session, so one
	// credential can never fill MaxSessions. 0 means
	// DefaultMaxSessionsPerPrincipal; it is at most MaxSessions.
	MaxSessionsPerPrincipal int
	// Logger receives operator logs; nil discards.
	Logger *slog.Logger
	// Now is the clock of session expiry; nil means time.Now.
	Now func() time.Time
	// Principals, when set, lists the configured principals (the API
	// keys'); a holder of httpapi.AdminScope sees on the Catalog page which
	// of its own tenant's principals may see each tool (pipeline.Disclose
	// for each).
	Principals func() []identity.Principal
	// CredentialMissing, when set, reports whether a tool that needs a
	// credential (descriptor auth.credentialRef) would find one of its
	// credentials missing if called now; the Catalog page then says
	// "needed, missing" or "needed, configured" (just "needed" without
	// it). It must be safe for concurrent use and never return or log a
	// credential's value.
	CredentialMissing func(toolID string) bool
}

// Authenticator is what the console signs in with; *auth.Authenticator
// (internal/auth) implements it. Both methods must be safe for concurrent
// use.
type Authenticator interface {
	// AuthenticateCredential authenticates r's Authorization header as
	// the API does and returns the principal and the secret-free record
	// of the credential. Errors: *errcode.Error unauthenticated.
	AuthenticateCredential(r *http.Request) (identity.Principal, identity.Credential, error)
	// Recheck checks again, at now, a credential record returned for p
	// and returns the principal as of now. Errors: *errcode.Error
	// unauthenticated when the credential is no longer accepted.
	Recheck(c identity.Credential, p identity.Principal, now time.Time) (identity.Principal, error)
}

// Console is the /ui/ handler. Safe for concurrent use; Close ends its
// live audit streams.
type Console struct {
	pipe        *pipeline.Pipeline
	signIn      Authenticator
	api         *httpapi.Handler
	sessions    *sessions
	approvers   string
	log         *slog.Logger
	principals  func() []identity.Principal
	credMissing func(toolID string) bool
	tmpl        *template.Template
	static      http.Handler
	mux         *http.ServeMux
}

// New returns the console. Errors (*errcode.Error invalid_config): a
// missing SignIn, or what httpapi.New refuses in API.
func New(opts Options) (*Console, error) {
	if opts.SignIn == nil {
		return nil, errcode.New(errcode.InvalidConfig, "console: SignIn is required")
	}
	if opts.SessionTTL <= 0 {
		opts.SessionTTL = DefaultSessionTTL
	}
	if opts.MaxSessions <= 0 {
		opts.MaxSessions = DefaultMaxSessions
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if opts.MaxSessionsPerPrincipal <= 0 {
		opts.MaxSessionsPerPrincipal = DefaultMaxSessionsPerPrincipal
	}
	sess := newSessions(opts.SessionTTL, opts.MaxSessions, opts.MaxSessionsPerPrincipal)
	if opts.Now != nil {
		sess.now = opts.Now
	}
	c := &Console{pipe: opts.API.Pipeline, signIn: opts.SignIn, sessions: sess,
		approvers: opts.API.ApproversScope, log: log, principals: opts.Principals, credMissing: opts.CredentialMissing}
	if c.approvers == "" {
		c.approvers = "toolgate:approve"
	}
	apiOpts := opts.API
	apiOpts.Auth = sessionAuth{c}
	apiOpts.TestSeams = false
	api, err := httpapi.New(apiOpts)
	if err != nil {
		return nil, err
	}
	c.api = api
	tmpl, err := template.New("").Funcs(template.FuncMap{"join": strings.Join}).ParseFS(templateFS, "templates/*.html")
	if err != nil {
		return nil, errcode.Wrap(errcode.Internal, err, "console: parsing templates")
	}
	c.tmpl = tmpl
	sub, _ := fs.Sub(staticFS, "static")
	c.static = http.StripPrefix(Prefix+"static/", http.FileServerFS(sub))
	c.routes()
	return c, nil
}

// Close ends the console's open SSE streams (register it with
// http.Server.RegisterOnShutdown). Idempotent.
func (c *Console) Close() { c.api.Close() }

func (c *Console) routes() {
	m := http.NewServeMux()
	m.HandleFunc("GET /ui/{$}", c.root)
	m.HandleFunc("GET /ui/signin", c.signinPage)
	m.HandleFunc("POST /ui/signin", c.signin)
	m.HandleFunc("POST /ui/signout", c.page(c.signout))
	m.HandleFunc("GET /ui/catalog", c.page(c.catalogPage))
	m.HandleFunc("GET /ui/audit", c.page(c.auditPage))
	m.HandleFunc("GET /ui/approvals", c.page(c.approvalsPage))
	m.HandleFunc("GET /ui/policy", c.page(c.policyPage))
	m.HandleFunc("GET /ui/static/", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "private, max-age=300")
		c.static.ServeHTTP(w, r)
	})
	m.HandleFunc("/ui/api/v1/", c.apiProxy)
	c.mux = m
}

// ServeHTTP serves /ui/ (mount it at Prefix). Every answer carries the
// security headers of the package doc; an unknown path answers 404.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", ContentSecurityPolicy)
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	c.mux.ServeHTTP(w, r)
}

// sessionAuth authenticates the console's API requests by their session
// cookie: the httpapi.Authenticator of the console's own API handler.
type sessionAuth struct{ c *Console }

// Authenticate returns the principal of r's live session. Errors:
// *errcode.Error unauthenticated without one.
func (a sessionAuth) Authenticate(r *http.Request) (identity.Principal, error) {
	if se := a.c.current(r); se != nil {
		return se.principal, nil
	}
	return identity.Principal{}, errcode.New(errcode.Unauthenticated, "no console session (sign in at /ui/signin)")
}

// AuthenticateStream is Authenticate for the live audit stream: the
// stream ends when the session does (sign-out, its expiry, eviction by a
// newer sign-in of its principal) and when its credential no longer passes
// SignIn.Recheck or its tenant or scopes changed (checked before every
// event sent and at every heartbeat). Errors: as Authenticate.
func (a sessionAuth) AuthenticateStream(r *http.Request) (identity.Principal, httpapi.StreamGrant, error) {
	ck, err := r.Cookie(sessionCookie)
	if err != nil {
		return identity.Principal{}, httpapi.StreamGrant{}, errNoSession
	}
	se := a.c.currentID(ck.Value)
	if se == nil {
		return identity.Principal{}, httpapi.StreamGrant{}, errNoSession
	}
	id, p := ck.Value, se.principal
	return p, httpapi.StreamGrant{Expires: se.expires, Done: se.done, Recheck: func(time.Time) error {
		now := a.c.currentID(id)
		if now == nil {
			return errNoSession
		}
		if now.principal.Tenant != p.Tenant || !slices.Equal(now.principal.Scopes, p.Scopes) {
			return errcode.New(errcode.Unauthenticated, "the session's tenant or scopes changed (reopen the stream)")
		}
		return nil
	}}, nil
}

// Challenge answers 401 with the flat error envelope (no WWW-Authenticate:
// the console's credential is its session cookie).
func (a sessionAuth) Challenge(w http.ResponseWriter, _ *http.Request, err error) {
	writeJSONError(w, http.StatusUnauthorized, errcode.Unauthenticated, errMessage(err))
}

func errMessage(err error) string {
	if e := errcode.As(err); e != nil {
		return e.Message
	}
	return "internal error"
}

func writeJSONError(w http.ResponseWriter, status int, code errcode.Code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": string(code), "message": msg})
}

// writeError is the one place the console maps an error to its answer:
// the code's HTTP status (errcode.Code.HTTPStatus) with the flat envelope
// {"error", "message"} under /ui/api/, plain text elsewhere. An error that
// is not an *errcode.Error is logged and answered 500 internal_error.
func (c *Console) writeError(w http.ResponseWriter, r *http.Request, err error) {
	e := errcode.As(err)
	if e == nil {
		c.log.Error("console: unexpected error", "method", r.Method, "path", r.URL.Path, "err", err)
		e = errcode.New(errcode.Internal, "internal error")
	}
	status := e.Code.HTTPStatus()
	var se *statusError
	if errors.As(err, &se) {
		status = se.status
	}
	if strings.HasPrefix(r.URL.Path, Prefix+"api/") {
		writeJSONError(w, status, e.Code, e.Message)
		return
	}
	http.Error(w, string(e.Code)+": "+e.Message, status)
}

// Errors of the console's own checks.
var (
	errNoSession   = errcode.New(errcode.Unauthenticated, "no console session (sign in at /ui/signin)")
	errCSRF        = errcode.New(errcode.Forbidden, "missing or wrong CSRF token ("+CSRFHeader+" header or csrf form field)")
	errSigninCSRF  = errcode.New(errcode.Forbidden, "missing or wrong CSRF token (reload the sign-in page)")
	errPostSession = errcode.New(errcode.Forbidden, "no console session")
)

// current returns r's live session, or nil. The session's credential record
// is checked again by SignIn.Recheck on every request, so a key removed or
// rotated by a reload, an expired JWT or changed scopes apply to the console
// at once as they do to the API; a credential no longer accepted ends the
// session. The returned session is a copy holding the principal of this
// check.
func (c *Console) current(r *http.Request) *session {
	ck, err := r.Cookie(sessionCookie)
	if err != nil {
		return nil
	}
	return c.currentID(ck.Value)
}

// currentID is current for the session cookie value id.
func (c *Console) currentID(id string) *session {
	se := c.sessions.get(id)
	if se == nil {
		return nil
	}
	p, err := c.signIn.Recheck(se.cred, se.principal, c.sessions.now())
	if err != nil {
		c.sessions.remove(id)
		c.log.Info("console session ended: its credential is no longer accepted", "principal", se.principal.ID, "err", errMessage(err))
		return nil
	}
	view := *se
	view.principal = p
	return &view
}

// check authenticates cred with SignIn exactly as the bearer credential of
// an API request (r's context; none of r's own headers or body).
func (c *Console) check(r *http.Request, cred string) (identity.Principal, identity.Credential, error) {
	ar := r.Clone(r.Context())
	ar.Header = http.Header{"Authorization": {"Bearer " + cred}}
	ar.Body, ar.ContentLength = http.NoBody, 0
	return c.signIn.AuthenticateCredential(ar)
}

// apiProxy serves /ui/api/v1/...: the console's API handler at /v1/...,
// after the session check (401) and, for a method other than GET and HEAD,
// the CSRF check (403 forbidden without the session's token in the
// X-CSRF-Token header or, for an application/x-www-form-urlencoded body,
// its csrf field). A form body reaches the API as the JSON object of its
// reason field ({"reason": ...}, the approval decisions' body), or empty
// without one.
func (c *Console) apiProxy(w http.ResponseWriter, r *http.Request) {
	se := c.current(r)
	if se == nil {
		c.writeError(w, r, errNoSession)
		return
	}
	r2 := r.Clone(r.Context())
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		tok := r.Header.Get(CSRFHeader)
		if ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); ct == "application/x-www-form-urlencoded" {
			r.Body = http.MaxBytesReader(w, r.Body, maxCredential)
			if err := r.ParseForm(); err != nil {
				c.writeError(w, r, formError(w, err, "reading the form"))
				return
			}
			if tok == "" {
				tok = r.PostForm.Get("csrf")
			}
			var body []byte
			if reason, ok := r.PostForm["reason"]; ok && len(reason) > 0 {
				body, _ = json.Marshal(map[string]string{"reason": reason[0]})
			}
			r2.Body, r2.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
			r2.Header.Set("Content-Type", "application/json")
			r2.Form, r2.PostForm = nil, nil
		}
		if !sameToken(tok, se.csrf) {
			c.writeError(w, r, errCSRF)
			return
		}
	}
	r2.URL.Path = strings.TrimPrefix(r.URL.Path, "/ui/api")
	r2.URL.RawPath = ""
	r2.RequestURI = r2.URL.RequestURI()
	// The API must never see the browser's credentials other than the
	// session: drop any Authorization header a page could not set anyway.
	r2.Header.Del("Authorization")
	r2.Header.Del("X-API-Key")
	c.api.ServeHTTP(w, r2)
}

// pageData is what every page template receives.
type pageData struct {
	Page       string
	Principal  identity.Principal
	CSRF       string
	IsApprover bool
	IsAdmin    bool
	Error      string
	Data       any
}

// page wraps a page handler: without a live session it redirects to the
// sign-in page (a POST without one is refused 403).
func (c *Console) page(fn func(w http.ResponseWriter, r *http.Request, se *session)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		se := c.current(r)
		if se == nil {
			if r.Method != http.MethodGet {
				c.writeError(w, r, errPostSession)
				return
			}
			http.Redirect(w, r, Prefix+"signin", http.StatusSeeOther)
			return
		}
		fn(w, r, se)
	}
}

func (c *Console) data(page string, se *session, d any) pageData {
	return pageData{Page: page, Principal: se.principal, CSRF: se.csrf,
		IsApprover: slices.Contains(se.principal.Scopes, c.approvers),
		IsAdmin:    slices.Contains(se.principal.Scopes, httpapi.AdminScope), Data: d}
}

func (c *Console) render(w http.ResponseWriter, status int, name string, d any) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	if err := c.tmpl.ExecuteTemplate(w, name, d); err != nil {
		c.log.Error("console: rendering a page", "page", name, "err", err)
	}
}

func (c *Console) root(w http.ResponseWriter, r *http.Request) {
	if c.current(r) != nil {
		http.Redirect(w, r, Prefix+"catalog", http.StatusSeeOther)
		return
	}
	http.Redirect(w, r, Prefix+"signin", http.StatusSeeOther)
}

// signinPage serves the sign-in form with a fresh double-submit token
// (cookie and hidden field).
func (c *Console) signinPage(w http.ResponseWriter, r *http.Request) {
	c.signinForm(w, r, http.StatusOK, "")
}

func (c *Console) signinForm(w http.ResponseWriter, r *http.Request, status int, msg string) {
	tok := randomToken()
	http.SetCookie(w, &http.Cookie{Name: signinCookie, Value: tok, Path: Prefix + "signin", HttpOnly: true,
		Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode, MaxAge: 600})
	c.render(w, status, "signin.html", pageData{Page: "signin", CSRF: tok, Error: msg})
}

// signin serves POST /ui/signin (form fields credential, csrf): the
// credential is checked by the API's authenticator exactly as a bearer
// credential of an API request; on success a session starts and the
// browser goes to the catalog. A wrong or missing csrf answers 403; a
// refused credential 401 with the form again (the credential is never
// echoed).
func (c *Console) signin(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxCredential)
	if err := r.ParseForm(); err != nil {
		c.writeError(w, r, formError(w, err, "reading the sign-in form"))
		return
	}
	ck, err := r.Cookie(signinCookie)
	if err != nil || !sameToken(ck.Value, r.PostForm.Get("csrf")) {
		c.writeError(w, r, errSigninCSRF)
		return
	}
	cred := strings.TrimSpace(r.PostForm.Get("credential"))
	if cred == "" {
		c.signinForm(w, r, http.StatusUnauthorized, "Enter an API key or a token.")
		return
	}
	p, rec, err := c.check(r, cred)
	if err != nil {
		c.signinForm(w, r, http.StatusUnauthorized, "Sign-in refused: "+errMessage(err))
		return
	}
	id, se, err := c.sessions.create(p, rec)
	if err != nil {
		c.signinForm(w, r, errcode.CodeOf(err).HTTPStatus(), errMessage(err))
		return
	}
	http.SetCookie(w, &http.Cookie{Name: signinCookie, Value: "", Path: Prefix + "signin", MaxAge: -1, HttpOnly: true,
		Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: id, Path: Prefix, HttpOnly: true, Secure: r.TLS != nil,
		SameSite: http.SameSiteStrictMode, MaxAge: max(1, int(se.expires.Sub(c.sessions.now())/time.Second))})
	c.log.Info("console sign-in", "principal", p.ID, "tenant", p.Tenant)
	http.Redirect(w, r, Prefix+"catalog", http.StatusSeeOther)
}

// formError is the error of a form body that could not be read: 408
// timeout (and the connection closed) when it did not arrive before the
// connection's read deadline (serve's http.read_body_timeout), else 400
// invalid_argument (413 for one over the size bound).
func formError(w http.ResponseWriter, err error, what string) error {
	var mbe *http.MaxBytesError
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		w.Header().Set("Connection", "close")
		return &statusError{status: http.StatusRequestTimeout, err: errcode.New(errcode.Timeout, what+": the request body did not arrive in time")}
	case errors.As(err, &mbe):
		return &statusError{status: http.StatusRequestEntityTooLarge, err: errcode.Errorf(errcode.InvalidArgument, "%s: the body exceeds %d bytes", what, mbe.Limit)}
	}
	return errcode.Wrap(errcode.InvalidArgument, err, what)
}

// statusError is an *errcode.Error answered with status instead of its
// code's.
type statusError struct {
	status int
	err    *errcode.Error
}

func (e *statusError) Error() string { return e.err.Error() }
func (e *statusError) Unwrap() error { return e.err }

// signout serves POST /ui/signout (form field csrf): the session ends.
func (c *Console) signout(w http.ResponseWriter, r *http.Request, se *session) {
	if err := r.ParseForm(); err != nil || !sameToken(r.PostForm.Get("csrf"), se.csrf) {
		c.writeError(w, r, errCSRF)
		return
	}
	if ck, err := r.Cookie(sessionCookie); err == nil {
		c.sessions.remove(ck.Value)
	}
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: "", Path: Prefix, MaxAge: -1, HttpOnly: true,
		Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, Prefix+"signin", http.StatusSeeOther)
}

// catalogRow is one tool of the Catalog page.
type catalogRow struct {
	ToolID, Title, Source, SafetyTier, Approval, Egress string
	Scopes                                              []string
	Credential                                          bool
	// CredentialState is, for a tool that needs a credential, "missing"
	// or "configured" (Options.CredentialMissing), or "" when unknown.
	CredentialState string
	// VisibleTo is, on an admin's page, the ids of the configured
	// principals of the admin's tenant that may see the tool.
	VisibleTo []string
}

// catalogPage lists pipeline.Disclose's answer for the session's
// principal: the function GET /v1/tools and MCP tools/list use.
func (c *Console) catalogPage(w http.ResponseWriter, r *http.Request, se *session) {
	rows := catalogRows(r.Context(), c.pipe, se.principal)
	if c.credMissing != nil {
		for i := range rows {
			if !rows[i].Credential {
				continue
			}
			rows[i].CredentialState = "configured"
			if c.credMissing(rows[i].ToolID) {
				rows[i].CredentialState = "missing"
			}
		}
	}
	d := c.data("catalog", se, rows)
	if d.IsAdmin && c.principals != nil {
		idx := map[string]int{}
		for i := range rows {
			idx[rows[i].ToolID] = i
		}
		for _, p := range c.principals() {
			if p.Tenant != se.principal.Tenant {
				continue // tenant scoping: another tenant's principals are not shown
			}
			for _, t := range c.pipe.Disclose(r.Context(), p) {
				if i, ok := idx[t.Descriptor.ToolID]; ok {
					rows[i].VisibleTo = append(rows[i].VisibleTo, p.ID)
				}
			}
		}
	}
	c.render(w, http.StatusOK, "catalog.html", d)
}

func catalogRows(ctx context.Context, pipe *pipeline.Pipeline, p identity.Principal) []catalogRow {
	var rows []catalogRow
	for _, t := range pipe.Disclose(ctx, p) {
		d := t.Descriptor
		row := catalogRow{ToolID: d.ToolID, Title: d.Title, Source: string(d.Source), SafetyTier: string(d.SafetyTier),
			Approval: string(d.Approval), Egress: string(d.Egress)}
		if row.Approval == "" {
			row.Approval = string(catalog.ApprovalNever)
		}
		if row.Egress == "" {
			row.Egress = string(catalog.EgressNone)
		}
		if d.Auth != nil {
			row.Scopes, row.Credential = d.Auth.Scopes, d.Auth.CredentialRef
		}
		rows = append(rows, row)
	}
	slices.SortFunc(rows, func(a, b catalogRow) int { return strings.Compare(a.ToolID, b.ToolID) })
	return rows
}

func (c *Console) auditPage(w http.ResponseWriter, r *http.Request, se *session) {
	c.render(w, http.StatusOK, "audit.html", c.data("audit", se, nil))
}

func (c *Console) approvalsPage(w http.ResponseWriter, r *http.Request, se *session) {
	c.render(w, http.StatusOK, "approvals.html", c.data("approvals", se, nil))
}

// policyData is the Policy page's: the loaded rules (shown to
// httpapi.AdminScope holders only, like the rule trace of POST
// /v1/policy/explain) and the policy's version and default.
type policyData struct {
	Version string
	Default pipeline.Effect
	Rules   []pipeline.RuleSummary
}

func (c *Console) policyPage(w http.ResponseWriter, r *http.Request, se *session) {
	d := c.data("policy", se, nil)
	prg := c.pipe.State().Policy
	pd := policyData{Version: prg.Version(), Default: prg.Default()}
	if d.IsAdmin {
		pd.Rules = prg.Rules()
	}
	d.Data = pd
	c.render(w, http.StatusOK, "policy.html", d)
}

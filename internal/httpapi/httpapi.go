package httpapi

import (
	"context"
	"crypto/ed25519"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"sync/atomic"
	"time"

	"github.com/toolgate/toolgate/catalog"
	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/identity"
	"github.com/toolgate/toolgate/internal/pipeline"
	"github.com/toolgate/toolgate/ratelimit"
	"github.com/toolgate/toolgate/store"
)

// AdminScope is the principal scope that lets a caller explain the policy's
// decision for another principal of its own tenant (POST /v1/policy/explain)
// and see the per-rule trace of an explanation.
const AdminScope = "toolgate:admin"

// DefaultAuditScope is the scope that lets a principal read every event of
// its tenant when Options.AuditScope is "" (config audit.readers_scope).
const DefaultAuditScope = "toolgate:audit"

// DefaultMaxBodyBytes bounds a request body when Options.MaxBodyBytes is 0
// (4 MiB, the same default as the MCP endpoint).
const DefaultMaxBodyBytes = 4 << 20

// DefaultHeartbeat is the SSE keep-alive interval when Options.Heartbeat is
// 0.
const DefaultHeartbeat = 15 * time.Second

// Authenticator authenticates a request and writes the 401 answer for a
// failure. *auth.Authenticator implements it: Authenticate returns the
// caller's principal or an *errcode.Error with code unauthenticated;
// Challenge writes 401 with WWW-Authenticate and the flat envelope
// {"error":"unauthenticated","message":…}. Implementations must be safe
// for concurrent use.
type Authenticator interface {
	Authenticate(r *http.Request) (identity.Principal, error)
	Challenge(w http.ResponseWriter, r *http.Request, err error)
}

// CredentialAuthenticator is an Authenticator that also returns the
// secret-free record of the credential it accepted and checks that record
// again later (*auth.Authenticator and serve's reloading wrapper implement
// it). With it, GET /v1/events/stream ends at the credential's expiry (a
// JWT's exp) and as soon as Recheck refuses it (a key removed or rotated
// by a reload) or returns another tenant or other scopes. Implementations
// must be safe for concurrent use.
type CredentialAuthenticator interface {
	Authenticator
	// AuthenticateCredential is Authenticate returning the credential's
	// record too. Errors: as Authenticate.
	AuthenticateCredential(r *http.Request) (identity.Principal, identity.Credential, error)
	// Recheck checks c (returned for p) again at now and returns the
	// principal as of now. Errors: *errcode.Error unauthenticated.
	Recheck(c identity.Credential, p identity.Principal, now time.Time) (identity.Principal, error)
}

// StreamAuthenticator is an Authenticator that bounds a long-lived answer
// (GET /v1/events/stream) by a StreamGrant; the web console's session
// authenticator implements it. Implementations must be safe for
// concurrent use.
type StreamAuthenticator interface {
	Authenticator
	// AuthenticateStream is Authenticate returning the grant the stream
	// lives under. Errors: as Authenticate.
	AuthenticateStream(r *http.Request) (identity.Principal, StreamGrant, error)
}

// StreamGrant bounds an open event stream's authentication: the stream
// ends (after an SSE comment saying why) at Expires, when Done is closed,
// or when Recheck fails. Recheck is called before every event is sent and
// at every heartbeat (Options.Heartbeat), so a revoked credential never
// receives another event. Zero fields impose nothing. A plain value.
type StreamGrant struct {
	// Expires is when the authentication ends (a JWT's exp, a console
	// session's end); zero: not by time.
	Expires time.Time
	// Done, when not nil, is closed when the authentication ends (a
	// console sign-out).
	Done <-chan struct{}
	// Recheck, when not nil, reports whether the authentication still
	// holds at now (nil error).
	Recheck func(now time.Time) error
}

// Options configures New. Pipeline, Auth and Events are required.
type Options struct {
	// Pipeline is the gate every call runs through and whose Disclose
	// scopes the catalog: the same instance the MCP gateway uses, so both
	// doors give the same answer.
	Pipeline *pipeline.Pipeline
	// Auth authenticates every /v1 request (discovery is public).
	Auth Authenticator
	// Events is the event store the pipeline writes to: run reads, the SSE
	// stream, and the seams' reads and writes.
	Events store.Events
	// Sessions records the session-run seam's tool sessions; nil records
	// the tool.session.* events only.
	Sessions store.Sessions
	// Receipts is the receipt log of the seams' pipeline (the pipeline
	// Receipts of the gate). Required when TestSeams is true.
	Receipts pipeline.ReceiptLog
	// TestSeams serves the OpenWOP conformance seams under
	// /v1/host/sample/ (config openwop.test_seams). When false those paths
	// answer 404 like any unknown route.
	TestSeams bool
	// SessionLifecycle advertises toolCatalog.sessionLifecycle: set it only
	// when a production code path emits tool.session.opened/closed (the
	// MCP gateway does, for upstream servers with per_client sessions).
	SessionLifecycle bool
	// MCP advertises "mcp" in supportedTransports (the MCP endpoint is
	// served next to this surface).
	MCP bool
	// MaxBodyBytes bounds a request body (bytes); a larger one is refused
	// with 413. 0 means DefaultMaxBodyBytes. It is advertised as
	// limits.maxRequestBodyBytes.
	MaxBodyBytes int64
	// AuditContent is the gate's audit content (config audit.content):
	// "hash" (default) or "full". The seams' pipeline uses it too, and
	// "full" withdraws toolHooks.prePostEvents (see ToolHooks).
	AuditContent string
	// Version is implementation.version in the discovery document
	// (default "dev").
	Version string
	// Heartbeat is the SSE keep-alive comment interval; 0 means
	// DefaultHeartbeat.
	Heartbeat time.Duration
	// Targets resolves the ids of the MCP surfaces that the catalog does
	// not hold (resources "mcp:<server>/resource", prompts
	// "mcp:<server>#<prompt>") for POST /v1/policy/explain; ok false means
	// not such an id of a configured server. Nil: those ids answer 404 like
	// unknown tools. The MCP gateway's Target.
	Targets func(id string) (t *catalog.Tool, ok bool)
	// Logger receives operator logs; nil discards.
	Logger *slog.Logger
	// Approvals serves the approval inbox (GET /v1/approvals, POST
	// /v1/approvals/{id}/approve|deny); nil leaves those routes out.
	Approvals Approvals
	// ApproversScope is the scope that lets a caller see every principal's
	// approvals (approving needs it too; Approvals checks). Default
	// "toolgate:approve".
	ApproversScope string
	// AuditScope is the scope that lets a caller read every event of its
	// tenant (GET /v1/runs/{runId}/events, GET /v1/events/stream and the
	// event-log seam); without it a caller reads only its own events (see
	// eventFilter). Default DefaultAuditScope.
	AuditScope string
	// ReceiptStore, when set, serves GET /v1/receipts and GET
	// /v1/receipts/{receiptId} (to callers with AuditScope); nil leaves
	// those routes out. Every store.Store implements it.
	ReceiptStore ReceiptStore
	// ReceiptKeys are the Ed25519 public keys GET
	// /v1/receipts/{receiptId}/verify trusts (this gateway's signing key,
	// and other replicas' to check their chains); a receipt of a chain
	// whose key is not here fails its signature check. Empty: that route
	// is left out.
	ReceiptKeys []ed25519.PublicKey
	// Principals lists the configured principals (the API keys, as
	// auth.Authenticator.Principals returns them, following reloads) for
	// GET /v1/admin/tools/{toolId}/principals, which shows those of the
	// caller's tenant, and for POST /v1/policy/explain for another
	// principal named by id alone (that configured principal of the
	// caller's tenant; none: 404). Nil lists none. Must be safe for
	// concurrent use.
	Principals func() []identity.Principal
	// PinAdmin, when set (Pins and Approve), serves the tool pinning
	// endpoints under /v1/admin/tools/pending (pins.go); nil leaves them
	// out.
	PinAdmin *PinAdmin
}

// Approvals is the approval inbox the HTTP surface serves;
// *approval.Manager implements it. Safe for concurrent use.
type Approvals interface {
	List(ctx context.Context, tenant string, status store.ApprovalStatus) ([]store.Approval, error)
	Resolve(ctx context.Context, approver identity.Principal, id string, approve bool, reason string) (*store.Approval, error)
}

// Handler serves the OpenWOP HTTP surface (see the package doc for the
// endpoints). It is immutable after New except for the seams' rate-limit
// buckets (replaced by POST /v1/host/sample/test/reset) and safe for
// concurrent use.
type Handler struct {
	opts    Options
	pipe    *pipeline.Pipeline
	auth    Authenticator
	events  store.Events
	log     *slog.Logger
	mux     *http.ServeMux
	maxBody int64

	seamPolicy  *pipeline.Policy
	seamLimiter atomic.Pointer[ratelimit.Memory]

	done      chan struct{} // closed by Close: ends SSE streams
	closeOnce atomic.Bool
}

// New returns the handler; it keeps opts (and the values it points to) for
// its lifetime. Errors (*errcode.Error InvalidConfig): a missing Pipeline,
// Auth or Events, or TestSeams without Receipts.
func New(opts Options) (*Handler, error) {
	if opts.Pipeline == nil || opts.Auth == nil || opts.Events == nil {
		return nil, errcode.New(errcode.InvalidConfig, "httpapi: Pipeline, Auth and Events are required")
	}
	if opts.TestSeams && opts.Receipts == nil {
		return nil, errcode.New(errcode.InvalidConfig, "httpapi: TestSeams needs Receipts")
	}
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if opts.Heartbeat <= 0 {
		opts.Heartbeat = DefaultHeartbeat
	}
	if opts.Version == "" {
		opts.Version = "dev"
	}
	if opts.ApproversScope == "" {
		opts.ApproversScope = "toolgate:approve"
	}
	if opts.AuditScope == "" {
		opts.AuditScope = DefaultAuditScope
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	h := &Handler{opts: opts, pipe: opts.Pipeline, auth: opts.Auth, events: opts.Events, log: log,
		maxBody: opts.MaxBodyBytes, done: make(chan struct{})}
	if opts.TestSeams {
		prg, err := pipeline.SeamPolicy(seamUnevaluable)
		if err != nil {
			return nil, errcode.Wrap(errcode.Internal, err, "httpapi: compiling the seam policy")
		}
		h.seamPolicy = prg
		h.seamLimiter.Store(ratelimit.NewMemory(ratelimit.MemoryOptions{}))
	}
	h.routes()
	return h, nil
}

// routes registers every endpoint on h.mux.
func (h *Handler) routes() {
	m := http.NewServeMux()
	m.HandleFunc("GET /.well-known/openwop", h.discovery)
	m.Handle("GET /v1/tools", h.authed(h.listTools))
	m.Handle("GET /v1/tools/{toolId...}", h.authed(h.getTool))
	m.Handle("POST /v1/calls", h.authed(h.postCall))
	m.Handle("GET /v1/runs/{runId}/events", h.authed(h.runEvents))
	m.Handle("GET /v1/events/stream", h.authedStream())
	m.Handle("POST /v1/policy/explain", h.authed(h.explain))
	// GET /v1/admin/tools/{toolId}/principals (who-can) and GET
	// /v1/admin/tools/pending/{toolId} (pinning) overlap as ServeMux
	// patterns; one route serves both ("pending" is never a toolId: every
	// toolId has a transport prefix).
	m.Handle("GET /v1/admin/tools/{first}/{second}", h.authed(h.adminToolGet))
	if h.opts.Approvals != nil {
		m.Handle("GET /v1/approvals", h.authed(h.listApprovals))
		m.Handle("POST /v1/approvals/{id}/approve", h.authed(h.resolveApproval(true)))
		m.Handle("POST /v1/approvals/{id}/deny", h.authed(h.resolveApproval(false)))
	}
	if h.opts.ReceiptStore != nil {
		m.Handle("GET /v1/receipts", h.authed(h.listReceipts))
		m.Handle("GET /v1/receipts/{receiptId}", h.authed(h.getReceipt))
		if len(h.opts.ReceiptKeys) > 0 {
			m.Handle("GET /v1/receipts/{receiptId}/verify", h.authed(h.verifyReceipt))
		}
	}
	if h.opts.PinAdmin != nil && h.opts.PinAdmin.Pins != nil && h.opts.PinAdmin.Approve != nil {
		m.Handle("GET /v1/admin/tools/pending", h.authed(h.listPending))
		m.Handle("POST /v1/admin/tools/pending/{toolId}/approve", h.authed(h.approvePending))
	}
	if h.opts.TestSeams {
		m.Handle("POST /v1/host/sample/toolhooks/invoke", h.authed(h.seamInvoke))
		m.Handle("POST /v1/host/sample/tools/session-run", h.authed(h.seamSessionRun))
		m.Handle("GET /v1/host/sample/test/runs/{runId}/events", h.authed(h.seamRunEvents))
		m.Handle("POST /v1/host/sample/test/reset", h.authed(h.seamReset))
	}
	h.mux = m
}

// ServeHTTP routes r. A path no endpoint serves answers 404 not_found and a
// method an endpoint does not accept answers 405 (code invalid_argument,
// with Allow), both as the flat envelope; so do the seam paths when
// TestSeams is false, and the request target "*" (400 invalid_argument).
// A path with malformed percent-encoding (GET /v1/tools/%ZZ) never reaches
// a handler: net/http's server answers it 400 (plain text) while parsing
// the request line. Mount the handler at "/" (or at "/v1/" and
// "/.well-known/openwop"). Safe for concurrent use.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.RequestURI == "*" { // the mux answers a bare 400 to it
		h.writeError(w, r, errcode.Errorf(errcode.InvalidArgument, "request target * is not served (method %s)", clip(r.Method)))
		return
	}
	hd, pattern := h.mux.Handler(r)
	if pattern != "" {
		h.mux.ServeHTTP(w, r) // sets the path values
		return
	}
	// Not found, method not allowed, or a redirect to the cleaned path:
	// learn which from the mux's own answer, then answer it our way.
	rec := &headerRecorder{header: http.Header{}}
	hd.ServeHTTP(rec, r)
	switch rec.status {
	case http.StatusMethodNotAllowed:
		allow := rec.header.Get("Allow")
		h.writeError(w, r, &statusError{status: http.StatusMethodNotAllowed,
			err:    errcode.Errorf(errcode.InvalidArgument, "method %s is not allowed on %s (allowed: %s)", clip(r.Method), clip(r.URL.Path), allow),
			header: http.Header{"Allow": {allow}}})
	case http.StatusMovedPermanently, http.StatusPermanentRedirect, http.StatusTemporaryRedirect, http.StatusFound:
		w.Header().Set("Location", rec.header.Get("Location"))
		w.WriteHeader(rec.status)
	default:
		h.writeError(w, r, errcode.Errorf(errcode.NotFound, "no endpoint %s %s", clip(r.Method), clip(r.URL.Path)))
	}
}

// headerRecorder captures the status and headers of the mux's fallback
// answer (its body is discarded).
type headerRecorder struct {
	header http.Header
	status int
}

func (r *headerRecorder) Header() http.Header { return r.header }
func (r *headerRecorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return len(b), nil
}
func (r *headerRecorder) WriteHeader(status int) {
	if r.status == 0 {
		r.status = status
	}
}

// Close ends every open SSE stream (they finish their current write and
// return), so that http.Server.Shutdown does not wait for them; register it
// with http.Server.RegisterOnShutdown. Idempotent; safe for concurrent use.
func (h *Handler) Close() {
	if h.closeOnce.CompareAndSwap(false, true) {
		close(h.done)
	}
}

// authedFunc is an endpoint behind authentication: it receives the
// caller's principal and returns an error for writeError instead of writing
// it (STYLE rule 23).
type authedFunc func(w http.ResponseWriter, r *http.Request, p identity.Principal) error

// authed authenticates the request (401 through writeError on failure),
// then runs fn and maps its error.
// adminToolGet serves GET /v1/admin/tools/pending/{toolId} (the pinning
// endpoints, when configured) and GET /v1/admin/tools/{toolId}/principals;
// any other path under /v1/admin/tools/ is not_found.
func (h *Handler) adminToolGet(w http.ResponseWriter, r *http.Request, p identity.Principal) error {
	first, second := r.PathValue("first"), r.PathValue("second")
	switch {
	case first == "pending" && h.opts.PinAdmin != nil && h.opts.PinAdmin.Pins != nil && h.opts.PinAdmin.Approve != nil:
		r.SetPathValue("toolId", second)
		return h.getPending(w, r, p)
	case second == "principals":
		r.SetPathValue("toolId", first)
		return h.whoCan(w, r, p)
	}
	return errcode.New(errcode.NotFound, "no such route")
}

func (h *Handler) authed(fn authedFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, err := h.auth.Authenticate(r)
		if err != nil {
			h.refuse(w, r, err)
			return
		}
		if err := fn(w, r, p); err != nil {
			h.writeError(w, r, err)
		}
	})
}

// refuse answers an authentication failure (401 through writeError).
func (h *Handler) refuse(w http.ResponseWriter, r *http.Request, err error) {
	if r.ContentLength != 0 {
		// Do not read (or let net/http drain) an unauthenticated body.
		w.Header().Set("Connection", "close")
	}
	if errcode.CodeOf(err) != errcode.Unauthenticated {
		err = errcode.Wrap(errcode.Unauthenticated, err, "authentication failed")
	}
	h.writeError(w, r, err)
}

// authedStream is authed for GET /v1/events/stream: the stream also
// receives the StreamGrant its authentication lives under (streamAuth).
func (h *Handler) authedStream() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, g, err := h.streamAuth(r)
		if err != nil {
			h.refuse(w, r, err)
			return
		}
		if err := h.stream(w, r, p, g); err != nil {
			h.writeError(w, r, err)
		}
	})
}

// streamAuth authenticates r for a stream: a StreamAuthenticator gives its
// grant; a CredentialAuthenticator's grant ends at the credential's expiry
// and when Recheck refuses it or changes its tenant or scopes; a plain
// Authenticator's imposes nothing.
func (h *Handler) streamAuth(r *http.Request) (identity.Principal, StreamGrant, error) {
	switch a := h.auth.(type) {
	case StreamAuthenticator:
		return a.AuthenticateStream(r)
	case CredentialAuthenticator:
		p, c, err := a.AuthenticateCredential(r)
		if err != nil {
			return identity.Principal{}, StreamGrant{}, err
		}
		return p, StreamGrant{Expires: c.Expires, Recheck: func(now time.Time) error {
			q, err := a.Recheck(c, p, now)
			if err != nil {
				return err
			}
			if q.Tenant != p.Tenant || !slices.Equal(q.Scopes, p.Scopes) {
				return errcode.New(errcode.Unauthenticated, "the credential's tenant or scopes changed (reconnect)")
			}
			return nil
		}}, nil
	}
	p, err := h.auth.Authenticate(r)
	return p, StreamGrant{}, err
}

// readBody reads the whole request body, at most h.maxBody bytes. Errors:
// invalid_argument answered 413 (details.limitBytes) for a larger body,
// 408 (and the connection closed) for a body that did not arrive before
// the read deadline of the serve listener (config http.read_body_timeout),
// invalid_argument 400 for a body that cannot be read.
func (h *Handler) readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	if r.ContentLength > h.maxBody {
		return nil, h.tooLarge()
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.maxBody))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, h.tooLarge()
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			w.Header().Set("Connection", "close")
			return nil, withStatus(http.StatusRequestTimeout, errcode.New(errcode.InvalidArgument, "the request body did not arrive in time"))
		}
		return nil, errcode.Wrap(errcode.InvalidArgument, err, "reading the request body")
	}
	return body, nil
}

func (h *Handler) tooLarge() error {
	return withStatus(http.StatusRequestEntityTooLarge,
		errcode.Errorf(errcode.InvalidArgument, "the request body exceeds %d bytes", h.maxBody).
			WithDetails(map[string]any{"limitBytes": h.maxBody}))
}

// detach returns a context that is done when r's is or when h is closed.
func (h *Handler) detach(r *http.Request) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(r.Context())
	go func() {
		select {
		case <-h.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// hasScope reports whether p holds scope.
func hasScope(p identity.Principal, scope string) bool {
	for _, s := range p.Scopes {
		if s == scope {
			return true
		}
	}
	return false
}

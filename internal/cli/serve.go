package cli

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"go.opentelemetry.io/otel"

	"github.com/toolgate/toolgate/approval"
	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/hook"
	"github.com/toolgate/toolgate/hook/webhook"
	"github.com/toolgate/toolgate/identity"
	"github.com/toolgate/toolgate/internal/auth"
	"github.com/toolgate/toolgate/internal/config"
	"github.com/toolgate/toolgate/internal/console"
	"github.com/toolgate/toolgate/internal/egress"
	"github.com/toolgate/toolgate/internal/httpapi"
	"github.com/toolgate/toolgate/internal/httptool"
	"github.com/toolgate/toolgate/internal/mcpgw"
	"github.com/toolgate/toolgate/internal/metrics"
	"github.com/toolgate/toolgate/internal/pipeline"
	"github.com/toolgate/toolgate/internal/tracing"
	"github.com/toolgate/toolgate/internal/version"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/ratelimit"
	rlredis "github.com/toolgate/toolgate/ratelimit/redis"
	"github.com/toolgate/toolgate/receipt"
	"github.com/toolgate/toolgate/store"
)

// quickStart is the embedded configuration of `toolgate serve` without
// --config: native demo tools, the demo policy, one API key (%s: its
// SHA-256), SQLite in the working directory.
const quickStart = `# toolgate quick start (toolgate serve without --config)
listen: %s
store: {driver: sqlite, dsn: toolgate.db}
signing: {key_file: toolgate.key}
auth:
  api_keys:
    - {id: quickstart, key_sha256: "%s", tenant: demo, scopes: [files:read]}
tools:
  - {match: "native:clock.now", safety_tier: read, replay_policy: non-deterministic, egress: none}
  - {match: "native:text.echo", safety_tier: pure, replay_policy: deterministic, egress: none}
  - {match: "native:files.read", safety_tier: read, scopes: [files:read], replay_policy: idempotent, egress: none}
policy:
  default: deny
  rules:
    - {id: everyone-clock, effect: allow, tools: ["native:clock.now", "native:text.echo"]}
    - {id: readers, effect: allow, tools: ["native:files.*"], reason: "principals with files:read may read demo files"}
    - {id: no-dotfiles, effect: deny, tools: ["native:files.read"], when: 'has(args.name) && (args.name.startsWith(".") || args.name.contains("/."))', reason: "dotfiles are private"}
  ratelimits:
    - {tools: ["native:clock.now"], per: principal_tool, rate: 10/s, burst: 20}
`

// annotationGraceful marks a command that handles SIGINT/SIGTERM itself
// (Main waits for it instead of exiting at once).
const annotationGraceful = "toolgate/graceful"

func newServeCmd() *cobra.Command {
	var file, listen, filesDir string
	cmd := &cobra.Command{
		Use:   "serve [--config FILE]",
		Short: "Run the MCP gateway (Streamable HTTP at /mcp) and the OpenWOP HTTP API (/v1)",
		Long: `Serve the MCP gateway: agents connect to /mcp (Streamable HTTP) with an API key or a JWT bearer
token; toolgate connects to the configured upstream MCP servers, shows each principal only the tools
its policy could allow, and runs every tools/call through the gate with durable audit events and
signed receipts.

Without --config it starts a quick start: loopback only, SQLite (toolgate.db) and a signing key
(toolgate.key) in the working directory, three native demo tools (clock.now, text.echo, and
files.read confined to ./toolgate-files), the demo policy, and a fresh API key printed at start.

The same listener serves the OpenWOP HTTP surface for agents that do not speak MCP: discovery at
/.well-known/openwop, the tool catalog (GET /v1/tools), HTTP tool calls (POST /v1/calls), the event
log (GET /v1/runs/{runId}/events, SSE at /v1/events/stream) and POST /v1/policy/explain, over the same
gate, store and credentials; openwop.test_seams: true adds the conformance seams under /v1/host/sample/.

/healthz answers 200 while the process runs; /readyz answers 200 once every upstream server has
been connected and listed and while the shared backends answer (store.driver postgres; ratelimit
backend redis unless on_unavailable: allow), else 503 naming what is missing (its body counts the
open MCP sessions and upstream processes; /metrics has them too). SIGINT/SIGTERM finish in-flight calls, then flush the store. SIGHUP
reloads policy, tools (classification) and auth (API keys, JWT) from --config (all kept unchanged if the
new file has issues); other sections apply after a restart.`,
		Example: `  toolgate serve
  toolgate serve --config toolgate.yaml`,
		Args:        cobra.NoArgs,
		Annotations: map[string]string{annotationGraceful: "true"},
		RunE: func(cmd *cobra.Command, _ []string) error {
			return serve(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), file, listen, filesDir)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&file, "config", "c", "", "configuration file (default: the quick start)")
	f.StringVar(&listen, "listen", "", "listen address, overriding the config's (default 127.0.0.1:7070)")
	f.StringVar(&filesDir, "files-dir", "toolgate-files", "quick start: the directory native:files.read may read")
	return cmd
}

// serve runs the gateway until ctx ends or a termination signal arrives.
func serve(ctx context.Context, stdout, stderr io.Writer, file, listen, filesDir string) error {
	// GC percentage 400 while the live heap is small, falling to 100 as
	// it grows (gctune.go); GOGC in the environment overrides it.
	defer tuneGC(os.Getenv)()
	var cfg *config.Config
	var apiKey string
	quick := file == ""
	if quick {
		addr := listen
		if addr == "" {
			addr = "127.0.0.1:7070"
		}
		key, err := auth.NewKey()
		if err != nil {
			return failure("generating an API key: %v", err)
		}
		apiKey = key
		cfg, err = config.Parse("quick-start.yaml", []byte(fmt.Sprintf(quickStart, addr, auth.HashKey(key))))
		if err != nil {
			return failure("quick start config: %v", err)
		}
	} else {
		var err error
		if cfg, err = loadConfig(file); err != nil {
			return err
		}
		if listen != "" {
			cfg.Listen = listen
		}
	}
	// Every log line passes the redactor, which learns each credential
	// as it is resolved (log: format and level; DESIGN.md decision 9).
	redactor := audit.NewRedactor()
	logger := newLogger(stderr, cfg.Log, redactor)
	// Traces (observability.tracing and OTEL_*; off by default: then
	// tp is nil and the pipeline gets no tracer at all).
	tp, err := tracing.New(ctx, cfg.Observability.Tracing, tracing.Options{ServiceVersion: version.String()})
	if err != nil {
		return failure("%v", err)
	}
	if tp != nil {
		logger = newLogger(stderr, cfg.Log, redactor, tracing.LogAttrs)
		// The SDK's own errors (an unreachable receiver) go to the
		// operator log, through the redactor, instead of its stderr logger.
		otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { logger.Warn("tracing: export failed", "err", err) }))
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := tp.Shutdown(sctx); err != nil {
				logger.Warn("tracing: flushing spans at shutdown failed", "err", err)
			}
		}()
		logger.Info("tracing on", "protocol", tracingProtocol(cfg.Observability.Tracing))
	}
	if !quick {
		logPolicyWarnings(logger, cfg)
	}
	if err := servable(cfg); err != nil {
		return err
	}
	// Listen before creating anything (key, store, files), so that a busy
	// or bad address leaves the directory as it was.
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return failure("listen %s: %v", cfg.Listen, err)
	}
	serving := false
	defer func() {
		if !serving {
			ln.Close()
		}
	}()
	var metricsLn net.Listener // observability.metrics_listen; nil: /metrics is on ln
	if cfg.Observability.MetricsListen != "" {
		if metricsLn, err = net.Listen("tcp", cfg.Observability.MetricsListen); err != nil {
			return failure("observability.metrics_listen %s: %v", cfg.Observability.MetricsListen, err)
		}
		defer metricsLn.Close()
	}
	prom := metrics.NewPrometheus()
	if quick {
		if err := os.MkdirAll(filesDir, 0o755); err != nil {
			return failure("files dir: %v", err)
		}
		hello := filepath.Join(filesDir, "hello.txt")
		if _, err := os.Stat(hello); errors.Is(err, os.ErrNotExist) {
			os.WriteFile(hello, []byte("Hello from toolgate.\n"), 0o644)
		}
	}
	key, created, err := receipt.LoadOrCreateKey(cfg.Signing.KeyFile)
	if err != nil {
		return failure("signing key %s: %v", cfg.Signing.KeyFile, err)
	}
	if created {
		logger.Info("created signing key", "file", cfg.Signing.KeyFile)
	}
	var retention time.Duration
	if cfg.Audit.Retention != "" {
		retention, _ = config.ParseDuration(cfg.Audit.Retention)
	}
	st, err := openServeStore(ctx, cfg, receipt.NewSigner(key), retention, logger)
	if err != nil {
		return err
	}
	defer st.Close()
	ttl, _ := config.ParseDuration(cfg.Approvals.TTL)
	wait, _ := config.ParseDuration(cfg.Approvals.Wait)
	binding, err := approvalBindingKey(cfg, key, redactor)
	if err != nil {
		return failure("%v", err)
	}
	if cfg.Approvals.BindingSecret == "" && cfg.Store.Driver == "postgres" {
		logger.Warn("approvals.binding_secret is not set: an approval is bound with this replica's signing key, so a retry through another replica asks for a new approval instead of consuming it; give every replica the same binding_secret")
	}
	approvals, err := approval.New(approval.Options{Store: st, Events: store.EventLog(st), TTL: ttl, Wait: wait,
		ApproversScope: cfg.Approvals.ApproversScope, AllowSelfApproval: cfg.Approvals.AllowSelfApproval, Logger: logger,
		BindingKey: binding, Redactor: redactor})
	if err != nil {
		return failure("%v", err)
	}
	hooks, webhooks, err := buildHooks(cfg, redactor, logger)
	if err != nil {
		return failure("%v", err)
	}
	defer func() {
		for _, h := range webhooks {
			h.Close()
		}
	}()
	limiter, closeLimiter, err := buildLimiter(ctx, cfg, logger)
	if err != nil {
		return failure("%v", err)
	}
	defer closeLimiter()
	pipe, err := pipeline.New(pipeline.Options{
		Limiter: limiter, Redactor: redactor,
		Events: store.EventLog(st), Receipts: store.ReceiptLog(st), Logger: logger, AuditContent: cfg.Audit.Content,
		Approver: approvals, Hooks: hooks, Metrics: prom, Tracer: tp.Tracer(),
		Recordings: st, RecordScope: cfg.Audit.RecordScope, ReadersScope: cfg.Audit.ReadersScope,
	})
	if err != nil {
		return failure("%v", err)
	}
	if cfg.Audit.RecordRetention != "" {
		keep, _ := config.ParseDuration(cfg.Audit.RecordRetention)
		stopPrune := pruneRecordings(ctx, st, keep, time.Hour, logger)
		defer stopPrune()
	}
	// Calls the previous run left open (kill -9, a crash) are closed as
	// gateway_restarted before anything is served, so every call in the
	// store is paired with an outcome and a receipt (issue 13 point 13).
	// On sqlite (Exclusive) every open call is the previous run's; on a
	// shared PostgreSQL store only those this replica (its signing key)
	// wrote are: the other replicas' open calls may still be running.
	var open []audit.Event
	if oc, ok := st.(interface {
		OpenCalls(context.Context) ([]audit.Event, error)
	}); ok {
		if open, err = oc.OpenCalls(ctx); err != nil {
			return failure("store %s: reading open calls: %v", storeName(cfg), err)
		}
	}
	if len(open) > 0 {
		n, err := pipe.CloseInterrupted(ctx, open)
		if err != nil && errcode.CodeOf(err) != errcode.InvalidArgument {
			return failure("store %s: closing %d interrupted calls: %v", storeName(cfg), len(open), err)
		}
		if err != nil {
			logger.Error("some open calls could not be closed", "err", err)
		}
		logger.Warn("closed calls interrupted by the previous stop as gateway_restarted", "calls", n)
	}
	var natives []mcpgw.Native
	if quick {
		for _, t := range demoTools(filesDir) {
			natives = append(natives, mcpgw.Native{Descriptor: t.desc, Invoker: nativeInvoker(t.fn)})
		}
	}
	// HTTP tools (http_tools, openapi imports; an openapi url is
	// fetched now): a document that cannot be read or does not validate
	// stops the start, naming it.
	httpTools, err := httptool.Build(ctx, cfg, httptool.Options{Secret: redactor.AddSecret, Egress: serveEgressOptions})
	if err != nil {
		return failure("%v", err)
	}
	var https []mcpgw.Native
	toolCreds := map[string][]string{} // toolId → the credentials its requests reference
	for _, t := range httpTools {
		https = append(https, mcpgw.Native{Descriptor: t.Descriptor, Invoker: t.Invoker, Source: t.Source})
		if len(t.Credentials) > 0 {
			toolCreds[t.Descriptor.ToolID] = t.Credentials
		}
	}
	refusals := auth.NewRefusals(logger)
	firstAuth, err := auth.New(ctx, cfg.Auth, auth.Options{Refusals: refusals})
	if err != nil {
		return failure("auth: %v", err)
	}
	ed := newEdge(cfg.HTTP, logger)
	authn := &swapAuth{refusals: refusals, onAuth: ed.authenticated}
	authn.cur.Store(firstAuth)
	gw, err := mcpgw.New(mcpgw.Options{Config: cfg, Pipeline: pipe, Policy: cfg.Policy, Natives: natives, HTTPTools: https,
		Sessions: st, Events: store.EventLog(st), Pins: st, Secret: redactor.AddSecret, Logger: logger, Egress: serveEgressOptions})
	if err != nil {
		return failure("%v", err)
	}
	defer gw.Close()

	// The OpenWOP HTTP surface (issue 5): same pipeline, store and auth as
	// /mcp; it serves every path the mux does not, so unknown routes get
	// the OpenWOP error envelope.
	upstreamSessions := false
	for _, s := range cfg.Servers {
		upstreamSessions = upstreamSessions || s.Sessions == "per_client"
	}
	apiOpts := httpapi.Options{Pipeline: pipe, Auth: authn, Events: st, Sessions: st,
		Receipts: store.ReceiptLog(st), TestSeams: cfg.OpenWOP.TestSeams, SessionLifecycle: upstreamSessions,
		MCP: true, MaxBodyBytes: cfg.MCP.MaxBodyBytes, AuditContent: cfg.Audit.Content, Version: version.String(), Logger: logger,
		Approvals: approvals, ApproversScope: cfg.Approvals.ApproversScope, AuditScope: cfg.Audit.ReadersScope, Targets: gw.Target, ReceiptStore: st,
		ReceiptKeys: []ed25519.PublicKey{key.Public().(ed25519.PublicKey)},
		Principals:  func() []policy.Principal { return authn.cur.Load().Principals() },
		PinAdmin:    &httpapi.PinAdmin{Pins: st, Mode: cfg.Pinning.Mode, Approve: gw.ApproveTool}}
	api, err := httpapi.New(apiOpts)
	if err != nil {
		return failure("%v", err)
	}
	defer api.Close()
	// The web console (issue 16 point 4): a client of the same API handler
	// code, behind a session signed in with the same authenticator.
	ui, err := console.New(console.Options{API: apiOpts, SignIn: authn, Logger: logger,
		Principals:        func() []policy.Principal { return authn.cur.Load().Principals() },
		CredentialMissing: func(toolID string) bool { return credentialMissing(cfg, toolCreds[toolID]) }})
	if err != nil {
		return failure("%v", err)
	}
	defer ui.Close()

	mux := http.NewServeMux()
	mux.Handle("/mcp", gw.Handler(authn, cfg.MCP.MaxBodyBytes))
	mux.Handle("/", api)
	mux.Handle(console.Prefix, ui)
	// RFC 9728 protected-resource metadata (with auth.jwt; else the API's 404).
	wellKnown := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !authn.cur.Load().ServeMetadata(w, r) {
			api.ServeHTTP(w, r)
		}
	})
	mux.Handle("GET "+auth.MetadataPath, wellKnown)
	mux.Handle("GET "+auth.MetadataPath+"/{path...}", wellKnown)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") })
	registerServeMetrics(prom, pipe, webhooks, gw, refusals, ed, approvals, st)
	if metricsLn == nil {
		mux.Handle("GET /metrics", prom.Handler())
	} else {
		mmux := http.NewServeMux()
		mmux.Handle("GET /metrics", prom.Handler())
		msrv := &http.Server{Handler: mmux, ReadHeaderTimeout: 10 * time.Second}
		go msrv.Serve(metricsLn)
		defer msrv.Close()
		fmt.Fprintf(stdout, "toolgate: metrics at http://%s/metrics\n", metricsLn.Addr())
	}
	// /readyz also probes the shared backends (PostgreSQL, Redis): while one
	// does not answer, calls are refused (audit_unavailable,
	// ratelimit_unavailable), so the replica is not ready. With redis
	// on_unavailable: allow calls still run, so Redis is not probed.
	ready := &readiness{log: logger}
	if pg, ok := st.(interface{ Ping(context.Context) error }); ok {
		ready.probes = append(ready.probes, backendProbe{name: "store (postgres)", ping: pg.Ping})
	}
	if rl, ok := limiter.(interface{ Ping(context.Context) error }); ok && cfg.RateLimit.OnUnavailable != "allow" {
		ready.probes = append(ready.probes, backendProbe{name: "ratelimit (redis)", ping: rl.Ping})
	}
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		down := ready.unavailable(r.Context())
		switch {
		case !gw.Ready():
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, "upstream servers are still connecting\n")
			// One line per server not ready, with its reason: one
			// refused by its egress guard will not become ready by
			// waiting.
			for _, nr := range gw.NotReady() {
				if nr.Reason == string(errcode.EgressDenied) {
					fmt.Fprintf(w, "server %s not ready: %s (rule %s, host %s)\n", nr.Server, nr.Reason, nr.Rule, nr.Host)
				} else {
					fmt.Fprintf(w, "server %s not ready: %s\n", nr.Server, nr.Reason)
				}
			}
		case len(down) > 0:
			w.WriteHeader(http.StatusServiceUnavailable)
		default:
			io.WriteString(w, "ready\n")
		}
		for _, name := range down {
			fmt.Fprintf(w, "%s unavailable\n", name)
		}
		gw.WriteReadiness(w)
	})
	srv := ed.server(mux)
	serving = true                    // srv.Serve closes ln
	srv.RegisterOnShutdown(api.Close) // end SSE streams so Shutdown need not wait for them
	srv.RegisterOnShutdown(ui.Close)
	// End idle clients' standalone MCP streams (GET /mcp); in-flight calls
	// still finish.
	srv.RegisterOnShutdown(gw.CloseStreams)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	url := "http://" + ln.Addr().String() + "/mcp"
	fmt.Fprintf(stdout, "toolgate: MCP gateway at %s\n", url)
	fmt.Fprintf(stdout, "toolgate: OpenWOP HTTP API at http://%s/v1 (discovery: /.well-known/openwop)\n", ln.Addr())
	fmt.Fprintf(stdout, "toolgate: web console at http://%s/ui/\n", ln.Addr())
	if quick {
		fmt.Fprintf(stdout, "toolgate: API key (shown once): %s\n", apiKey)
		fmt.Fprintf(stdout, "toolgate: try: go run ./cmd/toolgate client tools --url %s --key %s\n", url, apiKey)
	}
	if len(cfg.Servers) > 0 {
		fmt.Fprintf(stdout, "toolgate: connecting %d upstream server(s); /readyz answers 200 when done\n", len(cfg.Servers))
	}

	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	for {
		select {
		case err := <-served:
			return failure("server: %v", err)
		case <-ctx.Done():
			return shutdown(srv, gw, st, logger)
		case s := <-sigs:
			if s == syscall.SIGHUP {
				reload(ctx, file, gw, authn, logger)
				continue
			}
			return shutdown(srv, gw, st, logger)
		}
	}
}

// bindingKey derives the approvals' argument-binding HMAC key from the
// signing key, so that it is stable across restarts and secret.
func bindingKey(key ed25519.PrivateKey) []byte {
	sum := sha256.Sum256(append([]byte("toolgate approval binding v1\x00"), key.Seed()...))
	return sum[:]
}

// approvalBindingKey is the approvals' argument-binding HMAC key: derived
// from approvals.binding_secret (resolved, and registered for redaction)
// when it is set, so that every replica sharing the store binds alike;
// otherwise bindingKey(key).
func approvalBindingKey(cfg *config.Config, key ed25519.PrivateKey, redactor *audit.Redactor) ([]byte, error) {
	if cfg.Approvals.BindingSecret == "" {
		return bindingKey(key), nil
	}
	secret, err := resolveCredentials(cfg, cfg.Approvals.BindingSecret, redactor)
	if err != nil {
		return nil, fmt.Errorf("approvals.binding_secret: %v", err)
	}
	sum := sha256.Sum256(append([]byte("toolgate approval binding secret v1\x00"), secret...))
	return sum[:], nil
}

// resolveCredentials expands the {{credential:NAME}} references of v,
// registering each resolved value with redactor.
func resolveCredentials(cfg *config.Config, v string, redactor *audit.Redactor) (string, error) {
	return config.ExpandCredentials(v, func(name string) (string, error) {
		cr, ok := cfg.Credentials[name]
		if !ok {
			return "", fmt.Errorf("credential %s is not declared", name)
		}
		v, err := cr.Resolve(name)
		if err == nil {
			redactor.AddSecret(name, v)
		}
		return v, err
	})
}

// serveEgressOptions are the SSRF guard options of everything serve puts
// behind it (HTTP tools, servers[].egress, hooks[].egress): none in
// production; tests set a resolver (egress.WithResolver) before serving,
// never concurrently with a serve.
var serveEgressOptions []egress.Option

// buildHooks makes the config's webhook hooks, their signing secrets
// resolved from credentials (and registered for redaction).
func buildHooks(cfg *config.Config, redactor *audit.Redactor, log *slog.Logger) ([]hook.Registration, []*webhook.Hook, error) {
	var regs []hook.Registration
	var hs []*webhook.Hook
	for _, hc := range cfg.Hooks {
		secret, err := resolveCredentials(cfg, hc.Secret, redactor)
		if err != nil {
			return nil, hs, fmt.Errorf("hook %s: %v", hc.Name, err)
		}
		var timeout time.Duration
		if hc.Timeout != "" {
			timeout, _ = config.ParseDuration(hc.Timeout)
		}
		var client *http.Client // nil: unguarded (no egress block), as before
		if hc.Egress != nil {
			pol, err := hc.Egress.Policy()
			if err != nil {
				return nil, hs, fmt.Errorf("hook %s: %v", hc.Name, err)
			}
			client = egress.NewClient(pol, serveEgressOptions...)
		}
		h, err := webhook.New(webhook.Options{Name: hc.Name, URL: hc.URL, Secret: []byte(secret), Mode: hook.Mode(hc.Mode),
			Full: hc.Content == "full", Redact: redactor.RedactJSON, Logger: log, Client: client})
		if err != nil {
			return nil, hs, err
		}
		hs = append(hs, h)
		regs = append(regs, hook.Registration{Name: hc.Name, Hook: h, Mode: hook.Mode(hc.Mode), Mutating: hc.Mutating, Timeout: timeout})
	}
	return regs, hs, nil
}

// tracingProtocol names the OTLP protocol tracing uses, for the log.
func tracingProtocol(t config.Tracing) string {
	p, err := tracing.Protocol(t, os.Getenv)
	if err != nil {
		return "invalid"
	}
	return p
}

// shutdown stops accepting connections, waits (up to 30 s) for in-flight
// requests, closes the upstream sessions and flushes the store.
func shutdown(srv *http.Server, gw *mcpgw.Gateway, st store.Store, log *slog.Logger) error {
	log.Info("shutting down: finishing in-flight calls")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := srv.Shutdown(ctx)
	gw.Close()
	if cerr := st.Close(); cerr != nil {
		return failure("closing the store: %v", cerr)
	}
	if err != nil {
		return failure("shutdown: %v", err)
	}
	log.Info("stopped")
	return nil
}

// swapAuth is the running authenticator, replaced on reload. Its
// refusals counter outlives the replacements; onAuth is told of every
// request that authenticated (the edge uncounts its connection).
type swapAuth struct {
	cur      atomic.Pointer[auth.Authenticator]
	refusals *auth.Refusals
	onAuth   func(*http.Request)
}

// The API's event streams recheck credentials through it: a reload that
// removes or rotates a key ends that key's open streams before their next
// event (and at their next heartbeat).
var _ httpapi.CredentialAuthenticator = (*swapAuth)(nil)

func (s *swapAuth) Authenticate(r *http.Request) (policy.Principal, error) {
	p, err := s.cur.Load().Authenticate(r)
	if err == nil && s.onAuth != nil {
		s.onAuth(r)
	}
	return p, err
}

// AuthenticateCredential is Authenticate with the credential's
// secret-free record (the console's sign-in).
func (s *swapAuth) AuthenticateCredential(r *http.Request) (identity.Principal, identity.Credential, error) {
	p, c, err := s.cur.Load().AuthenticateCredential(r)
	if err == nil && s.onAuth != nil {
		s.onAuth(r)
	}
	return p, c, err
}

// Recheck checks a console session's credential record against the
// running authenticator (so a reload that removes a key ends its sessions).
func (s *swapAuth) Recheck(c identity.Credential, p identity.Principal, now time.Time) (identity.Principal, error) {
	return s.cur.Load().Recheck(c, p, now)
}

func (s *swapAuth) Challenge(w http.ResponseWriter, r *http.Request, err error) {
	s.cur.Load().Challenge(w, r, err)
}

// reload re-reads file and installs its policy, tools: classification and
// auth (API keys, JWT); on any issue the running configuration stays.
// Changed sections that need a restart are logged.
func reload(ctx context.Context, file string, gw *mcpgw.Gateway, authn *swapAuth, log *slog.Logger) {
	if file == "" {
		log.Warn("SIGHUP ignored: the quick start has no config file")
		return
	}
	cfg, err := config.Load(file)
	if err != nil {
		log.Error("reload failed; keeping the running configuration", "file", file, "err", strings.TrimSpace(err.Error()))
		return
	}
	if err := servable(cfg); err != nil { // the next start would refuse the file
		log.Error("reload failed; keeping the running configuration", "file", file, "err", strings.TrimSpace(err.Error()))
		return
	}
	newAuth, err := auth.New(ctx, cfg.Auth, auth.Options{Refusals: authn.refusals})
	if err != nil {
		log.Error("reload failed (auth); keeping the running configuration", "err", err)
		return
	}
	restart, err := gw.Reload(cfg)
	if err != nil {
		log.Error("reload failed; keeping the running configuration", "err", err)
		return
	}
	authn.cur.Store(newAuth)
	log.Info("reloaded the policy, tool classification and auth", "file", file)
	logPolicyWarnings(log, cfg)
	if len(restart) > 0 {
		log.Warn("these sections changed but apply only after a restart", "sections", strings.Join(restart, ", "))
	}
}

// logPolicyWarnings logs each of the policy's warnings (policy.Program.
// Warnings, for example startsWith on a path argument) at level warn.
func logPolicyWarnings(log *slog.Logger, cfg *config.Config) {
	for _, w := range cfg.Policy.Warnings() {
		log.Warn("policy warning", "at", w.Pos.String(), "warning", w.Message)
	}
}

// backendConnectTimeout bounds validate's check of a shared backend
// (PostgreSQL, Redis) and serve's first contact with a shared rate limiter
// (Redis).
const backendConnectTimeout = 5 * time.Second

// buildLimiter returns the rate limiter cfg.RateLimit selects and its
// closer: in-process buckets (memory), or Redis, which must answer within
// backendConnectTimeout (serve fails fast when it does not).
func buildLimiter(ctx context.Context, cfg *config.Config, logger *slog.Logger) (ratelimit.Limiter, func(), error) {
	if cfg.RateLimit.Backend != "redis" {
		return ratelimit.NewMemory(ratelimit.MemoryOptions{}), func() {}, nil
	}
	redisLog.Store(logger)
	redisLogOnce.Do(func() { goredis.SetLogger(redisLogger{}) })
	cctx, cancel := context.WithTimeout(ctx, backendConnectTimeout)
	defer cancel()
	l, err := rlredis.New(cctx, rlredis.Options{URL: cfg.RateLimit.URL, Prefix: cfg.RateLimit.KeyPrefix,
		AllowUnavailable: cfg.RateLimit.OnUnavailable == "allow", Logger: logger})
	if err != nil {
		return nil, nil, fmt.Errorf("ratelimit.backend redis: %v", err)
	}
	return l, func() { l.Close() }, nil
}

// go-redis logs its connection pool's troubles (failed dials, bad
// connections) through one process-wide logger that writes raw lines to
// stderr by default; redisLogger sends them, at debug level, to the
// logger of the newest buildLimiter (serve's, redacting), so that they
// are structured like every other line and never interleave with them.
// Outages are reported by /readyz and by the refusals' own log lines.
var (
	redisLog     atomic.Pointer[slog.Logger]
	redisLogOnce sync.Once
)

type redisLogger struct{}

func (redisLogger) Printf(ctx context.Context, format string, v ...any) {
	if l := redisLog.Load(); l != nil {
		l.DebugContext(ctx, "redis client: "+fmt.Sprintf(format, v...))
	}
}

// credentialMissing reports whether one of the credentials names would not
// resolve now (undeclared, its environment variable unset or empty, its
// file unreadable): the check a call makes when it expands them (the value
// read is discarded at once).
func credentialMissing(cfg *config.Config, names []string) bool {
	for _, n := range names {
		c, ok := cfg.Credentials[n]
		if !ok {
			return true
		}
		if _, err := c.Resolve(n); err != nil {
			return true
		}
	}
	return false
}

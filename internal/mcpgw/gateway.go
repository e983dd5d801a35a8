// Package mcpgw is toolgate's agent-facing MCP gateway: one MCP server over
// Streamable HTTP that aggregates the configured upstream MCP servers (stdio
// or Streamable HTTP, through the official go-sdk client) and native tools,
// with every tools/list filtered by the policy for the session's principal
// and every tools/call run through the pipeline (DESIGN.md Surfaces, issue
// 4).
//
// # Sessions
//
// By default (servers[].sessions: per_client) each downstream MCP session
// gets its own upstream session per server, opened when the session first
// uses that server and closed with it (tool.session.opened / closed). That
// is what lets the gateway relay what an upstream sends back to one client:
// logging, progress, sampling and elicitation requests, resource updates.
// The price is one upstream session (for stdio, one process) per client
// and server. sessions: shared uses one upstream session for every client:
// cheaper, but nothing is relayed. Either way the gateway keeps one shared
// session per server for tools/list and readiness.
//
// Sessions are capped (mcp.max_sessions, mcp.max_sessions_per_principal;
// limits.go); a per-client stdio server idle for servers[].idle_timeout is
// stopped until its session's next use. Stdio servers get a minimal
// environment and run in their own process group, ended with them
// (stdio.go).
//
// Resources, prompts and completions are gated like tools (surfaces.go):
// each server's resources are the target mcp:<server>/resource and each
// prompt mcp:<server>#<prompt>; lists are filtered by the same disclosure,
// and every resources/read, resources/subscribe, prompts/get and
// completion/complete runs the pipeline (decided, recorded, receipted).
package mcpgw

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolgate/toolgate/approval"
	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/catalog"
	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/identity"
	"github.com/toolgate/toolgate/internal/config"
	"github.com/toolgate/toolgate/internal/egress"
	"github.com/toolgate/toolgate/internal/glob"
	"github.com/toolgate/toolgate/internal/mcpwire"
	"github.com/toolgate/toolgate/internal/pipeline"
	"github.com/toolgate/toolgate/internal/tracing"
	"github.com/toolgate/toolgate/internal/version"
	"github.com/toolgate/toolgate/store"
)

// Meta keys of tools/call (request and result _meta); see package
// mcpwire, the one mapping shared with the go-sdk middleware.
const (
	MetaRunID        = mcpwire.MetaRunID
	MetaCallID       = mcpwire.MetaCallID
	MetaReceiptID    = mcpwire.MetaReceiptID
	MetaAgentID      = mcpwire.MetaAgentID
	MetaParentCallID = mcpwire.MetaParentCallID
	// MetaRecord (request _meta, boolean) asks for the call to be recorded
	// (pipeline.Call.Record; needs audit.record_scope).
	MetaRecord = "toolgate/record"
	// MetaReplayOf (request _meta, string runId) makes the call part of a
	// replay of that recorded run (pipeline.Call.ReplayOf; needs
	// audit.record_scope).
	MetaReplayOf = "toolgate/replayOf"
	// MetaError is the result _meta key of a gateway-made isError result
	// (a refusal or a gateway fault): {code, message, details?}, code
	// one of errcode's. It is not in structuredContent, which clients
	// validate against the tool's outputSchema (DESIGN.md decision 5).
	MetaError = mcpwire.MetaError
)

// surfaceName is what model APIs accept as a function name.
var surfaceName = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// Native is a native tool served on the MCP surface next to upstream tools.
type Native struct {
	Descriptor catalog.ToolDescriptor // toolId native:<name>
	Invoker    pipeline.Invoker
	// Source is, for an HTTP tool (Options.HTTPTools), the pinning unit
	// it belongs to (httptool.Tool.Source: its http_tools or openapi
	// entry), pinned like a server's tools; "" pins it alone, as the
	// source named by its toolId. Unused for natives.
	Source string
}

// Options configures New.
type Options struct {
	Config   *config.Config     // required
	Pipeline *pipeline.Pipeline // required; the gateway installs its state
	Policy   *pipeline.Policy   // nil denies every call
	Natives  []Native
	// HTTPTools are HTTP tools (toolId http:<name>, internal/httptool),
	// served as <name> (dots replaced by the separator) beside the
	// natives; their output is a CallToolResult. They are pinned (config
	// pinning) at New, per Source, like an upstream's tools.
	HTTPTools []Native
	Sessions  store.Sessions // nil: session records are not kept (events still are)
	Events    audit.Log      // for tool.session.* and toolgate.tool.* events; nil: none
	// Pins keeps tool-definition pins (config pinning); nil: no pinning
	// (digests are still computed and written to receipts).
	Pins store.Pins
	// Secret registers a resolved credential value for redaction (id, value).
	Secret     func(id, value string)
	Logger     *slog.Logger
	HTTPClient *http.Client // for Streamable HTTP upstreams; nil: one on upstreamTransport
	// Egress are options of the SSRF guard of every server with an egress
	// block (servers[].egress), whose requests never use HTTPClient (tests:
	// egress.WithResolver).
	Egress []egress.Option
}

// upstreamTransport is the default transport to Streamable HTTP upstreams:
// http.DefaultTransport keeps 2 idle connections per host, so under more
// concurrent calls to one server nearly every call opened (and closed) a
// TCP connection (toolgate-load, BENCHMARKS.md issue 4).
var upstreamTransport = func() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = 256
	return t
}()

// Gateway is the MCP gateway. Safe for concurrent use.
type Gateway struct {
	opts   Options
	cfg    *config.Config
	log    *slog.Logger
	pipe   *pipeline.Pipeline
	server *mcp.Server
	ups    map[string]*upstream // by server name; fixed at New
	order  []string             // server names, sorted
	// srcs are the pinning sources of the HTTP tools (pinning.go), by
	// Source; fixed at New, sorted in srcOrder.
	srcs     map[string]*httpSource
	srcOrder []string
	// ambiguous maps each bare surface name that tools of two servers (or
	// a server and a native) have claimed under naming.prefix never to
	// those toolIds; it only grows (until restart). Guarded by mu.
	ambiguous map[string][]string

	mu      sync.Mutex // serialises rebuild and policy swaps
	policy  *pipeline.Policy
	classes []config.ToolClass // tools: classification (reloadable), under mu
	surface atomic.Pointer[surface]

	sessions  sync.Map       // downstream session id → *dsession
	limits    *sessionLimits // mcp.max_sessions, mcp.max_sessions_per_principal (limits.go)
	notifyMu  sync.Mutex     // orders notification passes and new sessions' first view (listchanged.go)
	idleStops atomic.Int64   // per-client upstream sessions stopped for idleness
	updates   sync.Map       // relayed resources/updated params → its one *mcp.ServerSession (session.go)
	closed    atomic.Bool
	done      chan struct{} // closed by Close
	streams   streamCloser  // ends standalone GET streams at shutdown (http.go)

	// Direct tools/call (direct.go).
	userApprover    atomic.Bool  // the policy has an `approver: user` rule
	inflight        sync.Map     // session id + "\x00" + JSON-RPC id → *directCall
	directCalls     atomic.Int64 // tools/call requests served by serveDirect
	keepalives      atomic.Int64 // pings keepAlive sent
	keepaliveStatus atomic.Int32 // HTTP status of the last one
	protocols       []string     // sessionProtocols()
}

// upstream is one configured server.
type upstream struct {
	name    string
	cfg     config.Server
	d       *dialer
	timeout time.Duration
	idle    time.Duration // servers[].idle_timeout of a per-client stdio session (0: never stopped)
	shared  *conn
	caller  *upCaller // tools/call on a Streamable HTTP upstream's sessions (upcall.go); nil for stdio

	refreshMu sync.Mutex // serialises refreshTools
	mu        sync.Mutex
	tools     []*mcp.Tool // from the shared session's last tools/list
	// A re-list scheduled after a tools/list_changed (listchanged.go), and
	// the session to list on.
	refreshPending bool
	refreshOn      *mcp.ClientSession
	listed         chan struct{}
	pins           pinState // pinning's decision on the last listing (pinning.go); under mu
	once           sync.Once
	initRes        *mcp.InitializeResult
}

// surface is the MCP-surface view of one catalog: names, sorted.
type surface struct {
	byName map[string]string    // surface name → toolId
	tool   map[string]*mcp.Tool // toolId → the tool as listed (name, schema, annotations)
	names  []string             // surface names, sorted
	server map[string]string    // toolId → server ("" for native)
	http   map[string]bool      // toolIds of HTTP tools
	remote map[string]string    // toolId → upstream tool name
	descs  map[string]catalog.ToolDescriptor
	// classes is the tools: classification the catalog was built with,
	// which also classifies resource and prompt targets (surfaces.go).
	classes []catalog.Classification
	// defs caches the SHA-256 of each tool's JSON definition by toolId
	// (viewDigest), filled on first use; guarded by defMu.
	defMu sync.Mutex
	defs  map[string][32]byte
}

// def is the SHA-256 of toolID's definition as tools/list answers it.
func (sf *surface) def(toolID string) [32]byte {
	sf.defMu.Lock()
	defer sf.defMu.Unlock()
	if d, ok := sf.defs[toolID]; ok {
		return d
	}
	b, _ := json.Marshal(sf.tool[toolID])
	d := sha256.Sum256(b)
	if sf.defs == nil {
		sf.defs = map[string][32]byte{}
	}
	sf.defs[toolID] = d
	return d
}

// New builds the gateway: resolves credentials, starts connecting to every
// upstream (in the background) and installs the native tools. Errors:
// InvalidConfig for an unresolvable credential or a bad native descriptor.
func New(opts Options) (*Gateway, error) {
	if opts.Config == nil || opts.Pipeline == nil {
		return nil, errcode.New(errcode.InvalidConfig, "mcpgw: Config and Pipeline are required")
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	g := &Gateway{opts: opts, cfg: opts.Config, log: log, pipe: opts.Pipeline, ups: map[string]*upstream{}, policy: opts.Policy,
		classes: opts.Config.Tools, protocols: sessionProtocols(), limits: newSessionLimits(opts.Config.MCP), done: make(chan struct{})}
	resolve := func(name string) (string, error) {
		cr, ok := g.cfg.Credentials[name]
		if !ok {
			return "", fmt.Errorf("credential %s is not declared", name)
		}
		v, err := cr.Resolve(name)
		if err != nil {
			return "", err
		}
		if opts.Secret != nil {
			opts.Secret(name, v)
		}
		return v, nil
	}
	var err error
	hc := opts.HTTPClient
	if hc == nil {
		hc = &http.Client{Transport: upstreamTransport}
	}
	for _, srv := range g.cfg.Servers {
		client := hc
		if srv.Egress != nil && srv.URL != "" {
			if client, err = guardedClient(srv, opts.Egress); err != nil {
				return nil, errcode.Wrap(errcode.InvalidConfig, err, "mcpgw: server "+srv.Name)
			}
		}
		d, err := newDialer(srv, resolve, client)
		if err != nil {
			return nil, errcode.Wrap(errcode.InvalidConfig, err, "mcpgw")
		}
		u := &upstream{name: srv.Name, cfg: srv, d: d, listed: make(chan struct{})}
		if srv.URL != "" {
			if u.caller, err = newUpCaller(d.httpClient(), srv.URL, 0); err != nil {
				return nil, errcode.Wrap(errcode.InvalidConfig, err, "mcpgw: server "+srv.Name)
			}
		}
		if srv.Timeout != "" {
			u.timeout, _ = config.ParseDuration(srv.Timeout)
		}
		if srv.IdleTimeout != "" && len(srv.Command) > 0 {
			u.idle, _ = config.ParseDuration(srv.IdleTimeout)
		}
		g.ups[srv.Name] = u
		g.order = append(g.order, srv.Name)
	}
	sort.Strings(g.order)
	g.server = mcp.NewServer(&mcp.Implementation{Name: "toolgate", Title: "toolgate MCP gateway", Version: version.String()}, &mcp.ServerOptions{
		Logger: log,
		Capabilities: &mcp.ServerCapabilities{
			Tools:       &mcp.ToolCapabilities{ListChanged: true},
			Logging:     &mcp.LoggingCapabilities{},
			Completions: &mcp.CompletionCapabilities{},
			Prompts:     &mcp.PromptCapabilities{ListChanged: true},
			Resources:   &mcp.ResourceCapabilities{ListChanged: true, Subscribe: true},
		},
		CompletionHandler:         g.complete,
		SubscribeHandler:          g.subscribe,
		UnsubscribeHandler:        g.unsubscribe,
		SupportedProtocolVersions: sessionProtocols(),
	})
	g.server.AddReceivingMiddleware(g.middleware)
	g.server.AddSendingMiddleware(g.sendingMiddleware)
	g.pinHTTPTools()
	if err := g.rebuild(); err != nil {
		return nil, err
	}
	for _, name := range g.order {
		u := g.ups[name]
		u.shared = newConn(u.d, connConfig{opts: g.sharedClientOptions(u), log: log.With("server", name), onUp: func(cs *mcp.ClientSession) {
			g.refreshTools(u, cs)
		}})
	}
	if g.cfg.Pinning.Mode == "enforce" && opts.Pins != nil {
		go g.watchPins()
	}
	return g, nil
}

// guardedClient is the HTTP client of a Streamable HTTP server with an
// egress block: the SSRF guard's transport (pooled like
// upstreamTransport) and its redirect check.
func guardedClient(srv config.Server, opts []egress.Option) (*http.Client, error) {
	pol, err := srv.Egress.Policy()
	if err != nil {
		return nil, err
	}
	t := egress.NewTransport(pol, opts...)
	t.MaxIdleConnsPerHost = upstreamTransport.MaxIdleConnsPerHost
	return &http.Client{Transport: t, CheckRedirect: egress.CheckRedirect(pol)}, nil
}

// sessionProtocols are the MCP protocol versions served: every version the
// SDK supports that has sessions (before 2026-07-28, whose requests are
// sessionless), since a principal is fixed per session.
func sessionProtocols() []string {
	var out []string
	for _, v := range mcp.SupportedProtocolVersions() {
		if v < "2026-07-28" {
			out = append(out, v)
		}
	}
	return out
}

// Server returns the underlying MCP server (for an http handler).
func (g *Gateway) Server() *mcp.Server { return g.server }

// sharedClientOptions are the client options of u's shared session: it
// follows tools/list_changed.
func (g *Gateway) sharedClientOptions(u *upstream) *mcp.ClientOptions {
	return &mcp.ClientOptions{
		Logger: g.log,
		ToolListChangedHandler: func(ctx context.Context, req *mcp.ToolListChangedRequest) {
			g.scheduleRefresh(u, req.Session)
		},
	}
}

// refreshTools lists u's tools on cs and installs them. Refreshes of one
// server run one at a time, so the list installed last is the one taken
// last (a tools/list_changed during the first listing must not be undone
// by it).
func (g *Gateway) refreshTools(u *upstream, cs *mcp.ClientSession) {
	u.refreshMu.Lock()
	defer u.refreshMu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var tools []*mcp.Tool
	for t, err := range cs.Tools(ctx, nil) {
		if err != nil {
			g.log.Warn("upstream tools/list failed", "server", u.name, "err", err)
			return
		}
		tools = append(tools, t)
	}
	// The holds are installed before the pins are written (previewPinning),
	// so that a change is never visible as pending while its tool still
	// runs; the writing pass may hold more (a pin that failed to be
	// written), which a second install applies.
	defs := mcpPinDefs(u.name, tools)
	ps := g.previewPinning(ctx, u.name, defs)
	install := func(ps pinState) error {
		u.mu.Lock()
		u.tools = tools
		u.pins = ps
		u.initRes = cs.InitializeResult()
		u.mu.Unlock()
		g.mu.Lock()
		defer g.mu.Unlock()
		return g.rebuildLocked()
	}
	err := install(ps)
	if err == nil {
		if ps2 := g.applyPinning(ctx, u.name, defs); !maps.Equal(ps.held, ps2.held) || !maps.Equal(ps.digests, ps2.digests) {
			err = install(ps2)
		}
	}
	// Ready only once the tools are installed: WaitReady returning before
	// the surface has them made a first tools/call answer unknown tool.
	u.once.Do(func() { close(u.listed) })
	if err != nil {
		g.log.Error("installing upstream tools failed", "server", u.name, "err", err)
		return
	}
	g.notifyToolsChanged()
}

// Ready reports whether every upstream has been connected and listed once.
func (g *Gateway) Ready() bool {
	for _, u := range g.ups {
		select {
		case <-u.listed:
		default:
			return false
		}
	}
	return true
}

// UpstreamNotReady is one upstream server that is not ready (not yet
// connected and listed once): its servers[].name, the reason (an errcode
// code: "egress_denied" when the SSRF guard of servers[].egress refused
// the last connection attempt, else "connecting") and, for egress_denied,
// the guard's rule and the refused request's host (never the address).
type UpstreamNotReady struct {
	Server string
	Reason string
	Rule   string
	Host   string
}

// NotReady returns the upstream servers that are not ready, in name
// order; empty when Ready. Safe for concurrent use.
func (g *Gateway) NotReady() []UpstreamNotReady {
	var out []UpstreamNotReady
	for _, name := range g.order {
		u := g.ups[name]
		select {
		case <-u.listed:
			continue
		default:
		}
		nr := UpstreamNotReady{Server: name, Reason: "connecting"}
		if u.shared != nil {
			if d := u.shared.egressDenied(); d != nil {
				nr.Reason, nr.Rule, nr.Host = string(errcode.EgressDenied), d.Rule, d.Host
			}
		}
		out = append(out, nr)
	}
	return out
}

// WaitReady waits until Ready or ctx ends; it returns ctx's error then.
func (g *Gateway) WaitReady(ctx context.Context) error {
	for _, u := range g.ups {
		select {
		case <-u.listed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// SetPolicy installs a new policy atomically and tells connected sessions
// that their tool lists may have changed.
func (g *Gateway) SetPolicy(p *pipeline.Policy) error {
	g.mu.Lock()
	old := g.policy
	g.policy = p
	if err := g.rebuildLocked(); err != nil {
		g.policy = old
		g.mu.Unlock()
		return err
	}
	g.mu.Unlock()
	g.notifyToolsChanged()
	g.notifySurfacesChanged(old, p, nil, nil)
	return nil
}

// Reload installs what of cfg can change while running: the policy and the
// tools: classification (and so descriptors, scopes and annotations),
// atomically, then tells connected sessions their tool lists (and, when
// the policy or classification changed, their resource and prompt lists)
// may have changed. It returns the top-level sections that differ but need a
// restart to apply (servers, naming, store, listen, mcp, signing,
// credentials, http_tools, openapi, ...). Errors: a catalog the new classification makes invalid
// (the running configuration stays). Safe for concurrent use.
func (g *Gateway) Reload(cfg *config.Config) (restart []string, err error) {
	g.mu.Lock()
	oldPolicy, oldClasses := g.policy, g.classes
	g.policy, g.classes = cfg.Policy, cfg.Tools
	if err := g.rebuildLocked(); err != nil {
		g.policy, g.classes = oldPolicy, oldClasses
		g.mu.Unlock()
		return nil, err
	}
	g.mu.Unlock()
	g.notifyToolsChanged()
	g.notifySurfacesChanged(oldPolicy, cfg.Policy, oldClasses, cfg.Tools)
	for _, c := range []struct {
		name     string
		old, new any
	}{
		{"servers", g.cfg.Servers, cfg.Servers}, {"naming", g.cfg.Naming, cfg.Naming}, {"store", g.cfg.Store, cfg.Store},
		{"listen", g.cfg.Listen, cfg.Listen}, {"mcp", g.cfg.MCP, cfg.MCP}, {"signing", g.cfg.Signing, cfg.Signing},
		{"credentials", g.cfg.Credentials, cfg.Credentials}, {"hooks", g.cfg.Hooks, cfg.Hooks},
		{"approvals", g.cfg.Approvals, cfg.Approvals}, {"audit", g.cfg.Audit, cfg.Audit}, {"ratelimit", g.cfg.RateLimit, cfg.RateLimit},
		{"openwop", g.cfg.OpenWOP, cfg.OpenWOP}, {"http_tools", g.cfg.HTTPTools, cfg.HTTPTools}, {"openapi", g.cfg.OpenAPI, cfg.OpenAPI},
		{"pinning", g.cfg.Pinning, cfg.Pinning},
	} {
		if !reflect.DeepEqual(c.old, c.new) {
			restart = append(restart, c.name)
		}
	}
	return restart, nil
}

func (g *Gateway) rebuild() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.rebuildLocked()
}

// rebuildLocked builds the catalog from the natives and the upstreams'
// latest tool lists and installs it with the policy. g.mu is held.
func (g *Gateway) rebuildLocked() error {
	sep := g.cfg.Naming.Separator
	prefix := g.cfg.Naming.Prefix == "always" || (g.cfg.Naming.Prefix == "auto" && len(g.ups) > 1)
	classes := (&config.Config{Tools: g.classes}).Classifications()
	sf := &surface{byName: map[string]string{}, tool: map[string]*mcp.Tool{}, server: map[string]string{},
		remote: map[string]string{}, descs: map[string]catalog.ToolDescriptor{}, classes: classes, http: map[string]bool{}}
	var tools []catalog.Tool
	inv := map[string]pipeline.Invoker{}
	held := map[string]bool{}
	// Bare surface names claimed by tools of different servers (or a
	// server and a native) are served by none of them (issue 13.11): each
	// MCP tool is served under its prefixed name instead, and the bare
	// name stays refused as ambiguous until restart, even once only one
	// claimant is left, so it is never routed to whichever server is up.
	if !prefix {
		claims := map[string][]string{}
		claim := func(name, id string) {
			if !slices.Contains(claims[name], id) {
				claims[name] = append(claims[name], id)
			}
		}
		for _, n := range g.opts.Natives {
			name := strings.TrimPrefix(n.Descriptor.ToolID, "native:")
			claim(strings.ReplaceAll(name, ".", sep), n.Descriptor.ToolID)
		}
		for _, n := range g.opts.HTTPTools {
			name := strings.TrimPrefix(n.Descriptor.ToolID, "http:")
			claim(strings.ReplaceAll(name, ".", sep), n.Descriptor.ToolID)
		}
		for _, sname := range g.order {
			u := g.ups[sname]
			u.mu.Lock()
			ts := u.tools
			u.mu.Unlock()
			for _, mt := range ts {
				if mt != nil && mt.Name != "" {
					claim(mt.Name, catalog.MCPToolID(sname, mt.Name))
				}
			}
		}
		for name, ids := range claims {
			if len(ids) < 2 {
				continue
			}
			known := g.ambiguous[name]
			for _, id := range ids {
				if !slices.Contains(known, id) {
					known = append(known, id)
				}
			}
			if len(known) != len(g.ambiguous[name]) {
				slices.Sort(known)
				if g.ambiguous == nil {
					g.ambiguous = map[string][]string{}
				}
				g.ambiguous[name] = known
				g.log.Error("tool name collision under naming.prefix never: the bare name is refused as ambiguous; each MCP tool is served as <server>"+sep+"<tool> and by its toolId",
					"name", name, "toolIds", strings.Join(known, ", "))
			}
		}
	}
	add := func(t catalog.Tool, name string, mt *mcp.Tool, in pipeline.Invoker) {
		id := t.Descriptor.ToolID
		if _, amb := g.ambiguous[name]; amb && !prefix {
			if t.Transport != catalog.TransportMCP {
				g.log.Error("tool not served on MCP: its name collides with another tool's (call it by toolId)", "toolId", id, "name", name)
				return
			}
			name = t.Server + sep + t.Name
		}
		if !surfaceName.MatchString(name) {
			g.log.Warn("tool not served on MCP: its name is not a valid function name (^[a-zA-Z0-9_-]{1,64}$)", "toolId", id, "name", name)
			return
		}
		if other, dup := sf.byName[name]; dup {
			g.log.Warn("tool not served on MCP: its name is taken", "toolId", id, "name", name, "by", other)
			return
		}
		tools = append(tools, t)
		inv[id] = in
		sf.byName[name] = id
		sf.names = append(sf.names, name)
		sf.server[id] = t.Server
		sf.remote[id] = t.Name
		sf.descs[id] = t.Descriptor
		ann := t.Descriptor.Annotations()
		out := &mcp.Tool{Name: name, Title: t.Descriptor.Title, Description: t.Descriptor.Description,
			Annotations: &mcp.ToolAnnotations{ReadOnlyHint: ann.ReadOnlyHint, DestructiveHint: &ann.DestructiveHint,
				IdempotentHint: ann.IdempotentHint, OpenWorldHint: &ann.OpenWorldHint}}
		if mt != nil {
			out.Title, out.Description, out.InputSchema, out.OutputSchema, out.Icons, out.Meta = mt.Title, mt.Description, mt.InputSchema, mt.OutputSchema, mt.Icons, mt.Meta
			if mt.Annotations != nil && mt.Annotations.Title != "" {
				out.Annotations.Title = mt.Annotations.Title
			}
		}
		if out.InputSchema == nil {
			if len(t.Descriptor.InputSchema) > 0 {
				out.InputSchema = t.Descriptor.InputSchema
			} else {
				out.InputSchema = map[string]any{"type": "object"}
			}
		}
		sf.tool[id] = out
	}
	for _, n := range g.opts.Natives {
		d := n.Descriptor
		catalog.Classify(&d, classes)
		name := strings.TrimPrefix(d.ToolID, "native:")
		dig, _ := catalog.DefinitionDigest(catalog.DescriptorDefinition(&d))
		add(catalog.Tool{Descriptor: d, Transport: catalog.TransportNative, Name: name, Digest: dig},
			strings.ReplaceAll(name, ".", sep), nil, n.Invoker)
	}
	for _, n := range g.opts.HTTPTools {
		d := n.Descriptor
		catalog.Classify(&d, classes)
		name := strings.TrimPrefix(d.ToolID, "http:")
		if _, dup := sf.descs[d.ToolID]; dup {
			continue
		}
		sf.http[d.ToolID] = true
		// The digest pinning computed (of the definition as built, before
		// classification, as for an upstream's tools) is the receipts'.
		dig, held1 := g.httpPin(n)
		if held1 {
			held[d.ToolID] = true
		}
		add(catalog.Tool{Descriptor: d, Transport: catalog.TransportHTTP, Name: name, Digest: dig},
			strings.ReplaceAll(name, ".", sep), nil, n.Invoker)
	}
	for _, sname := range g.order {
		u := g.ups[sname]
		u.mu.Lock()
		ts, ps := u.tools, u.pins
		u.mu.Unlock()
		for _, mt := range ts {
			if err := catalog.ValidServerName(sname); err != nil || mt == nil || mt.Name == "" {
				continue
			}
			d := catalog.ToolDescriptor{ToolID: catalog.MCPToolID(sname, mt.Name), Source: catalog.SourceMCP,
				Title: mt.Title, Description: mt.Description}
			if u.cfg.Egress != nil {
				// Behind the SSRF guard (a tools: entry's egress, the
				// operator's word, still overrides it).
				d.Egress = catalog.EgressSafeFetch
			}
			if raw, err := json.Marshal(mt.InputSchema); err == nil && len(raw) > 2 && raw[0] == '{' {
				d.InputSchema = raw
			}
			catalog.Classify(&d, classes)
			if err := d.Validate(); err != nil {
				g.log.Warn("upstream tool skipped: invalid descriptor", "server", sname, "tool", mt.Name, "err", err)
				continue
			}
			name := mt.Name
			if prefix {
				name = sname + sep + mt.Name
			}
			if ps.held[mt.Name] {
				held[d.ToolID] = true
			}
			add(catalog.Tool{Descriptor: d, Transport: catalog.TransportMCP, Server: sname, Name: mt.Name, Digest: ps.digests[mt.Name]}, name, mt,
				g.mcpInvoker(u, mt.Name, g.toolTimeout(u, d.ToolID)))
		}
	}
	slices.Sort(sf.names)
	snap, err := catalog.NewSnapshot(tools, catalog.Options{Separator: sep, Ambiguous: g.ambiguous})
	if err != nil {
		return err
	}
	g.pipe.Swap(&pipeline.State{Catalog: snap, Policy: g.policy, Invokers: inv, Held: held})
	g.surface.Store(sf)
	return nil
}

// toolTimeout is the invocation timeout of toolID: the last matching
// tools[].timeout, else the server's timeout, else 0 (the pipeline's).
func (g *Gateway) toolTimeout(u *upstream, toolID string) time.Duration {
	d := u.timeout
	for _, tc := range g.classes {
		if tc.Timeout != "" && glob.Match(tc.Match, toolID) {
			if v, err := config.ParseDuration(tc.Timeout); err == nil {
				d = v
			}
		}
	}
	return d
}

// Close closes every upstream session (shared and per client).
func (g *Gateway) Close() {
	if !g.closed.CompareAndSwap(false, true) {
		return
	}
	close(g.done)
	g.sessions.Range(func(_, v any) bool {
		v.(*dsession).close("completed")
		return true
	})
	for _, u := range g.ups {
		u.shared.close()
	}
}

// principalOf returns the request's principal (set by the HTTP layer).
func principalOf(req mcp.Request) (identity.Principal, bool) {
	ex := req.GetExtra()
	if ex == nil || ex.TokenInfo == nil {
		return identity.Principal{}, false
	}
	p, ok := ex.TokenInfo.Extra[principalKey].(identity.Principal)
	return p, ok
}

// principalKey is the TokenInfo.Extra key of the principal.
const principalKey = "toolgate/principal"

// middleware handles tools/list and tools/call itself, the resource and
// prompt methods through the gate (surfaces.go) and relays logging/setLevel
// upstream; everything else (initialize, ping, completion/complete and
// resources/subscribe through the SDK's handlers, ...) goes to the SDK.
func (g *Gateway) middleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		switch method {
		case "initialize":
			res, err := next(ctx, method, req)
			if err == nil {
				g.sessionInitialized(req)
			}
			return res, err
		case "notifications/initialized", "ping", "notifications/cancelled", "notifications/progress",
			"notifications/roots/list_changed":
			return next(ctx, method, req)
		}
		p, ok := principalOf(req)
		if !ok {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: "no authenticated principal"}
		}
		ss, _ := req.GetSession().(*mcp.ServerSession)
		ds := g.dsession(ss, p)
		switch method {
		case "tools/list":
			return g.listTools(ctx, p, req.(*mcp.ListToolsRequest))
		case "tools/call":
			return g.callTool(ctx, ds, p, req.(*mcp.CallToolRequest))
		case "resources/list":
			return g.listResources(ctx, ds, p, req.(*mcp.ListResourcesRequest))
		case "resources/templates/list":
			return g.listResourceTemplates(ctx, ds, p, req.(*mcp.ListResourceTemplatesRequest))
		case "resources/read":
			return g.readResource(ctx, ds, p, req.(*mcp.ReadResourceRequest))
		case "prompts/list":
			return g.listPrompts(ctx, ds, p, req.(*mcp.ListPromptsRequest))
		case "prompts/get":
			return g.getPrompt(ctx, ds, p, req.(*mcp.GetPromptRequest))
		case "logging/setLevel":
			res, err := next(ctx, method, req)
			if err == nil {
				if params, ok := req.GetParams().(*mcp.SetLoggingLevelParams); ok {
					ds.setLogLevel(ctx, params)
				}
			}
			return res, err
		}
		return next(ctx, method, req)
	}
}

// pageSize is the tools/list page size.
const pageSize = 100

// listTools answers tools/list: exactly the tools whose decision could be
// non-deny for p, sorted by name, paginated by cursor after filtering.
func (g *Gateway) listTools(ctx context.Context, p identity.Principal, req *mcp.ListToolsRequest) (*mcp.ListToolsResult, error) {
	sf := g.surface.Load()
	// Only the tools up to a full page are decided (issue 15.5: one page
	// over 10,000 tools), not the whole catalog per request.
	visible := g.pipe.VisibleFunc(ctx, p)
	start := 0
	if req.Params != nil && req.Params.Cursor != "" {
		after, err := decodeCursor(req.Params.Cursor)
		if err != nil {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "invalid cursor"}
		}
		start = sort.SearchStrings(sf.names, after)
		if start < len(sf.names) && sf.names[start] == after {
			start++
		}
	}
	res := &mcp.ListToolsResult{Tools: []*mcp.Tool{}}
	for _, name := range sf.names[start:] {
		id := sf.byName[name]
		if !visible(id) {
			continue
		}
		if len(res.Tools) == pageSize {
			res.NextCursor = encodeCursor(res.Tools[len(res.Tools)-1].Name)
			break
		}
		res.Tools = append(res.Tools, sf.tool[id])
	}
	return res, nil
}

// Cursors are the last name of the previous page, base64url-free but
// opaque enough: "n:" + name.
func encodeCursor(name string) string { return "n:" + name }

func decodeCursor(c string) (string, error) {
	name, ok := strings.CutPrefix(c, "n:")
	if !ok || !surfaceName.MatchString(name) {
		return "", errors.New("invalid cursor")
	}
	return name, nil
}

// disclosed reports whether toolID is in p's tool list.
func (g *Gateway) disclosed(ctx context.Context, p identity.Principal, toolID string) bool {
	return g.pipe.Visible(ctx, p, toolID)
}

// unknownTool is the JSON-RPC error MCP servers (the go-sdk) give for a tool
// they do not have; undisclosed tools answer exactly the same (DESIGN.md
// decision 5).
func unknownTool(name string) error { return mcpwire.UnknownTool(name) }

// callTool answers tools/call through the pipeline.
func (g *Gateway) callTool(ctx context.Context, ds *dsession, p identity.Principal, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	params := req.Params
	if params == nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "missing params"}
	}
	sf := g.surface.Load()
	tool := params.Name
	if id, ok := sf.byName[params.Name]; ok {
		tool = id
	}
	args := params.Arguments
	if len(args) == 0 || string(args) == "null" {
		args = json.RawMessage("{}")
	}
	c := pipeline.Call{Tool: tool, Args: args, Principal: p, Transport: catalog.TransportMCP, RunID: ds.id}
	if err := applyCallMeta(params.Meta, &c); err != nil {
		return nil, err
	}
	if c.RunID == "" {
		c.RunID = "" // generated by the pipeline
	}
	// W3C Trace Context: the HTTP request's traceparent (the SDK's path;
	// serveDirect extracted it already), overridden by params._meta's.
	if req.Extra != nil {
		ctx = tracing.Extract(ctx, req.Extra.Header)
	}
	ctx = tracing.ExtractMeta(ctx, params.Meta)
	cc := &callCtx{ds: ds, progress: params.GetProgressToken(), extra: req.Extra}
	ctx = withCall(ctx, cc)
	if ask := ds.elicitor(); ask != nil {
		ctx = approval.WithElicitor(ctx, ask)
	}
	res, err := g.pipe.Call(ctx, c)
	if err != nil {
		switch errcode.CodeOf(err) {
		case errcode.NotFound, errcode.AmbiguousTool:
			return nil, unknownTool(params.Name)
		case errcode.InvalidArgument:
			// Malformed arguments of a tool the principal may not see
			// answer like an unknown tool: no existence leak.
			if res == nil || res.ToolID == "" || !g.disclosed(ctx, p, res.ToolID) {
				return nil, unknownTool(params.Name)
			}
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: errcode.As(err).Message}
		}
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "internal error"}
	}
	if res.Hidden {
		return nil, unknownTool(params.Name)
	}
	meta := mcp.Meta{MetaRunID: res.RunID, MetaCallID: res.CallID}
	if res.ReceiptID != "" {
		meta[MetaReceiptID] = res.ReceiptID
	}
	var out *mcp.CallToolResult
	gatewayMade := false
	switch {
	case res.Status == audit.StatusOK && sf.server[res.ToolID] != "":
		out = cc.upstreamResult(res.Output)
	case sf.http[res.ToolID] && res.Output != nil:
		// An HTTP tool's answer, built by the gateway (internal/httptool):
		// a CallToolResult; a failed one (non-2xx, cut body) carries the
		// gateway's error object too. The pipeline redacted a failed
		// call's output.
		out = toResult(true, res.Output)
		if res.Status != audit.StatusOK {
			out.IsError = true
			if out.Meta == nil {
				out.Meta = mcp.Meta{}
			}
			out.Meta[MetaError] = errorResult(res.Err).Meta[MetaError]
			gatewayMade = true
		}
	case res.Status == audit.StatusOK:
		out = toResult(false, res.Output)
	case res.Output != nil && res.Err != nil && res.Err.Code == errcode.ToolExecutionFailed && sf.server[res.ToolID] != "":
		// The upstream's own isError result, with resolved credentials
		// and secret shapes scrubbed (DESIGN.md decision 9: error
		// messages never carry secrets), as over POST /v1/calls.
		out = toResult(true, res.Output)
		if red, err := g.pipe.Redactor().RedactJSON(res.Output); err == nil {
			out = toResult(true, red)
		}
		out.IsError = true
	default:
		out = errorResult(res.Err)
		gatewayMade = true
	}
	if out.Meta == nil {
		out.Meta = mcp.Meta{}
	} else if !gatewayMade {
		// _meta["toolgate/error"] is the gateway's word alone: a tool's
		// own result never carries one.
		delete(out.Meta, MetaError)
	}
	for k, v := range meta {
		out.Meta[k] = v
	}
	return out, nil
}

// applyCallMeta sets c's runId, agentId, parentCallId and replayOf from a
// request's _meta (toolgate/runId, toolgate/agentId, toolgate/parentCallId,
// toolgate/replayOf), each when present, and Record from toolgate/record.
// Errors: a -32602 JSON-RPC error for a value that is not a string of 1-128
// bytes of UTF-8 without control characters, or a toolgate/record that is
// not a boolean.
func applyCallMeta(m mcp.Meta, c *pipeline.Call) error {
	if v, present := m[MetaRecord]; present {
		b, ok := v.(bool)
		if !ok {
			return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("_meta %q must be a boolean", MetaRecord)}
		}
		c.Record = b
	}
	for _, f := range []struct {
		key string
		dst *string
	}{{MetaRunID, &c.RunID}, {MetaAgentID, &c.AgentID}, {MetaParentCallID, &c.ParentCallID}, {MetaReplayOf, &c.ReplayOf}} {
		v, present := m[f.key]
		if !present {
			continue
		}
		str, ok := v.(string)
		if !ok || str == "" || len(str) > 128 || !utf8.ValidString(str) || strings.ContainsFunc(str, unicode.IsControl) {
			return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("_meta %q must be a string of 1-128 bytes of UTF-8 without control characters", f.key)}
		}
		*f.dst = str
	}
	return nil
}

// toResult turns a pipeline output into a CallToolResult: an upstream MCP
// tool's output is its CallToolResult; a native tool's is JSON, returned as
// text content and, when it is an object, as structuredContent.
func toResult(isMCP bool, out json.RawMessage) *mcp.CallToolResult {
	if isMCP {
		var r mcp.CallToolResult
		if err := json.Unmarshal(out, &r); err == nil {
			if r.Content == nil {
				r.Content = []mcp.Content{}
			}
			return &r
		}
	}
	r := &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: string(out)}}}
	if len(out) > 0 && out[0] == '{' {
		r.StructuredContent = out
	}
	return r
}

// errorResult is the isError result of a gate refusal or gateway fault
// (DESIGN.md decision 5), the one mapping of an errcode.Error to MCP: text
// content the model can read ("<code>: <message>") and _meta
// ["toolgate/error"] = {code, message, details?}. It has no
// structuredContent: official clients (the TypeScript SDK) validate any
// structuredContent of a tool with an outputSchema against that schema and
// would turn the refusal into a -32602 error of their own.
func errorResult(e *errcode.Error) *mcp.CallToolResult { return mcpwire.ErrorResult(e) }

// callCtx carries the downstream call's session and progress token to the
// upstream invoker.
type callCtx struct {
	ds       *dsession
	progress any
	extra    *mcp.RequestExtra // the downstream request's (nil in tests)
	// result is the upstream's result as mcpInvoker received it (the
	// pipeline output is its encoding); nil if the upstream call failed.
	// Written and read on the call's goroutine (the pipeline invokes
	// synchronously).
	result *mcp.CallToolResult
}

// upstreamResult is the result of an upstream MCP tool whose pipeline output
// is out: the CallToolResult mcpInvoker received, which saves decoding out
// again (one JSON decode of the result per call), else toResult(true, out).
func (cc *callCtx) upstreamResult(out json.RawMessage) *mcp.CallToolResult {
	r := cc.result
	if r == nil {
		return toResult(true, out)
	}
	if r.Content == nil {
		r.Content = []mcp.Content{}
	}
	return r
}

type callKey struct{}

func withCall(ctx context.Context, c *callCtx) context.Context {
	return context.WithValue(ctx, callKey{}, c)
}

func callFrom(ctx context.Context) *callCtx {
	c, _ := ctx.Value(callKey{}).(*callCtx)
	return c
}

// mcpInvoker calls tool name on u: on the calling session's own upstream
// session (per_client) or the shared one. An upstream isError result is
// returned as the output with a tool_execution_failed error; a connection
// failure is upstream_unavailable.
func (g *Gateway) mcpInvoker(u *upstream, name string, timeout time.Duration) pipeline.Invoker {
	return &mcpInvoker{g: g, u: u, invoke: g.mcpInvokeFunc(u, name, timeout)}
}

// mcpInvoker invokes one upstream tool; as a pipeline.Preparer it opens the
// caller's upstream session before the call is recorded.
type mcpInvoker struct {
	g      *Gateway
	u      *upstream
	invoke pipeline.InvokerFunc
}

func (m *mcpInvoker) Invoke(ctx context.Context, t *catalog.Tool, args json.RawMessage) (json.RawMessage, error) {
	return m.invoke(ctx, t, args)
}

// Prepare opens the calling downstream session's upstream session (per
// client), recording tool.session.opened before the call's events.
func (m *mcpInvoker) Prepare(ctx context.Context, _ *catalog.Tool) error {
	cc := callFrom(ctx)
	if cc == nil || cc.ds == nil {
		return nil
	}
	_, err := m.g.sessionFor(ctx, cc.ds, m.u)
	return err
}

// mcpInvokeFunc is the invocation of tool name on u.
func (g *Gateway) mcpInvokeFunc(u *upstream, name string, timeout time.Duration) pipeline.InvokerFunc {
	return pipeline.InvokerFunc(func(ctx context.Context, _ *catalog.Tool, args json.RawMessage) (json.RawMessage, error) {
		cc := callFrom(ctx)
		var ds *dsession
		if cc != nil {
			ds = cc.ds
			cc.result = nil
		}
		cs, err := g.sessionFor(ctx, ds, u)
		if err != nil {
			return nil, err
		}
		if timeout > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeoutCause(ctx, timeout, errToolTimeout)
			defer cancel()
		}
		var res *mcp.CallToolResult
		if u.caller != nil {
			// The hot path: tools/call posted on the session the SDK
			// client opened, without its per-call machinery (upcall.go).
			var meta map[string]any
			if cc != nil && cc.progress != nil {
				meta = map[string]any{"progressToken": cc.progress}
			}
			var h upHandlers
			switch {
			case u.cfg.Sessions == "shared":
				// As sharedClientOptions: a tool list change announced on
				// the call's stream refreshes the catalog; the rest has no
				// one client to go to.
				h.OnNotification = func(_ context.Context, method string, _ json.RawMessage) {
					if method == "notifications/tools/list_changed" {
						g.scheduleRefresh(u, cs)
					}
				}
			case ds != nil && ds.ss != nil:
				h = ds.upHandlers()
			}
			res, _, err = u.caller.callTool(ctx, upSessionOf(cs), name, args, meta, h)
			if err != nil {
				if ctx.Err() == nil {
					relayStreamEnd(ctx, cc, cs, err)
				}
				return nil, upCallError(ctx, u, cs, timeout, err)
			}
		} else {
			params := &mcp.CallToolParams{Name: name, Arguments: args}
			if cc != nil && cc.progress != nil {
				params.Meta = mcp.Meta{"progressToken": cc.progress}
			}
			w := new(callWire)
			res, err = cs.CallTool(withWire(ctx, w), params)
			if e := egressDenied(u, err); e != nil && ctx.Err() == nil {
				return nil, e
			}
			if err != nil && ctx.Err() == nil {
				// Written, then no valid answer: the tool may have run.
				if e := w.failure(u.name, err); e != nil {
					return nil, e
				}
			}
		}
		if err != nil {
			if context.Cause(ctx) == errToolTimeout {
				return nil, errcode.Errorf(errcode.Timeout, "tool did not finish within %s", timeout)
			}
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			if e := egressDenied(u, err); e != nil {
				return nil, e
			}
			var je *jsonrpc.Error
			if errors.As(err, &je) && !sdkTransportError(je) {
				return nil, errcode.Errorf(errcode.ToolExecutionFailed, "upstream error %d: %s", je.Code, je.Message)
			}
			relayStreamEnd(ctx, cc, cs, err)
			return nil, errcode.Wrap(errcode.UpstreamUnavailable, err, "upstream "+u.name)
		}
		out, err := json.Marshal(res)
		if err != nil {
			return nil, errcode.Wrap(errcode.ToolExecutionFailed, err, "encoding the upstream result")
		}
		if cc != nil {
			cc.result = res
		}
		if res.IsError {
			return out, errcode.New(errcode.ToolExecutionFailed, firstText(res))
		}
		return out, nil
	})
}

var errToolTimeout = errors.New("tool timeout")

// upCallError maps a failed upCaller.callTool on u's session cs to the
// pipeline's error: timeout (the tool's own timeout), the context's error,
// tool_execution_failed for the upstream's JSON-RPC error or an oversize
// result, upstream_protocol_error or upstream_crashed (details.ran
// "unknown") when the upstream accepted the request but its answer was not
// a valid response or never came, upstream_unavailable otherwise. A
// session the upstream no longer knows (404) is closed, so that it is
// opened again.
func upCallError(ctx context.Context, u *upstream, cs *mcp.ClientSession, timeout time.Duration, err error) error {
	if context.Cause(ctx) == errToolTimeout {
		return errcode.Errorf(errcode.Timeout, "tool did not finish within %s", timeout)
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if e := egressDenied(u, err); e != nil {
		return e
	}
	var je *jsonrpc.Error
	if errors.As(err, &je) {
		return errcode.Errorf(errcode.ToolExecutionFailed, "upstream error %d: %s", je.Code, je.Message)
	}
	if errors.Is(err, errUpBodyTooLarge) {
		return errcode.Wrap(errcode.ToolExecutionFailed, err, "upstream "+u.name)
	}
	var ue *upError
	if errors.As(err, &ue) && ue.SessionGone() {
		go cs.Close()
	}
	if ue != nil && ue.Delivered {
		// The upstream accepted the request (2xx), then its answer was
		// not a valid response or never came: the tool may have run.
		if ue.Protocol {
			return upstreamProtocolError(u.name, ue.Error())
		}
		return upstreamCrashed(u.name, ue.Error())
	}
	return errcode.Wrap(errcode.UpstreamUnavailable, err, "upstream "+u.name)
}

// egressDenied is the egress_denied error of a request to u that the SSRF
// guard refused (details {rule, host}), nil for any other error. The
// upstream never received it: the tool did not run.
func egressDenied(u *upstream, err error) *errcode.Error {
	e := egress.Error(err)
	if e == nil {
		return nil
	}
	return errcode.New(errcode.EgressDenied, "upstream "+u.name+": "+e.Message).WithDetails(e.Details)
}

// sdkTransportError reports whether je is one of the go-sdk's own transport
// errors rather than the upstream's answer: -32005 (rejected by transport:
// the request did not reach the upstream, e.g. an HTTP upstream that went
// away mid-call), -32003 (client closing) and -32004 (server closing).
func sdkTransportError(je *jsonrpc.Error) bool {
	return je.Code == -32005 || je.Code == -32003 || je.Code == -32004
}

// firstText is the first text content of r, or a generic message.
func firstText(r *mcp.CallToolResult) string {
	for _, c := range r.Content {
		if t, ok := c.(*mcp.TextContent); ok && t.Text != "" {
			return t.Text
		}
	}
	return "the upstream tool reported an error"
}

// sessionFor returns the upstream session for a call on u: ds's own (opened
// on first use) for a per_client server, else the shared one.
func (g *Gateway) sessionFor(ctx context.Context, ds *dsession, u *upstream) (*mcp.ClientSession, error) {
	if ds == nil || u.cfg.Sessions == "shared" {
		return u.shared.session()
	}
	return ds.upstream(ctx, u)
}

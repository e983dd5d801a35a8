package mcpgw

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolgate/toolgate/approval"
	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/identity"
	"github.com/toolgate/toolgate/store"
)

// connectWait bounds how long a call waits for a new per-client upstream
// session to connect (a stdio server's start-up).
const connectWait = 30 * time.Second

// dsession is one downstream MCP session: its principal, fixed at its first
// request, and its upstream sessions.
type dsession struct {
	g         *Gateway
	id        string // the MCP session id ("" for a session-less request)
	ss        *mcp.ServerSession
	principal identity.Principal

	mu       sync.Mutex
	conns    map[string]*conn         // per_client upstream sessions, by server
	ready    map[string]chan struct{} // by server: closed once its first connection attempt is over (and tool.session.opened recorded)
	opened   map[string]string        // server → tool-session id of tool.session.opened
	logLevel mcp.LoggingLevel         // last logging/setLevel, replayed on new upstream sessions
	closed   bool
	view     [32]byte // viewDigest of the tools the session was last told of (listchanged.go)

	closeOnce sync.Once // close: a second caller waits for the first to finish

	sdkSeen atomic.Int64 // when the SDK last served a request of the session (Unix ns; direct.go)
	closing atomic.Bool  // the session is terminated or ending: the direct path leaves its requests to the SDK (404)
	owed    atomic.Bool  // a tools/list_changed is due to the session (listchanged.go)
}

// dsession returns the state of ss, creating it (and a watcher that closes
// it when ss ends) on first use.
func (g *Gateway) dsession(ss *mcp.ServerSession, p identity.Principal) *dsession {
	if ss == nil || ss.ID() == "" {
		return &dsession{g: g, principal: p, conns: map[string]*conn{}, ready: map[string]chan struct{}{}, opened: map[string]string{}}
	}
	if v, ok := g.sessions.Load(ss.ID()); ok {
		return v.(*dsession)
	}
	ds := &dsession{g: g, id: ss.ID(), ss: ss, principal: p, conns: map[string]*conn{}, ready: map[string]chan struct{}{}, opened: map[string]string{}}
	ds.touch()
	// The view the session starts with, taken in order with the
	// notification passes, so that a change is either in it or notified.
	g.notifyMu.Lock()
	ds.view = g.viewDigest(context.Background(), p)
	v, loaded := g.sessions.LoadOrStore(ss.ID(), ds)
	g.notifyMu.Unlock()
	if loaded {
		return v.(*dsession)
	}
	go func() {
		ss.Wait()
		ds.closing.Store(true)
		// Closed before it leaves g.sessions, so that Gateway.Close waits
		// for it.
		ds.close(audit.SessionCompleted)
		g.sessions.Delete(ds.id)
	}()
	return ds
}

// upstream returns ds's session to u, opening it on first use (and then
// recording tool.session.opened). While it is down (a crashed stdio server
// being restarted) it fails at once with upstream_unavailable.
func (ds *dsession) upstream(ctx context.Context, u *upstream) (*mcp.ClientSession, error) {
	ds.mu.Lock()
	if ds.closed {
		ds.mu.Unlock()
		return nil, errcode.New(errcode.UpstreamUnavailable, "the session is closed")
	}
	c, ok := ds.conns[u.name]
	if ok {
		// While the first connection attempt runs (another call of this
		// session started it), wait for it: concurrent first calls must
		// not fail, and tool.session.opened comes before their events.
		ready := ds.ready[u.name]
		ds.mu.Unlock()
		select {
		case <-ready:
		case <-ctx.Done():
		}
		// A process stopped for idleness starts again here.
		wctx, cancel := context.WithTimeout(ctx, connectWait)
		defer cancel()
		return c.get(wctx)
	}
	// The client's log level reaches a new upstream session before the
	// session is handed out: a call made at once (the first call of a
	// session opens its upstream session) must not reach the upstream
	// before its logging/setLevel, or the tool's first messages are
	// dropped (an MCP server sends none until the level is set; issue 13
	// point 21). A logging/setLevel that arrives while setup runs, before
	// the session is handed out (setLogLevel does not see it yet), is
	// applied by onUp.
	var applied mcp.LoggingLevel // setup and onUp run in turn on the conn's goroutine
	level := func(cs *mcp.ClientSession) {
		ds.mu.Lock()
		lvl := ds.logLevel
		ds.mu.Unlock()
		if lvl != "" && lvl != applied {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			if cs.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: lvl}) == nil {
				applied = lvl
			}
			cancel()
		}
	}
	c = newConn(u.d, connConfig{opts: ds.clientOptions(u), version: ds.g.negotiated(ds.ss), idle: u.idle, idleStops: &ds.g.idleStops,
		log: ds.g.log.With("server", u.name, "session", ds.id), setup: func(cs *mcp.ClientSession) { applied = ""; level(cs) },
		onUp: level, mw: []mcp.Middleware{ds.clientMiddleware}})
	ds.conns[u.name] = c
	ready := make(chan struct{})
	ds.ready[u.name] = ready
	ds.mu.Unlock()
	defer close(ready)
	wctx, cancel := context.WithTimeout(ctx, connectWait)
	defer cancel()
	cs, err := c.waitUp(wctx)
	if err == nil {
		ds.sessionOpened(ctx, u.name)
	}
	return cs, err
}

// negotiated is the protocol version ss's client and the gateway agreed on
// (what the SDK server answered to initialize: the client's version when
// the gateway serves it, else the latest it serves), or "" before
// initialize. A per-client upstream session asks for the same version, so
// that the upstream speaks to the client's protocol (issue 4 §2).
func (g *Gateway) negotiated(ss *mcp.ServerSession) string {
	if ss == nil {
		return ""
	}
	ip := ss.InitializeParams()
	if ip == nil {
		return ""
	}
	if slices.Contains(g.protocols, ip.ProtocolVersion) {
		return ip.ProtocolVersion
	}
	return slices.Max(g.protocols)
}

// clientOptions relay what u sends on ds's upstream session to ds's client:
// logging and progress notifications, resource updates (to ds's client
// only, see resourceUpdated), the end of a URL elicitation, and sampling
// and elicitation requests. The upstream sees ds's client's sampling and
// elicitation capabilities as that client declared them (the SDK would
// infer its own from the handlers set); roots keep the SDK's default.
func (ds *dsession) clientOptions(u *upstream) *mcp.ClientOptions {
	ss := ds.ss
	opts := &mcp.ClientOptions{Logger: ds.g.log}
	if ss == nil {
		return opts
	}
	opts.LoggingMessageHandler = func(ctx context.Context, req *mcp.LoggingMessageRequest) {
		ss.Log(ctx, req.Params)
	}
	opts.ProgressNotificationHandler = func(ctx context.Context, req *mcp.ProgressNotificationClientRequest) {
		ss.NotifyProgress(ctx, req.Params)
	}
	opts.ResourceUpdatedHandler = func(ctx context.Context, req *mcp.ResourceUpdatedNotificationRequest) {
		ds.g.resourceUpdated(ctx, ss, req.Params)
	}
	opts.ElicitationCompleteHandler = func(ctx context.Context, req *mcp.ElicitationCompleteNotificationRequest) {
		ss.NotifyElicitationComplete(ctx, req.Params)
	}
	caps := &mcp.ClientCapabilities{RootsV2: &mcp.RootCapabilities{ListChanged: true}}
	if down := clientCaps(ss); down != nil {
		if down.Sampling != nil {
			c := *down.Sampling
			caps.Sampling = &c
			// The tools variant relays every field and content block as is
			// (the basic one would reject multi-block content).
			opts.CreateMessageWithToolsHandler = func(ctx context.Context, req *mcp.CreateMessageWithToolsRequest) (*mcp.CreateMessageWithToolsResult, error) {
				return ss.CreateMessageWithTools(ctx, req.Params)
			}
		}
		if down.Elicitation != nil {
			c := *down.Elicitation
			caps.Elicitation = &c // clientMiddleware relays elicitation/create
		}
	}
	opts.Capabilities = caps
	return opts
}

// upHandlers relay what an HTTP upstream sends on a tools/call's response
// stream (upCaller) as clientOptions relays what the SDK client receives:
// logging, progress, resource updates and the end of a URL elicitation to
// ds's client; sampling and elicitation requests to ds's client when it
// declared them, the SDK client's answers otherwise (ping, roots/list: none;
// anything else: method not found).
func (ds *dsession) upHandlers() upHandlers {
	ss := ds.ss
	return upHandlers{
		OnNotification: func(ctx context.Context, method string, params json.RawMessage) {
			var err error
			switch method {
			case "notifications/message":
				var p mcp.LoggingMessageParams
				if err = json.Unmarshal(params, &p); err == nil {
					err = ss.Log(ctx, &p)
				}
			case "notifications/progress":
				var p mcp.ProgressNotificationParams
				if err = json.Unmarshal(params, &p); err == nil {
					err = ss.NotifyProgress(ctx, &p)
				}
			case "notifications/resources/updated":
				var p mcp.ResourceUpdatedNotificationParams
				if err = json.Unmarshal(params, &p); err == nil {
					ds.g.resourceUpdated(ctx, ss, &p)
				}
			case "notifications/elicitation/complete":
				var p mcp.ElicitationCompleteParams
				if err = json.Unmarshal(params, &p); err == nil {
					err = ss.NotifyElicitationComplete(ctx, &p)
				}
			}
			if err != nil {
				ds.g.log.DebugContext(ctx, "mcp: relaying an upstream notification failed", "method", method, "err", err)
			}
		},
		OnRequest: func(ctx context.Context, method string, params json.RawMessage) (any, *jsonrpc.Error) {
			caps := clientCaps(ss)
			var res any
			var err error
			switch {
			case method == "sampling/createMessage" && caps != nil && caps.Sampling != nil:
				var p mcp.CreateMessageWithToolsParams
				if err = json.Unmarshal(params, &p); err != nil {
					return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: err.Error()}
				}
				res, err = ss.CreateMessageWithTools(ctx, &p)
			case method == "elicitation/create" && caps != nil && caps.Elicitation != nil:
				var p mcp.ElicitParams
				if err = json.Unmarshal(params, &p); err != nil {
					return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: err.Error()}
				}
				res, err = relayElicit(ctx, ss, &p)
			default:
				return upDefaultRequest(method)
			}
			if err != nil {
				var je *jsonrpc.Error
				if errors.As(err, &je) {
					return nil, je
				}
				return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: err.Error()}
			}
			return res, nil
		},
	}
}

// clientCaps are the capabilities ss's client declared, nil before
// initialize.
func clientCaps(ss *mcp.ServerSession) *mcp.ClientCapabilities {
	if ip := ss.InitializeParams(); ip != nil {
		return ip.Capabilities
	}
	return nil
}

// clientMiddleware is the receiving middleware of ds's upstream sessions. It
// relays elicitation/create to ds's client before the SDK client checks the
// requested schema: that check is stricter than the spec and than the
// clients the gateway fronts (go-sdk v1.8.0 rejects a titled multi-select,
// items {type: string, anyOf: [...]}, which its own conformance server
// sends), and the upstream checks the answer against its schema anyway.
func (ds *dsession) clientMiddleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if method == "elicitation/create" && ds.ss != nil {
			if caps := clientCaps(ds.ss); caps != nil && caps.Elicitation != nil {
				if r, ok := req.(*mcp.ElicitRequest); ok && r.Params != nil {
					return relayElicit(ctx, ds.ss, r.Params)
				}
			}
		}
		return next(ctx, method, req)
	}
}

// relayElicit sends p to ss's client as it is and returns the answer as it
// is. The requested schema goes past ServerSession.Elicit in ctx (Elicit
// would check it as the SDK client does, then the answer against it);
// sendingMiddleware puts it back on the wire.
func relayElicit(ctx context.Context, ss *mcp.ServerSession, p *mcp.ElicitParams) (*mcp.ElicitResult, error) {
	q := *p
	if q.RequestedSchema != nil {
		ctx = withElicitSchema(ctx, q.RequestedSchema)
		q.RequestedSchema = nil
	}
	return ss.Elicit(ctx, &q)
}

type elicitSchemaKey struct{}

func withElicitSchema(ctx context.Context, schema any) context.Context {
	return context.WithValue(ctx, elicitSchemaKey{}, schema)
}

func elicitSchemaFrom(ctx context.Context) any { return ctx.Value(elicitSchemaKey{}) }

// resourceUpdated relays an upstream resources/updated to ss, if ss is
// subscribed to the resource. Server.ResourceUpdated notifies every
// subscribed session, with the params it is given; sendingMiddleware drops
// the notifications for sessions other than ss (g.updates: params → ss),
// since their own upstream sessions send their own.
func (g *Gateway) resourceUpdated(ctx context.Context, ss *mcp.ServerSession, p *mcp.ResourceUpdatedNotificationParams) {
	q := *p
	g.updates.Store(&q, ss)
	defer g.updates.Delete(&q)
	g.server.ResourceUpdated(ctx, &q)
}

// sendingMiddleware is the gateway server's sending middleware: it restores
// a relayed elicitation's schema (relayElicit) and keeps a relayed resource
// update to its one session (resourceUpdated).
func (g *Gateway) sendingMiddleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		switch method {
		case "elicitation/create":
			schema := elicitSchemaFrom(ctx)
			p, ok := req.GetParams().(*mcp.ElicitParams)
			ss, _ := req.GetSession().(*mcp.ServerSession)
			if schema != nil && ok && p != nil && p.RequestedSchema == nil {
				q := *p
				q.RequestedSchema = schema
				req = &mcp.ServerRequest[*mcp.ElicitParams]{Session: ss, Params: &q}
			}
		case "notifications/resources/updated":
			if to, ok := g.updates.Load(req.GetParams()); ok && to != req.GetSession() {
				return nil, nil
			}
		case "notifications/tools/list_changed":
			if ss, _ := req.GetSession().(*mcp.ServerSession); !g.listChangedOwed(ss) {
				return nil, nil
			}
		}
		return next(ctx, method, req)
	}
}

// relayStreamEnd relays the end of an upstream call's response stream
// without a response (err from cs.CallTool) to the downstream call, when
// the upstream is still up (it answers a ping): the upstream then closed
// the SSE stream mid-call on purpose (SEP-1699 polling) but cannot resume
// it (it sent no event id), so the gateway closes its client's stream too,
// and the client sees what it would see without the gateway. The call
// still ends, and is recorded, as upstream_crashed; that result is not
// delivered on the closed stream. When the upstream is down the stream
// stays open and carries the upstream_unavailable result.
func relayStreamEnd(ctx context.Context, cc *callCtx, cs *mcp.ClientSession, err error) {
	// go-sdk v1.8.0 has no sentinel for this error; the message is its own
	// (streamable.go, processStream). The conformance test (scenario
	// server-sse-polling) notices if it changes. upCaller's is
	// errUpResumeFailed: it resumes a closed stream itself, and a stream
	// that simply ended without our response (no event ids: a broken
	// upstream, not SEP-1699) is answered upstream_unavailable.
	if cc == nil || cc.extra == nil || cc.extra.CloseSSEStream == nil ||
		!(strings.Contains(err.Error(), "request terminated without response") || errors.Is(err, errUpResumeFailed)) {
		return
	}
	pctx, cancel := context.WithTimeout(ctx, pingWait)
	defer cancel()
	if cs.Ping(pctx, nil) == nil {
		cc.extra.CloseSSEStream(mcp.CloseSSEStreamArgs{})
	}
}

// pingWait bounds relayStreamEnd's ping.
const pingWait = 2 * time.Second

// setLogLevel forwards logging/setLevel to ds's open upstream sessions and
// remembers it for the ones opened later.
func (ds *dsession) setLogLevel(ctx context.Context, p *mcp.SetLoggingLevelParams) {
	ds.mu.Lock()
	ds.logLevel = p.Level
	conns := make([]*conn, 0, len(ds.conns))
	for _, c := range ds.conns {
		conns = append(conns, c)
	}
	ds.mu.Unlock()
	for _, c := range conns {
		// A parked upstream session gets the level when it starts again.
		if cs := c.live(); cs != nil {
			cs.SetLoggingLevel(ctx, p)
		}
	}
}

// sessionOpened records tool.session.opened for server (once), under
// ctx's values (not its cancellation): the call that opened the session,
// whose trace ids a failure's log line carries.
func (ds *dsession) sessionOpened(ctx context.Context, server string) {
	ds.mu.Lock()
	if _, ok := ds.opened[server]; ok || ds.id == "" || ds.closed {
		ds.mu.Unlock()
		return
	}
	sid := ds.id + "/" + server
	ds.opened[server] = sid
	ds.mu.Unlock()
	g := ds.g
	now := time.Now()
	toolID := "mcp:" + server
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if g.opts.Sessions != nil {
		if err := g.opts.Sessions.OpenSession(ctx, &store.Session{SessionID: sid, Tenant: ds.principal.Tenant, RunID: ds.id,
			ToolID: toolID, Server: server, OpenedAt: now}); err != nil && errcode.CodeOf(err) != errcode.Conflict {
			g.log.ErrorContext(ctx, "recording tool.session.opened", "err", err)
		}
	}
	if g.opts.Events != nil {
		if ev, err := audit.NewEvent(ds.id, audit.TypeSessionOpened, audit.SessionOpened{SessionID: sid, ToolID: toolID}, "", now); err == nil {
			ev.Tenant, ev.Principal = ds.principal.Tenant, ds.principal.ID
			if err := g.opts.Events.Append(ctx, ev); err != nil {
				g.log.ErrorContext(ctx, "recording tool.session.opened", "err", err)
			}
		}
	}
}

// close closes ds's upstream sessions and records tool.session.closed for
// each opened one. Idempotent; every call returns once that is done (the
// gateway's Close must not return, and the store close, while the session's
// own end is still recording).
func (ds *dsession) close(outcome string) {
	ds.closing.Store(true)
	if ds.id != "" {
		ds.g.cancelDirectCalls(ds.id)
	}
	ds.closeOnce.Do(func() { ds.doClose(outcome) })
}

func (ds *dsession) doClose(outcome string) {
	ds.mu.Lock()
	ds.closed = true
	conns, opened := maps.Clone(ds.conns), maps.Clone(ds.opened)
	ds.mu.Unlock()
	for _, c := range conns {
		c.close()
	}
	g := ds.g
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for server, sid := range opened {
		toolID := "mcp:" + server
		now := time.Now()
		if g.opts.Sessions != nil {
			if _, err := g.opts.Sessions.CloseSession(ctx, ds.principal.Tenant, sid, outcome, now); err != nil {
				g.log.Error("recording tool.session.closed", "err", err)
			}
		}
		if g.opts.Events != nil {
			p, err := audit.NewSessionClosed(sid, toolID, outcome)
			if err != nil {
				continue
			}
			if ev, err := audit.NewEvent(ds.id, audit.TypeSessionClosed, p, "", now); err == nil {
				ev.Tenant, ev.Principal = ds.principal.Tenant, ds.principal.ID
				if err := g.opts.Events.Append(ctx, ev); err != nil {
					g.log.Error("recording tool.session.closed", "err", err)
				}
			}
		}
	}
}

// Process returns the process of session sessionID's stdio upstream server
// (nil if there is none): for tests and operators.
func (g *Gateway) Process(sessionID, server string) (pid int, ok bool) {
	v, found := g.sessions.Load(sessionID)
	if !found {
		return 0, false
	}
	ds := v.(*dsession)
	ds.mu.Lock()
	c := ds.conns[server]
	ds.mu.Unlock()
	if c == nil {
		return 0, false
	}
	p := c.process()
	if p == nil {
		return 0, false
	}
	return p.Pid, true
}

// WaitUpstream waits until session sessionID's upstream session to server
// is connected (after a restart), or ctx ends. For tests and operators.
func (g *Gateway) WaitUpstream(ctx context.Context, sessionID, server string) error {
	v, found := g.sessions.Load(sessionID)
	if !found {
		return errcode.New(errcode.NotFound, "no such session")
	}
	ds := v.(*dsession)
	ds.mu.Lock()
	c := ds.conns[server]
	ds.mu.Unlock()
	if c == nil {
		return errcode.New(errcode.NotFound, "no such upstream session")
	}
	_, err := c.waitUp(ctx)
	return err
}

// elicitor asks ds's client in-band (MCP elicitation) whether a call needing
// approval may run (policy `approver: user`), or is nil when the client did
// not declare the elicitation capability.
func (ds *dsession) elicitor() approval.Elicitor {
	if ds == nil || ds.ss == nil {
		return nil
	}
	ip := ds.ss.InitializeParams()
	if ip == nil || ip.Capabilities == nil || ip.Capabilities.Elicitation == nil {
		return nil
	}
	ss := ds.ss
	return func(ctx context.Context, message string) (bool, string, error) {
		res, err := ss.Elicit(ctx, &mcp.ElicitParams{
			Message: message,
			RequestedSchema: map[string]any{
				"type": "object",
				"properties": map[string]any{
					"approve": map[string]any{"type": "boolean", "title": "Approve", "description": "Run this call?"},
					"reason":  map[string]any{"type": "string", "title": "Reason"},
				},
				"required": []string{"approve"},
			},
		})
		if err != nil {
			return false, "", err
		}
		if res.Action != "accept" {
			return false, "the user chose " + res.Action, nil
		}
		approve, _ := res.Content["approve"].(bool)
		reason, _ := res.Content["reason"].(string)
		return approve, reason, nil
	}
}

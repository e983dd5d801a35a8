package mcpgw

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/policy"
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
	principal policy.Principal

	mu       sync.Mutex
	conns    map[string]*conn  // per_client upstream sessions, by server
	opened   map[string]string // server → tool-session id of tool.session.opened
	logLevel mcp.LoggingLevel  // last logging/setLevel, replayed on new upstream sessions
	closed   bool
}

// dsession returns the state of ss, creating it (and a watcher that closes
// it when ss ends) on first use.
func (g *Gateway) dsession(ss *mcp.ServerSession, p policy.Principal) *dsession {
	if ss == nil || ss.ID() == "" {
		return &dsession{g: g, principal: p, conns: map[string]*conn{}, opened: map[string]string{}}
	}
	if v, ok := g.sessions.Load(ss.ID()); ok {
		return v.(*dsession)
	}
	ds := &dsession{g: g, id: ss.ID(), ss: ss, principal: p, conns: map[string]*conn{}, opened: map[string]string{}}
	if v, loaded := g.sessions.LoadOrStore(ss.ID(), ds); loaded {
		return v.(*dsession)
	}
	go func() {
		ss.Wait()
		g.sessions.Delete(ds.id)
		ds.close(audit.SessionCompleted)
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
		ds.mu.Unlock()
		return c.session()
	}
	c = newConn(u.d, ds.clientOptions(u), ds.g.log.With("server", u.name, "session", ds.id), func(cs *mcp.ClientSession) {
		ds.mu.Lock()
		lvl := ds.logLevel
		ds.mu.Unlock()
		if lvl != "" {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			cs.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: lvl})
			cancel()
		}
	})
	ds.conns[u.name] = c
	ds.mu.Unlock()
	wctx, cancel := context.WithTimeout(ctx, connectWait)
	defer cancel()
	cs, err := c.waitUp(wctx)
	if err == nil {
		ds.sessionOpened(u.name)
	}
	return cs, err
}

// clientOptions relay what u sends on ds's upstream session to ds's client.
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
		ds.g.server.ResourceUpdated(ctx, req.Params)
	}
	if caps := ss.InitializeParams(); caps != nil && caps.Capabilities != nil {
		if caps.Capabilities.Sampling != nil {
			opts.CreateMessageHandler = func(ctx context.Context, req *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
				return ss.CreateMessage(ctx, req.Params)
			}
		}
		if caps.Capabilities.Elicitation != nil {
			opts.ElicitationHandler = func(ctx context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
				return ss.Elicit(ctx, req.Params)
			}
		}
	}
	return opts
}

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
		if cs, err := c.session(); err == nil {
			cs.SetLoggingLevel(ctx, p)
		}
	}
}

// sessionOpened records tool.session.opened for server (once).
func (ds *dsession) sessionOpened(server string) {
	ds.mu.Lock()
	if _, ok := ds.opened[server]; ok || ds.id == "" {
		ds.mu.Unlock()
		return
	}
	sid := ds.id + "/" + server
	ds.opened[server] = sid
	ds.mu.Unlock()
	g := ds.g
	now := time.Now()
	toolID := "mcp:" + server
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if g.opts.Sessions != nil {
		if err := g.opts.Sessions.OpenSession(ctx, &store.Session{SessionID: sid, Tenant: ds.principal.Tenant, RunID: ds.id,
			ToolID: toolID, Server: server, OpenedAt: now}); err != nil && errcode.CodeOf(err) != errcode.Conflict {
			g.log.Error("recording tool.session.opened", "err", err)
		}
	}
	if g.opts.Events != nil {
		if ev, err := audit.NewEvent(ds.id, audit.TypeSessionOpened, audit.SessionOpened{SessionID: sid, ToolID: toolID}, "", now); err == nil {
			ev.Tenant = ds.principal.Tenant
			if err := g.opts.Events.Append(ctx, ev); err != nil {
				g.log.Error("recording tool.session.opened", "err", err)
			}
		}
	}
}

// close closes ds's upstream sessions and records tool.session.closed for
// each opened one. Idempotent.
func (ds *dsession) close(outcome string) {
	ds.mu.Lock()
	if ds.closed {
		ds.mu.Unlock()
		return
	}
	ds.closed = true
	conns, opened := ds.conns, ds.opened
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
				ev.Tenant = ds.principal.Tenant
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

// visibleServers are the servers with at least one tool p may see: the
// servers whose resources, prompts and completions p may use.
func (g *Gateway) visibleServers(ctx context.Context, p policy.Principal) []string {
	seen := map[string]bool{}
	var out []string
	for _, t := range g.pipe.Disclose(ctx, p) {
		if t.Server != "" && !seen[t.Server] {
			seen[t.Server] = true
			out = append(out, t.Server)
		}
	}
	return out
}

// relaySession is the session of ds to server for relayed methods.
func (g *Gateway) relaySession(ctx context.Context, ds *dsession, server string) (*mcp.ClientSession, error) {
	u := g.ups[server]
	cs, err := g.sessionFor(ctx, ds, u)
	if err != nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: errcode.As(err).Message}
	}
	return cs, nil
}

// prefixed reports whether prompt names carry the server prefix (as tool
// names do).
func (g *Gateway) prefixed() bool {
	return g.cfg.Naming.Prefix == "always" || (g.cfg.Naming.Prefix == "auto" && len(g.ups) > 1)
}

func (g *Gateway) listResources(ctx context.Context, ds *dsession, p policy.Principal, req *mcp.ListResourcesRequest) (*mcp.ListResourcesResult, error) {
	out := &mcp.ListResourcesResult{Resources: []*mcp.Resource{}}
	for _, server := range g.visibleServers(ctx, p) {
		cs, err := g.relaySession(ctx, ds, server)
		if err != nil {
			return nil, err
		}
		for r, err := range cs.Resources(ctx, nil) {
			if err != nil {
				return nil, err
			}
			out.Resources = append(out.Resources, r)
		}
	}
	return out, nil
}

func (g *Gateway) listResourceTemplates(ctx context.Context, ds *dsession, p policy.Principal, req *mcp.ListResourceTemplatesRequest) (*mcp.ListResourceTemplatesResult, error) {
	out := &mcp.ListResourceTemplatesResult{ResourceTemplates: []*mcp.ResourceTemplate{}}
	for _, server := range g.visibleServers(ctx, p) {
		cs, err := g.relaySession(ctx, ds, server)
		if err != nil {
			return nil, err
		}
		for r, err := range cs.ResourceTemplates(ctx, nil) {
			if err != nil {
				return nil, err
			}
			out.ResourceTemplates = append(out.ResourceTemplates, r)
		}
	}
	return out, nil
}

// resourceServer picks the server for a resource URI: the only visible
// server, or the first whose read succeeds.
func (g *Gateway) readResource(ctx context.Context, ds *dsession, p policy.Principal, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
	var lastErr error = &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "resource not found"}
	for _, server := range g.visibleServers(ctx, p) {
		cs, err := g.relaySession(ctx, ds, server)
		if err != nil {
			return nil, err
		}
		res, err := cs.ReadResource(ctx, req.Params)
		if err == nil {
			return res, nil
		}
		lastErr = err
	}
	return nil, lastErr
}

func (g *Gateway) listPrompts(ctx context.Context, ds *dsession, p policy.Principal, req *mcp.ListPromptsRequest) (*mcp.ListPromptsResult, error) {
	out := &mcp.ListPromptsResult{Prompts: []*mcp.Prompt{}}
	for _, server := range g.visibleServers(ctx, p) {
		cs, err := g.relaySession(ctx, ds, server)
		if err != nil {
			return nil, err
		}
		for pr, err := range cs.Prompts(ctx, nil) {
			if err != nil {
				return nil, err
			}
			if g.prefixed() {
				c := *pr
				c.Name = server + g.cfg.Naming.Separator + pr.Name
				pr = &c
			}
			out.Prompts = append(out.Prompts, pr)
		}
	}
	return out, nil
}

// promptServer splits a surface prompt name into server and upstream name.
func (g *Gateway) promptServer(ctx context.Context, p policy.Principal, name string) (string, string, bool) {
	visible := g.visibleServers(ctx, p)
	if !g.prefixed() {
		if len(visible) == 0 {
			return "", "", false
		}
		return visible[0], name, true
	}
	server, rest, ok := strings.Cut(name, g.cfg.Naming.Separator)
	if !ok {
		return "", "", false
	}
	for _, s := range visible {
		if s == server {
			return server, rest, true
		}
	}
	return "", "", false
}

func (g *Gateway) getPrompt(ctx context.Context, ds *dsession, p policy.Principal, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
	server, name, ok := g.promptServer(ctx, p, req.Params.Name)
	if !ok {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "unknown prompt " + req.Params.Name}
	}
	cs, err := g.relaySession(ctx, ds, server)
	if err != nil {
		return nil, err
	}
	params := *req.Params
	params.Name = name
	return cs.GetPrompt(ctx, &params)
}

// complete relays completion/complete to the server of the prompt or
// resource it refers to.
func (g *Gateway) complete(ctx context.Context, req *mcp.CompleteRequest) (*mcp.CompleteResult, error) {
	p, ok := principalOf(req)
	if !ok {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: "no authenticated principal"}
	}
	ss, _ := req.GetSession().(*mcp.ServerSession)
	ds := g.dsession(ss, p)
	params := *req.Params
	server := ""
	if params.Ref != nil && params.Ref.Type == "ref/prompt" {
		s, name, ok := g.promptServer(ctx, p, params.Ref.Name)
		if !ok {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "unknown prompt " + params.Ref.Name}
		}
		ref := *params.Ref
		ref.Name = name
		params.Ref = &ref
		server = s
	} else {
		visible := g.visibleServers(ctx, p)
		if len(visible) == 0 {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "unknown reference"}
		}
		server = visible[0]
	}
	cs, err := g.relaySession(ctx, ds, server)
	if err != nil {
		return nil, err
	}
	return cs.Complete(ctx, &params)
}

func (g *Gateway) subscribe(ctx context.Context, req *mcp.SubscribeRequest) error {
	return g.forEachVisible(ctx, req, func(cs *mcp.ClientSession) error { return cs.Subscribe(ctx, req.Params) })
}

func (g *Gateway) unsubscribe(ctx context.Context, req *mcp.UnsubscribeRequest) error {
	return g.forEachVisible(ctx, req, func(cs *mcp.ClientSession) error { return cs.Unsubscribe(ctx, req.Params) })
}

// forEachVisible runs fn on the session of every server the request's
// principal may use; it succeeds if one succeeds.
func (g *Gateway) forEachVisible(ctx context.Context, req mcp.Request, fn func(*mcp.ClientSession) error) error {
	p, ok := principalOf(req)
	if !ok {
		return &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: "no authenticated principal"}
	}
	ss, _ := req.GetSession().(*mcp.ServerSession)
	ds := g.dsession(ss, p)
	var lastErr error = &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "resource not found"}
	for _, server := range g.visibleServers(ctx, p) {
		cs, err := g.relaySession(ctx, ds, server)
		if err != nil {
			return err
		}
		if err := fn(cs); err == nil {
			return nil
		} else {
			lastErr = err
		}
	}
	return lastErr
}

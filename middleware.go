package toolgate

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/catalog"
	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/internal/mcpwire"
	"github.com/toolgate/toolgate/internal/pipeline"
)

// ServerOptions configures ServerMiddleware. The zero value is usable.
type ServerOptions struct {
	// Principal attributes a request to a principal, typically from the
	// request's auth info (req.GetExtra().TokenInfo, set by the go-sdk's
	// auth.RequireBearerToken). An error refuses the request (fail
	// closed). Nil means PrincipalFromToken. Called once per tools/list
	// and tools/call; it must be safe for concurrent use.
	Principal func(ctx context.Context, req mcp.Request) (Principal, error)
	// Namespace, when set, names the server's tools native:<Namespace>.<tool>
	// in the catalog (so that two servers embedded in one Gateway do not
	// collide); empty: native:<tool>.
	Namespace string
	// Ungated lists the content methods (see ungatedMethods) the server
	// may serve without the gate, e.g. "resources/read". The middleware
	// gates tools only, so by default every other method that hands the
	// server's content to a client (resources/*, prompts/*,
	// completion/complete) is refused with JSON-RPC -32601 and its
	// capability is removed from the initialize result (fail closed:
	// DESIGN.md "every door goes through the gate").
	Ungated []string
}

// ClientOptions configures ClientMiddleware.
type ClientOptions struct {
	// Server names the remote server in the catalog: its tools are
	// mcp:<Server>.<tool> (mcp transport, as the gateway names upstream
	// tools). Required; catalog.ValidServerName rules.
	Server string
	// Principal is the agent's principal: every outbound call is decided,
	// limited and recorded as this principal. Required (ID non-empty).
	Principal Principal
	// RunID and AgentID are recorded on every call when set (else the
	// gate generates a run id per call and uses core.system); a call's own
	// _meta toolgate/runId, toolgate/agentId and toolgate/parentCallId win.
	RunID, AgentID string
	// Ungated lists the content methods (see ungatedMethods) the client
	// may send without the gate, e.g. "prompts/get"; by default they are
	// refused before they are sent (JSON-RPC -32601) and the server's
	// capabilities for them are removed from the initialize result the
	// client sees, as for ServerOptions.Ungated.
	Ungated []string
}

// contentMethods are the MCP methods beside tools/* that move a server's
// content to a client: the middlewares gate tools only, so these are
// refused unless listed in ServerOptions.Ungated / ClientOptions.Ungated.
var contentMethods = map[string]string{
	"resources/list": "resources", "resources/templates/list": "resources", "resources/read": "resources",
	"resources/subscribe": "resources", "resources/unsubscribe": "resources",
	"prompts/list": "prompts", "prompts/get": "prompts",
	"completion/complete": "completions",
}

// contentGate is the refusal of the content methods not in ungated, and the
// capabilities to strip from an initialize result.
type contentGate struct {
	ungated map[string]bool
}

func newContentGate(ungated []string) contentGate {
	g := contentGate{ungated: map[string]bool{}}
	for _, m := range ungated {
		g.ungated[m] = true
	}
	return g
}

// refuse returns the JSON-RPC error for method when it is a content method
// not passed through, nil otherwise.
func (g contentGate) refuse(method string) error {
	if _, ok := contentMethods[method]; !ok || g.ungated[method] {
		return nil
	}
	return &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: method + " is not served through the gate (toolgate middleware gates tools only; list it in Ungated to pass it through)"}
}

// other handles every method but tools/list and tools/call for a
// middleware: initialize and server/discover go to next with the shut
// capabilities stripped from their result, a shut content method is
// refused, anything else goes to next unchanged.
func (g contentGate) other(ctx context.Context, method string, req mcp.Request, next mcp.MethodHandler) (mcp.Result, error) {
	switch method {
	case "initialize", "server/discover":
		res, err := next(ctx, method, req)
		g.strip(res)
		return res, err
	}
	if err := g.refuse(method); err != nil {
		return nil, err
	}
	return next(ctx, method, req)
}

// strip removes from an initialize (or server/discover) result the
// capabilities whose methods are all refused.
func (g contentGate) strip(res mcp.Result) {
	var capsp **mcp.ServerCapabilities
	switch r := res.(type) {
	case *mcp.InitializeResult:
		if r != nil {
			capsp = &r.Capabilities
		}
	case *mcp.DiscoverResult: // server/discover (protocol 2026-07-28)
		if r != nil {
			capsp = &r.Capabilities
		}
	}
	if capsp == nil || *capsp == nil {
		return
	}
	open := map[string]bool{}
	for m, c := range contentMethods {
		if g.ungated[m] {
			open[c] = true
		}
	}
	caps := **capsp
	if !open["resources"] {
		caps.Resources = nil
	}
	if !open["prompts"] {
		caps.Prompts = nil
	}
	if !open["completions"] {
		caps.Completions = nil
	}
	*capsp = &caps
}

// PrincipalFromToken is the default ServerOptions.Principal: the request's
// bearer-token info (mcp.RequestExtra.TokenInfo) as a principal: ID is
// TokenInfo.UserID, Scopes are TokenInfo.Scopes, Tenant is
// TokenInfo.Extra["tenant"] when it is a string, and every other string
// value of TokenInfo.Extra is an attribute. Errors (code unauthenticated):
// no token info or an empty UserID. Pure.
func PrincipalFromToken(_ context.Context, req mcp.Request) (Principal, error) {
	var ex *mcp.RequestExtra
	if req != nil {
		ex = req.GetExtra()
	}
	if ex == nil || ex.TokenInfo == nil || ex.TokenInfo.UserID == "" {
		return Principal{}, errcode.New(errcode.Unauthenticated, "the request carries no authenticated user (TokenInfo.UserID)")
	}
	ti := ex.TokenInfo
	p := Principal{ID: ti.UserID, Scopes: append([]string(nil), ti.Scopes...)}
	for k, v := range ti.Extra {
		s, ok := v.(string)
		switch {
		case !ok:
		case k == "tenant":
			p.Tenant = s
		default:
			if p.Attributes == nil {
				p.Attributes = map[string]string{}
			}
			p.Attributes[k] = s
		}
	}
	return p, nil
}

// ServerMiddleware returns receiving middleware that puts gw in front of
// an existing go-sdk server's tools, installed with one call:
//
//	server.AddReceivingMiddleware(toolgate.ServerMiddleware(gw, toolgate.ServerOptions{}))
//
// The server's own tools become native-transport tools of gw's catalog
// (toolId native:<tool>, or native:<Namespace>.<tool>; source
// host-extension, safetyTier write unless Options.Classifications say
// otherwise, title, description and schemas from the server's tool). The
// middleware learns them by listing them through the server's own
// tools/list handler (every page), on the first tools/list or tools/call
// and again at every tools/list without a cursor and whenever a call names
// a tool it does not know, so tools added or removed later follow. A tool
// whose name is not a valid toolId name ([A-Za-z0-9_./-]) is left out of
// the catalog, hence never listed and never callable (fail closed).
//
// tools/list answers the server's tools the principal may see (the gate's
// Disclose), sorted by name and paginated after filtering with the
// middleware's own cursors ("n:" + the last name listed; pages as large as
// the server's own): no page and no cursor tells of a tool the principal
// may not see, and an unknown cursor is -32602 "invalid cursor".
// tools/call runs the full gate (decision, rate limits, approval, hooks,
// events, receipt) with transport mcp; the server's handler runs only when
// the gate lets the call through, with the arguments the before-hooks
// leave. Answers are exactly the gateway's (DESIGN.md decision 5): a tool
// the principal may not see, or that does not exist, is the JSON-RPC error
// -32602 `unknown tool "<name>"`; a refusal or gateway fault is an isError
// result with _meta["toolgate/error"] = {code, message, details?}; the
// server's own result (and its own isError result, redacted) goes back
// with _meta toolgate/runId, toolgate/callId and toolgate/receiptId; the
// server's own JSON-RPC error goes back unchanged (recorded as
// tool_execution_failed). A request the Principal function refuses is the
// JSON-RPC error -32600 "unauthenticated: …". The content methods beside
// tools (resources/*, prompts/*, completion/complete) are refused with
// -32601 and left out of the initialize result's capabilities unless
// Options.Ungated lists them (gate resources and prompts by serving them
// through the gateway instead); initialize, ping and notifications pass
// through. Safe for concurrent use by every session of the server.
func ServerMiddleware(gw *Gateway, opts ServerOptions) mcp.Middleware {
	principal := opts.Principal
	if principal == nil {
		principal = PrincipalFromToken
	}
	return func(next mcp.MethodHandler) mcp.MethodHandler {
		m := &mwState{gw: gw, namespace: opts.Namespace}
		m.group = fmt.Sprintf("server:%p", m)
		m.list = func(ctx context.Context, req mcp.Request, cursor string) (*mcp.ListToolsResult, error) {
			ss, _ := req.GetSession().(*mcp.ServerSession)
			res, err := next(ctx, "tools/list", &mcp.ListToolsRequest{Session: ss, Params: &mcp.ListToolsParams{Cursor: cursor}, Extra: req.GetExtra()})
			if err != nil {
				return nil, err
			}
			lr, _ := res.(*mcp.ListToolsResult)
			return lr, nil
		}
		m.send = func(ctx context.Context, req mcp.Request, name string, args json.RawMessage) (*mcp.CallToolResult, error) {
			ss, _ := req.GetSession().(*mcp.ServerSession)
			params := *req.GetParams().(*mcp.CallToolParamsRaw)
			params.Name, params.Arguments = name, args
			res, err := next(ctx, "tools/call", &mcp.CallToolRequest{Session: ss, Params: &params, Extra: req.GetExtra()})
			if err != nil {
				return nil, err
			}
			r, ok := res.(*mcp.CallToolResult)
			if !ok {
				return nil, errcode.New(errcode.ToolExecutionFailed, "the server's tools/call answered no CallToolResult")
			}
			return r, nil
		}
		gate := newContentGate(opts.Ungated)
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if method != "tools/list" && method != "tools/call" {
				return gate.other(ctx, method, req, next)
			}
			p, err := principal(ctx, req)
			if err != nil {
				return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: "unauthenticated: " + errMessage(err)}
			}
			if method == "tools/list" {
				cursor := ""
				if lp, ok := req.GetParams().(*mcp.ListToolsParams); ok && lp != nil {
					cursor = lp.Cursor
				}
				return m.listTools(ctx, req, p, cursor)
			}
			cp, _ := req.GetParams().(*mcp.CallToolParamsRaw)
			if cp == nil {
				// Never run ungated (fail closed).
				return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "tools/call: missing params"}
			}
			return m.callTool(ctx, req, p, cp.Name, cp.Arguments, cp.Meta, Call{})
		}
	}
}

// ClientMiddleware returns sending middleware that gates a go-sdk client's
// own outbound calls, installed with
//
//	client.AddSendingMiddleware(toolgate.ClientMiddleware(gw, toolgate.ClientOptions{Server: "crm", Principal: p}))
//
// The remote server's tools become mcp-transport tools of gw's catalog
// (mcp:<Server>.<tool>, source mcp, safetyTier write unless
// Options.Classifications say otherwise), learnt from the tools/list
// results the client receives and, when a call names a tool not yet known,
// from a tools/list the middleware sends itself. tools/list results are
// filtered to what opts.Principal may see and paginated after filtering
// with the middleware's own cursors, as ServerMiddleware's. tools/call is decided (and rate
// limited, approved, hooked, recorded with opts.Principal) before anything
// is sent: a refused call never leaves the process, and the client gets the
// gateway's answer (a -32602 unknown-tool error for a tool the principal may
// not see, an isError result with _meta["toolgate/error"] otherwise). An
// allowed call is sent with the arguments the hooks leave and its result
// comes back with _meta toolgate/runId, toolgate/callId and
// toolgate/receiptId. A misconfigured middleware (no Server, no principal
// id) refuses every tools/list and tools/call with -32600. The content
// methods (resources/*, prompts/*, completion/complete) are refused before
// they are sent unless Options.Ungated lists them; other methods pass
// through. Safe for concurrent use.
func ClientMiddleware(gw *Gateway, opts ClientOptions) mcp.Middleware {
	return func(next mcp.MethodHandler) mcp.MethodHandler {
		m := &mwState{gw: gw, server: opts.Server}
		m.group = fmt.Sprintf("client:%p", m)
		m.list = func(ctx context.Context, req mcp.Request, cursor string) (*mcp.ListToolsResult, error) {
			cs, _ := req.GetSession().(*mcp.ClientSession)
			res, err := next(ctx, "tools/list", &mcp.ClientRequest[*mcp.ListToolsParams]{Session: cs, Params: &mcp.ListToolsParams{Cursor: cursor}})
			if err != nil {
				return nil, err
			}
			lr, _ := res.(*mcp.ListToolsResult)
			return lr, nil
		}
		m.send = func(ctx context.Context, req mcp.Request, name string, args json.RawMessage) (*mcp.CallToolResult, error) {
			cs, _ := req.GetSession().(*mcp.ClientSession)
			params := *req.GetParams().(*mcp.CallToolParams)
			params.Name, params.Arguments = name, args
			res, err := next(ctx, "tools/call", &mcp.ClientRequest[*mcp.CallToolParams]{Session: cs, Params: &params})
			if err != nil {
				return nil, err
			}
			r, ok := res.(*mcp.CallToolResult)
			if !ok {
				return nil, errcode.New(errcode.ToolExecutionFailed, "the server answered no CallToolResult")
			}
			return r, nil
		}
		var bad error
		switch {
		case catalog.ValidServerName(opts.Server) != nil:
			bad = &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: "toolgate.ClientMiddleware: " + errMessage(catalog.ValidServerName(opts.Server))}
		case opts.Principal.ID == "":
			bad = &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: "unauthenticated: toolgate.ClientMiddleware has no principal"}
		}
		gate := newContentGate(opts.Ungated)
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if method != "tools/list" && method != "tools/call" {
				return gate.other(ctx, method, req, next)
			}
			if bad != nil {
				return nil, bad
			}
			if method == "tools/list" {
				cursor := ""
				if lp, ok := req.GetParams().(*mcp.ListToolsParams); ok && lp != nil {
					cursor = lp.Cursor
				}
				return m.listTools(ctx, req, opts.Principal, cursor)
			}
			cp, _ := req.GetParams().(*mcp.CallToolParams)
			if cp == nil {
				// Never sent ungated (fail closed).
				return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "tools/call: missing params"}
			}
			var args json.RawMessage
			if cp.Arguments != nil {
				raw, err := json.Marshal(cp.Arguments)
				if err != nil {
					return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "arguments do not encode as JSON: " + err.Error()}
				}
				args = raw
			}
			return m.callTool(ctx, req, opts.Principal, cp.Name, args, cp.Meta, Call{RunID: opts.RunID, AgentID: opts.AgentID})
		}
	}
}

// mwState is one installed middleware: how it lists and calls the tools
// behind it, and the names it registered in the gateway's catalog.
type mwState struct {
	gw        *Gateway
	group     string
	namespace string // server middleware: native:<namespace>.<name>
	server    string // client middleware: mcp:<server>.<name>
	list      func(ctx context.Context, req mcp.Request, cursor string) (*mcp.ListToolsResult, error)
	send      func(ctx context.Context, req mcp.Request, name string, args json.RawMessage) (*mcp.CallToolResult, error)

	mu     sync.Mutex
	synced bool
	byName map[string]string // tool name behind the middleware → toolId
	byID   map[string]string // toolId → tool name
	tools  []*mcp.Tool       // the catalogued tools behind, sorted by name
	page   int               // the page size behind (0: one page), see sync
}

// toolID is the catalog id of tool name, "" when the name is not one a
// toolId may carry.
func (m *mwState) toolID(name string) (id string, t catalog.Tool) {
	if m.server != "" {
		id = catalog.MCPToolID(m.server, name)
		t = catalog.Tool{Transport: catalog.TransportMCP, Server: m.server, Name: name,
			Descriptor: catalog.ToolDescriptor{ToolID: id, Source: catalog.SourceMCP, SafetyTier: catalog.TierWrite}}
	} else {
		n := name
		if m.namespace != "" {
			n = m.namespace + "." + name
		}
		id = catalog.NativeToolID(n)
		t = catalog.Tool{Transport: catalog.TransportNative, Name: n,
			Descriptor: catalog.ToolDescriptor{ToolID: id, Source: catalog.SourceHostExtension, SafetyTier: catalog.TierWrite}}
	}
	if !validName(t.Name) || t.Descriptor.Validate() != nil {
		return "", t
	}
	return id, t
}

// validName reports whether s may name a catalog tool ([A-Za-z0-9_./-],
// 1 to catalog.MaxNameLen bytes).
func validName(s string) bool {
	if s == "" || len(s) > catalog.MaxNameLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '/' || c == '-') {
			return false
		}
	}
	return true
}

// sync lists every tool behind the middleware (all pages) and makes them
// the middleware's tools in the catalog.
func (m *mwState) sync(ctx context.Context, req mcp.Request) error {
	var all []*mcp.Tool
	cursor := ""
	pageSize := 0
	for range 1000 { // bounded: a server whose cursors never end
		lr, err := m.list(ctx, req, cursor)
		if err != nil {
			return err
		}
		if lr == nil {
			break
		}
		all = append(all, lr.Tools...)
		if lr.NextCursor == "" || lr.NextCursor == cursor {
			break
		}
		pageSize = max(pageSize, len(lr.Tools))
		cursor = lr.NextCursor
	}
	byName, byID := map[string]string{}, map[string]string{}
	var tools []catalog.Tool
	var listed []*mcp.Tool
	for _, mt := range all {
		if mt == nil {
			continue
		}
		id, t := m.toolID(mt.Name)
		if id == "" || byID[id] != "" {
			continue
		}
		t.Descriptor.Title, t.Descriptor.Description = mt.Title, mt.Description
		if mt.InputSchema != nil {
			if raw, err := json.Marshal(mt.InputSchema); err == nil {
				t.Descriptor.InputSchema = raw
			}
		}
		if mt.OutputSchema != nil {
			if raw, err := json.Marshal(mt.OutputSchema); err == nil {
				t.Descriptor.OutputSchema = raw
			}
		}
		if t.Descriptor.Validate() != nil {
			continue
		}
		byName[mt.Name], byID[id] = id, mt.Name
		tools = append(tools, t)
		listed = append(listed, mt)
	}
	slices.SortFunc(listed, func(a, b *mcp.Tool) int { return strings.Compare(a.Name, b.Name) })
	if err := m.gw.setGroup(m.group, tools, pipeline.InvokerFunc(m.invoke)); err != nil {
		return err
	}
	m.mu.Lock()
	m.byName, m.byID, m.tools, m.page, m.synced = byName, byID, listed, pageSize, true
	m.mu.Unlock()
	return nil
}

func (m *mwState) lookup(name string) (string, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	id, ok := m.byName[name]
	return id, ok
}

// listTools answers tools/list from the middleware's own list of the tools
// behind (sorted by name), filtered to what p may see and paginated after
// filtering, as the gateway's tools/list is: a page holds up to the page
// size the server behind used (every visible tool when it did not
// paginate), and its cursor is "n:" + the last tool name on it, a name the
// principal sees. The server's own cursors never reach the client: they
// encode the server's position, hence the names of tools the principal may
// not see (DESIGN.md decision 5: a hidden tool is indistinguishable from
// one that does not exist). Never an empty page with a cursor; a cursor
// that is not one of ours is JSON-RPC -32602 "invalid cursor".
func (m *mwState) listTools(ctx context.Context, req mcp.Request, p Principal, cursor string) (mcp.Result, error) {
	after := ""
	if cursor != "" {
		name, ok := strings.CutPrefix(cursor, "n:")
		if !ok || !validName(name) {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "invalid cursor"}
		}
		after = name
	}
	m.mu.Lock()
	synced := m.synced
	m.mu.Unlock()
	if cursor == "" || !synced {
		if err := m.sync(ctx, req); err != nil {
			return nil, err
		}
	}
	m.mu.Lock()
	all, size, byName := m.tools, m.page, m.byName
	m.mu.Unlock()
	start := 0
	if after != "" {
		start, _ = slices.BinarySearchFunc(all, after, func(t *mcp.Tool, name string) int { return strings.Compare(t.Name, name) })
		if start < len(all) && all[start].Name == after {
			start++
		}
	}
	vis := m.gw.p.VisibleFunc(ctx, p)
	out := &mcp.ListToolsResult{Tools: []*mcp.Tool{}}
	for _, t := range all[start:] {
		if !vis(byName[t.Name]) {
			continue
		}
		if size > 0 && len(out.Tools) == size {
			out.NextCursor = "n:" + out.Tools[len(out.Tools)-1].Name
			break
		}
		out.Tools = append(out.Tools, t)
	}
	return out, nil
}

// mwCall is one call's link between the middleware and its invoker.
type mwCall struct {
	req      mcp.Request
	result   *mcp.CallToolResult // what the tool behind answered
	protoErr error               // its JSON-RPC error, passed back unchanged
}

type mwCallKey struct{}

// invoke is the pipeline invoker of every tool of the middleware: it sends
// the call on to the tool behind.
func (m *mwState) invoke(ctx context.Context, t *catalog.Tool, args json.RawMessage) (json.RawMessage, error) {
	c, _ := ctx.Value(mwCallKey{}).(*mwCall)
	m.mu.Lock()
	name, ok := m.byID[t.Descriptor.ToolID]
	m.mu.Unlock()
	if c == nil || !ok {
		return nil, errcode.Errorf(errcode.UpstreamUnavailable, "%s is only callable through its MCP session", t.Descriptor.ToolID)
	}
	r, err := m.send(ctx, c.req, name, args)
	if err != nil {
		if errcode.As(err) != nil && ctx.Err() == nil {
			return nil, err
		}
		c.protoErr = err
		return nil, errcode.Wrap(errcode.ToolExecutionFailed, err, "the tool answered a JSON-RPC error: "+errMessage(err))
	}
	c.result = r
	out, err := json.Marshal(r)
	if err != nil {
		return nil, errcode.Wrap(errcode.ToolExecutionFailed, err, "the tool's result does not encode")
	}
	if r.IsError {
		return out, errcode.New(errcode.ToolExecutionFailed, "the tool returned an isError result")
	}
	return out, nil
}

// callTool runs one tools/call through the gate and answers it as the
// gateway's MCP surface does.
func (m *mwState) callTool(ctx context.Context, req mcp.Request, p Principal, name string, args json.RawMessage, meta mcp.Meta, base Call) (mcp.Result, error) {
	id, ok := m.lookup(name)
	if !ok {
		if err := m.sync(ctx, req); err != nil {
			return nil, err
		}
		if id, ok = m.lookup(name); !ok {
			return nil, mcpwire.UnknownTool(name)
		}
	}
	if len(args) == 0 || string(args) == "null" {
		args = json.RawMessage("{}")
	}
	c := base
	c.Tool, c.Args, c.Principal, c.Transport = id, args, p, catalog.TransportMCP
	for key, dst := range map[string]*string{mcpwire.MetaRunID: &c.RunID, mcpwire.MetaAgentID: &c.AgentID, mcpwire.MetaParentCallID: &c.ParentCallID} {
		if v, present := meta[key]; present {
			s, isStr := v.(string)
			if !isStr || s == "" {
				return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("_meta %q must be a string of 1-128 bytes of UTF-8 without control characters", key)}
			}
			*dst = s
		}
	}
	mc := &mwCall{req: req}
	res, err := m.gw.Call(context.WithValue(ctx, mwCallKey{}, mc), c)
	if err != nil {
		switch errcode.CodeOf(err) {
		case errcode.NotFound, errcode.AmbiguousTool:
			return nil, mcpwire.UnknownTool(name)
		case errcode.InvalidArgument:
			if res == nil || res.ToolID == "" || !m.gw.p.Visible(ctx, p, res.ToolID) {
				return nil, mcpwire.UnknownTool(name)
			}
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: errcode.As(err).Message}
		}
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "internal error"}
	}
	if res.Hidden {
		return nil, mcpwire.UnknownTool(name)
	}
	if mc.protoErr != nil {
		return nil, mc.protoErr
	}
	var out *mcp.CallToolResult
	own := false
	switch {
	case res.Status == audit.StatusOK && mc.result != nil:
		out, own = mc.result, true
	case res.Output != nil && res.Err != nil && res.Err.Code == errcode.ToolExecutionFailed:
		// The tool's own isError result, as the pipeline redacted it.
		var r mcp.CallToolResult
		if json.Unmarshal(res.Output, &r) == nil {
			out, own = &r, true
			out.IsError = true
		}
	}
	if out == nil {
		out = mcpwire.ErrorResult(res.Err)
	}
	if out.Content == nil {
		out.Content = []mcp.Content{}
	}
	if out.Meta == nil {
		out.Meta = mcp.Meta{}
	} else if own {
		delete(out.Meta, mcpwire.MetaError) // the gateway's word alone
	}
	out.Meta[mcpwire.MetaRunID], out.Meta[mcpwire.MetaCallID] = res.RunID, res.CallID
	if res.ReceiptID != "" {
		out.Meta[mcpwire.MetaReceiptID] = res.ReceiptID
	}
	return out, nil
}

func errMessage(err error) string {
	if e := errcode.As(err); e != nil {
		return e.Message
	}
	return err.Error()
}

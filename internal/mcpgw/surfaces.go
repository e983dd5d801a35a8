package mcpgw

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"reflect"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolgate/toolgate/approval"
	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/catalog"
	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/identity"
	"github.com/toolgate/toolgate/internal/config"
	"github.com/toolgate/toolgate/internal/pipeline"
	"github.com/toolgate/toolgate/internal/tracing"
)

// Resources, prompts and completions (DESIGN.md Surfaces: no MCP method
// reaches an upstream ungated).
//
// Every server's resources are one target, catalog.MCPResourceID
// ("mcp:<server>/resource"), whose uses carry the resource URI as an
// argument: resources/read and resources/subscribe decide on args {uri}
// (their request params), so a rule conditions on args.uri. Every prompt is
// its own target, catalog.MCPPromptID ("mcp:<server>#<prompt>", the
// upstream's prompt name), decided on the prompts/get params {name,
// arguments}. completion/complete uses the target of its ref (the prompt,
// or the resources of the server of ref.uri) with its params {ref,
// argument, context} as args. Rules, tools: classifications (scopes, tier)
// and rate limits name these ids like tool ids; a policy that grants none
// of them exposes no resource and no prompt (default deny).
//
// Each of those four requests runs the pipeline (pipeline.Call with a
// Target): decided, rate limited, hooked, recorded as agent.toolCalled /
// agent.toolReturned with transport mcp and the argsHash of the params
// (without _meta), and receipted. A refused resource answers exactly like
// an unknown one (mcp.ResourceNotFoundError), a refused prompt like an
// unknown prompt; a refusal of a use the principal may see (rate limited,
// approval) answers the JSON-RPC error CodeRefused. Lists are filtered by
// the same decision: resources/list per URI (pipeline.DiscloseTarget with
// args {uri}), resources/templates/list per server, prompts/list per prompt.
// They aggregate only the servers that advertise the capability; a server
// failing a list is logged and left out.

// CodeRefused is the JSON-RPC error code of a gated resource, prompt or
// completion request that the principal may see but that the gate refused
// or could not serve (rate_limited, approval_required, approval_denied,
// upstream_unavailable, timeout, audit_unavailable, ...). Its data is the
// error object {code, message, details?} (DESIGN.md decision 8).
const CodeRefused = -32010

// notifySurfacesChanged sends notifications/resources/list_changed and
// notifications/prompts/list_changed to every connected session when a
// reload changed the policy (its version) or the tools: classification,
// since either may change which resources and prompts a session is shown
// (the SDK sends them when its own registries change; the gateway's lists
// ignore those registries).
func (g *Gateway) notifySurfacesChanged(oldPolicy, newPolicy *pipeline.Policy, oldClasses, newClasses []config.ToolClass) {
	if g.closed.Load() || (oldPolicy.Version() == newPolicy.Version() && (oldPolicy == nil) == (newPolicy == nil) &&
		reflect.DeepEqual(oldClasses, newClasses)) {
		return
	}
	// The SDK's own registries are never served (the middleware answers
	// every resource and prompt method), so the markers stay invisible.
	const uri, prompt = "toolgate:list-changed", "toolgate-list-changed"
	g.server.AddResource(&mcp.Resource{Name: prompt, URI: uri},
		func(context.Context, *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			return nil, errors.New("unreachable")
		})
	g.server.RemoveResources(uri)
	g.server.AddPrompt(&mcp.Prompt{Name: prompt}, func(context.Context, *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
		return nil, errors.New("unreachable")
	})
	g.server.RemovePrompts(prompt)
}

// serverCaps are the capabilities u advertised in its last initialize (its
// shared session's), or nil while it was never connected.
func (u *upstream) serverCaps() *mcp.ServerCapabilities {
	if cs, err := u.shared.session(); err == nil {
		if ir := cs.InitializeResult(); ir != nil {
			return ir.Capabilities
		}
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.initRes == nil {
		return nil
	}
	return u.initRes.Capabilities
}

// serversWith are the servers (sorted) whose capabilities satisfy has.
func (g *Gateway) serversWith(has func(*mcp.ServerCapabilities) bool) []string {
	var out []string
	for _, name := range g.order {
		if c := g.ups[name].serverCaps(); c != nil && has(c) {
			out = append(out, name)
		}
	}
	return out
}

func hasResources(c *mcp.ServerCapabilities) bool { return c.Resources != nil }
func hasPrompts(c *mcp.ServerCapabilities) bool   { return c.Prompts != nil }

// target is the classified target id of server (name: "resource" or the
// prompt's upstream name).
func (g *Gateway) target(server, id, name string) *catalog.Tool {
	d := catalog.ToolDescriptor{ToolID: id, Source: catalog.SourceMCP}
	catalog.Classify(&d, g.surface.Load().classes)
	return &catalog.Tool{Descriptor: d, Transport: catalog.TransportMCP, Server: server, Name: name}
}

// Target returns the classified target of a resource or prompt id
// ("mcp:<server>/resource", "mcp:<server>#<prompt>") of a configured
// server, as resources/read and prompts/get decide it; ok is false for any
// other id, an unconfigured server or an empty prompt name. The prompt need
// not exist upstream: the decision is made on the id. Safe for concurrent
// use.
func (g *Gateway) Target(id string) (t *catalog.Tool, ok bool) {
	server, prompt, kind := catalog.ParseTargetID(id)
	if _, configured := g.ups[server]; !configured {
		return nil, false
	}
	switch {
	case kind == "resource":
		return g.resourceTarget(server), true
	case kind == "prompt" && prompt != "":
		return g.promptTarget(server, prompt), true
	}
	return nil, false
}

func (g *Gateway) resourceTarget(server string) *catalog.Tool {
	return g.target(server, catalog.MCPResourceID(server), "resource")
}

func (g *Gateway) promptTarget(server, prompt string) *catalog.Tool {
	return g.target(server, catalog.MCPPromptID(server, prompt), prompt)
}

// prefixed reports whether prompt names carry the server prefix (as tool
// names do).
func (g *Gateway) prefixed() bool {
	return g.cfg.Naming.Prefix == "always" || (g.cfg.Naming.Prefix == "auto" && len(g.ups) > 1)
}

// listSession is ds's session to server for a list, or nil (logged) when
// it cannot be had.
func (g *Gateway) listSession(ctx context.Context, ds *dsession, server, method string) *mcp.ClientSession {
	cs, err := g.sessionFor(ctx, ds, g.ups[server])
	if err != nil {
		g.log.WarnContext(ctx, "upstream "+method+" skipped: no session", "server", server, "err", g.pipe.Redactor().RedactString(err.Error()))
		return nil
	}
	return cs
}

// listFailed logs a server's failed list, which is then left out.
func (g *Gateway) listFailed(server, method string, err error) {
	g.log.Warn("upstream "+method+" failed; its entries are left out", "server", server, "err", g.pipe.Redactor().RedactString(err.Error()))
}

// listResources answers resources/list: the resources of every server that
// advertises resources and whose resources p may use, each shown iff its
// URI could be read (one decision per URI).
func (g *Gateway) listResources(ctx context.Context, ds *dsession, p identity.Principal, _ *mcp.ListResourcesRequest) (*mcp.ListResourcesResult, error) {
	out := &mcp.ListResourcesResult{Resources: []*mcp.Resource{}}
	for _, server := range g.serversWith(hasResources) {
		t := g.resourceTarget(server)
		if !g.pipe.DiscloseTarget(ctx, p, t, nil) {
			continue // no URI of this server could be read: not even asked
		}
		cs := g.listSession(ctx, ds, server, "resources/list")
		if cs == nil {
			continue
		}
		var rs []*mcp.Resource
		var err error
		for r, e := range cs.Resources(ctx, nil) {
			if e != nil {
				err = e
				break
			}
			if r != nil && g.pipe.DiscloseTarget(ctx, p, t, map[string]any{"uri": r.URI}) {
				rs = append(rs, r)
			}
		}
		if err != nil {
			g.listFailed(server, "resources/list", err)
			continue
		}
		out.Resources = append(out.Resources, rs...)
	}
	return out, nil
}

// listResourceTemplates answers resources/templates/list: the templates of
// every server that advertises resources and some of whose URIs p could
// read (a template names no URI, so the decision is the server's).
func (g *Gateway) listResourceTemplates(ctx context.Context, ds *dsession, p identity.Principal, _ *mcp.ListResourceTemplatesRequest) (*mcp.ListResourceTemplatesResult, error) {
	out := &mcp.ListResourceTemplatesResult{ResourceTemplates: []*mcp.ResourceTemplate{}}
	for _, server := range g.serversWith(hasResources) {
		if !g.pipe.DiscloseTarget(ctx, p, g.resourceTarget(server), nil) {
			continue
		}
		cs := g.listSession(ctx, ds, server, "resources/templates/list")
		if cs == nil {
			continue
		}
		var ts []*mcp.ResourceTemplate
		var err error
		for rt, e := range cs.ResourceTemplates(ctx, nil) {
			if e != nil {
				err = e
				break
			}
			if rt != nil {
				ts = append(ts, rt)
			}
		}
		if err != nil {
			g.listFailed(server, "resources/templates/list", err)
			continue
		}
		out.ResourceTemplates = append(out.ResourceTemplates, ts...)
	}
	return out, nil
}

// listPrompts answers prompts/list: every prompt of a server advertising
// prompts that p could get, named as tools are (<server><sep><prompt> when
// prefixed). The names come from the server's shared session, so that a
// principal who may see none of a server's prompts starts no upstream
// session for it.
func (g *Gateway) listPrompts(ctx context.Context, _ *dsession, p identity.Principal, _ *mcp.ListPromptsRequest) (*mcp.ListPromptsResult, error) {
	out := &mcp.ListPromptsResult{Prompts: []*mcp.Prompt{}}
	for _, server := range g.serversWith(hasPrompts) {
		cs, err := g.ups[server].shared.session()
		if err != nil {
			g.listFailed(server, "prompts/list", err)
			continue
		}
		var ps []*mcp.Prompt
		for pr, e := range cs.Prompts(ctx, nil) {
			if e != nil {
				err = e
				break
			}
			if pr == nil || !g.pipe.DiscloseTarget(ctx, p, g.promptTarget(server, pr.Name), nil) {
				continue
			}
			if g.prefixed() {
				c := *pr
				c.Name = server + g.cfg.Naming.Separator + pr.Name
				pr = &c
			}
			ps = append(ps, pr)
		}
		if err != nil {
			g.listFailed(server, "prompts/list", err)
			continue
		}
		out.Prompts = append(out.Prompts, ps...)
	}
	return out, nil
}

// resourceServer routes a resource URI (or a template's URI) to the server
// that serves it: the only server advertising resources; among several,
// the one listing uri, else the one with the longest template whose
// literal prefix (up to the first '{') uri starts with. "" when none does.
// Routing only picks the server; whether p may use the URI is the
// decision's.
func (g *Gateway) resourceServer(ctx context.Context, uri string) string {
	if hasDotSegment(uri) {
		return ""
	}
	servers := g.serversWith(hasResources)
	switch len(servers) {
	case 0:
		return ""
	case 1:
		return servers[0]
	}
	best, bestLen := "", -1
	for _, server := range servers {
		cs, err := g.ups[server].shared.session()
		if err != nil {
			continue
		}
		for r, err := range cs.Resources(ctx, nil) {
			if err != nil {
				break
			}
			if r != nil && r.URI == uri {
				return server
			}
		}
		for rt, err := range cs.ResourceTemplates(ctx, nil) {
			if err != nil {
				break
			}
			if rt == nil {
				continue
			}
			prefix, _, _ := strings.Cut(rt.URITemplate, "{")
			if strings.HasPrefix(uri, prefix) && len(prefix) > bestLen {
				best, bestLen = server, len(prefix)
			}
		}
	}
	return best
}

// hasDotSegment reports whether uri's path has a "." or ".." segment
// (RFC 3986 §3.3), raw or percent-encoded ("%2e%2e"), or with "\\" or
// "%2f" as the separator, or whether its escapes do not decode. An upstream
// resolving such a URI (RFC 3986 §5.2.4 remove_dot_segments, as URL
// parsers do) would read another resource than the one the decision saw
// (a rule's args.uri.startsWith("demo://static/") passed for
// "demo://static/../secret"), so such a URI is answered like an unknown
// one.
func hasDotSegment(uri string) bool {
	rest := uri
	if i := strings.IndexAny(rest, "?#"); i >= 0 {
		rest = rest[:i]
	}
	if _, after, ok := strings.Cut(rest, ":"); ok {
		rest = after
	}
	dec, err := url.PathUnescape(rest)
	if err != nil {
		return true
	}
	for seg := range strings.FieldsFuncSeq(dec, func(r rune) bool { return r == '/' || r == '\\' }) {
		if seg == "." || seg == ".." {
			return true
		}
	}
	return false
}

// promptServer routes a surface prompt name to its server and upstream
// name: by the server prefix when names are prefixed, else the only server
// advertising prompts or the first (sorted) that lists the name.
func (g *Gateway) promptServer(ctx context.Context, name string) (server, upstreamName string, ok bool) {
	if g.prefixed() {
		server, rest, found := strings.Cut(name, g.cfg.Naming.Separator)
		u := g.ups[server]
		if !found || rest == "" || u == nil {
			return "", "", false
		}
		if c := u.serverCaps(); c == nil || !hasPrompts(c) {
			return "", "", false
		}
		return server, rest, true
	}
	servers := g.serversWith(hasPrompts)
	if len(servers) == 1 {
		return servers[0], name, true
	}
	for _, server := range servers {
		cs, err := g.ups[server].shared.session()
		if err != nil {
			continue
		}
		for pr, err := range cs.Prompts(ctx, nil) {
			if err != nil {
				break
			}
			if pr != nil && pr.Name == name {
				return server, name, true
			}
		}
	}
	return "", "", false
}

// unknownPrompt is the answer to a prompt that does not exist and to one
// the principal may not see, alike.
func unknownPrompt(name string) error {
	return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("unknown prompt %q", name)}
}

func (g *Gateway) readResource(ctx context.Context, ds *dsession, p identity.Principal, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
	if req.Params == nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "missing params"}
	}
	uri := req.Params.URI
	server := g.resourceServer(ctx, uri)
	if server == "" {
		return nil, mcp.ResourceNotFoundError(uri)
	}
	args := *req.Params
	args.Meta = nil
	notFound := func(*pipeline.Result) error { return mcp.ResourceNotFoundError(uri) }
	return gatedCall(ctx, g, ds, p, g.resourceTarget(server), req.Params.Meta, &args, notFound,
		func(ctx context.Context, cs *mcp.ClientSession) (*mcp.ReadResourceResult, error) {
			return cs.ReadResource(ctx, req.Params)
		})
}

func (g *Gateway) getPrompt(ctx context.Context, ds *dsession, p identity.Principal, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
	if req.Params == nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "missing params"}
	}
	surfaceName := req.Params.Name
	server, name, ok := g.promptServer(ctx, surfaceName)
	if !ok {
		return nil, unknownPrompt(surfaceName)
	}
	args := *req.Params
	args.Meta = nil
	return gatedCall(ctx, g, ds, p, g.promptTarget(server, name), req.Params.Meta, &args, promptRefusal(surfaceName),
		func(ctx context.Context, cs *mcp.ClientSession) (*mcp.GetPromptResult, error) {
			params := *req.Params
			params.Name = name
			return cs.GetPrompt(ctx, &params)
		})
}

// promptRefusal answers a forbidden prompt use: like an unknown prompt when
// the principal may not see the prompt, else (denied for its arguments)
// with the refusal.
func promptRefusal(name string) func(*pipeline.Result) error {
	return func(res *pipeline.Result) error {
		if res.Hidden {
			return unknownPrompt(name)
		}
		return refusedError(res.Err)
	}
}

// complete answers completion/complete through the gate: on the prompt it
// refers to (ref/prompt) or on the resources of the server of its URI
// (ref/resource).
func (g *Gateway) complete(ctx context.Context, req *mcp.CompleteRequest) (*mcp.CompleteResult, error) {
	p, ok := principalOf(req)
	if !ok {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: "no authenticated principal"}
	}
	if req.Params == nil || req.Params.Ref == nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "missing params.ref"}
	}
	ss, _ := req.GetSession().(*mcp.ServerSession)
	ds := g.dsession(ss, p)
	args := *req.Params
	args.Meta = nil
	params := *req.Params
	var t *catalog.Tool
	var refusal func(*pipeline.Result) error
	switch ref := req.Params.Ref; ref.Type {
	case "ref/prompt":
		server, name, ok := g.promptServer(ctx, ref.Name)
		if !ok {
			return nil, unknownPrompt(ref.Name)
		}
		up := *ref
		up.Name = name
		params.Ref = &up
		t, refusal = g.promptTarget(server, name), promptRefusal(ref.Name)
	case "ref/resource":
		server := g.resourceServer(ctx, ref.URI)
		if server == "" {
			return nil, mcp.ResourceNotFoundError(ref.URI)
		}
		t, refusal = g.resourceTarget(server), func(*pipeline.Result) error { return mcp.ResourceNotFoundError(ref.URI) }
	default:
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("unknown reference type %q", ref.Type)}
	}
	return gatedCall(ctx, g, ds, p, t, req.Params.Meta, &args, refusal,
		func(ctx context.Context, cs *mcp.ClientSession) (*mcp.CompleteResult, error) {
			return cs.Complete(ctx, &params)
		})
}

// subscribe answers resources/subscribe through the gate (the SDK records
// the subscription only when it succeeds).
func (g *Gateway) subscribe(ctx context.Context, req *mcp.SubscribeRequest) error {
	p, ok := principalOf(req)
	if !ok {
		return &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: "no authenticated principal"}
	}
	if req.Params == nil {
		return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "missing params"}
	}
	uri := req.Params.URI
	server := g.resourceServer(ctx, uri)
	if server == "" {
		return mcp.ResourceNotFoundError(uri)
	}
	ss, _ := req.GetSession().(*mcp.ServerSession)
	args := *req.Params
	args.Meta = nil
	notFound := func(*pipeline.Result) error { return mcp.ResourceNotFoundError(uri) }
	_, err := gatedCall(ctx, g, g.dsession(ss, p), p, g.resourceTarget(server), req.Params.Meta, &args, notFound,
		func(ctx context.Context, cs *mcp.ClientSession) (*struct{}, error) {
			return &struct{}{}, cs.Subscribe(ctx, req.Params)
		})
	return err
}

// unsubscribe relays resources/unsubscribe to the resource's server when p
// may read the URI (a removal, not recorded); otherwise it answers like an
// unknown resource.
func (g *Gateway) unsubscribe(ctx context.Context, req *mcp.UnsubscribeRequest) error {
	p, ok := principalOf(req)
	if !ok {
		return &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: "no authenticated principal"}
	}
	if req.Params == nil {
		return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "missing params"}
	}
	uri := req.Params.URI
	server := g.resourceServer(ctx, uri)
	if server == "" || !g.pipe.DiscloseTarget(ctx, p, g.resourceTarget(server), map[string]any{"uri": uri}) {
		return mcp.ResourceNotFoundError(uri)
	}
	ss, _ := req.GetSession().(*mcp.ServerSession)
	cs, err := g.sessionFor(ctx, g.dsession(ss, p), g.ups[server])
	if err != nil {
		return refusedError(errcode.As(err))
	}
	return cs.Unsubscribe(ctx, req.Params)
}

// gatedCall runs one request on target t through the pipeline: args (the
// request params without _meta) are the call's arguments, meta the
// request's _meta (toolgate/runId, agentId, parentCallId), run the upstream
// request on the calling session's upstream session. It returns run's
// result (with the call's toolgate/runId, callId and receiptId in its
// _meta) once the outcome is recorded; refused answers a forbidden
// decision; the upstream's own JSON-RPC error is relayed (scrubbed of
// secrets); any other failure answers CodeRefused.
func gatedCall[R any](ctx context.Context, g *Gateway, ds *dsession, p identity.Principal, t *catalog.Tool, meta mcp.Meta, args any,
	refused func(*pipeline.Result) error, run func(context.Context, *mcp.ClientSession) (R, error)) (R, error) {
	var zero R
	raw, err := json.Marshal(args)
	if err != nil {
		return zero, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "params cannot be encoded: " + err.Error()}
	}
	inv := &targetInvoker[R]{g: g, u: g.ups[t.Server], ds: ds, run: run}
	c := pipeline.Call{Tool: t.Descriptor.ToolID, Args: raw, Principal: p, Transport: catalog.TransportMCP, RunID: ds.id,
		Target: &pipeline.Target{Tool: t, Invoker: inv}}
	if err := applyCallMeta(meta, &c); err != nil {
		return zero, err
	}
	ctx = tracing.ExtractMeta(ctx, meta) // W3C Trace Context in params._meta
	if ask := ds.elicitor(); ask != nil {
		ctx = approval.WithElicitor(ctx, ask) // approver: user rules, as for tools
	}
	res, err := g.pipe.Call(ctx, c)
	if err != nil {
		if errcode.CodeOf(err) == errcode.InvalidArgument {
			return zero, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: errcode.As(err).Message}
		}
		return zero, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "internal error"}
	}
	switch {
	case res.Status == audit.StatusOK && inv.ok:
		if r, ok := any(inv.res).(mcp.Result); ok {
			m := r.GetMeta()
			if m == nil {
				m = map[string]any{}
			}
			m[MetaRunID], m[MetaCallID] = res.RunID, res.CallID
			if res.ReceiptID != "" {
				m[MetaReceiptID] = res.ReceiptID
			}
			r.SetMeta(m)
		}
		return inv.res, nil
	case res.Status == audit.StatusForbidden && res.Err != nil && res.Err.Code == errcode.Forbidden:
		return zero, refused(res)
	case res.Status == audit.StatusError && inv.upErr != nil && res.Err != nil && res.Err.Code == errcode.ToolExecutionFailed:
		e := *inv.upErr
		e.Message = g.pipe.Redactor().RedactString(e.Message)
		if len(e.Data) > 0 {
			if red, err := g.pipe.Redactor().RedactJSON(e.Data); err == nil {
				e.Data = red
			} else {
				e.Data = nil
			}
		}
		return zero, &e
	}
	return zero, refusedError(res.Err)
}

// refusedError is the CodeRefused JSON-RPC error of e.
func refusedError(e *errcode.Error) error {
	if e == nil {
		e = errcode.New(errcode.Internal, "the request failed")
	}
	obj := map[string]any{"code": string(e.Code), "message": e.Message}
	if len(e.Details) > 0 {
		obj["details"] = e.Details
	}
	data, _ := json.Marshal(obj)
	return &jsonrpc.Error{Code: CodeRefused, Message: string(e.Code) + ": " + e.Message, Data: data}
}

// targetInvoker invokes one gated request on u for the pipeline; as a
// pipeline.Preparer it opens the caller's upstream session before the call
// is recorded (tool.session.opened first). Used by one call only: the
// pipeline invokes it synchronously, so its fields need no lock.
type targetInvoker[R any] struct {
	g   *Gateway
	u   *upstream
	ds  *dsession
	run func(context.Context, *mcp.ClientSession) (R, error)

	res   R              // run's result, when ok
	ok    bool           // run succeeded
	upErr *jsonrpc.Error // the upstream's own JSON-RPC error, relayed to the caller
}

// Prepare implements pipeline.Preparer.
func (ti *targetInvoker[R]) Prepare(ctx context.Context, _ *catalog.Tool) error {
	_, err := ti.g.sessionFor(ctx, ti.ds, ti.u)
	return err
}

// Invoke implements pipeline.Invoker: run on the caller's session to u,
// within u's timeout. An upstream JSON-RPC error is tool_execution_failed,
// a connection failure upstream_unavailable.
func (ti *targetInvoker[R]) Invoke(ctx context.Context, _ *catalog.Tool, _ json.RawMessage) (json.RawMessage, error) {
	cs, err := ti.g.sessionFor(ctx, ti.ds, ti.u)
	if err != nil {
		return nil, err
	}
	if ti.u.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, ti.u.timeout, errToolTimeout)
		defer cancel()
	}
	r, err := ti.run(ctx, cs)
	if err != nil {
		if context.Cause(ctx) == errToolTimeout {
			return nil, errcode.Errorf(errcode.Timeout, "the request did not finish within %s", ti.u.timeout)
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		var je *jsonrpc.Error
		if errors.As(err, &je) && !sdkTransportError(je) {
			ti.upErr = je
			return nil, errcode.Errorf(errcode.ToolExecutionFailed, "upstream error %d: %s", je.Code, je.Message)
		}
		return nil, errcode.Wrap(errcode.UpstreamUnavailable, err, "upstream "+ti.u.name)
	}
	out, err := json.Marshal(r)
	if err != nil {
		return nil, errcode.Wrap(errcode.ToolExecutionFailed, err, "encoding the upstream result")
	}
	ti.res, ti.ok = r, true
	return out, nil
}

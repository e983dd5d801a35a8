package mcpgw

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolgate/toolgate/identity"
	"github.com/toolgate/toolgate/internal/auth"
	"github.com/toolgate/toolgate/internal/tracing"
)

// Direct tools/call.
//
// A plain tools/call on an established session is the gateway's hot path.
// The go-sdk's Streamable HTTP server transport serves it through a
// jsonrpc2 connection (a goroutine per request, channel hand-offs, an SSE
// response stream) and decodes the message and its params with a decoder
// that allocates a 32 KiB buffer per decode; that is most of the gateway's
// CPU per call besides the store. serveDirect answers such a request itself
// with the same handler (Gateway.callTool), so the result, the refusals and
// the audit record are the same, and writes the JSON-RPC response as
// application/json, which the Streamable HTTP transport allows for any
// request (MCP 2025-11-25 basic/transports §"Sending Messages to the
// Server": the server returns either text/event-stream or
// application/json).
//
// It takes only requests whose every part it understands; anything else
// goes to the SDK unchanged:
//   - a POST with an Mcp-Session-Id of a session the gateway already serves
//     (one that made a request through the SDK), of the same principal;
//   - Content-Type application/json, an Accept that the SDK would accept,
//     an Mcp-Protocol-Version header that the gateway negotiates, a Host
//     header the SDK's DNS-rebinding protection would let through;
//   - one JSON-RPC request object with exactly the members jsonrpc ("2.0"),
//     id (a string or an integer), method ("tools/call") and params; params
//     with only name (a string), arguments and _meta, where _meta holds only
//     the toolgate/* correlation keys and W3C Trace Context (traceparent,
//     tracestate) (no progressToken: progress notifications need the SDK's
//     response stream);
//   - nothing may need the call's response stream: the client declared
//     neither sampling nor elicitation (an upstream's sampling or
//     elicitation request during the call, or an in-band approval, goes to
//     the client on that stream) and did not ask for log messages
//     (logging/setLevel).
//
// notifications/cancelled for a directly served call, from the principal
// of its session, cancels it (the notification still goes to the SDK, which
// answers it, or answers another principal 404 like an unknown session). The SDK's idle
// session timer does not see direct calls; serveDirect keeps it running by
// sending the SDK a ping on the session when the SDK has not seen it for a
// sixteenth of the session timeout, and again every quarter while a direct
// call runs. When the session ends (DELETE, the SDK's timeout, shutdown) its
// direct calls are cancelled, as the SDK cancels its own.

// directCall is a directly served request in flight (g.inflight).
type directCall struct {
	ctx    context.Context
	cancel context.CancelFunc
}

// directKey is the g.inflight key of a directly served request.
func directKey(sessionID string, id json.RawMessage) string {
	k, _ := idKey(id)
	return sessionID + "\x00" + k
}

// idKey is the value of a JSON-RPC id, so that equal ids written
// differently ("a" and "\u0061", 7 and 7.0) match: "s" and the string, or
// "n" and the integer. ok is false for anything else (fractions, numbers
// beyond int64, other JSON).
func idKey(raw json.RawMessage) (key string, ok bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return "", false
	}
	if raw[0] == '"' {
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return "", false
		}
		return "s" + s, true
	}
	if n, err := strconv.ParseInt(string(raw), 10, 64); err == nil {
		return "n" + strconv.FormatInt(n, 10), true
	}
	f, err := strconv.ParseFloat(string(raw), 64)
	if err != nil || f != math.Trunc(f) || f < math.MinInt64 || f >= math.MaxInt64 {
		return "", false
	}
	return "n" + strconv.FormatInt(int64(f), 10), true
}

// rpcResponse is the JSON-RPC response serveDirect writes.
type rpcResponse struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Result  any             `json:"result,omitempty"`
	Error   *jsonrpc.Error  `json:"error,omitempty"`
}

// directMembers are the JSON-RPC request members serveDirect understands.
var directMembers = []string{"jsonrpc", "id", "method", "params"}

// directParams are the tools/call params members serveDirect understands.
var directParams = []string{"name", "arguments", "_meta"}

// directMeta are the _meta keys serveDirect understands.
var directMeta = []string{MetaRunID, MetaAgentID, MetaParentCallID, tracing.MetaTraceparent, tracing.MetaTracestate}

// members decodes a JSON object into its members; ok is false if data is
// not an object or has a member outside allowed.
func members(data []byte, allowed []string) (map[string]json.RawMessage, bool) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil || m == nil {
		return nil, false
	}
	for k := range m {
		if !slices.Contains(allowed, k) {
			return nil, false
		}
	}
	return m, true
}

// validID reports whether raw is a JSON-RPC id serveDirect echoes: a JSON
// string or an integer (the SDK's jsonrpc.ID kinds).
func validID(raw json.RawMessage) bool {
	if len(raw) == 0 {
		return false
	}
	if raw[0] == '"' {
		var s string
		return json.Unmarshal(raw, &s) == nil
	}
	_, err := strconv.ParseInt(string(raw), 10, 64)
	return err == nil
}

// parseDirect returns the tools/call of body, or ok false when body is not
// one serveDirect takes.
func parseDirect(body []byte) (id json.RawMessage, params *mcp.CallToolParamsRaw, ok bool) {
	if !bytes.Contains(body, []byte(`"tools/call"`)) {
		return nil, nil, false
	}
	m, ok := members(body, directMembers)
	if !ok {
		return nil, nil, false
	}
	// members decoded body once, exact member names only; its values are
	// read from m rather than by decoding body again.
	var method string
	if string(m["jsonrpc"]) != `"2.0"` || json.Unmarshal(m["method"], &method) != nil || method != "tools/call" ||
		!validID(m["id"]) || len(m["params"]) == 0 {
		return nil, nil, false
	}
	pm, ok := members(m["params"], directParams)
	if !ok {
		return nil, nil, false
	}
	params = &mcp.CallToolParamsRaw{}
	if raw, present := pm["name"]; !present || json.Unmarshal(raw, &params.Name) != nil || raw[0] != '"' {
		return nil, nil, false
	}
	params.Arguments = pm["arguments"]
	if raw, present := pm["_meta"]; present {
		mm, ok := members(raw, directMeta)
		if !ok {
			return nil, nil, false
		}
		params.Meta = mcp.Meta{}
		for k, v := range mm {
			var x any
			if json.Unmarshal(v, &x) != nil {
				return nil, nil, false
			}
			params.Meta[k] = x
		}
	}
	return m["id"], params, true
}

// acceptsBoth reports whether an Accept header allows both application/json
// and text/event-stream, as the SDK requires of a POST.
func acceptsBoth(values []string) bool {
	var jsonOK, streamOK bool
	for _, v := range values {
		for raw := range strings.SplitSeq(v, ",") {
			base, _, _ := strings.Cut(raw, ";")
			switch strings.ToLower(strings.TrimSpace(base)) {
			case "application/json", "application/*":
				jsonOK = true
			case "text/event-stream", "text/*":
				streamOK = true
			case "*/*":
				jsonOK, streamOK = true, true
			}
		}
	}
	return jsonOK && streamOK
}

// isJSONContent reports whether a Content-Type is application/json (with
// parameters or not).
func isJSONContent(ct string) bool {
	base, _, _ := strings.Cut(ct, ";")
	return strings.EqualFold(strings.TrimSpace(base), "application/json")
}

// hostAllowed reports whether r passes the SDK's DNS-rebinding check: a
// request to a loopback address must name a loopback host.
func hostAllowed(r *http.Request) bool {
	la, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if !ok || la == nil || !loopback(la.String()) {
		return true
	}
	return loopback(r.Host)
}

// loopback reports whether hostport names a loopback host.
func loopback(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.Trim(host, "[]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// serveDirect answers r (whose body is body, authenticated as p) when it is
// a tools/call it takes (see the comment at the top of the file) and
// reports whether it did; when it returns false nothing was written.
func (g *Gateway) serveDirect(w http.ResponseWriter, r *http.Request, body []byte, p identity.Principal, sdk http.Handler) bool {
	sid := r.Header.Get("Mcp-Session-Id")
	if sid == "" {
		return false
	}
	v, ok := g.sessions.Load(sid)
	if !ok {
		return false
	}
	ds := v.(*dsession)
	if ds.principal.Tenant != p.Tenant || ds.principal.ID != p.ID {
		return false // the SDK answers 403
	}
	if ds.closing.Load() {
		return false // terminated: the SDK answers 404
	}
	pv := r.Header.Get("Mcp-Protocol-Version")
	if pv == "" || !slices.Contains(g.protocols, pv) || !isJSONContent(r.Header.Get("Content-Type")) ||
		!acceptsBoth(r.Header.Values("Accept")) || !hostAllowed(r) || len(r.Header.Values("Last-Event-ID")) > 0 {
		return false // the SDK's answers (a Last-Event-ID on a POST is its 400)
	}
	id, params, ok := parseDirect(body)
	if !ok {
		return false
	}
	if !ds.directOK() {
		return false
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	call := &directCall{ctx: ctx, cancel: cancel}
	key := directKey(sid, id)
	if _, dup := g.inflight.LoadOrStore(key, call); dup {
		return false // a second request with an id in flight: the SDK's rules apply
	}
	defer g.inflight.Delete(key)
	if ds.closing.Load() {
		return false // closed meanwhile (cancelDirectCalls may have run before the call was in flight): the SDK answers 404
	}
	// In flight before the keep-alive ping, so that a cancellation sent
	// meanwhile finds the call.
	g.keepAlive(ds, r, sdk)
	if timeout := g.sessionTimeout(); timeout > 0 {
		// A call longer than a quarter of the timeout keeps pinging, as
		// the SDK's own timer pauses while it serves a request.
		var t *time.Timer
		var done atomic.Bool
		t = time.AfterFunc(time.Duration(math.MaxInt64), func() {
			if done.Load() {
				return // the call ended (a Reset may race with Stop)
			}
			g.keepAlive(ds, r, sdk)
			t.Reset(timeout / 4)
		})
		t.Reset(timeout / 4)
		defer func() { done.Store(true); t.Stop() }()
	}

	g.directCalls.Add(1)

	resp := rpcResponse{JSONRPC: "2.0", ID: id}
	res, err := g.callTool(tracing.Extract(ctx, r.Header), ds, p, &mcp.CallToolRequest{Session: ds.ss, Params: params})
	if err != nil {
		je, ok := err.(*jsonrpc.Error)
		if !ok {
			je = &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "internal error"}
		}
		resp.Error = je
	} else {
		resp.Result = res
	}
	buf := responsePool.Get().(*bytes.Buffer)
	buf.Reset()
	defer func() {
		if buf.Cap() <= maxPooledResponse { // a huge result's buffer is not kept
			responsePool.Put(buf)
		}
	}()
	if err := json.NewEncoder(buf).Encode(&resp); err != nil {
		resp.Result, resp.Error = nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "encoding the result: " + err.Error()}
		buf.Reset()
		json.NewEncoder(buf).Encode(&resp)
	}
	h := w.Header()
	h.Set("Cache-Control", "no-cache, no-transform") // as the SDK's responses
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(buf.Len()))
	w.WriteHeader(http.StatusOK)
	w.Write(buf.Bytes())
	return true
}

var responsePool = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// maxPooledResponse is the largest response buffer responsePool keeps
// (bytes).
const maxPooledResponse = 1 << 20

// cancelDirect cancels the directly served call that a
// notifications/cancelled body names on session sid, if there is one and p
// is the session's principal. The notification then goes on to the SDK,
// which answers it.
func (g *Gateway) cancelDirect(sid string, p identity.Principal, body []byte) {
	if sid == "" || !bytes.Contains(body, []byte(`"notifications/cancelled"`)) {
		return
	}
	v, ok := g.sessions.Load(sid)
	if !ok {
		return
	}
	if ds := v.(*dsession); ds.principal.Tenant != p.Tenant || ds.principal.ID != p.ID {
		return
	}
	var n struct {
		Method string `json:"method"`
		Params struct {
			RequestID json.RawMessage `json:"requestId"`
		} `json:"params"`
	}
	if json.Unmarshal(body, &n) != nil || n.Method != "notifications/cancelled" || len(n.Params.RequestID) == 0 {
		return
	}
	if _, ok := idKey(n.Params.RequestID); !ok {
		return
	}
	if v, ok := g.inflight.Load(directKey(sid, n.Params.RequestID)); ok {
		v.(*directCall).cancel()
	}
}

// directOK reports whether ds's client may be served directly: it declared
// neither sampling nor elicitation and asked for no log messages.
func (ds *dsession) directOK() bool {
	if caps := clientCaps(ds.ss); caps != nil && (caps.Sampling != nil || caps.Elicitation != nil) {
		return false
	}
	ds.mu.Lock()
	defer ds.mu.Unlock()
	return ds.logLevel == ""
}

// keepAliveFraction: a direct call pings the SDK when it has not seen the
// session for timeout/keepAliveFraction, so a session expires between
// 15/16 of the timeout and the timeout after its last call (the SDK's idle
// clock starts at its last ping).
const keepAliveFraction = 16

// cancelDirectCalls cancels every directly served call of session sid (the
// session is ending: the SDK cancels its own requests the same way).
func (g *Gateway) cancelDirectCalls(sid string) {
	prefix := sid + "\x00"
	g.inflight.Range(func(k, v any) bool {
		if strings.HasPrefix(k.(string), prefix) {
			v.(*directCall).cancel()
		}
		return true
	})
}

// touch records that the SDK served a request of ds's session now.
func (ds *dsession) touch() { ds.sdkSeen.Store(time.Now().UnixNano()) }

// keepAlive sends the SDK a ping on ds's session when the SDK has not
// served a request of it for a quarter of the session timeout, so that its
// idle timer, which direct calls bypass, does not close a busy session.
func (g *Gateway) keepAlive(ds *dsession, r *http.Request, sdk http.Handler) {
	timeout := g.sessionTimeout()
	if timeout <= 0 || ds.closing.Load() || time.Since(time.Unix(0, ds.sdkSeen.Load())) < timeout/keepAliveFraction {
		return
	}
	ds.touch()
	body := `{"jsonrpc":"2.0","id":"toolgate-keepalive-` + strconv.FormatInt(g.keepalives.Add(1), 10) + `","method":"ping"}`
	req, err := http.NewRequestWithContext(r.Context(), http.MethodPost, r.URL.String(), strings.NewReader(body))
	if err != nil {
		return
	}
	req.Host = r.Host
	for _, h := range []string{"Authorization", "X-API-Key", "Mcp-Session-Id", "Mcp-Protocol-Version", "Content-Type", "Accept"} {
		if vs := r.Header.Values(h); len(vs) > 0 {
			req.Header[h] = vs
		}
	}
	if req.Header.Get("Authorization") == "" {
		req.Header.Set("Authorization", "Bearer x-api-key") // as Handler does for X-API-Key
	}
	if p, ok := auth.PrincipalFrom(r.Context()); ok {
		req = req.WithContext(auth.WithPrincipal(req.Context(), p))
	}
	d := &discard{h: http.Header{}}
	sdk.ServeHTTP(d, req)
	if d.status == 0 {
		d.status = http.StatusOK
	}
	g.keepaliveStatus.Store(int32(d.status))
	if d.status != http.StatusOK {
		g.log.Warn("mcp: session keep-alive ping refused by the SDK", "session", ds.id, "status", d.status)
	}
}

// discard is a ResponseWriter that keeps only the status (keepAlive's
// pings).
type discard struct {
	h      http.Header
	status int
}

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) Write(b []byte) (int, error) { return len(b), nil }
func (d *discard) Flush()                      {}
func (d *discard) WriteHeader(code int) {
	if d.status == 0 {
		d.status = code
	}
}

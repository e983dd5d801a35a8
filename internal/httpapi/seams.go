package httpapi

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/catalog"
	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/identity"
	"github.com/toolgate/toolgate/internal/pipeline"
	"github.com/toolgate/toolgate/ratelimit"
	"github.com/toolgate/toolgate/store"
)

// The OpenWOP conformance seams (CONTRACT §2.5), served only with
// Options.TestSeams. Each is authenticated, and every read and write is
// scoped to the caller's tenant.
//
// toolhooks/invoke runs one call through a real pipeline.Pipeline (the
// seam pipeline) that writes to the same event store and receipt log as
// the gate. Its catalog holds one synthetic tool, native:<toolName>
// (source host-extension, safetyTier pure), whose auth.scopes are the
// request's requiredScopes; its policy is seamPolicy. So the statuses come
// from the real decision, limiter and invoker code:
//
//   - forbidden: the principal (id = the request's principal, tenant = the
//     caller's, scopes = grantedScopes) lacks a required scope, or
//     grantedScopes is absent while requiredScopes is not empty
//     ("authorization cannot be evaluated": rule seam-unevaluable);
//   - rate_limited: simulateRateLimitExhausted swaps in a limiter whose
//     bucket is empty; otherwise the seam's own in-memory buckets apply
//     (60 calls, refilled at 10/s, per principal and tool);
//   - error (tool_execution_failed, with durationMs): simulateToolError
//     makes the synthetic tool fail;
//   - ok, with durationMs, otherwise.

// seamUnevaluable is the principal attribute the seam sets when the
// request has no grantedScopes.
const seamUnevaluable = "scopes_unevaluable"

// exhausted is a ratelimit.Limiter whose every bucket is empty
// (simulateRateLimitExhausted).
type exhausted struct{}

func (exhausted) Take(_ context.Context, _ ratelimit.Key, l ratelimit.Limit) (ratelimit.Result, error) {
	retry := time.Second
	if l.Rate > 0 {
		retry = time.Duration(float64(time.Second) / l.Rate)
	}
	return ratelimit.Result{Allowed: false, Limit: l, Remaining: 0, RetryAfter: retry}, nil
}

// seamTool is the synthetic tool's invoker: {"ok":true}, or a
// tool_execution_failed error when fail is set.
func seamTool(fail bool) pipeline.Invoker {
	return pipeline.InvokerFunc(func(ctx context.Context, _ *catalog.Tool, _ json.RawMessage) (json.RawMessage, error) {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if fail {
			return nil, errcode.New(errcode.ToolExecutionFailed, "simulated tool failure (simulateToolError)")
		}
		return json.RawMessage(`{"ok":true}`), nil
	})
}

// seamPipeline returns a pipeline over the one synthetic tool
// native:<name> requiring scopes, writing to the gate's stores.
//
// The events it records belong to owner, the seam's caller, whatever
// principal the call simulates: the caller reads them back.
func (h *Handler) seamPipeline(owner identity.Principal, name string, scopes []string, limiter ratelimit.Limiter, fail bool) (*pipeline.Pipeline, string, error) {
	name = strings.TrimPrefix(name, "native:")
	id := catalog.NativeToolID(name)
	d := catalog.ToolDescriptor{ToolID: id, Source: catalog.SourceHostExtension, SafetyTier: catalog.TierPure,
		Title: "OpenWOP conformance seam tool", Egress: catalog.EgressNone, ReplayPolicy: catalog.ReplayDeterministic,
		InputSchema: json.RawMessage(`{"type":"object"}`)}
	if len(scopes) > 0 {
		d.Auth = &catalog.Auth{Scopes: scopes}
	}
	snap, err := catalog.NewSnapshot([]catalog.Tool{{Descriptor: d, Transport: catalog.TransportNative, Name: name}}, catalog.Options{})
	if err != nil {
		msg := err.Error()
		if e := errcode.As(err); e != nil {
			msg = e.Message
		}
		msg = scrubEchoes(msg, append([]string{name, id}, scopes...)...)
		return nil, "", invalid("toolName", "toolName %q / requiredScopes are not usable: %s", clip(name), msg)
	}
	p, err := pipeline.New(pipeline.Options{Limiter: limiter, Redactor: h.pipe.Redactor(), Events: ownedLog{store.EventLog(h.events), owner.ID},
		Receipts: h.opts.Receipts, AuditContent: h.opts.AuditContent, Logger: h.log})
	if err != nil {
		return nil, "", err
	}
	p.Swap(&pipeline.State{Catalog: snap, Policy: h.seamPolicy, Invokers: map[string]pipeline.Invoker{id: seamTool(fail)}})
	return p, id, nil
}

// ownedLog appends events as belonging to principal (audit.Event.Principal).
type ownedLog struct {
	audit.Log
	principal string
}

// Append sets each event's Principal, then appends them.
func (l ownedLog) Append(ctx context.Context, events ...*audit.Event) error {
	for _, ev := range events {
		ev.Principal = l.principal
	}
	return l.Log.Append(ctx, events...)
}

// InvokeRequest is the body of POST /v1/host/sample/toolhooks/invoke
// (CONTRACT §2.5, with the openwop-app extensions grantedScopes and
// transport and the §F extension simulateToolError). GrantedScopes nil
// (absent or null) means authorization cannot be evaluated. Transport is
// mcp, http or native (default native). Unknown members are ignored. A
// plain value.
type InvokeRequest struct {
	Principal                  string          `json:"principal"`
	ToolName                   string          `json:"toolName"`
	RequiredScopes             []string        `json:"requiredScopes,omitempty"`
	GrantedScopes              []string        `json:"grantedScopes,omitempty"`
	Args                       json.RawMessage `json:"args,omitempty"`
	SimulateRateLimitExhausted bool            `json:"simulateRateLimitExhausted,omitempty"`
	SimulateToolError          bool            `json:"simulateToolError,omitempty"`
	Transport                  string          `json:"transport,omitempty"`
}

// InvokeResponse is the 200 answer of the invoke seam: exactly the
// agent.toolCalled and agent.toolReturned payloads the call stored (read
// back from the event store). A plain value.
type InvokeResponse struct {
	ToolCalled   json.RawMessage `json:"toolCalled"`
	ToolReturned json.RawMessage `json:"toolReturned"`
}

// seamInvoke serves POST /v1/host/sample/toolhooks/invoke: 200 with the
// stored payload pair whatever the status (the [rec] of CONTRACT §2.5; a
// gate refusal is in toolReturned.status, not the HTTP status). Errors:
// invalid_argument for a body without principal or toolName, an unusable
// toolName (it must fit [A-Za-z0-9_./-]) or scopes, non-object args or an
// unknown transport; audit_unavailable when the call could not be stored.
func (h *Handler) seamInvoke(w http.ResponseWriter, r *http.Request, caller identity.Principal) error {
	body, err := h.readBody(w, r)
	if err != nil {
		return err
	}
	var req InvokeRequest
	if err := decodeJSON(body, &req, false); err != nil {
		return err
	}
	switch {
	case req.Principal == "":
		return invalid("principal", "principal is required")
	case req.ToolName == "":
		return invalid("toolName", "toolName is required")
	}
	args, err := objectArgs(req.Args)
	if err != nil {
		return err
	}
	transport := catalog.TransportNative
	if req.Transport != "" {
		transport = catalog.Transport(req.Transport)
		if !transport.Valid() {
			return invalid("transport", "transport %q is not mcp, http or native", clip(req.Transport))
		}
	}
	var limiter ratelimit.Limiter = h.seamLimiter.Load()
	if req.SimulateRateLimitExhausted {
		limiter = exhausted{}
	}
	sp, id, err := h.seamPipeline(caller, req.ToolName, req.RequiredScopes, limiter, req.SimulateToolError)
	if err != nil {
		return err
	}
	principal := identity.Principal{ID: req.Principal, Tenant: caller.Tenant, Scopes: req.GrantedScopes}
	if req.GrantedScopes == nil {
		principal.Attributes = map[string]string{seamUnevaluable: "true"}
	}
	res, err := sp.Call(r.Context(), pipeline.Call{Tool: id, Args: args, Principal: principal, Transport: transport})
	if err != nil {
		return err
	}
	if res.Err != nil && (res.Err.Code == errcode.AuditUnavailable || res.Err.Code == errcode.Internal) {
		return res.Err
	}
	evs, err := h.events.EventsByRun(r.Context(), caller.Tenant, res.RunID, -1, 16)
	if err != nil {
		return err
	}
	var out InvokeResponse
	for _, ev := range evs {
		switch ev.Type {
		case audit.TypeToolCalled:
			out.ToolCalled = ev.Payload
		case audit.TypeToolReturned:
			out.ToolReturned = ev.Payload
		}
	}
	if out.ToolCalled == nil || out.ToolReturned == nil {
		return errcode.Errorf(errcode.Internal, "the seam call's events were not found in run %s", res.RunID)
	}
	h.writeJSON(w, r, http.StatusOK, out)
	return nil
}

// SessionRunRequest is the body of POST /v1/host/sample/tools/session-run
// (it may be empty). Without ToolID the session calls the synthetic seam
// tool native:openwop.session-probe; with one, the gate's tool of that id,
// which the caller must be allowed to see (else 404), with Args (default
// {}). Unknown members are ignored. A plain value.
type SessionRunRequest struct {
	ToolID string          `json:"toolId,omitempty"`
	Args   json.RawMessage `json:"args,omitempty"`
}

// SessionRunResponse is the answer of the session-run seam: the fresh run
// holding the bracket, the session id on both bracket events and the
// canonical toolId called. A plain value.
type SessionRunResponse struct {
	RunID     string `json:"runId"`
	SessionID string `json:"sessionId"`
	ToolID    string `json:"toolId"`
}

// probeTool is the seam session's default tool name (native:openwop.session-probe).
const probeTool = "openwop.session-probe"

// seamSessionRun serves POST /v1/host/sample/tools/session-run: in a fresh
// run it persists, in order, tool.session.opened, the call's
// agent.toolCalled and agent.toolReturned (a real pipeline call, transport
// http, attributed to the caller) and tool.session.closed (outcome
// completed when the call's status is ok, else failed), and records the
// session in Options.Sessions when set. The events are content-free:
// sessionId and toolId on the bracket, argsHash on the call.
func (h *Handler) seamSessionRun(w http.ResponseWriter, r *http.Request, caller identity.Principal) error {
	body, err := h.readBody(w, r)
	if err != nil {
		return err
	}
	var req SessionRunRequest
	if len(strings.TrimSpace(string(body))) > 0 {
		if err := decodeJSON(body, &req, false); err != nil {
			return err
		}
	}
	args, err := objectArgs(req.Args)
	if err != nil {
		return err
	}
	pipe, toolID := h.pipe, req.ToolID
	if toolID == "" {
		sp, id, err := h.seamPipeline(caller, probeTool, nil, h.seamLimiter.Load(), false)
		if err != nil {
			return err
		}
		pipe, toolID = sp, id
	} else {
		t, err := h.pipe.State().Catalog.Resolve(toolID)
		if err != nil {
			return h.callError(r, caller, req.ToolID, nil, err)
		}
		if !h.pipe.Visible(r.Context(), caller, t.Descriptor.ToolID) {
			return notFoundTool(req.ToolID)
		}
		toolID = t.Descriptor.ToolID
	}
	runID, sessionID := newID("run_"), newID("tses_")
	rec := context.WithoutCancel(r.Context())
	if err := h.openSession(rec, caller, runID, sessionID, toolID); err != nil {
		return err
	}
	res, callErr := pipe.Call(r.Context(), pipeline.Call{Tool: toolID, Args: args, Principal: caller,
		Transport: catalog.TransportHTTP, RunID: runID})
	outcome := audit.SessionCompleted
	if callErr != nil || res.Status != audit.StatusOK {
		outcome = audit.SessionFailed
	}
	if err := h.closeSession(rec, caller, runID, sessionID, toolID, outcome); err != nil {
		return err
	}
	if callErr != nil {
		return callErr
	}
	h.writeJSON(w, r, http.StatusOK, SessionRunResponse{RunID: runID, SessionID: sessionID, ToolID: toolID})
	return nil
}

// openSession records tool.session.opened (RFC 0078 §D) in run runID and,
// with Options.Sessions, the open session.
func (h *Handler) openSession(ctx context.Context, caller identity.Principal, runID, sessionID, toolID string) error {
	tenant := caller.Tenant
	now := time.Now()
	if s := h.opts.Sessions; s != nil {
		if err := s.OpenSession(ctx, &store.Session{SessionID: sessionID, Tenant: tenant, RunID: runID, ToolID: toolID, OpenedAt: now}); err != nil {
			return err
		}
	}
	ev, err := audit.NewEvent(runID, audit.TypeSessionOpened, audit.SessionOpened{SessionID: sessionID, ToolID: toolID}, "", now)
	if err != nil {
		return err
	}
	ev.Tenant, ev.Principal = tenant, caller.ID
	return h.events.AppendEvents(ctx, ev)
}

// closeSession records tool.session.closed with outcome (completed or
// failed) and closes the stored session.
func (h *Handler) closeSession(ctx context.Context, caller identity.Principal, runID, sessionID, toolID, outcome string) error {
	tenant := caller.Tenant
	now := time.Now()
	p, err := audit.NewSessionClosed(sessionID, toolID, outcome)
	if err != nil {
		return err
	}
	ev, err := audit.NewEvent(runID, audit.TypeSessionClosed, p, "", now)
	if err != nil {
		return err
	}
	ev.Tenant, ev.Principal = tenant, caller.ID
	if err := h.events.AppendEvents(ctx, ev); err != nil {
		return err
	}
	if s := h.opts.Sessions; s != nil {
		if _, err := s.CloseSession(ctx, tenant, sessionID, outcome, now); err != nil {
			return err
		}
	}
	return nil
}

// TestEvents is the answer of the event-log read seam: the run's events
// (run-event.schema.json documents, which are the seam's TestEvent shape)
// ordered by sequence. A plain value.
type TestEvents struct {
	Events []audit.Event `json:"events"`
}

// seamRunEvents serves GET /v1/host/sample/test/runs/{runId}/events
// [?type=&causationId=&correlationId=&nodeId=]: every event of the
// caller's tenant's run, ordered by sequence, 200 with {events: []} for a
// run it does not have (so the probe runId __probe__ answers 200). The
// filters keep events whose member equals the value; toolgate's events
// carry no nodeId or correlationId, so those filters keep none. Events
// naming a tool the caller may not see are left out (eventFilter), so a run
// holding only such events answers like an unknown one.
func (h *Handler) seamRunEvents(w http.ResponseWriter, r *http.Request, caller identity.Principal) error {
	runID := r.PathValue("runId")
	q := r.URL.Query()
	f := h.newEventFilter(r.Context(), caller)
	out := TestEvents{Events: []audit.Event{}}
	after := int64(-1)
	for {
		page, err := h.events.EventsByRun(r.Context(), caller.Tenant, runID, after, store.MaxLimit)
		if err != nil {
			return err
		}
		for i := range page {
			ev := &page[i]
			if (q.Has("type") && ev.Type != q.Get("type")) ||
				(q.Has("causationId") && ev.CausationID != q.Get("causationId")) ||
				q.Has("nodeId") || q.Has("correlationId") || !f.visible(ev) {
				continue
			}
			out.Events = append(out.Events, *ev)
		}
		if len(page) < store.MaxLimit {
			break
		}
		after = page[len(page)-1].Sequence
	}
	h.writeJSON(w, r, http.StatusOK, out)
	return nil
}

// seamReset serves POST /v1/host/sample/test/reset: the seams' rate-limit
// buckets start afresh. The event log and receipts are append-only audit
// records and are not erased. Answers 200 {}.
func (h *Handler) seamReset(w http.ResponseWriter, r *http.Request, _ identity.Principal) error {
	if _, err := h.readBody(w, r); err != nil {
		return err
	}
	h.seamLimiter.Store(ratelimit.NewMemory(ratelimit.MemoryOptions{}))
	h.writeJSON(w, r, http.StatusOK, struct{}{})
	return nil
}

// newID returns prefix followed by 32 lowercase hex digits of crypto/rand.
func newID(prefix string) string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

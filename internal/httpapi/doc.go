// Package httpapi serves toolgate's OpenWOP v1 HTTP surface (DESIGN.md
// Surfaces, CONTRACT.md): discovery, the RFC 0078 tool catalog, tool calls
// over HTTP for agents that do not speak MCP, the run-event log (JSON and
// SSE), policy explanations, and the conformance test seams. It runs every
// call through the same pipeline.Pipeline as the MCP gateway and reads the
// same event store, so an agent gets the same answer whichever door it
// uses.
//
// # Quick start
//
//	api, err := httpapi.New(httpapi.Options{Pipeline: pipe, Auth: authn, Events: st,
//		Sessions: st, Receipts: store.ReceiptLog(st), TestSeams: cfg.OpenWOP.TestSeams})
//	if err != nil { return err }
//	mux.Handle("/mcp", gw.Handler(authn, maxBody))
//	mux.Handle("/", api)               // every other path: the envelope on 404
//	srv.RegisterOnShutdown(api.Close)  // end SSE streams on shutdown
//
// # Endpoints
//
//	GET  /.well-known/openwop                    discovery (public; Cache-Control: public, max-age=300)
//	GET  /v1/tools[?source=]                     descriptors the caller may invoke, bare array sorted by toolId
//	GET  /v1/tools/{toolId}                      one descriptor; 404 alike for unknown and not visible
//	POST /v1/calls                               {toolId, args, runId?, agentId?, parentCallId?, record?, replayOf?} → CallResponse
//	GET  /v1/runs/{runId}/events[?type=&after=]  the run's events by sequence (the caller's own, see below)
//	GET  /v1/events/stream                       SSE (id = cursor; Last-Event-ID resumes)
//	GET  /v1/approvals[?status=]                 the approval inbox, with each argument summary
//	POST /v1/approvals/{id}/approve|deny         resolve an approval (approvers only)
//	POST /v1/policy/explain                      {principal?, toolId, args?} → decision, rule, layer, reason
//	GET  /v1/admin/tools/{toolId}/principals[?args=] who of the tenant's configured principals may call it (AdminScope)
//	GET  /v1/receipts[?chain=&from=&limit=]      a page of a receipt chain as `receipts export` JSON Lines (audit scope)
//	GET  /v1/receipts/{receiptId}                one receipt, canonical JSON; 404 alike for unknown and another tenant's (audit scope)
//	POST /v1/host/sample/toolhooks/invoke        seam (Options.TestSeams only)
//	POST /v1/host/sample/tools/session-run       seam
//	GET  /v1/host/sample/test/runs/{runId}/events seam
//	POST /v1/host/sample/test/reset              seam
//
// The event reads (run events, the stream, the event-log seam) never show
// an event that names a tool the reader may not see (a hidden tool's
// refused call is recorded under the run id its caller chose): a run whose
// every event is so hidden answers exactly as an unknown run. Their ?type=
// accepts a run-event type only (400 otherwise). The stream lives no
// longer than its caller's authentication (StreamGrant): it ends at a
// JWT's exp and, with a CredentialAuthenticator, as soon as a recheck
// (before every event sent and at every heartbeat) refuses the credential
// or finds its tenant or scopes changed.
//
// Every /v1 endpoint needs credentials (API key as Bearer or X-API-Key, or
// a JWT); none needs a particular scope except explaining for another
// principal and listing who may call a tool (AdminScope) and the receipts
// (Options.AuditScope). A receipts
// page holds only whole checkpointed batches of the caller's tenant's
// receipts (a batch with another tenant's receipt is skipped), so that
// `toolgate receipts verify PAGE --pubkey K [--from SEQ]` verifies it;
// the next page's ?from= is in its Toolgate-Receipts-Next header.
//
// # Errors
//
// Every non-2xx answer of every endpoint, unknown routes (404) and wrong
// methods (405, with Allow) included, is the flat OpenWOP envelope
// {"error": code, "message": text, "details": {…}?} written by one function
// (writeError), with the closed errcode codes: 400 invalid_argument and
// ambiguous_tool, 401 unauthenticated (with WWW-Authenticate), 403
// forbidden, 404 not_found, 413 invalid_argument (body over
// Options.MaxBodyBytes), 429 rate_limited (with Retry-After), 503
// audit_unavailable, 500 internal_error. A tool's own failure is not an
// HTTP error: POST /v1/calls answers 200 with status "error" and error
// (RFC 0064 §F). Messages name JSON members and types, never Go types, and
// echo a caller's value (tool name, run id, parameter) cut to 200 bytes.
//
// # Tenants
//
// A principal's tenant scopes everything it reads: events and runs are
// stored per (tenant, runId) and read with the caller's tenant only, so
// another tenant's run answers 404. Within a tenant, a principal reads the
// events of its own calls (audit.Event.Principal), and a holder of
// Options.AuditScope (toolgate:audit) every principal's: a run with none
// of the caller's events answers 404 like an unknown one. Tools carry no
// tenant; a deployment
// scopes tools to tenants in the policy, with conditions on
// principal.tenant (rule `{id: acme-crm, effect: allow, tools:
// ["mcp:crm.*"], when: 'principal.tenant == "acme"'}`). Under the default
// deny posture a tool no rule allows for a tenant is absent from that
// tenant's GET /v1/tools and answers 404 on GET /v1/tools/{toolId} and
// POST /v1/calls.
package httpapi

package httpapi

import (
	"encoding/json"
	"maps"
	"net/http"

	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/identity"
	"github.com/toolgate/toolgate/internal/pipeline"
)

// ExplainPrincipal is the principal an explanation is for: id (required),
// tenant (default: the caller's), scopes and attributes as the policy sees
// them. A plain value.
type ExplainPrincipal struct {
	ID         string            `json:"id"`
	Tenant     string            `json:"tenant,omitempty"`
	Scopes     []string          `json:"scopes,omitempty"`
	Attributes map[string]string `json:"attributes,omitempty"`
}

// ExplainRequest is the body of POST /v1/policy/explain. Principal absent
// means the caller itself; ToolID is required; Args is a JSON object
// (absent or null means {}). Unknown members and members given twice are
// refused. A plain value.
type ExplainRequest struct {
	Principal *ExplainPrincipal `json:"principal,omitempty"`
	ToolID    string            `json:"toolId"`
	Args      json.RawMessage   `json:"args,omitempty"`
}

// ExplainResponse is the answer of POST /v1/policy/explain: the decision
// Decide gives for (principal, tool, args) at call time over transport
// native — effect, deciding rule ("" for the default posture or a missing
// descriptor scope), layer (scopes, rule, default, error, no-policy) and
// reason — plus whether the tool is disclosed to the principal. Rules, the
// per-rule trace (conditions, file positions), is included only for a
// caller holding AdminScope. A plain value.
type ExplainResponse struct {
	ToolID         string               `json:"toolId"`
	Principal      string               `json:"principal"`
	Decision       pipeline.Effect      `json:"decision"`
	Rule           string               `json:"rule"`
	Layer          string               `json:"layer"`
	Reason         string               `json:"reason"`
	PolicyVersion  string               `json:"policyVersion,omitempty"`
	RequiredScopes []string             `json:"requiredScopes,omitempty"`
	MissingScopes  []string             `json:"missingScopes,omitempty"`
	Disclosed      bool                 `json:"disclosed"`
	Error          string               `json:"error,omitempty"`
	Rules          []pipeline.RuleTrace `json:"rules,omitempty"`
}

// decodeExplain parses a POST /v1/policy/explain body. Errors:
// *errcode.Error invalid_argument (details.field when a member is at fault)
// for anything but one JSON object with a non-empty toolId, object (or null)
// args, and a principal object with a non-empty id when present, without
// unknown members or trailing data. It never panics.
func decodeExplain(body []byte) (ExplainRequest, error) {
	var req ExplainRequest
	if err := decodeJSON(body, &req, true); err != nil {
		return ExplainRequest{}, err
	}
	if req.ToolID == "" {
		return ExplainRequest{}, invalid("toolId", "toolId is required")
	}
	if req.Principal != nil && req.Principal.ID == "" {
		return ExplainRequest{}, invalid("principal.id", "principal.id is required when principal is given")
	}
	args, err := objectArgs(req.Args)
	if err != nil {
		return ExplainRequest{}, err
	}
	req.Args = args
	return req, nil
}

// configuredPrincipal is the configured principal (Options.Principals)
// of tenant and id, scopes and attributes copied; ok false when there is
// none.
func (h *Handler) configuredPrincipal(tenant, id string) (identity.Principal, bool) {
	if h.opts.Principals == nil {
		return identity.Principal{}, false
	}
	for _, p := range h.opts.Principals() {
		if p.ID == id && p.Tenant == tenant {
			p.Scopes = append([]string(nil), p.Scopes...)
			p.Attributes = maps.Clone(p.Attributes)
			return p, true
		}
	}
	return identity.Principal{}, false
}

// explain serves POST /v1/policy/explain.
//
// Who is explained: without principal, or with the caller's own id (and
// tenant), the caller as authenticated (scopes in the body are ignored:
// nobody can explain with scopes they do not hold). Another principal
// needs AdminScope (403 forbidden, details.requiredScopes, otherwise) and
// must be of the caller's tenant (tenant empty or equal; 403 otherwise):
// admins are tenant-scoped. Named by id alone (no scopes, no attributes),
// it is the configured principal of that id in the caller's tenant (its
// scopes and attributes; Options.Principals), and an id that is none
// answers 404 not_found (details.field principal.id), whether it is
// unknown or another tenant's. With scopes or attributes given it is a
// hypothetical principal of the caller's tenant holding exactly those.
//
// Which tools: only a tool the caller may see, or a resource or prompt id
// of a configured server (Options.Targets) some use of which the caller may
// be allowed; any other id answers 404 exactly as an unknown one. Errors: invalid_argument (400) for a bad body
// (a member given twice included) or arguments a call would refuse (a
// duplicate key), ambiguous_tool as for POST /v1/calls, 413 for an oversize
// body.
func (h *Handler) explain(w http.ResponseWriter, r *http.Request, caller identity.Principal) error {
	body, err := h.readBody(w, r)
	if err != nil {
		return err
	}
	req, err := decodeExplain(body)
	if err != nil {
		return err
	}
	admin := hasScope(caller, AdminScope)
	subject := caller
	if bp := req.Principal; bp != nil && (bp.ID != caller.ID || (bp.Tenant != "" && bp.Tenant != caller.Tenant)) {
		if !admin {
			return errcode.Errorf(errcode.Forbidden, "explaining the policy for another principal needs scope %s", AdminScope).
				WithDetails(map[string]any{"requiredScopes": []string{AdminScope}})
		}
		if bp.Tenant != "" && bp.Tenant != caller.Tenant {
			return errcode.New(errcode.Forbidden, "an admin may explain the policy only for principals of its own tenant").
				WithDetails(map[string]any{"field": "principal.tenant"})
		}
		if bp.Scopes == nil && bp.Attributes == nil {
			p, ok := h.configuredPrincipal(caller.Tenant, bp.ID)
			if !ok {
				return errcode.Errorf(errcode.NotFound, "no configured principal %q in your tenant", clip(bp.ID, 200)).
					WithDetails(map[string]any{"field": "principal.id"})
			}
			subject = p
		} else {
			subject = identity.Principal{ID: bp.ID, Tenant: caller.Tenant, Scopes: bp.Scopes, Attributes: bp.Attributes}
		}
	}
	t, err := h.pipe.State().Catalog.Resolve(req.ToolID)
	var target bool // a resource or prompt id, not a catalog tool
	if err != nil && errcode.CodeOf(err) == errcode.NotFound && h.opts.Targets != nil {
		if tt, ok := h.opts.Targets(req.ToolID); ok {
			t, err, target = tt, nil, true
		}
	}
	if err != nil {
		return h.callError(r, caller, req.ToolID, nil, err)
	}
	if target && !h.pipe.DiscloseTarget(r.Context(), caller, t, nil) || !target && !h.pipe.Visible(r.Context(), caller, t.Descriptor.ToolID) {
		return notFoundTool(req.ToolID)
	}
	// The arguments' parse is the call's (strict: a duplicate key is
	// refused), so that explain never decides on arguments a call would
	// refuse; checked once the tool is known visible, as for a call.
	if _, err := h.pipe.Redactor().ArgsHash(req.Args); err != nil {
		msg := "not canonicalizable"
		if e := errcode.As(err); e != nil {
			msg = e.Message
		}
		return invalid("args", "arguments must be a JSON object: %s", clip(msg, 500))
	}
	var x pipeline.Explanation
	if target {
		x, err = h.pipe.ExplainTarget(r.Context(), subject, t, req.Args)
	} else {
		x, _, err = h.pipe.Explain(r.Context(), subject, t.Descriptor.ToolID, req.Args)
	}
	if err != nil {
		if errcode.CodeOf(err) == errcode.InvalidArgument {
			return errcode.As(err).WithDetails(map[string]any{"field": "args"})
		}
		return err
	}
	d := x.Decision
	out := ExplainResponse{
		ToolID: t.Descriptor.ToolID, Principal: subject.ID, Decision: d.Effect, Rule: d.RuleID, Layer: d.Layer,
		Reason: d.Reason, PolicyVersion: d.PolicyVersion, RequiredScopes: d.RequiredScopes, MissingScopes: d.MissingScopes,
		Disclosed: x.Disclosed, Error: x.Error,
	}
	if admin {
		out.Rules = x.Rules
	}
	h.writeJSON(w, r, http.StatusOK, out)
	return nil
}

package httpapi

import (
	"encoding/json"
	"net/http"

	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/identity"
	"github.com/toolgate/toolgate/internal/pipeline"
)

// WhoCanResponse is the answer of GET /v1/admin/tools/{toolId}/principals:
// for each configured principal of the caller's tenant, what the policy
// lets it do with the tool (pipeline.Access: effect allow, require_approval,
// deny or conditional, shown, deciding rule with file:line). A plain value.
type WhoCanResponse struct {
	ToolID     string            `json:"toolId"`
	ArgsKnown  bool              `json:"argsKnown"`
	Principals []pipeline.Access `json:"principals"`
}

// whoCan serves GET /v1/admin/tools/{toolId}/principals[?args=JSON]: who
// among the configured principals (Options.Principals, the API keys) of
// the caller's tenant may call the tool, decided by the installed policy
// exactly as calls are (pipeline.WhoCan → policy.Program.WhoCan →
// Explain). Without ?args the arguments are unknown and a decision that
// depends on them is "conditional". A tool pinning holds is answered as
// the running gateway treats it: every principal deny, shown false, layer
// "held", reason naming tool_changed (pipeline.WhoCan). Needs AdminScope (403 forbidden,
// details.requiredScopes). Errors: 404 not_found for a tool not in the
// catalog, 400 invalid_argument for ?args that is not a JSON object. Each
// answered read is logged (operator log, level info: caller, tenant,
// toolId), like the other admin reads.
func (h *Handler) whoCan(w http.ResponseWriter, r *http.Request, caller identity.Principal) error {
	if !hasScope(caller, AdminScope) {
		return errcode.Errorf(errcode.Forbidden, "listing who may call a tool needs scope %s", AdminScope).
			WithDetails(map[string]any{"requiredScopes": []string{AdminScope}})
	}
	id := r.PathValue("toolId")
	var args json.RawMessage
	q := r.URL.Query()
	known := q.Has("args")
	if known {
		raw := []byte(q.Get("args"))
		if _, err := h.pipe.Redactor().ArgsHash(raw); err != nil || !json.Valid(raw) || len(raw) == 0 || raw[0] != '{' {
			return invalid("args", "args must be a JSON object")
		}
		args = raw
	}
	var prs []identity.Principal
	if h.opts.Principals != nil {
		for _, p := range h.opts.Principals() {
			if p.Tenant == caller.Tenant {
				prs = append(prs, p)
			}
		}
	}
	acc, err := h.pipe.WhoCan(r.Context(), id, prs, args, known)
	if err != nil {
		if errcode.CodeOf(err) == errcode.NotFound {
			return notFoundTool(id)
		}
		return err
	}
	h.log.Info("admin read", "route", "GET /v1/admin/tools/{toolId}/principals", "principal", caller.ID, "tenant", caller.Tenant, "toolId", id)
	h.writeJSON(w, r, http.StatusOK, WhoCanResponse{ToolID: id, ArgsKnown: known, Principals: acc})
	return nil
}

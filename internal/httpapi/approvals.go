package httpapi

import (
	"net/http"
	"time"

	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/identity"
	"github.com/toolgate/toolgate/store"
)

// ApprovalView is one approval on the wire (GET /v1/approvals and the
// approve/deny answers): the argsHash and what the approver decides on,
// argsSummary, the SR-1-redacted arguments cut short (never the raw
// arguments; omitted for an approval stored without one).
type ApprovalView struct {
	ID          string `json:"id"`
	Principal   string `json:"principal"`
	ToolID      string `json:"toolId"`
	ArgsHash    string `json:"argsHash"`
	ArgsSummary string `json:"argsSummary,omitempty"`
	// RequestReason is why the call needs approval (the policy rule's
	// reason, redacted); omitted when none was stored.
	RequestReason string `json:"requestReason,omitempty"`
	Status        string `json:"status"`
	CreatedAt     string `json:"createdAt"`
	ExpiresAt     string `json:"expiresAt,omitempty"`
	ResolvedBy    string `json:"resolvedBy,omitempty"`
	Reason        string `json:"reason,omitempty"`
	ResolvedAt    string `json:"resolvedAt,omitempty"`
}

func approvalView(a *store.Approval) ApprovalView {
	ts := func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return t.UTC().Format(time.RFC3339Nano)
	}
	return ApprovalView{ID: a.ID, Principal: a.Principal, ToolID: a.ToolID, ArgsHash: a.ArgsHash, ArgsSummary: a.ArgsSummary, RequestReason: a.RequestReason, Status: string(a.Status),
		CreatedAt: ts(a.CreatedAt), ExpiresAt: ts(a.ExpiresAt), ResolvedBy: a.ResolvedBy, Reason: a.Reason, ResolvedAt: ts(a.ResolvedAt)}
}

// listApprovals serves GET /v1/approvals[?status=pending|approved|denied|
// expired|consumed|all]: the caller's tenant's approvals (default pending),
// oldest first, as {approvals: [...]}. Approvers (Options.ApproversScope)
// see every principal's; others only their own.
func (h *Handler) listApprovals(w http.ResponseWriter, r *http.Request, p identity.Principal) error {
	status := store.ApprovalStatus(r.URL.Query().Get("status"))
	switch status {
	case "":
		status = store.ApprovalPending
	case "all":
		status = ""
	}
	as, err := h.opts.Approvals.List(r.Context(), p.Tenant, status)
	if err != nil {
		return err
	}
	approver := hasScope(p, h.opts.ApproversScope)
	out := []ApprovalView{}
	for i := range as {
		if approver || as[i].Principal == p.ID {
			out = append(out, approvalView(&as[i]))
		}
	}
	h.writeJSON(w, r, http.StatusOK, map[string]any{"approvals": out})
	return nil
}

// resolveApproval serves POST /v1/approvals/{id}/approve and /deny (body
// optional: {"reason": "..."}). Errors: 403 forbidden without the approvers
// scope or for one's own call (unless allow_self_approval); 404 for an
// unknown id or another tenant's; 409 conflict when it is not pending or
// has expired.
func (h *Handler) resolveApproval(approve bool) authedFunc {
	return func(w http.ResponseWriter, r *http.Request, p identity.Principal) error {
		body, err := h.readBody(w, r)
		if err != nil {
			return err
		}
		var req struct {
			Reason string `json:"reason"`
		}
		if len(body) > 0 {
			if err := decodeJSON(body, &req, true); err != nil {
				return err
			}
		}
		id := r.PathValue("id")
		a, err := h.opts.Approvals.Resolve(r.Context(), p, id, approve, req.Reason)
		if err != nil {
			if e := errcode.As(err); e != nil && len(id) > maxEcho {
				return scrubError(e, id) // the store's "approval %q not found"
			}
			return err
		}
		h.writeJSON(w, r, http.StatusOK, approvalView(a))
		return nil
	}
}

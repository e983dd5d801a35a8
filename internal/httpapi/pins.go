package httpapi

import (
	"context"
	"net/http"
	"time"

	"github.com/toolgate/toolgate/catalog"
	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/identity"
	"github.com/toolgate/toolgate/store"
)

// Tool-definition pinning, the operator side (issue 17 §3, config
// pinning): GET /v1/admin/tools/pending, GET
// /v1/admin/tools/pending/{toolId} (the field-by-field diff) and POST
// /v1/admin/tools/pending/{toolId}/approve, for callers holding AdminScope
// (others get 403 forbidden). Pins are the deployment's, not a tenant's:
// an admin of any tenant sees and approves them.

// PinAdmin is what the pinning endpoints read and do; the MCP gateway (its
// store's pins and its ApproveTool) provides it. Safe for concurrent use.
type PinAdmin struct {
	Pins store.Pins
	// Mode is config pinning.mode: in enforce a pending change is held.
	Mode string
	// Approve approves toolID's pending definition (digest "" or the
	// pending one) on behalf of by, and applies it at once.
	Approve func(ctx context.Context, toolID, digest, by string) (*store.Pin, error)
}

// PinView is one pin as the pinning endpoints and `toolgate tools` show
// it: the approved digest, the pending one, the fields that differ, when
// the change was first seen and whether it holds the tool. Diff (the
// field-by-field old and new values) only in the single-tool answer. A
// plain value.
type PinView struct {
	ToolID        string                `json:"toolId"`
	Server        string                `json:"server"`
	Digest        string                `json:"digest,omitempty"`
	PendingDigest string                `json:"pendingDigest,omitempty"`
	ChangedFields []string              `json:"changedFields"`
	FirstSeen     time.Time             `json:"firstSeen,omitzero"`
	ApprovedBy    string                `json:"approvedBy,omitempty"`
	ApprovedAt    time.Time             `json:"approvedAt,omitzero"`
	Held          bool                  `json:"held"`
	Diff          []catalog.FieldChange `json:"diff,omitempty"`
}

// NewPinView is p's view under pinning mode mode; with diff it carries the
// field-by-field diff of the pending definition against the approved one.
func NewPinView(p store.Pin, mode string, diff bool) PinView {
	v := PinView{ToolID: p.ToolID, Server: p.Server, Digest: p.Digest, PendingDigest: p.PendingDigest,
		ChangedFields: p.ChangedFields, FirstSeen: p.FirstSeen, ApprovedBy: p.ApprovedBy, ApprovedAt: p.ApprovedAt,
		Held: mode == "enforce" && p.Pending()}
	if v.ChangedFields == nil {
		v.ChangedFields = []string{}
	}
	if diff && p.Pending() {
		v.Diff, _ = catalog.DiffDefinitions(p.Definition, p.PendingDefinition)
	}
	return v
}

func (h *Handler) pinAdmin(p identity.Principal) error {
	if !hasScope(p, AdminScope) {
		return errcode.Errorf(errcode.Forbidden, "the tool pinning endpoints need the %s scope", AdminScope)
	}
	return nil
}

// listPending serves GET /v1/admin/tools/pending[?all=true]: the pins
// with a pending change (all=true: every pin), sorted by toolId.
func (h *Handler) listPending(w http.ResponseWriter, r *http.Request, p identity.Principal) error {
	if err := h.pinAdmin(p); err != nil {
		return err
	}
	all := false
	switch r.URL.Query().Get("all") {
	case "", "false":
	case "true":
		all = true
	default:
		return invalid("all", "all must be true or false")
	}
	pins, err := h.opts.PinAdmin.Pins.ListPins(r.Context())
	if err != nil {
		return err
	}
	out := []PinView{}
	for _, pin := range pins {
		if all || pin.Pending() {
			out = append(out, NewPinView(pin, h.opts.PinAdmin.Mode, false))
		}
	}
	h.writeJSON(w, r, http.StatusOK, out)
	return nil
}

// getPending serves GET /v1/admin/tools/pending/{toolId}: the pending
// change with its diff. 404 when the tool has no pending change.
func (h *Handler) getPending(w http.ResponseWriter, r *http.Request, p identity.Principal) error {
	if err := h.pinAdmin(p); err != nil {
		return err
	}
	id := r.PathValue("toolId")
	pin, err := h.opts.PinAdmin.Pins.GetPin(r.Context(), id)
	if err != nil {
		return scrubNotFound(err, id)
	}
	if !pin.Pending() {
		return errcode.Errorf(errcode.NotFound, "tool %s has no pending definition change", clip(id))
	}
	h.writeJSON(w, r, http.StatusOK, NewPinView(*pin, h.opts.PinAdmin.Mode, true))
	return nil
}

// approvePending serves POST /v1/admin/tools/pending/{toolId}/approve,
// body absent or {"digest": "sha256:…"} (the pending digest the operator
// reviewed; a different pending one is 409 conflict).
func (h *Handler) approvePending(w http.ResponseWriter, r *http.Request, p identity.Principal) error {
	if err := h.pinAdmin(p); err != nil {
		return err
	}
	body, err := h.readBody(w, r)
	if err != nil {
		return err
	}
	var req struct {
		Digest string `json:"digest"`
	}
	if len(body) > 0 {
		if err := decodeJSON(body, &req, true); err != nil {
			return err
		}
	}
	id := r.PathValue("toolId")
	pin, err := h.opts.PinAdmin.Approve(r.Context(), id, req.Digest, p.ID)
	if err != nil {
		return scrubNotFound(err, id)
	}
	h.writeJSON(w, r, http.StatusOK, NewPinView(*pin, h.opts.PinAdmin.Mode, false))
	return nil
}

// scrubNotFound keeps a long caller-chosen id out of a not-found message.
func scrubNotFound(err error, id string) error {
	if e := errcode.As(err); e != nil && len(id) > maxEcho {
		return scrubError(e, id)
	}
	return err
}

package httpapi

import (
	"net/http"

	"github.com/toolgate/toolgate/catalog"
	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/identity"
)

// listTools serves GET /v1/tools[?source=]: a bare JSON array of the
// RFC 0078 descriptors of exactly the tools the caller may invoke
// (pipeline Disclose: the decision function that also gates calls, so
// scoped by the caller's scopes and, through policy conditions on
// principal.tenant, its tenant), sorted by toolId. `source` keeps one
// source (node-pack, workflow, mcp, connector, host-extension); another
// value, or `view` other than "standard", is invalid_argument (400).
func (h *Handler) listTools(w http.ResponseWriter, r *http.Request, p identity.Principal) error {
	q := r.URL.Query()
	src := catalog.Source(q.Get("source"))
	if q.Has("source") && !src.Valid() {
		return invalid("source", "source %q is not one of node-pack, workflow, mcp, connector, host-extension", clip(string(src)))
	}
	if v := q.Get("view"); v != "" && v != "standard" {
		return invalid("view", "view %q is not supported (only standard)", clip(v))
	}
	out := []catalog.ToolDescriptor{}
	for _, t := range h.pipe.Disclose(r.Context(), p) {
		if src != "" && t.Descriptor.Source != src {
			continue
		}
		out = append(out, t.Descriptor)
	}
	h.writeJSON(w, r, http.StatusOK, out)
	return nil
}

// getTool serves GET /v1/tools/{toolId}: the descriptor of the tool whose
// canonical toolId is exactly the (URL-decoded) path remainder, if the
// caller may invoke it. An unknown id and an id the caller may not see get
// the same 404 not_found answer, byte for byte.
func (h *Handler) getTool(w http.ResponseWriter, r *http.Request, p identity.Principal) error {
	id := r.PathValue("toolId")
	t, ok := h.pipe.State().Catalog.Lookup(id)
	if !ok || !h.pipe.Visible(r.Context(), p, id) {
		return notFoundTool(id)
	}
	h.writeJSON(w, r, http.StatusOK, t.Descriptor)
	return nil
}

// visibleCandidates resolves an ambiguous_tool error for caller p: the
// error listing only the candidates p may see when there are still two or
// more, else the not-found answer (the other candidates must not be
// disclosed).
func (h *Handler) visibleCandidates(r *http.Request, p identity.Principal, name string, e *errcode.Error) error {
	var visible []string
	if ids, ok := e.Details["candidates"].([]string); ok {
		for _, id := range ids {
			if h.pipe.Visible(r.Context(), p, id) {
				visible = append(visible, id)
			}
		}
	}
	if len(visible) < 2 {
		return notFoundTool(name)
	}
	return errcode.Errorf(errcode.AmbiguousTool, "tool name %q is ambiguous: it matches %v; use the toolId", clip(name), visible).
		WithDetails(map[string]any{"name": clip(name), "candidates": visible})
}

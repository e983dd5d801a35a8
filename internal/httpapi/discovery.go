package httpapi

import (
	"net/http"
	"slices"
)

// Capabilities is the discovery document of GET /.well-known/openwop
// (OpenWOP capabilities.schema.json, CONTRACT §1.2–1.3). toolgate runs no
// envelopes, so supportedEnvelopes and schemaVersions are empty and the
// three envelope limits are 0; limits.maxRequestBodyBytes is enforced on
// every /v1 request body. The two capability families sit at the root and
// again in the deprecated `capabilities` mirror, because the conformance
// suite reads toolHooks from the mirror and toolCatalog from the root.
// A plain value (Handler.Capabilities builds a fresh one per call).
type Capabilities struct {
	ProtocolVersion     string           `json:"protocolVersion"`
	Implementation      Implementation   `json:"implementation"`
	SupportedEnvelopes  []string         `json:"supportedEnvelopes"`
	SchemaVersions      map[string]int   `json:"schemaVersions"`
	Limits              Limits           `json:"limits"`
	SupportedTransports []string         `json:"supportedTransports"`
	ToolHooks           ToolHooks        `json:"toolHooks"`
	ToolCatalog         ToolCatalog      `json:"toolCatalog"`
	Mirror              CapabilityFamily `json:"capabilities"`
}

// Implementation is the server identity (name, version, vendor). A plain
// value.
type Implementation struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	Vendor  string `json:"vendor"`
}

// Limits are the capabilities.schema.json limits: the three envelope
// counts (always 0: toolgate runs no envelopes) and MaxRequestBodyBytes,
// in bytes, enforced on every /v1 request body (413 above it). A plain
// value.
type Limits struct {
	ClarificationRounds int   `json:"clarificationRounds"`
	SchemaRounds        int   `json:"schemaRounds"`
	EnvelopesPerTurn    int   `json:"envelopesPerTurn"`
	MaxRequestBodyBytes int64 `json:"maxRequestBodyBytes"`
}

// ToolHooks is the RFC 0064 advertisement. Every flag is backed by the
// pipeline, which every call of every door runs through: argsHash,
// principal, transport, status and durationMs on every tool event, without
// inputs (prePostEvents; false when Options.AuditContent is "full", since
// the events then also carry the redacted inputs, which RFC 0064 §B says a
// prePostEvents host drops), per-tool scopes checked fail-closed before
// invoking (perToolAuthorization), and per-(principal, toolId) token
// buckets (perToolRateLimit, applied to the tools the policy's ratelimits
// name). A plain value.
type ToolHooks struct {
	Supported            bool `json:"supported"`
	PrePostEvents        bool `json:"prePostEvents"`
	PerToolAuthorization bool `json:"perToolAuthorization"`
	PerToolRateLimit     bool `json:"perToolRateLimit"`
}

// ToolCatalog is the RFC 0078 advertisement: GET /v1/tools is served;
// Sources are the sources of the tools the host serves (sorted);
// SessionLifecycle is Options.SessionLifecycle. A plain value.
type ToolCatalog struct {
	Supported        bool     `json:"supported"`
	Sources          []string `json:"sources"`
	SessionLifecycle bool     `json:"sessionLifecycle"`
}

// CapabilityFamily is the `capabilities` mirror: the same two families. A
// plain value.
type CapabilityFamily struct {
	ToolHooks   ToolHooks   `json:"toolHooks"`
	ToolCatalog ToolCatalog `json:"toolCatalog"`
}

// Capabilities returns the discovery document as served now:
// toolCatalog.sources are the sources of the tools in the gate's catalog at
// this moment (an upstream MCP server still connecting adds "mcp" once its
// tools are listed). Safe for concurrent use.
func (h *Handler) Capabilities() Capabilities {
	hooks := ToolHooks{Supported: true, PrePostEvents: h.opts.AuditContent != "full", PerToolAuthorization: true, PerToolRateLimit: true}
	sources := []string{}
	for _, t := range h.pipe.State().Catalog.Tools() {
		s := string(t.Descriptor.Source)
		if !slices.Contains(sources, s) {
			sources = append(sources, s)
		}
	}
	slices.Sort(sources)
	cat := ToolCatalog{Supported: true, Sources: sources, SessionLifecycle: h.opts.SessionLifecycle}
	transports := []string{"rest"}
	if h.opts.MCP {
		transports = append(transports, "mcp")
	}
	return Capabilities{
		ProtocolVersion:     "1.0",
		Implementation:      Implementation{Name: "toolgate", Version: h.opts.Version, Vendor: "toolgate"},
		SupportedEnvelopes:  []string{},
		SchemaVersions:      map[string]int{},
		Limits:              Limits{MaxRequestBodyBytes: h.maxBody},
		SupportedTransports: transports,
		ToolHooks:           hooks,
		ToolCatalog:         cat,
		Mirror:              CapabilityFamily{ToolHooks: hooks, ToolCatalog: cat},
	}
}

// discovery serves GET /.well-known/openwop: public (no credentials),
// Cache-Control: public, max-age=300.
func (h *Handler) discovery(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "public, max-age=300")
	h.writeJSON(w, r, http.StatusOK, h.Capabilities())
}

package mcpgw

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/catalog"
	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/store"
)

// Tool-definition pinning (issue 17 §3, §4; config pinning.mode). Every
// listing of an upstream's tools (the first, and each re-list after a
// tools/list_changed), and the HTTP tools of each `http_tools:` entry and
// each `openapi:` import (a "source", pinned like a server, at New: an
// OpenAPI document fetched from a URL, or a file replaced between
// restarts, can change an operation), computes each tool's definition
// digest and compares it with the tool's pin in the store:
//
//   - No pin for any tool of the server (its first ever listing): every
//     tool is pinned as listed ("pinning:first-sight"), in both modes. This
//     is how the initial pin set is established: what the operator
//     configured and started is trusted as first seen (review it with
//     `toolgate tools pending --all`); what changes later is not.
//   - A new tool of a server that has pins: record mode pins it at once;
//     enforce mode stores it as pending and holds it.
//   - A definition that differs from the approved one: stored as the
//     pending change (old/new digest, changed fields, first seen); record
//     mode serves it, enforce mode holds it (not listed, a call answers
//     tool_changed) until approved.
//   - A definition back to the approved one clears the pending change.
//
// Each change (a digest differing from the last one seen) is one
// toolgate.tool.changed event; each approval one toolgate.tool.approved.
// Both are content-free: toolIds, digests, field names, mode, who.

// Event types of pinning, in the run PinningRunID of the empty tenant.
const (
	TypeToolChanged  = "toolgate.tool.changed"
	TypeToolApproved = "toolgate.tool.approved"
	PinningRunID     = "toolgate.pinning"
)

// pinPoll is how often a gateway in enforce mode with held tools re-reads
// the pins, so that an approval made elsewhere (the CLI beside it, another
// replica) releases the tool without a restart.
const pinPoll = time.Second

// ToolChanged is the payload of a toolgate.tool.changed event. OldDigest is
// "" (omitted) for a tool never seen before.
type ToolChanged struct {
	Server        string   `json:"server"`
	ToolID        string   `json:"toolId"`
	OldDigest     string   `json:"oldDigest,omitempty"`
	NewDigest     string   `json:"newDigest"`
	ChangedFields []string `json:"changedFields"`
	Mode          string   `json:"mode"`
	Held          bool     `json:"held"`
}

// ToolApproved is the payload of a toolgate.tool.approved event.
type ToolApproved struct {
	Server     string `json:"server"`
	ToolID     string `json:"toolId"`
	OldDigest  string `json:"oldDigest,omitempty"`
	Digest     string `json:"digest"`
	ApprovedBy string `json:"approvedBy"`
}

// pinState is what pinning decided for one listing of a server: the digest
// of each listed tool and the tools held, by upstream tool name (for an
// HTTP source, by toolId).
type pinState struct {
	digests map[string]string
	held    map[string]bool
}

// pinDef is one listed tool as pinning sees it: its key in pinState
// (upstream tool name, or toolId), its toolId and its definition.
type pinDef struct {
	key, toolID string
	def         catalog.Definition
}

// mcpPinDefs are the pinDefs of server's listed tools.
func mcpPinDefs(server string, tools []*mcp.Tool) []pinDef {
	var out []pinDef
	for _, t := range tools {
		if t == nil || t.Name == "" {
			continue
		}
		out = append(out, pinDef{key: t.Name, toolID: catalog.MCPToolID(server, t.Name), def: mcpDefinition(t)})
	}
	return out
}

// httpSource is one pinning source of HTTP tools (Native.Source).
type httpSource struct {
	name    string
	tools   []Native
	repinMu sync.Mutex // serialises applyPinning on the source
	mu      sync.Mutex
	pins    pinState // under mu
}

// sourceOf is n's pinning source name.
func sourceOf(n Native) string {
	if n.Source != "" {
		return n.Source
	}
	return n.Descriptor.ToolID
}

// httpPinDefs are the pinDefs of src's tools: each descriptor as built
// (before tools: classification, which is the operator's and not the
// source's).
func (src *httpSource) pinDefs() []pinDef {
	out := make([]pinDef, 0, len(src.tools))
	for _, n := range src.tools {
		d := n.Descriptor
		out = append(out, pinDef{key: d.ToolID, toolID: d.ToolID, def: catalog.DescriptorDefinition(&d)})
	}
	return out
}

// pinHTTPTools groups the HTTP tools by source and applies pinning to
// each (called by New, before the first catalog is built).
func (g *Gateway) pinHTTPTools() {
	g.srcs = map[string]*httpSource{}
	for _, n := range g.opts.HTTPTools {
		name := sourceOf(n)
		src, ok := g.srcs[name]
		if !ok {
			src = &httpSource{name: name}
			g.srcs[name] = src
			g.srcOrder = append(g.srcOrder, name)
		}
		src.tools = append(src.tools, n)
	}
	slices.Sort(g.srcOrder)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, name := range g.srcOrder {
		src := g.srcs[name]
		ps := g.applyPinning(ctx, name, src.pinDefs())
		src.mu.Lock()
		src.pins = ps
		src.mu.Unlock()
	}
}

// httpPin is the definition digest of HTTP tool n and whether it is held.
func (g *Gateway) httpPin(n Native) (digest string, held bool) {
	src, ok := g.srcs[sourceOf(n)]
	if !ok {
		return "", false
	}
	src.mu.Lock()
	defer src.mu.Unlock()
	return src.pins.digests[n.Descriptor.ToolID], src.pins.held[n.Descriptor.ToolID]
}

// repinHTTP applies pinning again to src (after an approval) and, when its
// holds changed, installs the catalog and notifies sessions.
func (g *Gateway) repinHTTP(src *httpSource) {
	src.repinMu.Lock()
	defer src.repinMu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ps := g.applyPinning(ctx, src.name, src.pinDefs())
	src.mu.Lock()
	same := maps2Equal(src.pins.held, ps.held)
	src.pins = ps
	src.mu.Unlock()
	if same {
		return
	}
	if err := g.rebuild(); err != nil {
		g.log.Error("installing HTTP tools failed", "source", src.name, "err", err)
		return
	}
	g.notifyToolsChanged()
}

// mcpDefinition is the pinned part of an upstream tool.
func mcpDefinition(t *mcp.Tool) catalog.Definition {
	d := catalog.Definition{Name: t.Name, Title: t.Title, Description: t.Description}
	if t.InputSchema != nil {
		d.InputSchema, _ = json.Marshal(t.InputSchema)
	}
	if t.OutputSchema != nil {
		d.OutputSchema, _ = json.Marshal(t.OutputSchema)
	}
	if t.Annotations != nil {
		d.Annotations, _ = json.Marshal(t.Annotations)
	}
	return d
}

// applyPinning computes the digests of the tools server (an upstream, or
// an HTTP tool source) lists and applies pinning to them (see above). It
// fails closed in enforce mode: a tool whose definition cannot be
// normalized, or whose pin cannot be read or written, is held.
func (g *Gateway) applyPinning(ctx context.Context, server string, defs []pinDef) pinState {
	return g.pinning(ctx, server, defs, true)
}

// previewPinning is applyPinning without its writes and events: the
// holds the listing will get, so that they can be installed before the
// pending change becomes visible (in the store, the admin API and the
// event stream) and a call never runs a tool that is already shown as
// held. A pin that then fails to be written holds its tool on the second
// pass.
func (g *Gateway) previewPinning(ctx context.Context, server string, defs []pinDef) pinState {
	return g.pinning(ctx, server, defs, false)
}

// pinning is applyPinning (write true) or previewPinning (write false).
func (g *Gateway) pinning(ctx context.Context, server string, defs []pinDef, write bool) pinState {
	mode := g.cfg.Pinning.Mode
	enforce := mode == "enforce"
	ps := pinState{digests: map[string]string{}, held: map[string]bool{}}
	norms := map[string][]byte{}
	ids := map[string]string{}
	var names []string
	for _, pd := range defs {
		norm, err := catalog.NormalizeDefinition(pd.def)
		if err != nil {
			g.log.Warn("tool definition cannot be pinned", "server", server, "toolId", pd.toolID, "err", err)
			if enforce {
				ps.held[pd.key] = true
			}
			continue
		}
		norms[pd.key] = norm
		ids[pd.key] = pd.toolID
		ps.digests[pd.key] = catalog.DigestOf(norm)
		names = append(names, pd.key)
	}
	if mode == "off" || g.opts.Pins == nil {
		return ps
	}
	slices.Sort(names)
	all, err := g.opts.Pins.ListPins(ctx)
	if err != nil {
		g.log.Error("reading tool pins failed", "server", server, "err", err, "held", enforce)
		if enforce {
			for _, n := range names {
				ps.held[n] = true
			}
		}
		return ps
	}
	pins := map[string]store.Pin{}
	for _, p := range all {
		if p.Server == server {
			pins[p.ToolID] = p
		}
	}
	first := len(pins) == 0
	now := time.Now()
	put := func(p *store.Pin, name string) {
		if !write {
			return
		}
		if err := g.opts.Pins.PutPin(ctx, p); err != nil {
			g.log.Error("storing tool pin failed", "toolId", p.ToolID, "err", err, "held", enforce)
			if enforce {
				ps.held[name] = true
			}
		}
	}
	changed := func(c ToolChanged) {
		if write {
			g.toolChanged(ctx, c)
		}
	}
	for _, name := range names {
		id, norm, dig := ids[name], norms[name], ps.digests[name]
		pin, ok := pins[id]
		switch {
		case !ok && (!enforce || first):
			by := "pinning:first-sight"
			if !first {
				by = "pinning:record"
			}
			put(&store.Pin{ToolID: id, Server: server, Digest: dig, Definition: norm, ApprovedBy: by, ApprovedAt: now}, name)
			if !first {
				changed(ToolChanged{Server: server, ToolID: id, NewDigest: dig,
					ChangedFields: catalog.ChangedFields(nil, norm), Mode: mode})
			}
		case !ok:
			ps.held[name] = true
			put(&store.Pin{ToolID: id, Server: server, PendingDigest: dig, PendingDefinition: norm,
				ChangedFields: catalog.ChangedFields(nil, norm), FirstSeen: now}, name)
			changed(ToolChanged{Server: server, ToolID: id, NewDigest: dig,
				ChangedFields: catalog.ChangedFields(nil, norm), Mode: mode, Held: true})
		case pin.Digest == dig:
			if pin.Pending() { // back to the approved definition
				last, lastDef := pin.PendingDigest, pin.PendingDefinition
				pin.PendingDigest, pin.PendingDefinition, pin.ChangedFields, pin.FirstSeen = "", nil, nil, time.Time{}
				put(&pin, name)
				changed(ToolChanged{Server: server, ToolID: id, OldDigest: last, NewDigest: dig,
					ChangedFields: nonNilFields(catalog.ChangedFields(lastDef, norm)), Mode: mode})
			}
		default:
			if enforce {
				ps.held[name] = true
			}
			if pin.PendingDigest == dig {
				continue // this change is already recorded
			}
			last, lastDef := pin.Digest, pin.Definition
			if pin.Pending() {
				last, lastDef = pin.PendingDigest, pin.PendingDefinition
			}
			pin.PendingDigest, pin.PendingDefinition, pin.FirstSeen = dig, norm, now
			pin.ChangedFields = nonNilFields(catalog.ChangedFields(pin.Definition, norm))
			put(&pin, name)
			changed(ToolChanged{Server: server, ToolID: id, OldDigest: last, NewDigest: dig,
				ChangedFields: nonNilFields(catalog.ChangedFields(lastDef, norm)), Mode: mode, Held: enforce})
		}
	}
	return ps
}

func nonNilFields(f []string) []string {
	if f == nil {
		return []string{}
	}
	return f
}

// toolChanged records a toolgate.tool.changed event and logs the change.
func (g *Gateway) toolChanged(ctx context.Context, c ToolChanged) {
	g.log.Warn("tool definition changed", "toolId", c.ToolID, "oldDigest", c.OldDigest, "newDigest", c.NewDigest,
		"changedFields", c.ChangedFields, "mode", c.Mode, "held", c.Held)
	g.pinEvent(ctx, TypeToolChanged, c)
}

// pinEvent appends one pinning event and logs a failure.
func (g *Gateway) pinEvent(ctx context.Context, typ string, payload any) {
	if g.opts.Events == nil {
		return
	}
	if err := AppendPinEvent(ctx, g.opts.Events, typ, payload); err != nil {
		g.log.Error("recording pinning event", "type", typ, "err", err)
	}
}

// AppendPinEvent appends one pinning event (TypeToolChanged with a
// ToolChanged, TypeToolApproved with a ToolApproved) to log, in run
// PinningRunID of the empty tenant, principal core.system. Errors: those
// of audit.NewEvent and log.Append.
func AppendPinEvent(ctx context.Context, log audit.Log, typ string, payload any) error {
	ev, err := audit.NewEvent(PinningRunID, typ, payload, "", time.Now())
	if err != nil {
		return err
	}
	ev.Principal = audit.AgentSystem
	return log.Append(ctx, ev)
}

// ApproveTool approves the pending definition of toolID (store.Pins.
// ApprovePin: digest, when not "", must be the pending one), records a
// toolgate.tool.approved event and applies the approval at once: the tool
// is listed and callable if its current definition is the approved one,
// and sessions whose view changed are sent tools/list_changed. Errors:
// InvalidConfig when the gateway keeps no pins; those of ApprovePin
// (NotFound, Conflict). Safe for concurrent use.
func (g *Gateway) ApproveTool(ctx context.Context, toolID, digest, by string) (*store.Pin, error) {
	if g.opts.Pins == nil || g.cfg.Pinning.Mode == "off" {
		return nil, errcode.New(errcode.InvalidConfig, "tool pinning is off (pinning.mode)")
	}
	before, err := g.opts.Pins.GetPin(ctx, toolID)
	if err != nil {
		return nil, err
	}
	p, err := g.opts.Pins.ApprovePin(ctx, toolID, digest, by, time.Now())
	if err != nil {
		return nil, err
	}
	g.pinEvent(ctx, TypeToolApproved, ToolApproved{Server: p.Server, ToolID: p.ToolID, OldDigest: before.Digest, Digest: p.Digest, ApprovedBy: by})
	if u, ok := g.ups[p.Server]; ok {
		g.repin(u)
	} else if src, ok := g.srcs[p.Server]; ok {
		g.repinHTTP(src)
	}
	return p, nil
}

// repin applies pinning again to u's last listing (after an approval) and,
// when its holds changed, installs the catalog and notifies sessions.
func (g *Gateway) repin(u *upstream) {
	u.refreshMu.Lock()
	defer u.refreshMu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	u.mu.Lock()
	tools, listed := u.tools, u.pins.digests != nil
	old := u.pins
	u.mu.Unlock()
	if !listed {
		return
	}
	ps := g.applyPinning(ctx, u.name, mcpPinDefs(u.name, tools))
	if maps2Equal(old.held, ps.held) {
		return
	}
	u.mu.Lock()
	u.pins = ps
	u.mu.Unlock()
	if err := g.rebuild(); err != nil {
		g.log.Error("installing upstream tools failed", "server", u.name, "err", err)
		return
	}
	g.notifyToolsChanged()
}

func maps2Equal(a, b map[string]bool) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if !b[k] {
			return false
		}
	}
	return true
}

// watchPins re-applies pinning, every pinPoll while some tool is held, so
// that an approval written to the store by another process (the CLI, a
// replica) takes effect without a restart. It ends with the gateway.
func (g *Gateway) watchPins() {
	t := time.NewTicker(pinPoll)
	defer t.Stop()
	for {
		select {
		case <-g.done:
			return
		case <-t.C:
		}
		for _, name := range g.order {
			u := g.ups[name]
			u.mu.Lock()
			n := len(u.pins.held)
			u.mu.Unlock()
			if n > 0 {
				g.repin(u)
			}
		}
		for _, name := range g.srcOrder {
			src := g.srcs[name]
			src.mu.Lock()
			n := len(src.pins.held)
			src.mu.Unlock()
			if n > 0 {
				g.repinHTTP(src)
			}
		}
	}
}

package mcpgw

import (
	"context"
	"crypto/sha256"
	"errors"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/toolgate/toolgate/identity"
)

// Tool list changes (issue 13 §14): an upstream's tools/list_changed is
// followed by one re-list per refreshDebounce however many arrive, and a
// session is told notifications/tools/list_changed only when the tools it
// may see, or the definition of one of them, changed.

// refreshDebounce is how long after an upstream's tools/list_changed the
// gateway lists its tools again; the notifications arriving meanwhile are
// covered by that one listing.
const refreshDebounce = 250 * time.Millisecond

// scheduleRefresh lists u's tools on cs (the session that announced the
// change) refreshDebounce from now, unless a listing is already scheduled.
func (g *Gateway) scheduleRefresh(u *upstream, cs *mcp.ClientSession) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.refreshOn = cs
	if u.refreshPending {
		return
	}
	u.refreshPending = true
	time.AfterFunc(refreshDebounce, func() {
		u.mu.Lock()
		cs := u.refreshOn
		u.refreshPending, u.refreshOn = false, nil
		u.mu.Unlock()
		if !g.closed.Load() {
			g.refreshTools(u, cs)
		}
	})
}

// viewDigest is a digest of the tools p may see, with their definitions as
// tools/list answers them (digests cached in the surface).
func (g *Gateway) viewDigest(ctx context.Context, p identity.Principal) [32]byte {
	sf := g.surface.Load()
	h := sha256.New()
	visible := g.pipe.VisibleFunc(ctx, p)
	for _, name := range sf.names { // sorted: the digest does not depend on the catalog's order
		id := sf.byName[name]
		if !visible(id) {
			continue
		}
		d := sf.def(id)
		h.Write([]byte(name))
		h.Write([]byte{0})
		h.Write(d[:])
	}
	var out [32]byte
	h.Sum(out[:0])
	return out
}

// notifyToolsChanged sends notifications/tools/list_changed to every
// session whose view (viewDigest) differs from the one it was last told
// of. The SDK sends it, to every session, when its tool registry changes
// (the gateway's own tools/list ignores that registry); sendingMiddleware
// drops it for the sessions not owed one (dsession.owed).
func (g *Gateway) notifyToolsChanged() {
	if g.closed.Load() {
		return
	}
	g.notifyMu.Lock()
	defer g.notifyMu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	byPrincipal := map[string][32]byte{}
	changed := false
	g.sessions.Range(func(_, v any) bool {
		ds := v.(*dsession)
		key := limitKey(ds.principal)
		d, ok := byPrincipal[key]
		if !ok {
			d = g.viewDigest(ctx, ds.principal)
			byPrincipal[key] = d
		}
		ds.mu.Lock()
		if ds.view != d {
			ds.view = d
			ds.owed.Store(true)
			changed = true
		}
		ds.mu.Unlock()
		return true
	})
	if !changed {
		return
	}
	// Never a surface name ('.'), yet a valid SDK tool name (the SDK logs
	// an error for a name outside [A-Za-z0-9_.-]).
	const marker = "toolgate.list-changed"
	g.server.AddTool(&mcp.Tool{Name: marker, InputSchema: map[string]any{"type": "object"}},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return nil, errors.New("unreachable")
		})
	g.server.RemoveTools(marker)
}

// listChangedOwed reports whether the SDK's tools/list_changed to ss should
// go out (and, if so, that it has): the session's view changed since it
// was last told. A session the gateway does not track gets it.
func (g *Gateway) listChangedOwed(ss *mcp.ServerSession) bool {
	if ss == nil {
		return true
	}
	v, ok := g.sessions.Load(ss.ID())
	if !ok {
		return true
	}
	return v.(*dsession).owed.CompareAndSwap(true, false)
}

package mcpgw

import "time"

// DirectCalls is the number of tools/call requests g served directly.
func DirectCalls(g *Gateway) int64 { return g.directCalls.Load() }

// KeepAlives is the number of keep-alive pings g sent and the HTTP status
// of the last one.
func KeepAlives(g *Gateway) (int64, int) {
	return g.keepalives.Load(), int(g.keepaliveStatus.Load())
}

// AgeSession makes the SDK's last sight of session id look d old.
func AgeSession(g *Gateway, id string, d time.Duration) bool {
	v, ok := g.sessions.Load(id)
	if ok {
		v.(*dsession).sdkSeen.Store(time.Now().Add(-d).UnixNano())
	}
	return ok
}

// DirectCallCancelled reports whether the direct call with JSON-RPC id (as
// sent) on session sid is in flight and whether it was cancelled.
func DirectCallCancelled(g *Gateway, sid, id string) (inFlight, cancelled bool) {
	v, ok := g.inflight.Load(directKey(sid, []byte(id)))
	if !ok {
		return false, false
	}
	return true, v.(*directCall).ctx.Err() != nil
}

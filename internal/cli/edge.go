package cli

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/toolgate/toolgate/internal/config"
)

// edge bounds the listener's clients (config http:): header and body read
// deadlines per request, idle keep-alive connections, header size, and the
// number of connections that have not yet authenticated. Long responses
// and SSE streams are never cut: there is no server-wide ReadTimeout or
// WriteTimeout (a connection read deadline that fires during a response
// cancels the request), only a deadline for a request's body, lifted once
// the body has been read. Safe for concurrent use.
type edge struct {
	readHeader, readBody, idle time.Duration
	maxHeader                  int
	maxUnauth                  int64
	log                        *slog.Logger

	unauth  atomic.Int64 // connections counted as unauthenticated
	refused atomic.Int64 // connections closed at once: the cap was reached
	conns   sync.Map     // net.Conn → *connState
}

// connState is a connection's authentication state.
type connState struct {
	counted atomic.Bool // counted in edge.unauth (not yet authenticated)
}

type connKey struct{}

func newEdge(h config.HTTP, log *slog.Logger) *edge {
	e := &edge{maxHeader: h.MaxHeaderBytes, maxUnauth: int64(h.MaxUnauthenticatedConns), log: log}
	e.readHeader, e.readBody, e.idle = h.Durations()
	if e.maxHeader <= 0 {
		e.maxHeader = config.DefaultMaxHeaderBytes
	}
	if e.maxUnauth <= 0 {
		e.maxUnauth = config.DefaultMaxUnauthenticatedConns
	}
	return e
}

// server returns the http.Server serving h within e's bounds.
func (e *edge) server(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           e.bodyDeadline(h),
		ReadHeaderTimeout: e.readHeader,
		IdleTimeout:       e.idle,
		MaxHeaderBytes:    e.maxHeader,
		ConnContext:       e.connContext,
		ConnState:         e.connState,
		ErrorLog:          slog.NewLogLogger(e.log.Handler(), slog.LevelDebug),
	}
}

func (e *edge) connContext(ctx context.Context, c net.Conn) context.Context {
	st := &connState{}
	e.conns.Store(c, st)
	return context.WithValue(ctx, connKey{}, st)
}

// connState counts a new connection as unauthenticated, closing it at once
// beyond the cap, and uncounts it when it ends.
func (e *edge) connState(c net.Conn, s http.ConnState) {
	switch s {
	case http.StateNew:
		v, ok := e.conns.Load(c)
		if !ok {
			return
		}
		if e.unauth.Add(1) > e.maxUnauth {
			e.unauth.Add(-1)
			if e.refused.Add(1)%100 == 1 {
				e.log.Warn("closing a new connection: too many unauthenticated connections",
					"limit", e.maxUnauth, "remote", c.RemoteAddr().String(), "refused_total", e.refused.Load())
			}
			c.Close()
			return
		}
		v.(*connState).counted.Store(true)
	case http.StateClosed, http.StateHijacked:
		if v, ok := e.conns.LoadAndDelete(c); ok && v.(*connState).counted.Swap(false) {
			e.unauth.Add(-1)
		}
	}
}

// authenticated uncounts r's connection: it presented valid credentials.
func (e *edge) authenticated(r *http.Request) {
	if st, ok := r.Context().Value(connKey{}).(*connState); ok && st.counted.Swap(false) {
		e.unauth.Add(-1)
	}
}

// bodyDeadline sets a read deadline of e.readBody on a request that has a
// body and lifts it once the body has been read to its end, so a slow body
// cannot hold a handler, while the response (an SSE stream, a long call)
// is not bounded by it.
func (e *edge) bodyDeadline(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength != 0 && r.Body != nil && r.Body != http.NoBody {
			rc := http.NewResponseController(w)
			if rc.SetReadDeadline(time.Now().Add(e.readBody)) == nil {
				r = r.WithContext(r.Context())
				r.Body = &deadlineBody{ReadCloser: r.Body, rc: rc}
			}
		}
		next.ServeHTTP(w, r)
	})
}

// deadlineBody lifts its connection's read deadline at the body's end.
type deadlineBody struct {
	io.ReadCloser
	rc   *http.ResponseController
	done bool
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF && !b.done {
		b.done = true
		_ = b.rc.SetReadDeadline(time.Time{})
	}
	return n, err
}

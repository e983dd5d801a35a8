package mcpgw

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/internal/config"
	"github.com/toolgate/toolgate/internal/egress"
	"github.com/toolgate/toolgate/internal/tracing"
	"github.com/toolgate/toolgate/internal/version"
)

// Backoff of upstream reconnects: the first retry waits minBackoff, each
// failed attempt doubles the wait up to maxBackoff; a session that stayed
// up for stableAfter resets it.
const (
	minBackoff  = 100 * time.Millisecond
	maxBackoff  = 5 * time.Second
	stableAfter = 10 * time.Second
)

// testHookSessionEnded, set only by tests, is called by a conn's supervisor
// once its session has ended and the conn is down (session() answers
// upstream_unavailable), before it waits to reconnect; the reconnect waits
// for it to return. pid is the ended stdio server's process id (0 for
// HTTP). It lets a test observe the down state without racing the restart.
var testHookSessionEnded atomic.Pointer[func(server string, pid int)]

// dialer opens client sessions to one configured upstream server. It is
// immutable; safe for concurrent use.
type dialer struct {
	cfg     config.Server
	env     []string          // resolved KEY=value pairs of the server's env: (stdio), sorted by key
	headers map[string]string // resolved headers (Streamable HTTP)
	client  *http.Client
}

// newDialer resolves srv's credential references with resolve (each value
// is registered for redaction by resolve).
func newDialer(srv config.Server, resolve func(string) (string, error), client *http.Client) (*dialer, error) {
	d := &dialer{cfg: srv, headers: map[string]string{}, client: client}
	keys := make([]string, 0, len(srv.Env))
	for k := range srv.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v, err := config.ExpandCredentials(srv.Env[k], resolve)
		if err != nil {
			return nil, fmt.Errorf("server %s: env %s: %w", srv.Name, k, err)
		}
		d.env = append(d.env, k+"="+v)
	}
	for k, v := range srv.Headers {
		v, err := config.ExpandCredentials(v, resolve)
		if err != nil {
			return nil, fmt.Errorf("server %s: header %s: %w", srv.Name, k, err)
		}
		d.headers[k] = v
	}
	return d, nil
}

// headerTransport adds fixed headers (the server's resolved headers:
// credentials) to every request to the server's own origin (scheme and
// host:port of servers[].url), and to no other: a redirect the upstream
// answers is followed without them, so it cannot send them elsewhere.
type headerTransport struct {
	base    http.RoundTripper
	headers map[string]string
	origin  string // scheme://host:port of the endpoint, lower case
}

func (t headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if originOf(r.URL) != t.origin {
		return t.base.RoundTrip(r)
	}
	r = r.Clone(r.Context())
	for k, v := range t.headers {
		r.Header.Set(k, v)
	}
	return t.base.RoundTrip(r)
}

// httpClient is the HTTP client of a Streamable HTTP upstream: the
// configured transport plus the server's resolved headers.
func (d *dialer) httpClient() *http.Client {
	base := http.RoundTripper(http.DefaultTransport)
	if d.client != nil && d.client.Transport != nil {
		base = d.client.Transport
	}
	// The call's span context goes upstream as traceparent/tracestate
	// (a request without one is not copied).
	base = tracing.Transport{Base: base}
	var check func(*http.Request, []*http.Request) error
	if d.client != nil {
		check = d.client.CheckRedirect // the egress guard's redirect limit, if any
	}
	if len(d.headers) == 0 {
		return &http.Client{Transport: base, CheckRedirect: check} // nothing to add: no per-request clone
	}
	origin := ""
	if u, err := url.Parse(d.cfg.URL); err == nil {
		origin = originOf(u)
	}
	return &http.Client{Transport: headerTransport{base: base, headers: d.headers, origin: origin}, CheckRedirect: check}
}

// originOf is u's scheme://host:port, lower-cased, the port made explicit.
func originOf(u *url.URL) string {
	port := u.Port()
	if port == "" {
		port = "80"
		if strings.EqualFold(u.Scheme, "https") {
			port = "443"
		}
	}
	return strings.ToLower(u.Scheme + "://" + u.Hostname() + ":" + port)
}

// dial connects one client session with opts, sending middleware send
// (nil: none) and receiving middleware mw,
// asking for MCP protocol version protocol (the SDK's latest when ""; the
// server may answer another it supports). For a stdio server it starts the
// process; cmd is then the started command (nil for HTTP).
func (d *dialer) dial(ctx context.Context, opts *mcp.ClientOptions, protocol string, send mcp.Middleware, mw ...mcp.Middleware) (*mcp.ClientSession, *exec.Cmd, error) {
	client := mcp.NewClient(&mcp.Implementation{Name: "toolgate", Version: version.String()}, opts)
	client.AddReceivingMiddleware(mw...)
	if send != nil {
		client.AddSendingMiddleware(send)
	}
	var transport mcp.Transport
	var cmd *exec.Cmd
	if len(d.cfg.Command) > 0 {
		cmd = exec.Command(d.cfg.Command[0], d.cfg.Command[1:]...)
		// Not the gateway's environment: it holds the values behind
		// other servers' credentials (issue 12 §3).
		cmd.Env = stdioEnv(os.Environ(), d.cfg.InheritEnv, d.env)
		cmd.Dir = d.cfg.Cwd
		cmd.Stderr = nil // discarded; a noisy server must not block on a full pipe
		// watchTransport tells a call the process never received from one
		// it crashed on or answered with garbage (wire.go).
		transport = watchTransport{&stdioTransport{cmd: cmd}}
	} else {
		hc := d.httpClient()
		// MaxRetries stays the SDK's default (5): a server may end an SSE
		// stream mid-call and expect the client to resume it with
		// Last-Event-ID (SEP-1699); with no retries the whole session fails.
		transport = &mcp.StreamableClientTransport{Endpoint: d.cfg.URL, HTTPClient: hc}
	}
	var so *mcp.ClientSessionOptions
	if protocol != "" {
		so = &mcp.ClientSessionOptions{ProtocolVersion: protocol}
	}
	cs, err := client.Connect(ctx, transport, so)
	if err != nil {
		return nil, nil, err
	}
	return cs, cmd, nil
}

// conn is one supervised client session to an upstream server: connected
// in the background, reconnected with backoff when it ends, until closed.
// Safe for concurrent use.
type conn struct {
	server  string
	d       *dialer
	opts    *mcp.ClientOptions
	version string           // protocol version to ask for ("" = the SDK's latest)
	mw      []mcp.Middleware // receiving middleware of each session
	log     *slog.Logger
	// setup runs on each new session before it is handed out (get,
	// waitUp), so a call can never overtake it; may be nil.
	setup     func(*mcp.ClientSession)
	onUp      func(*mcp.ClientSession) // called after each (re)connect, may be nil
	idle      time.Duration            // stop the session after this long unused (0: never); see reapIdle
	idleStops *atomic.Int64            // counts reapIdle's stops; may be nil
	connects  atomic.Int64             // sessions established (the first, then each reconnect)

	mu      sync.Mutex
	cs      *mcp.ClientSession // nil while down or parked
	cmd     *exec.Cmd
	lastErr error
	// denied is the SSRF guard's refusal of the last connection attempt
	// (servers[].egress), nil when it was not refused by the guard.
	denied   *egress.DeniedError
	upCh     chan struct{} // closed when connected; replaced when the session ends
	closed   bool
	parked   bool                // stopped for idleness: the next get starts it again
	wake     chan struct{}       // (capacity 1) a get asks a parked conn to connect
	lastUse  time.Time           // of the session: the last get or request sent
	inflight int                 // requests sent on the session and not yet answered
	subs     map[string]struct{} // resource URIs subscribed on the session
	stop     chan struct{}
	done     chan struct{}
}

// connConfig configures newConn.
type connConfig struct {
	opts    *mcp.ClientOptions
	version string // protocol version to ask for ("" = the SDK's latest)
	// idle > 0 stops a session unused for idle (for stdio, its process
	// group); the next get starts it again. idleStops, if not nil, counts
	// those stops.
	idle      time.Duration
	idleStops *atomic.Int64
	log       *slog.Logger
	// setup, if not nil, runs on each new session before it is handed
	// out (a call cannot overtake it); onUp, if not nil, after.
	setup func(*mcp.ClientSession)
	onUp  func(*mcp.ClientSession)
	mw    []mcp.Middleware // receiving middleware of each client session
}

// newConn starts supervising a session to d's server.
func newConn(d *dialer, cc connConfig) *conn {
	c := &conn{server: d.cfg.Name, d: d, opts: cc.opts, version: cc.version, mw: cc.mw, log: cc.log, setup: cc.setup, onUp: cc.onUp,
		idle: cc.idle, idleStops: cc.idleStops,
		upCh: make(chan struct{}), wake: make(chan struct{}, 1), subs: map[string]struct{}{},
		stop: make(chan struct{}), done: make(chan struct{})}
	go c.run()
	return c
}

// track is the sending middleware of c's sessions: it counts the requests
// in flight, notes the last use and the resource subscriptions (a
// subscribed session waits for updates, so it is not idle).
func (c *conn) track(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		c.mu.Lock()
		c.inflight++
		c.lastUse = time.Now()
		c.mu.Unlock()
		res, err := next(ctx, method, req)
		c.mu.Lock()
		c.inflight--
		c.lastUse = time.Now()
		if err == nil {
			switch p := req.GetParams().(type) {
			case *mcp.SubscribeParams:
				c.subs[p.URI] = struct{}{}
			case *mcp.UnsubscribeParams:
				delete(c.subs, p.URI)
			}
		}
		c.mu.Unlock()
		return res, err
	}
}

// reapIdle stops cs once it has been idle for c.idle: no request in flight,
// no resource subscribed and none sent (nor a get) for that long. It
// returns when cs ends.
func (c *conn) reapIdle(cs *mcp.ClientSession, ended <-chan struct{}) {
	tick := time.NewTicker(max(c.idle/4, 10*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-ended:
			return
		case <-tick.C:
		}
		c.mu.Lock()
		if c.cs != cs || c.closed {
			c.mu.Unlock()
			return
		}
		if c.inflight > 0 || len(c.subs) > 0 || time.Since(c.lastUse) < c.idle {
			c.mu.Unlock()
			continue
		}
		// From here on a get sees the conn parked and wakes it.
		c.cs, c.cmd, c.parked = nil, nil, true
		c.lastErr = errors.New("stopped while idle")
		c.upCh = make(chan struct{})
		c.mu.Unlock()
		c.log.Info("upstream session idle; stopping it until its next use", "idle_timeout", c.idle)
		if c.idleStops != nil {
			c.idleStops.Add(1)
		}
		cs.Close()
		return
	}
}

// run connects, waits for the session to end and reconnects with backoff;
// a session stopped for idleness is connected again when a get asks.
func (c *conn) run() {
	defer close(c.done)
	backoff := minBackoff
	for {
		c.mu.Lock()
		parked := c.parked
		c.mu.Unlock()
		if parked {
			// Until the session is up again (or fails to start), gets
			// still see the conn parked and wait for it.
			select {
			case <-c.stop:
				return
			case <-c.wake:
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		go func() {
			select {
			case <-c.stop:
				cancel()
			case <-ctx.Done():
			}
		}()
		var send mcp.Middleware
		if c.idle > 0 {
			send = c.track
		}
		cs, cmd, err := c.d.dial(ctx, c.opts, c.version, send, c.mw...)
		cancel()
		if err == nil && c.setup != nil {
			c.setup(cs)
		}
		if err == nil {
			c.mu.Lock()
			if c.closed {
				c.mu.Unlock()
				cs.Close()
				return
			}
			c.cs, c.cmd, c.lastErr, c.parked, c.denied = cs, cmd, nil, false, nil
			c.lastUse, c.inflight, c.subs = time.Now(), 0, map[string]struct{}{}
			select {
			case <-c.wake: // a get's request to start it, now served
			default:
			}
			close(c.upCh)
			c.connects.Add(1)
			c.mu.Unlock()
			c.log.Info("upstream connected")
			if c.onUp != nil {
				c.onUp(cs)
			}
			ended := make(chan struct{})
			if c.idle > 0 {
				go c.reapIdle(cs, ended)
			}
			start := time.Now()
			werr := cs.Wait()
			close(ended)
			c.mu.Lock()
			if c.parked { // reapIdle stopped it
				closed := c.closed
				c.mu.Unlock()
				if closed {
					return
				}
				backoff = minBackoff
				continue
			}
			pid := 0
			if c.cmd != nil && c.cmd.Process != nil {
				pid = c.cmd.Process.Pid
			}
			c.cs, c.cmd = nil, nil
			c.lastErr = fmt.Errorf("the session ended: %v", werr)
			if werr == nil {
				c.lastErr = errors.New("the session ended")
			}
			c.upCh = make(chan struct{})
			closed := c.closed
			c.mu.Unlock()
			if closed {
				return
			}
			c.log.Warn("upstream session ended; reconnecting", "err", werr)
			if h := testHookSessionEnded.Load(); h != nil {
				(*h)(c.server, pid)
			}
			if time.Since(start) > stableAfter {
				backoff = minBackoff
			}
		} else {
			var d *egress.DeniedError
			errors.As(err, &d)
			c.mu.Lock()
			c.lastErr = err
			c.parked = false // down: retried with backoff, as after a crash
			prev := c.denied
			c.denied = d
			c.mu.Unlock()
			switch {
			case d != nil && (prev == nil || prev.Rule != d.Rule || prev.Host != d.Host):
				// Refused by servers[].egress: it will be refused again
				// until the configuration (or DNS) changes; said once
				// per refusal, at ERROR, without the refused address.
				c.log.Error("upstream refused by the egress guard; it stays not ready (allow it with servers[].egress.allow_cidrs or allow_hosts)",
					"rule", d.Rule, "host", d.Host)
			case d != nil:
				c.log.Debug("upstream still refused by the egress guard", "rule", d.Rule, "host", d.Host, "backoff", backoff)
			default:
				c.log.Warn("upstream connect failed; retrying", "err", err, "backoff", backoff)
			}
		}
		t := time.NewTimer(backoff)
		select {
		case <-c.stop:
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// egressDenied is the SSRF guard's refusal of c's last connection
// attempt, or nil.
func (c *conn) egressDenied() *egress.DeniedError {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.denied
}

// session returns the live session, or upstream_unavailable while down
// or parked.
func (c *conn) session() (*mcp.ClientSession, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cs != nil {
		c.lastUse = time.Now()
		return c.cs, nil
	}
	msg := fmt.Sprintf("upstream server %s is not connected", c.server)
	if e := egress.Error(c.lastErr); e != nil {
		// The SSRF guard refused the connection: say so, with its rule.
		return nil, errcode.New(errcode.EgressDenied, msg+": "+e.Message).WithDetails(e.Details)
	}
	if c.lastErr != nil {
		msg += ": " + c.lastErr.Error()
	}
	return nil, errcode.New(errcode.UpstreamUnavailable, msg)
}

// get returns the live session; a conn parked for idleness is connected
// again (get waits until it is up or ctx ends); while down (a crashed
// server being restarted) it answers upstream_unavailable at once.
func (c *conn) get(ctx context.Context) (*mcp.ClientSession, error) {
	c.mu.Lock()
	if c.cs != nil {
		c.lastUse = time.Now()
		cs := c.cs
		c.mu.Unlock()
		return cs, nil
	}
	if !c.parked || c.closed {
		c.mu.Unlock()
		return c.session()
	}
	select {
	case c.wake <- struct{}{}:
	default: // already asked
	}
	c.mu.Unlock()
	return c.waitUp(ctx)
}

// live returns the session if it is connected, else nil; it does not
// count as a use.
func (c *conn) live() *mcp.ClientSession {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cs
}

// waitUp waits until the session is connected or ctx ends, and returns
// session().
func (c *conn) waitUp(ctx context.Context) (*mcp.ClientSession, error) {
	c.mu.Lock()
	ch := c.upCh
	c.mu.Unlock()
	select {
	case <-ch:
	case <-ctx.Done():
	}
	return c.session()
}

// process returns the stdio server's process, nil for HTTP or while down.
func (c *conn) process() *os.Process {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cmd == nil {
		return nil
	}
	return c.cmd.Process
}

// close ends the session and stops reconnecting; it waits for the
// supervisor to return. Idempotent.
func (c *conn) close() {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		<-c.done
		return
	}
	c.closed = true
	cs := c.cs
	close(c.stop)
	if c.parked {
		close(c.upCh) // gets waiting for the start see it closed
	}
	c.mu.Unlock()
	if cs != nil {
		cs.Close()
	}
	<-c.done
}

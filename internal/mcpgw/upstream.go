package mcpgw

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/internal/config"
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

// headerTransport adds fixed headers to every request.
type headerTransport struct {
	base    http.RoundTripper
	headers map[string]string
}

func (t headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
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
	if len(d.headers) == 0 {
		return &http.Client{Transport: base} // nothing to add: no per-request clone
	}
	return &http.Client{Transport: headerTransport{base: base, headers: d.headers}}
}

// dial connects one client session with opts and receiving middleware mw,
// asking for MCP protocol version (the SDK's latest when ""; the server
// may answer another it supports). For a stdio server it starts the
// process; cmd is then the started command (nil for HTTP).
func (d *dialer) dial(ctx context.Context, opts *mcp.ClientOptions, version string, mw ...mcp.Middleware) (*mcp.ClientSession, *exec.Cmd, error) {
	client := mcp.NewClient(&mcp.Implementation{Name: "toolgate", Version: Version}, opts)
	client.AddReceivingMiddleware(mw...)
	var transport mcp.Transport
	var cmd *exec.Cmd
	if len(d.cfg.Command) > 0 {
		cmd = exec.Command(d.cfg.Command[0], d.cfg.Command[1:]...)
		// Not the gateway's environment: it holds the values behind
		// other servers' credentials (issue 12 §3).
		cmd.Env = stdioEnv(os.Environ(), d.cfg.InheritEnv, d.env)
		cmd.Dir = d.cfg.Cwd
		cmd.Stderr = nil // discarded; a noisy server must not block on a full pipe
		transport = &stdioTransport{cmd: cmd}
	} else {
		hc := d.httpClient()
		// MaxRetries stays the SDK's default (5): a server may end an SSE
		// stream mid-call and expect the client to resume it with
		// Last-Event-ID (SEP-1699); with no retries the whole session fails.
		transport = &mcp.StreamableClientTransport{Endpoint: d.cfg.URL, HTTPClient: hc}
	}
	var so *mcp.ClientSessionOptions
	if version != "" {
		so = &mcp.ClientSessionOptions{ProtocolVersion: version}
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
	onUp    func(*mcp.ClientSession) // called after each (re)connect, may be nil

	mu      sync.Mutex
	cs      *mcp.ClientSession // nil while down
	cmd     *exec.Cmd
	lastErr error
	upCh    chan struct{} // closed when connected; replaced when the session ends
	closed  bool
	stop    chan struct{}
	done    chan struct{}
}

// newConn starts supervising a session to d's server, speaking protocol
// version ("" = the SDK's latest); mw is the receiving middleware of each
// of its client sessions.
func newConn(d *dialer, opts *mcp.ClientOptions, version string, log *slog.Logger, onUp func(*mcp.ClientSession), mw ...mcp.Middleware) *conn {
	c := &conn{server: d.cfg.Name, d: d, opts: opts, version: version, mw: mw, log: log, onUp: onUp,
		upCh: make(chan struct{}), stop: make(chan struct{}), done: make(chan struct{})}
	go c.run()
	return c
}

// run connects, waits for the session to end and reconnects with backoff.
func (c *conn) run() {
	defer close(c.done)
	backoff := minBackoff
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		go func() {
			select {
			case <-c.stop:
				cancel()
			case <-ctx.Done():
			}
		}()
		cs, cmd, err := c.d.dial(ctx, c.opts, c.version, c.mw...)
		cancel()
		if err == nil {
			c.mu.Lock()
			if c.closed {
				c.mu.Unlock()
				cs.Close()
				return
			}
			c.cs, c.cmd, c.lastErr = cs, cmd, nil
			close(c.upCh)
			c.mu.Unlock()
			c.log.Info("upstream connected")
			if c.onUp != nil {
				c.onUp(cs)
			}
			start := time.Now()
			werr := cs.Wait()
			c.mu.Lock()
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
			c.mu.Lock()
			c.lastErr = err
			c.mu.Unlock()
			c.log.Warn("upstream connect failed; retrying", "err", err, "backoff", backoff)
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

// session returns the live session, or upstream_unavailable while down.
func (c *conn) session() (*mcp.ClientSession, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cs != nil {
		return c.cs, nil
	}
	msg := fmt.Sprintf("upstream server %s is not connected", c.server)
	if c.lastErr != nil {
		msg += ": " + c.lastErr.Error()
	}
	return nil, errcode.New(errcode.UpstreamUnavailable, msg)
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
	c.mu.Unlock()
	if cs != nil {
		cs.Close()
	}
	<-c.done
}

package loadtest

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os/exec"
	"runtime/pprof"
	"sync"
	"time"
)

// proxyPrefix starts the line `toolgate-load proxy` prints with its MCP
// endpoint; the parent reads it like toolgate serve's.
const proxyPrefix = "toolgate-load: proxy at "

// newProxyHandler is the bare proxy hop of issue 15 point 3: an
// httputil.ReverseProxy to upstream (the echo server's /mcp URL) with no
// MCP work, no authentication and no logging; responses are flushed as
// they come (the SSE streams of Streamable HTTP), and the idle upstream
// connections are pooled like toolgate's (no reconnect per call).
func newProxyHandler(upstream string) (http.Handler, error) {
	u, err := url.Parse(upstream)
	if err != nil || u.Scheme != "http" || u.Host == "" {
		return nil, fmt.Errorf("proxy upstream %q: want an http:// URL", upstream)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns, tr.MaxIdleConnsPerHost = 1024, 1024
	return &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.Out.URL.Scheme, r.Out.URL.Host = u.Scheme, u.Host
			r.Out.Host = u.Host
		},
		Transport:     tr,
		FlushInterval: -1,
		ErrorLog:      nil,
	}, nil
}

// serveProxy serves the proxy to upstream on a free loopback port until
// ctx ends; it sends the proxy's MCP endpoint on ready once listening.
func serveProxy(ctx context.Context, upstream string, ready func(endpoint string)) error {
	h, err := newProxyHandler(upstream)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	u, _ := url.Parse(upstream)
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { <-ctx.Done(); srv.Close() }()
	ready("http://" + ln.Addr().String() + u.Path)
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// proxyMain is `toolgate-load proxy --upstream URL`, the child process the
// load tool measures as the bare proxy target: it prints proxyPrefix and
// its endpoint on stdout and serves until ctx ends (SIGTERM).
func proxyMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("toolgate-load proxy", flag.ContinueOnError)
	fs.SetOutput(stderr)
	upstream := fs.String("upstream", "", "the MCP endpoint (http://127.0.0.1:port/mcp) proxied to")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 || *upstream == "" {
		fmt.Fprintln(stderr, "toolgate-load proxy: want --upstream URL and no arguments")
		return 2
	}
	if _, err := newProxyHandler(*upstream); err != nil {
		fmt.Fprintln(stderr, "toolgate-load proxy:", err)
		return 2
	}
	err := serveProxy(ctx, *upstream, func(ep string) { fmt.Fprintln(stdout, proxyPrefix+ep) })
	if err != nil {
		fmt.Fprintln(stderr, "toolgate-load proxy:", err)
		return 1
	}
	return 0
}

// startProxy starts the bare proxy to upstream: `self proxy --upstream
// upstream` as a child process (its CPU measured like toolgate's), or in
// this process (goroutines labelled role=gateway) when self is "". It
// returns once the proxy listens. stop is idempotent.
func startProxy(ctx context.Context, self, upstream string) (g *gateway, err error) {
	g = &gateway{logs: &tail{max: 16 << 10}}
	pr, pw := io.Pipe()
	if self != "" {
		if err := g.startChild(exec.Command(self, "proxy", "--upstream", upstream), pw); err != nil {
			return nil, fmt.Errorf("starting %s proxy: %w", self, err)
		}
	} else {
		pctx, cancel := context.WithCancel(context.Background())
		exited := make(chan struct{})
		go pprof.Do(pctx, pprof.Labels("role", "gateway"), func(ctx context.Context) {
			err := serveProxy(ctx, upstream, func(ep string) { fmt.Fprintln(pw, proxyPrefix+ep) })
			if err != nil {
				fmt.Fprintln(g.logs, err)
			}
			pw.Close()
			close(exited)
		})
		g.stop = sync.OnceFunc(func() { cancel(); <-exited })
	}
	if err := g.waitURL(ctx, pr, proxyPrefix); err != nil {
		g.stop()
		return nil, fmt.Errorf("%w\nproxy log (last lines):\n%s", err, g.logs.String())
	}
	return g, nil
}

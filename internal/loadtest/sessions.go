package loadtest

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolgate/toolgate/internal/auth"
)

const sessionsUsage = `toolgate-load sessions: the resident memory of toolgate serve holding idle MCP sessions
(issue 15 point 5). It starts the Go SDK echo server (Streamable HTTP) in this process and
toolgate serve as a child process in front of it (the full gate's configuration, with
mcp.max_sessions and max_sessions_per_principal raised to 4096), reads the child's VmRSS,
opens --n go-sdk client sessions through it (each makes one tools/call echo, so its upstream
session exists too, then stays idle with its standalone GET stream open), waits --settle
and reads VmRSS again (Linux /proc), then closes the sessions.

Usage: go run ./cmd/toolgate-load sessions [flags]

Flags:
`

// SessionsOptions configures RunSessions.
type SessionsOptions struct {
	Toolgate string        // the toolgate binary run as the gateway child
	N        int           // client sessions opened (1–4000)
	Mode     string        // servers[].sessions of the echo upstream: per_client or shared
	Settle   time.Duration // wait after the last session opened before sampling
	Progress io.Writer     // progress lines; nil: none
}

// SessionsReport is the outcome of RunSessions. Sizes are bytes.
type SessionsReport struct {
	Opts                   SessionsOptions
	BaselineRSS, IdleRSS   int64 // the child's VmRSS before the sessions and with them open (after Settle)
	PeakRSS                int64 // the highest VmRSS sampled while opening and settling
	Opened                 int   // sessions opened (each with one successful call)
	OpenTime               time.Duration
	Load1Start, Load1End   string
	Started                time.Time
	GOOS, GOARCH, Protocol string
	CPUs                   int
}

// RunSessions is `toolgate-load sessions`: see sessionsUsage. Errors: a
// gateway that does not start, a session that does not open or whose call
// fails, ctx ending, no /proc (not Linux).
func RunSessions(ctx context.Context, o SessionsOptions) (*SessionsReport, error) {
	rep := &SessionsReport{Opts: o, Started: time.Now(), Load1Start: loadAvg(), GOOS: runtime.GOOS, GOARCH: runtime.GOARCH, CPUs: runtime.NumCPU()}
	dir, err := os.MkdirTemp("", "toolgate-load-sessions-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	echo, err := startEcho()
	if err != nil {
		return nil, fmt.Errorf("starting the echo server: %w", err)
	}
	defer echo.close()
	key, err := auth.NewKey()
	if err != nil {
		return nil, err
	}
	g, err := startGateway(ctx, o.Toolgate, dir, echo.url, o.Mode, key, backend{})
	if err != nil {
		return nil, fmt.Errorf("starting toolgate: %w", err)
	}
	defer g.stop()
	if rep.BaselineRSS, err = procRSS(g.pid); err != nil {
		return nil, err
	}
	rep.PeakRSS = rep.BaselineRSS
	sample := func() {
		if v, err := procRSS(g.pid); err == nil && v > rep.PeakRSS {
			rep.PeakRSS = v
		}
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns, tr.MaxIdleConnsPerHost = 2*o.N+16, 2*o.N+16
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: bearer{base: tr, key: g.key}}
	sessions := make([]*mcp.ClientSession, o.N)
	defer func() {
		var wg sync.WaitGroup
		for _, cs := range sessions {
			if cs != nil {
				wg.Go(func() { cs.Close() })
			}
		}
		wg.Wait()
	}()
	t0 := time.Now()
	var mu sync.Mutex
	var firstErr error
	sem := make(chan struct{}, 16) // opening at most 16 at once
	var wg sync.WaitGroup
	for i := range o.N {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			cctx, cancel := context.WithTimeout(ctx, callTimeout)
			defer cancel()
			cl := mcp.NewClient(&mcp.Implementation{Name: "toolgate-load", Version: "1.0.0"}, nil)
			cs, err := cl.Connect(cctx, &mcp.StreamableClientTransport{Endpoint: g.url, HTTPClient: hc}, nil)
			if err == nil {
				sessions[i] = cs
				var res *mcp.CallToolResult
				if res, err = cs.CallTool(cctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "idle"}}); err == nil {
					err = checkEcho(res, "idle")
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil && firstErr == nil {
				firstErr = fmt.Errorf("session %d: %w", i+1, err)
			}
			if err == nil {
				rep.Opened++
			}
			if i%50 == 0 {
				sample()
			}
		})
		if i%100 == 99 && o.Progress != nil {
			fmt.Fprintf(o.Progress, "toolgate-load sessions: %d opened\n", i+1)
		}
	}
	wg.Wait()
	rep.OpenTime = time.Since(t0)
	if firstErr != nil {
		return rep, fmt.Errorf("%w\ngateway log (last lines):\n%s", firstErr, g.logs.String())
	}
	if ir := sessions[0].InitializeResult(); ir != nil {
		rep.Protocol = ir.ProtocolVersion
	}
	deadline := time.Now().Add(o.Settle)
	for time.Now().Before(deadline) {
		if err := pause(ctx, 250*time.Millisecond); err != nil {
			return rep, err
		}
		sample()
	}
	if rep.IdleRSS, err = procRSS(g.pid); err != nil {
		return rep, err
	}
	sample()
	rep.Load1End = loadAvg()
	return rep, nil
}

// Markdown writes the report.
func (r *SessionsReport) Markdown(w io.Writer) {
	mib := func(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
	per := float64(r.IdleRSS-r.BaselineRSS) / float64(max(r.Opened, 1)) / 1024
	fmt.Fprintf(w, "toolgate-load sessions %s: %d idle go-sdk sessions (Streamable HTTP, protocol %s, one tools/call each) through toolgate serve (upstream sessions: %s) to a go-sdk echo upstream over Streamable HTTP; %s/%s, %d CPUs, load average %s at the start, %s at the end\n\n",
		r.Started.Format("2006-01-02 15:04"), r.Opened, r.Protocol, r.Opts.Mode, r.GOOS, r.GOARCH, r.CPUs, r.Load1Start, r.Load1End)
	fmt.Fprintln(w, "| sessions | VmRSS before | VmRSS idle (after settle) | peak VmRSS | per session | opened in |")
	fmt.Fprintln(w, "|---:|---:|---:|---:|---:|---:|")
	fmt.Fprintf(w, "| %d | %s | %s | %s | %.1f KiB | %s |\n\n", r.Opened, mib(r.BaselineRSS), mib(r.IdleRSS), mib(r.PeakRSS), per, r.OpenTime.Round(time.Millisecond))
	fmt.Fprintf(w, "- idle RSS with %d sessions: %s (issue 15.5 target ≤ 100 MB with 1,000: %s)\n", r.Opened, mib(r.IdleRSS), verdict(r.Opened >= 1000 && r.IdleRSS <= 100e6))
}

// sessionsMain is `toolgate-load sessions`.
func sessionsMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("toolgate-load sessions", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, sessionsUsage); fs.PrintDefaults() }
	var o SessionsOptions
	var out string
	fs.StringVar(&o.Toolgate, "toolgate", "", "toolgate binary (default: build ./cmd/toolgate)")
	fs.IntVar(&o.N, "n", 1000, "client sessions (1-4000)")
	fs.StringVar(&o.Mode, "sessions", "per_client", "the echo upstream's sessions mode: per_client or shared")
	fs.DurationVar(&o.Settle, "settle", 5*time.Second, "wait after the last session opened before the idle RSS sample")
	fs.StringVar(&out, "out", "", "append the Markdown report to this file")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 || o.N < 1 || o.N > 4000 || (o.Mode != "per_client" && o.Mode != "shared") || o.Settle < 0 {
		fmt.Fprintln(stderr, "toolgate-load sessions: want --n 1-4000, --sessions per_client or shared, --settle ≥ 0 and no arguments")
		return 2
	}
	o.Progress = stderr
	fail := func(err error) int {
		fmt.Fprintln(stderr, "toolgate-load sessions:", err)
		return 1
	}
	if o.Toolgate == "" {
		bdir, err := os.MkdirTemp("", "toolgate-load-bin-")
		if err != nil {
			return fail(err)
		}
		defer os.RemoveAll(bdir)
		o.Toolgate = filepath.Join(bdir, "toolgate")
		if err := buildToolgate(ctx, o.Toolgate, stderr); err != nil {
			return fail(err)
		}
	}
	rep, err := RunSessions(ctx, o)
	if err != nil {
		return fail(err)
	}
	var b strings.Builder
	rep.Markdown(&b)
	fmt.Fprint(stdout, b.String())
	if out != "" {
		if err := appendFile(out, b.String()); err != nil {
			return fail(err)
		}
	}
	return 0
}

// buildToolgate builds ./cmd/toolgate (the module's) into bin.
func buildToolgate(ctx context.Context, bin string, stderr io.Writer) error {
	fmt.Fprintln(stderr, "toolgate-load: building ./cmd/toolgate")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/toolgate/toolgate/cmd/toolgate")
	cmd.Stdout, cmd.Stderr = stderr, stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("building toolgate (run inside the module, or pass --toolgate): %w", err)
	}
	return nil
}

// appendFile appends a blank line and text to file (created if missing).
func appendFile(file, text string) error {
	f, err := os.OpenFile(file, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	_, werr := io.WriteString(f, "\n"+text)
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	return werr
}

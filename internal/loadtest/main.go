package loadtest

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"
)

const usage = `toolgate-load: tools/call throughput, latency and gateway CPU, direct to a Go SDK echo
server versus through toolgate serve with the full gate on (CEL policy, rate limit, durable
events and receipts in SQLite or PostgreSQL). Everything listens on 127.0.0.1. With
--stores postgres --replicas 1,2 it also measures two toolgate serve processes sharing one
PostgreSQL schema (and Redis, with --redis), the client sessions spread over both.

Every concurrency also measures a bare httputil.ReverseProxy hop to the echo server (no MCP
work; this binary as a child process, "toolgate-load proxy --upstream URL", its CPU measured
like toolgate's), and the report gives each target's ratios to it (issue 15 point 3).

Usage: go run ./cmd/toolgate-load [flags]
       go run ./cmd/toolgate-load slowbody [flags]   (the slow-body attack of issue 12; -h for its flags)
       go run ./cmd/toolgate-load proxy --upstream URL   (the bare proxy alone, on 127.0.0.1)
       go run ./cmd/toolgate-load sessions [flags]   (RSS with idle MCP sessions, issue 15.5; -h for its flags)

Without --toolgate it builds ./cmd/toolgate into a temporary directory (run it inside the
module). Exit status: 0 when every call succeeded (whether or not the targets are met),
1 on an error, 2 on bad flags.

Flags:
`

// Main is toolgate-load's command line: it parses args, runs the load and
// prints progress to stderr and the Markdown report to stdout (and appends
// it to --out). It returns the exit status.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "slowbody" {
		return slowMain(ctx, args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "sessions" {
		return sessionsMain(ctx, args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "proxy" {
		return proxyMain(ctx, args[1:], stdout, stderr)
	}
	fs := flag.NewFlagSet("toolgate-load", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usage); fs.PrintDefaults() }
	var o Options
	var conc, sessions, stores, replicas, out, cpuprofile string
	var inProcess, smoke bool
	fs.StringVar(&o.Toolgate, "toolgate", "", "toolgate binary to run as the gateway child (default: build ./cmd/toolgate)")
	fs.BoolVar(&inProcess, "in-process", false, "run the gateway in this process (no gateway CPU figure; for --cpuprofile)")
	fs.DurationVar(&o.Duration, "duration", 10*time.Second, "measured time per step")
	fs.DurationVar(&o.Warmup, "warmup", 2*time.Second, "unmeasured warm-up before each step")
	fs.StringVar(&conc, "concurrency", "1,16,64", "comma-separated client session counts")
	fs.StringVar(&sessions, "sessions", "per_client", "comma-separated gateway sessions modes: per_client, shared")
	fs.StringVar(&stores, "stores", "sqlite", "comma-separated gateway stores: sqlite, postgres (each a target, measured alternately)")
	fs.StringVar(&replicas, "replicas", "1", "comma-separated toolgate serve counts per postgres target (the client sessions are spread round-robin over them); sqlite is measured with 1")
	fs.StringVar(&o.Postgres, "postgres", "", "PostgreSQL DSN (postgres://…) for --stores postgres; each target gets its own schema, dropped afterwards")
	fs.StringVar(&o.Redis, "redis", "", "Redis URL (redis://…): the gateways take their rate limit in Redis (ratelimit.backend redis), shared by the replicas of a target")
	fs.IntVar(&o.Runs, "runs", 1, "repetitions of every step; the report shows medians")
	fs.IntVar(&o.Payload, "payload", 64, "bytes of the echoed text")
	fs.BoolVar(&o.NoDirect, "no-direct", false, "skip the direct steps")
	fs.BoolVar(&o.NoProxy, "no-proxy", false, "skip the bare proxy steps (an httputil.ReverseProxy hop to the echo server, run as `toolgate-load proxy` in a child process)")
	fs.StringVar(&out, "out", "", "append the Markdown report to this file")
	fs.StringVar(&cpuprofile, "cpuprofile", "", "write a CPU profile of this process (with --in-process: goroutines labelled role=gateway|client|echo)")
	fs.IntVar(&o.GOGC, "gogc", 0, "GC percent of this process (its clients and the echo server, on both paths; 0: Go's default or GOGC from the environment); the gateway child keeps its own (toolgate serve's, which follows its live heap, or GOGC from the environment)")
	fs.BoolVar(&smoke, "smoke", false, "a short check: --duration 300ms --warmup 100ms --concurrency 1,4 unless given")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if smoke {
		if !set["duration"] {
			o.Duration = 300 * time.Millisecond
		}
		if !set["warmup"] {
			o.Warmup = 100 * time.Millisecond
		}
		if !set["concurrency"] {
			conc = "1,4"
		}
	}
	bad := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "toolgate-load: "+format+"\n", a...)
		return 2
	}
	for _, s := range strings.Split(conc, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 || n > 1024 {
			return bad("--concurrency %q: want numbers from 1 to 1024", s)
		}
		o.Concurrency = append(o.Concurrency, n)
	}
	for _, s := range strings.Split(sessions, ",") {
		if s = strings.TrimSpace(s); s != "per_client" && s != "shared" {
			return bad("--sessions %q: want per_client or shared", s)
		}
		o.Sessions = append(o.Sessions, s)
	}
	for _, s := range strings.Split(stores, ",") {
		if s = strings.TrimSpace(s); s != "sqlite" && s != "postgres" {
			return bad("--stores %q: want sqlite or postgres", s)
		}
		o.Stores = append(o.Stores, s)
	}
	for _, s := range strings.Split(replicas, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 || n > 8 {
			return bad("--replicas %q: want numbers from 1 to 8", s)
		}
		o.Replicas = append(o.Replicas, n)
	}
	pg := slices.Contains(o.Stores, "postgres")
	if !pg && slices.ContainsFunc(o.Replicas, func(n int) bool { return n > 1 }) {
		return bad("--replicas above 1 needs --stores postgres (replicas share one PostgreSQL store)")
	}
	if pg && !strings.HasPrefix(o.Postgres, "postgres://") && !strings.HasPrefix(o.Postgres, "postgresql://") {
		return bad("--stores postgres needs --postgres postgres://…")
	}
	if o.Redis != "" && !strings.HasPrefix(o.Redis, "redis://") && !strings.HasPrefix(o.Redis, "rediss://") {
		return bad("--redis %q: want redis://host:port", o.Redis)
	}
	if o.Duration <= 0 || o.Warmup < 0 || o.Runs < 1 || o.Payload < 1 || o.Payload >= 1000 {
		return bad("--duration must be positive, --warmup not negative, --runs ≥ 1, --payload 1–999 (the policy allows < 1000)")
	}
	if o.GOGC < 0 {
		return bad("--gogc must not be negative")
	}
	if o.GOGC > 0 {
		debug.SetGCPercent(o.GOGC)
	}
	if inProcess && o.Toolgate != "" {
		return bad("--in-process and --toolgate exclude each other")
	}
	o.Progress = stderr
	fail := func(err error) int {
		fmt.Fprintln(stderr, "toolgate-load:", err)
		return 1
	}
	if !inProcess && !o.NoProxy {
		self, err := os.Executable()
		if err != nil {
			return fail(fmt.Errorf("finding this binary for the proxy child: %w", err))
		}
		o.Self = self
	}
	if !inProcess && o.Toolgate == "" {
		dir, err := os.MkdirTemp("", "toolgate-load-bin-")
		if err != nil {
			return fail(err)
		}
		defer os.RemoveAll(dir)
		o.Toolgate = filepath.Join(dir, "toolgate")
		fmt.Fprintln(stderr, "toolgate-load: building ./cmd/toolgate")
		cmd := exec.CommandContext(ctx, "go", "build", "-o", o.Toolgate, "github.com/toolgate/toolgate/cmd/toolgate")
		cmd.Stdout, cmd.Stderr = stderr, stderr
		if err := cmd.Run(); err != nil {
			return fail(fmt.Errorf("building toolgate (run inside the module, or pass --toolgate): %w", err))
		}
	}
	var rep *Report
	err := profile(cpuprofile, func() error {
		var err error
		rep, err = Run(ctx, o)
		return err
	})
	if err != nil {
		return fail(err)
	}
	var b strings.Builder
	rep.Markdown(&b)
	fmt.Fprint(stdout, b.String())
	if out != "" {
		f, err := os.OpenFile(out, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			return fail(err)
		}
		_, werr := io.WriteString(f, "\n"+b.String())
		if cerr := f.Close(); werr == nil {
			werr = cerr
		}
		if werr != nil {
			return fail(werr)
		}
	}
	return 0
}

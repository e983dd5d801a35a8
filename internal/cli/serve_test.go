package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The quick start as the README runs it: `toolgate serve` without a config
// prints the MCP URL and an API key; a Go SDK client with that key lists the
// demo tools and calls one; without the key it is refused; cancelling (what
// SIGINT/SIGTERM do) shuts down gracefully with exit 0 and the store holds
// the call's events.
func TestServeQuickStart(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr, pw := io.Pipe()
	var errb strings.Builder
	exited := make(chan int, 1)
	go func() {
		code := Main(ctx, []string{"serve", "--listen", "127.0.0.1:0"}, strings.NewReader(""), pw, &errb)
		pw.Close()
		exited <- code
	}()
	var url, key string
	sc := bufio.NewScanner(pr)
	for sc.Scan() && (url == "" || key == "") {
		line := sc.Text()
		if u, ok := strings.CutPrefix(line, "toolgate: MCP gateway at "); ok {
			url = u
		}
		if k, ok := strings.CutPrefix(line, "toolgate: API key (shown once): "); ok {
			key = k
		}
	}
	go io.Copy(io.Discard, pr)
	if url == "" || key == "" {
		t.Fatalf("serve printed no URL or key; stderr: %s", errb.String())
	}
	base := strings.TrimSuffix(url, "/mcp")
	for _, p := range []string{"/healthz", "/readyz", "/metrics"} {
		resp, err := http.Get(base + p)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("GET %s: %v %v", p, resp, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		// The session and process counts (issue 12 §4).
		if want := map[string]string{"/readyz": "ready\nsessions 0/512\nupstream_processes 0\n", "/metrics": "toolgate_mcp_sessions 0\n"}[p]; want != "" && !strings.Contains(string(b), want) {
			t.Errorf("GET %s = %q, want %q in it", p, b, want)
		}
	}

	connect := func(k string) (*mcp.ClientSession, error) {
		c := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil)
		return c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: bearerTransport{key: k}}}, nil)
	}
	if _, err := connect("tg_wrong"); err == nil || !strings.Contains(err.Error(), "Unauthorized") {
		t.Fatalf("a wrong key connected: %v", err)
	}
	cs, err := connect(key)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for tool, err := range cs.Tools(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, tool.Name)
	}
	if strings.Join(names, ",") != "clock__now,files__read,text__echo" {
		t.Fatalf("tools/list = %v", names)
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "files__read", Arguments: map[string]any{"name": "hello.txt"}})
	if err != nil || res.IsError {
		t.Fatalf("files__read: %v %+v", err, res)
	}
	if b, _ := json.Marshal(res.StructuredContent); !strings.Contains(string(b), "Hello from toolgate") {
		t.Fatalf("files__read returned %s", b)
	}
	runID, _ := res.Meta["toolgate/runId"].(string)
	if runID == "" || res.Meta["toolgate/receiptId"] == nil {
		t.Fatalf("result _meta %v lacks the correlation ids", res.Meta)
	}
	cs.Close()

	cancel()
	select {
	case code := <-exited:
		if code != ExitOK {
			t.Fatalf("serve exited %d after cancel; stderr: %s", code, errb.String())
		}
	case <-time.After(time.Minute):
		t.Fatal("serve did not shut down")
	}
	for _, f := range []string{"toolgate.db", "toolgate.key", filepath.Join("toolgate-files", "hello.txt")} {
		if _, err := os.Stat(f); err != nil {
			t.Errorf("quick start did not create %s: %v", f, err)
		}
	}
	cfgFile := writeFile(t, "c.yaml", "store: {driver: sqlite, dsn: "+filepath.Join(dir, "toolgate.db")+"}\nsigning: {key_file: "+filepath.Join(dir, "toolgate.key")+"}\n")
	code, out, errOut := run(t, "", "audit", "tail", "--config", cfgFile, "--tenant", "demo", "--run", runID)
	if code != ExitOK || strings.Count(out, "\n") != 2 || !strings.Contains(out, "agent.toolReturned") {
		t.Fatalf("audit tail of the call's run: %d %q %q", code, out, errOut)
	}
	if code, out, errOut := run(t, "", "receipts", "verify", "--config", cfgFile); code != ExitOK || !strings.Contains(out, "OK: 1 receipts") {
		t.Fatalf("receipts verify: %d %q %q", code, out, errOut)
	}
}

// The quick start's native tools validate their arguments against the
// inputSchema they advertise (issue 13 point 6), on every door: over MCP a
// missing required key or a wrong type answers an isError invalid_argument
// naming the path, over POST /v1/calls a 400 envelope with details.path;
// each refusal is recorded (events and a receipt that verifies).
func TestServeQuickStartValidatesArguments(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr, pw := io.Pipe()
	var errb strings.Builder
	exited := make(chan int, 1)
	go func() {
		code := Main(ctx, []string{"serve", "--listen", "127.0.0.1:0"}, strings.NewReader(""), pw, &errb)
		pw.Close()
		exited <- code
	}()
	var url, key string
	sc := bufio.NewScanner(pr)
	for sc.Scan() && (url == "" || key == "") {
		line := sc.Text()
		if u, ok := strings.CutPrefix(line, "toolgate: MCP gateway at "); ok {
			url = u
		}
		if k, ok := strings.CutPrefix(line, "toolgate: API key (shown once): "); ok {
			key = k
		}
	}
	go io.Copy(io.Discard, pr)
	if url == "" || key == "" {
		t.Fatalf("serve printed no URL or key; stderr: %s", errb.String())
	}
	c := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: bearerTransport{key: key}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var runs []string
	for _, call := range []struct {
		tool string
		args map[string]any
		path string
	}{
		{"files__read", map[string]any{}, "/name"},
		{"text__echo", map[string]any{}, "/text"},
		{"text__echo", map[string]any{"text": 5}, "/text"},
	} {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: call.tool, Arguments: call.args})
		if err != nil {
			t.Fatalf("%s %v: %v", call.tool, call.args, err)
		}
		text := ""
		if len(res.Content) > 0 {
			if tc, ok := res.Content[0].(*mcp.TextContent); ok {
				text = tc.Text
			}
		}
		if !res.IsError || !strings.HasPrefix(text, "invalid_argument") || !strings.Contains(text, call.path) {
			t.Errorf("%s %v: isError %v %q; want invalid_argument naming %s", call.tool, call.args, res.IsError, text, call.path)
		}
		if r, _ := res.Meta["toolgate/runId"].(string); r != "" && res.Meta["toolgate/receiptId"] != nil {
			runs = append(runs, r)
		} else {
			t.Errorf("%s: result _meta %v lacks the correlation ids", call.tool, res.Meta)
		}
	}
	cs.Close()

	base := strings.TrimSuffix(url, "/mcp")
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/calls", strings.NewReader(`{"toolId":"native:files.read","args":{}}`))
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var env struct {
		Error   string         `json:"error"`
		Details map[string]any `json:"details"`
	}
	err = json.NewDecoder(resp.Body).Decode(&env)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusBadRequest || env.Error != "invalid_argument" || env.Details["path"] != "/name" || env.Details["receiptId"] == nil {
		t.Fatalf("POST /v1/calls files.read {}: %d %+v (%v); want 400 invalid_argument with details.path /name and the receipt", resp.StatusCode, env, err)
	}

	cancel()
	select {
	case code := <-exited:
		if code != ExitOK {
			t.Fatalf("serve exited %d; stderr: %s", code, errb.String())
		}
	case <-time.After(time.Minute):
		t.Fatal("serve did not shut down")
	}
	cfgFile := writeFile(t, "c.yaml", "store: {driver: sqlite, dsn: "+filepath.Join(dir, "toolgate.db")+"}\nsigning: {key_file: "+filepath.Join(dir, "toolgate.key")+"}\n")
	code, out, errOut := run(t, "", "audit", "tail", "--config", cfgFile, "--tenant", "demo", "--run", runs[0])
	if code != ExitOK || !strings.Contains(out, "agent.toolReturned") || !strings.Contains(out, "invalid_argument") {
		t.Fatalf("audit tail of the refused call's run: %d %q %q", code, out, errOut)
	}
	if code, out, errOut := run(t, "", "receipts", "verify", "--config", cfgFile); code != ExitOK || !strings.Contains(out, "OK: 4 receipts") {
		t.Fatalf("receipts verify: %d %q %q", code, out, errOut)
	}
}

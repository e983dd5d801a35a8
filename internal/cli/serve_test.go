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

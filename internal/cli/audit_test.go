package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// buildToolgate builds the toolgate binary into a temporary directory.
func buildToolgate(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "toolgate")
	out, err := exec.Command("go", "build", "-o", bin, "../../cmd/toolgate").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// startProcess starts bin with args in dir and returns its stdout lines on
// a channel (closed at EOF). The process is interrupted (SIGINT) and waited
// for at cleanup.
func startProcess(t *testing.T, dir, bin string, args ...string) <-chan string {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 1024)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			lines <- sc.Text()
		}
		io.Copy(io.Discard, out)
	}()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGINT)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			<-done
			t.Errorf("%s %v did not exit on SIGINT; stderr: %s", bin, args, stderr.String())
		}
		if t.Failed() {
			t.Logf("%s %v stderr: %s", filepath.Base(bin), args, stderr.String())
		}
	})
	return lines
}

// Issue 13.15: `audit tail --follow` follows a running gateway, another
// process writing the store: a call made while it follows shows up, not
// only what was stored when it started.
func TestAuditTailFollowsRunningGateway(t *testing.T) {
	bin := buildToolgate(t)
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	serve := startProcess(t, dir, bin, "serve", "--listen", "127.0.0.1:0")
	var url, key string
	for url == "" || key == "" {
		select {
		case line, ok := <-serve:
			if !ok {
				t.Fatal("serve exited before printing its URL and key")
			}
			if u, ok := strings.CutPrefix(line, "toolgate: MCP gateway at "); ok {
				url = u
			}
			if k, ok := strings.CutPrefix(line, "toolgate: API key (shown once): "); ok {
				key = k
			}
		case <-ctx.Done():
			t.Fatal("serve printed no URL and key")
		}
	}
	go func() {
		for range serve {
		}
	}()
	c := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: bearerTransport{key: key}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	call := func(text string) string {
		t.Helper()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "text__echo", Arguments: map[string]any{"text": text}})
		if err != nil || res.IsError {
			t.Fatalf("text__echo: %v %+v", err, res)
		}
		runID, _ := res.Meta["toolgate/runId"].(string)
		if runID == "" {
			t.Fatalf("no runId in %v", res.Meta)
		}
		return runID
	}
	before := call("before the tail")

	cfg := filepath.Join(dir, "tail.yaml")
	if err := os.WriteFile(cfg, []byte("store: {driver: sqlite, dsn: toolgate.db}\nsigning: {key_file: toolgate.key}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tail := startProcess(t, dir, bin, "audit", "tail", "--config", cfg, "--tenant", "demo", "--follow")
	// waitReturned reads the tail until it prints run's agent.toolReturned.
	waitReturned := func(run string) {
		t.Helper()
		for {
			select {
			case line, ok := <-tail:
				if !ok {
					t.Fatalf("audit tail exited before printing run %s's agent.toolReturned", run)
				}
				var ev struct{ RunID, Type string }
				if err := json.Unmarshal([]byte(line), &ev); err != nil {
					t.Fatalf("audit tail printed %q: %v", line, err)
				}
				if ev.RunID == run && ev.Type == "agent.toolReturned" {
					return
				}
			case <-ctx.Done():
				t.Fatalf("audit tail --follow did not print run %s's agent.toolReturned", run)
			}
		}
	}
	waitReturned(before) // replayed from the store
	// The tail is following now: calls the gateway makes from here on are
	// committed by the gateway's process alone.
	for _, text := range []string{"one", "two"} {
		waitReturned(call(text))
	}
}

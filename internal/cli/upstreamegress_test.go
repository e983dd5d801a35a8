package cli

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/egress"
	"github.com/toolgate/toolgate/internal/egress/egresstest"
)

// TestServeUpstreamEgressRefusedNotReady: a Streamable HTTP upstream whose
// servers[].egress refuses its first connection (its name resolves to
// 127.0.0.1, loopback not allowed) is visible as such: serve logs one
// ERROR naming the server and the rule (retries say so at debug only),
// /readyz answers 503 naming the server with reason egress_denied and the
// rule, and the counting server on 127.0.0.1 never sees a request.
func TestServeUpstreamEgressRefusedNotReady(t *testing.T) {
	var hits atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		http.Error(w, "no", http.StatusNotFound)
	}))
	t.Cleanup(up.Close)
	_, port, _ := net.SplitHostPort(up.Listener.Addr().String())
	serveEgressOptions = []egress.Option{egress.WithResolver(egresstest.Static(map[string][]string{"mcp.example.test": {"127.0.0.1"}}))}
	t.Cleanup(func() { serveEgressOptions = nil })
	dir := t.TempDir()
	cfg := writeFile(t, "upegress.yaml", fmt.Sprintf(`listen: 127.0.0.1:0
log: {format: json, level: debug}
store: {driver: sqlite, dsn: %s}
signing: {key_file: %s}
servers:
  - {name: fenced, url: "http://mcp.example.test:%s/mcp", egress: {allow_hosts: [mcp.example.test]}}
policy: {default: deny}
`, filepath.Join(dir, "toolgate.db"), filepath.Join(dir, "toolgate.key"), port))
	base, logs := startServeUnready(t, cfg)
	errorLines := func() []string {
		var out []string
		for _, l := range strings.Split(logs(), "\n") {
			if strings.Contains(l, `"level":"ERROR"`) && strings.Contains(l, "egress guard") {
				out = append(out, l)
			}
		}
		return out
	}
	// Wait for a retry after the first refusal: then the ERROR must have
	// been said exactly once.
	waitUntil(t, 60*time.Second, "a retried refusal", func() bool {
		return strings.Contains(logs(), "upstream still refused by the egress guard")
	})
	lines := errorLines()
	if len(lines) != 1 || !strings.Contains(lines[0], `"server":"fenced"`) || !strings.Contains(lines[0], `"rule":"loopback"`) ||
		!strings.Contains(lines[0], `"host":"mcp.example.test"`) || strings.Contains(lines[0], "127.0.0.1") {
		t.Fatalf("ERROR lines about the refusal: %q, want one naming server fenced, rule loopback", lines)
	}
	resp, err := http.Get(base + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), "server fenced not ready: egress_denied (rule loopback, host mcp.example.test)") {
		t.Fatalf("/readyz: %d %q", resp.StatusCode, body)
	}
	if hits.Load() != 0 {
		t.Fatalf("the refused upstream saw %d requests", hits.Load())
	}
}

package cli

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
)

// Issue 13.18: validate reports, all at once and located, the mistakes
// serve would hit — a stdio command it cannot start, a rule naming a
// server that is not configured, a backend it lacks — next to the file's
// other issues of every section, and it starts no process and opens no
// connection doing so.
func TestValidateReportsWhatServeWouldHit(t *testing.T) {
	dir := t.TempDir()
	marker := filepath.Join(dir, "started")
	script := filepath.Join(dir, "server.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\ntouch "+marker+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	notExec := filepath.Join(dir, "not-exec.sh")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var hits atomic.Int64
	remote := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	defer remote.Close()
	cfg := writeFile(t, "c.yaml", fmt.Sprintf(`listen: 127.0.0.1:7070
store: {driver: memory, dsn: "postgres://127.0.0.1/test"}
servers:
  - {name: fs, command: [%q]}
  - {name: gone, command: [toolgate-no-such-command-xyz]}
  - {name: half, command: [%q]}
  - {name: remote, url: %q, timout: 5s}
policy:
  rules:
    - {id: readers, effect: allow, tools: ["mcp:fs.*", "mcp:github.*"]}
`, script, notExec, remote.URL))
	code, out, errOut := run(t, "", "validate", "--config", cfg)
	if code != ExitFailure || out != "" {
		t.Fatalf("validate: code %d out %q err %q", code, out, errOut)
	}
	for _, want := range []string{
		"has 5 issue(s)",
		`c.yaml:2:17: store.driver "memory": serve supports sqlite and postgres`,
		`c.yaml:5:28: servers[1] (gone): command "toolgate-no-such-command-xyz" is not found on PATH or is not executable`,
		fmt.Sprintf(`c.yaml:6:28: servers[2] (half): command %q is not executable`, notExec),
		`unknown key "timout" (did you mean "timeout"?)`,
		`c.yaml:10:56: rule "readers": tool pattern "mcp:github.*" names server "github", which is not configured in servers`,
	} {
		if !strings.Contains(errOut, want) {
			t.Errorf("validate output lacks %q:\n%s", want, errOut)
		}
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("validate started a server's command")
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("validate sent %d request(s) to a server's url", n)
	}
}

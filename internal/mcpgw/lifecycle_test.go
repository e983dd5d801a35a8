package mcpgw

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/auth"
)

// Issue 12 §3-5: the life of upstream stdio processes (environment,
// process groups, caps and idle stops).

// lifecycleConfig is a configuration with alice (scope ops) and bob, a
// policy that lets everyone use every tool, and servers (YAML list items)
// and extra top-level YAML.
func lifecycleConfig(servers, extra string) string {
	return fmt.Sprintf(`auth:
  api_keys:
    - {id: alice, key_sha256: %q, tenant: %s, scopes: [ops]}
    - {id: bob, key_sha256: %q, tenant: %s}
servers:
%s
policy:
  default: deny
  rules:
    - {id: everyone, effect: allow, tools: ["*"]}
%s`, auth.HashKey(keyAlice), tenant, auth.HashKey(keyBob), tenant, servers, extra)
}

// A stdio server sees the minimal environment (PATH, HOME, ...), its own
// env: and what inherit_env names, never the rest of the gateway's
// environment, such as the variable behind another server's credential.
func TestStdioServerEnvironmentIsMinimal(t *testing.T) {
	npm := npmDeps(t)
	rec := startRecordingUpstream(t)
	t.Setenv("TOOLGATE_TEST_REMOTE_TOKEN", "remote-token-value")
	t.Setenv("TOOLGATE_TEST_UNRELATED", "unrelated-value")
	t.Setenv("TOOLGATE_TEST_INHERITED", "inherited-value")
	t.Setenv("LC_TIME", "C")
	e := startGateway(t, lifecycleConfig(fmt.Sprintf(`  - name: everything
    command: [%s, %s, stdio]
    env: {OWN_SETTING: own-value, TOOLGATE_TEST_INHERITED: overridden}
    inherit_env: [TOOLGATE_TEST_INHERITED]
  - name: remote
    url: %s
    headers: {Authorization: "Bearer {{credential:remote-token}}"}`, yamlQuote(npm.node), yamlQuote(npm.everything), yamlQuote(rec.url)),
		"credentials:\n  remote-token: {env: TOOLGATE_TEST_REMOTE_TOKEN}\n"))
	res := callTool(t, e.connect(t, keyAlice), "everything__get-env", map[string]any{})
	mustOK(t, "get-env", res)
	var env map[string]string
	if err := json.Unmarshal([]byte(resultText(res)), &env); err != nil {
		t.Fatalf("get-env answered %q: %v", resultText(res), err)
	}
	for k, want := range map[string]string{"OWN_SETTING": "own-value", "TOOLGATE_TEST_INHERITED": "overridden",
		"PATH": os.Getenv("PATH"), "HOME": os.Getenv("HOME"), "LC_TIME": "C"} {
		if env[k] != want {
			t.Errorf("the server's %s = %q, want %q", k, env[k], want)
		}
	}
	for _, k := range []string{"TOOLGATE_TEST_REMOTE_TOKEN", "TOOLGATE_TEST_UNRELATED"} {
		if v, ok := env[k]; ok {
			t.Errorf("the server sees the gateway's %s (%q)", k, v)
		}
	}
	if strings.Contains(resultText(res), "remote-token-value") {
		t.Error("the server's environment holds another server's credential value")
	}

	// Without an own value, an inherited variable comes from the gateway.
	e2 := startGateway(t, lifecycleConfig(fmt.Sprintf(`  - name: everything
    command: [%s, %s, stdio]
    inherit_env: [TOOLGATE_TEST_INHERITED, TOOLGATE_TEST_NOT_SET]`, yamlQuote(npm.node), yamlQuote(npm.everything)), ""))
	res = callTool(t, e2.connect(t, keyAlice), "get-env", map[string]any{})
	mustOK(t, "get-env", res)
	env = nil
	if err := json.Unmarshal([]byte(resultText(res)), &env); err != nil {
		t.Fatal(err)
	}
	if env["TOOLGATE_TEST_INHERITED"] != "inherited-value" {
		t.Errorf("inherited TOOLGATE_TEST_INHERITED = %q, want the gateway's", env["TOOLGATE_TEST_INHERITED"])
	}
	if _, ok := env["TOOLGATE_TEST_NOT_SET"]; ok {
		t.Error("an inherited variable the gateway does not have is set")
	}
}

// alive reports whether process pid exists and is not a zombie (an exited
// process its parent has not reaped yet).
func alive(pid int) bool {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	_, rest, ok := strings.Cut(string(b), ") ")
	return ok && !strings.HasPrefix(rest, "Z")
}

// waitDead waits until none of pids is alive, or fails the test.
func waitDead(t *testing.T, what string, pids ...int) {
	t.Helper()
	deadline := time.Now().Add(e2eWait)
	for {
		var live []int
		for _, p := range pids {
			if alive(p) {
				live = append(live, p)
			}
		}
		if len(live) == 0 {
			return
		}
		if time.Now().After(deadline) {
			for _, p := range live {
				syscall.Kill(p, syscall.SIGKILL) // leave nothing behind
			}
			t.Fatalf("%s: processes %v are still running", what, live)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// spawnedPIDs are the helper pids the wrapper wrote to file, in order.
func spawnedPIDs(t *testing.T, file string) []int {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []int
	for _, f := range strings.Fields(string(b)) {
		n, err := strconv.Atoi(f)
		if err != nil {
			t.Fatalf("pid file %s: %q", file, b)
		}
		out = append(out, n)
	}
	return out
}

// waitSpawned waits until file lists n helpers.
func waitSpawned(t *testing.T, file string, n int) []int {
	t.Helper()
	deadline := time.Now().Add(e2eWait)
	for {
		if p := spawnedPIDs(t, file); len(p) >= n {
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("the wrapper started %d helpers, want %d", len(spawnedPIDs(t, file)), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// helperWrapper is a stdio server command that starts a helper (sleep 1000,
// holding the server's stdout as helpers do) and then becomes
// server-everything; each helper's pid is appended to pidFile.
func helperWrapper(npm npmPaths, pidFile string) string {
	return fmt.Sprintf(`[/bin/sh, -c, 'sleep 1000 & echo $! >> "$1"; exec "$2" "$3" stdio', sh, %s, %s, %s]`,
		yamlQuote(pidFile), yamlQuote(npm.node), yamlQuote(npm.everything))
}

// A stdio server's helpers end with it: when its session closes, when it
// crashes and is restarted, and when the gateway shuts down (issue 12 §5).
func TestStdioServerHelpersDoNotSurvive(t *testing.T) {
	npm := npmDeps(t)
	pidFile := filepath.Join(t.TempDir(), "helpers")
	e := startGateway(t, lifecycleConfig(fmt.Sprintf("  - {name: everything, command: %s}", helperWrapper(npm, pidFile)), ""))
	shared := waitSpawned(t, pidFile, 1) // the shared session's server

	// Session close.
	alice := e.connect(t, keyAlice)
	mustOK(t, "echo", callTool(t, alice, "echo", map[string]any{"message": "hi"}))
	helpers := waitSpawned(t, pidFile, 2)
	server, ok := e.gw.Process(alice.ID(), "everything")
	if !ok {
		t.Fatal("no process for alice's session")
	}
	if err := alice.Close(); err != nil {
		t.Fatalf("closing alice's session: %v", err)
	}
	waitDead(t, "after the session closed", server, helpers[1])

	// Crash and restart.
	bob := e.connect(t, keyBob)
	mustOK(t, "echo", callTool(t, bob, "echo", map[string]any{"message": "hi"}))
	helpers = waitSpawned(t, pidFile, 3)
	server, ok = e.gw.Process(bob.ID(), "everything")
	if !ok {
		t.Fatal("no process for bob's session")
	}
	if err := syscall.Kill(server, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitDead(t, "after the server crashed", helpers[2])
	ctx, cancel := context.WithTimeout(t.Context(), e2eWait)
	defer cancel()
	deadline := time.Now().Add(e2eWait)
	for {
		if err := e.gw.WaitUpstream(ctx, bob.ID(), "everything"); err != nil {
			t.Fatalf("the server was not restarted: %v", err)
		}
		if p, ok := e.gw.Process(bob.ID(), "everything"); ok && p != server {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the server was not restarted")
		}
		time.Sleep(20 * time.Millisecond)
	}
	mustOK(t, "echo after the restart", callTool(t, bob, "echo", map[string]any{"message": "again"}))
	restarted, _ := e.gw.Process(bob.ID(), "everything")
	helpers = waitSpawned(t, pidFile, 4)

	// Shutdown: every server and helper still running ends.
	e.gw.Close()
	waitDead(t, "after the gateway closed", append([]int{restarted, shared[0]}, helpers...)...)
	if n := len(spawnedPIDs(t, pidFile)); n != 4 {
		t.Errorf("%d helpers were started, want 4 (shared, alice, bob, bob restarted)", n)
	}
}

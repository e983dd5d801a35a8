package cli

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/auth"
)

// An HTTP tool's credential is registered for redaction when serve
// starts, not when an HTTP tool first sends it: the first call of the
// gateway, to an upstream MCP tool whose arguments hold the credential
// value, is recorded redacted (events with audit content full, receipts,
// store files, log), and the
// argsHash of the same arguments is the same before and after an HTTP
// tool sent the credential.
func TestServeHTTPToolCredentialsRedactedFromStart(t *testing.T) {
	const secret = "wx-Early-7Qp3Zr9Tn" // not a secret shape: only the credential registration knows it
	t.Setenv("TG_HTTP_EARLY_KEY", secret)
	api := &testAPI{}
	apiSrv := httptest.NewServer(api)
	t.Cleanup(apiSrv.Close)
	upURL := consoleUpstream(t)
	dir := t.TempDir()
	key, err := auth.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(dir, "toolgate.db")
	doc := fmt.Sprintf(`listen: 127.0.0.1:0
store: {driver: sqlite, dsn: %[1]s}
signing: {key_file: %[2]s}
audit: {content: full}
auth:
  api_keys:
    - {id: tester, key_sha256: "%[3]s", tenant: t1, scopes: [toolgate:audit]}
credentials:
  wx-key: {env: TG_HTTP_EARLY_KEY}
servers:
  - {name: up, url: "%[4]s", sessions: shared}
http_tools:
  - {name: items, url: "%[5]s/items", headers: {X-Api-Key: "{{credential:wx-key}}"}, egress: {allow_cidrs: [127.0.0.0/8]}}
policy:
  default: deny
  rules:
    - {id: all, effect: allow, tools: ["mcp:up.*", "http:*"]}
`, db, filepath.Join(dir, "toolgate.key"), auth.HashKey(key), upURL+"/mcp", apiSrv.URL)
	base, logs := startServeInProcess(t, writeFile(t, "early.yaml", doc))
	do := func(method, path, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	argsHash := regexp.MustCompile(`"argsHash":"([0-9a-f]{64})"`)
	echo := func(run string) (string, string) {
		t.Helper()
		code, body := do("POST", "/v1/calls", `{"toolId":"mcp:up.echo","runId":"`+run+`","args":{"text":"token `+secret+`"}}`)
		if code != 200 || !strings.Contains(body, `"status":"ok"`) {
			t.Fatalf("echo %s: %d %s; log:\n%s", run, code, body, logs())
		}
		code, events := do("GET", "/v1/runs/"+run+"/events", "")
		m := argsHash.FindStringSubmatch(events)
		if code != 200 || m == nil {
			t.Fatalf("events of %s: %d %s", run, code, events)
		}
		return events, m[1] // the answer itself is the caller's own text, not a recording
	}
	// The gateway's first call: an MCP tool, the credential in its args.
	first, hashBefore := echo("run-echo-1")
	if strings.Contains(first, secret) || !strings.Contains(first, "[REDACTED:wx-key]") {
		t.Errorf("the first call's events hold the credential in clear: %s", first)
	}
	if code, body := do("POST", "/v1/calls", `{"toolId":"http:items","runId":"run-items","args":{}}`); code != 200 || !strings.Contains(body, `"status":"ok"`) || api.seen("/items") != 1 {
		t.Fatalf("items: %d %s", code, body)
	}
	second, hashAfter := echo("run-echo-2")
	if strings.Contains(second, secret) {
		t.Errorf("the second call's events hold the credential: %s", second)
	}
	if hashBefore != hashAfter {
		t.Errorf("argsHash of the same arguments changed after the HTTP call: %s then %s", hashBefore, hashAfter)
	}
	code, receipts := do("GET", "/v1/receipts", "")
	if code != 200 || strings.Contains(receipts, secret) {
		t.Errorf("receipts: %d %s", code, receipts)
	}
	var files []byte
	for _, suffix := range []string{"", "-wal", "-shm"} {
		b, err := os.ReadFile(db + suffix)
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		files = append(files, b...)
	}
	if len(files) == 0 || strings.Contains(string(files), secret) {
		t.Errorf("the store files (%d bytes) hold the credential", len(files))
	}
	if strings.Contains(logs(), secret) {
		t.Errorf("the log holds the credential")
	}
}

package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/toolgate/toolgate"
	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/catalog"
	"github.com/toolgate/toolgate/hook"
	"github.com/toolgate/toolgate/internal/auth"
	"github.com/toolgate/toolgate/internal/config"
	"github.com/toolgate/toolgate/internal/tracing"
	"github.com/toolgate/toolgate/policy"
)

// syncBuffer is an io.Writer safe for concurrent writes and reads.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// echoingUpstream answers every JSON-RPC request with an error whose
// message echoes the X-Token header it was sent: a credential that comes
// back in an upstream's error, which the gateway logs when it cannot
// connect. sent counts the requests that carried want.
func echoingUpstream(t *testing.T, want string) (url string, sent func() int) {
	t.Helper()
	var mu sync.Mutex
	n := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var msg struct {
			ID json.RawMessage `json:"id"`
		}
		body, _ := io.ReadAll(r.Body)
		json.Unmarshal(body, &msg)
		tok := r.Header.Get("X-Token")
		if tok == want {
			mu.Lock()
			n++
			mu.Unlock()
		}
		if len(msg.ID) == 0 {
			w.WriteHeader(http.StatusAccepted)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"error":{"code":-32000,"message":"token %s is not accepted here"}}`, msg.ID, tok)
	}))
	t.Cleanup(srv.Close)
	return srv.URL, func() int { mu.Lock(); defer mu.Unlock(); return n }
}

// log: {format, level} (issue 16 point 3): serve writes its log in the
// configured format and level, and no line carries a credential value,
// not even one an upstream echoes in the error serve logs; the line is
// there, with the value replaced by [REDACTED:<name>]. format json gives
// one JSON object per line (time, level, msg).
func TestServeLogFormats(t *testing.T) {
	const secret = "s3cr3t-log-Value-42"
	for _, tc := range []struct {
		format, level string
		check         func(t *testing.T, line string)
	}{
		{"json", "debug", func(t *testing.T, line string) {
			var m map[string]any
			if err := json.Unmarshal([]byte(line), &m); err != nil {
				t.Errorf("log line is not JSON: %v: %s", err, line)
				return
			}
			for _, k := range []string{"time", "level", "msg"} {
				if _, ok := m[k]; !ok {
					t.Errorf("JSON log line without %q: %s", k, line)
				}
			}
		}},
		{"text", "warn", func(t *testing.T, line string) {
			if !strings.HasPrefix(line, "time=") || json.Valid([]byte(line)) {
				t.Errorf("not a text log line: %s", line)
			}
			if !strings.Contains(line, " level=WARN ") && !strings.Contains(line, " level=ERROR ") {
				t.Errorf("a line below log.level warn: %s", line)
			}
		}},
	} {
		t.Run(tc.format, func(t *testing.T) {
			t.Setenv("TG_LOG_TEST_TOKEN", secret)
			upURL, sent := echoingUpstream(t, secret)
			dir := t.TempDir()
			key, err := auth.NewKey()
			if err != nil {
				t.Fatal(err)
			}
			cfg := writeFile(t, "log.yaml", fmt.Sprintf(`listen: 127.0.0.1:0
log: {format: %s, level: %s}
store: {driver: sqlite, dsn: %s}
signing: {key_file: %s}
auth:
  api_keys:
    - {id: tester, key_sha256: "%s", tenant: t1}
credentials:
  tok: {env: TG_LOG_TEST_TOKEN}
servers:
  - {name: up, url: "%s", sessions: shared, headers: {X-Token: "{{credential:tok}}"}}
policy:
  default: deny
  rules:
    - {id: all, effect: allow, tools: ["mcp:up.*"]}
`, tc.format, tc.level, filepath.Join(dir, "toolgate.db"), filepath.Join(dir, "toolgate.key"), auth.HashKey(key), upURL))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var stdout, stderr syncBuffer
			exited := make(chan int, 1)
			go func() {
				exited <- Main(ctx, []string{"serve", "--config", cfg}, strings.NewReader(""), &stdout, &stderr)
			}()
			deadline := time.Now().Add(30 * time.Second)
			for !strings.Contains(stderr.String(), "[REDACTED:tok]") {
				if time.Now().After(deadline) {
					t.Fatalf("no log line with the redacted credential within 30 s; upstream got it %d times; stderr:\n%s", sent(), stderr.String())
				}
				select {
				case code := <-exited:
					t.Fatalf("serve exited %d:\n%s", code, stderr.String())
				case <-time.After(20 * time.Millisecond): // polling the log
				}
			}
			// A refused request: an info line (debug for missing credentials).
			if base := firstLine(stdout.String(), "toolgate: MCP gateway at "); base != "" {
				if resp, err := http.Get(strings.TrimSuffix(base, "/mcp") + "/v1/tools"); err == nil {
					resp.Body.Close()
				}
			}
			cancel()
			select {
			case code := <-exited:
				if code != ExitOK {
					t.Fatalf("serve exited %d:\n%s", code, stderr.String())
				}
			case <-time.After(time.Minute):
				t.Fatal("serve did not shut down")
			}
			if sent() == 0 {
				t.Fatal("the upstream never got the credential: the test proves nothing")
			}
			logs := stderr.String()
			if strings.Contains(logs, secret) || strings.Contains(stdout.String(), secret) {
				t.Errorf("the credential value is in the output:\n%s", logs)
			}
			lines := strings.Split(strings.TrimSuffix(logs, "\n"), "\n")
			for _, line := range lines {
				tc.check(t, line)
			}
			t.Logf("%d log lines; first: %s", len(lines), lines[0])
		})
	}
}

// firstLine returns the rest of the first line of s that starts with
// prefix ("" if none).
func firstLine(s, prefix string) string {
	for _, l := range strings.Split(s, "\n") {
		if rest, ok := strings.CutPrefix(l, prefix); ok {
			return rest
		}
	}
	return ""
}

// The log's redactor reaches every value of a line: the message, bound
// attributes, groups, errors and other values; a 64-hex argsHash a line
// names is kept (only the identifier rules apply).
func TestLoggerRedactsEveryValue(t *testing.T) {
	const secret = "hunter2-very-secret"
	red := audit.NewRedactor()
	red.AddSecret("db-password", secret)
	var out strings.Builder
	log := newLogger(&out, config.Log{Format: "json", Level: "info"}, red)
	hash := strings.Repeat("ab", 32)
	log.With("bound", "x"+secret).WithGroup("g").Info("connect "+secret+" failed",
		"err", errors.New("dial: "+secret), "nested", slog.GroupValue(slog.String("v", secret)),
		"any", struct{ DSN string }{"postgres://u:" + secret + "@h/db"}, "argsHash", hash, "n", 3)
	line := out.String()
	if strings.Contains(line, secret) {
		t.Fatalf("secret in the log line: %s", line)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(line), &m); err != nil {
		t.Fatalf("not JSON: %v: %s", err, line)
	}
	g, _ := m["g"].(map[string]any)
	if m["msg"] != "connect [REDACTED:db-password] failed" || m["bound"] != "x[REDACTED:db-password]" || g["argsHash"] != hash || g["n"] != float64(3) ||
		g["err"] != "dial: [REDACTED:db-password]" || !strings.Contains(fmt.Sprint(g["any"]), "[REDACTED:db-password]") {
		t.Fatalf("log line: %s", line)
	}
}

// With tracing on (issue 16 point 3), serve's JSON log lines written
// during a call carry the call span's trace_id and span_id; a line
// outside any span carries neither.
func TestLoggerTraceIDs(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp, err := tracing.New(t.Context(), config.Tracing{Enabled: true}, tracing.Options{Exporter: exp, Syncer: true})
	if err != nil || tp == nil {
		t.Fatalf("tracing.New: %v %v", tp, err)
	}
	defer tp.Shutdown(context.Background())
	var out syncBuffer
	log := newLogger(&out, config.Log{Format: "json", Level: "info"}, audit.NewRedactor(), tracing.LogAttrs)
	log.Info("outside any call")
	failing := hook.Registration{Name: "flaky", Mode: hook.Observe, Hook: hook.Funcs{
		BeforeFunc: func(context.Context, *hook.Call) (hook.Verdict, error) {
			return hook.Verdict{}, errors.New("observer down")
		},
	}}
	prog, err := policy.Load("p.yaml", []byte("rules:\n  - {id: all, effect: allow, tools: [\"*\"]}\n"), policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	gw, err := toolgate.New(toolgate.Options{Policy: prog, Logger: log, Tracer: tp.Tracer(), Hooks: []hook.Registration{failing}})
	if err != nil {
		t.Fatal(err)
	}
	defer gw.Close()
	if err := gw.RegisterNative(catalog.ToolDescriptor{ToolID: "native:t.run", Source: catalog.SourceHostExtension, SafetyTier: catalog.TierPure},
		func(context.Context, json.RawMessage) (any, error) { return "ok", nil }); err != nil {
		t.Fatal(err)
	}
	res, err := gw.Call(t.Context(), toolgate.Call{Tool: "native:t.run", Principal: toolgate.Principal{ID: "a", Tenant: "t"}})
	if err != nil || res.Err != nil {
		t.Fatalf("call: %v %+v", err, res)
	}
	var call tracetest.SpanStub
	for _, s := range exp.GetSpans() {
		if s.Name == "execute_tool native:t.run" {
			call = s
		}
	}
	if !call.SpanContext.IsValid() {
		t.Fatalf("no execute_tool span: %v", exp.GetSpans())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	seen := map[string]map[string]any{}
	for _, l := range lines {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("not JSON: %s", l)
		}
		seen[m["msg"].(string)] = m
	}
	if m := seen["outside any call"]; m == nil || m["trace_id"] != nil || m["span_id"] != nil {
		t.Errorf("line outside a span: %v", m)
	}
	m := seen["observe hook failed"]
	if m == nil || m["trace_id"] != call.SpanContext.TraceID().String() || len(fmt.Sprint(m["span_id"])) != 16 {
		t.Fatalf("hook failure line %v; want trace_id %s; log:\n%s", m, call.SpanContext.TraceID(), out.String())
	}
}

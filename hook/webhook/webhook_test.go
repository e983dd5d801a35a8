package webhook_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolgate/toolgate"
	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/catalog"
	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/hook"
	"github.com/toolgate/toolgate/hook/webhook"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/receipt"
)

var secret = []byte("whsec-test-0123456789")

func gateway(t *testing.T, reg hook.Registration) (*toolgate.Gateway, *[]string) {
	t.Helper()
	spec, err := policy.Parse("p.yaml", []byte(`
default: deny
rules:
  - {id: files, effect: allow, tools: ["native:fs.write"]}
  - {id: no-etc, effect: deny, tools: ["native:fs.write"], when: 'has(args.path) && args.path.startsWith("/etc")'}
`))
	if err != nil {
		t.Fatal(err)
	}
	prog, err := policy.Compile(spec, policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	gw, err := toolgate.New(toolgate.Options{Policy: prog, Hooks: []hook.Registration{reg}})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var got []string
	if err := gw.RegisterNative(catalog.ToolDescriptor{ToolID: "native:fs.write", Source: catalog.SourceHostExtension, SafetyTier: catalog.TierWrite},
		func(_ context.Context, args json.RawMessage) (any, error) {
			mu.Lock()
			got = append(got, string(args))
			mu.Unlock()
			return map[string]bool{"ok": true}, nil
		}); err != nil {
		t.Fatal(err)
	}
	return gw, &got
}

func call(t *testing.T, gw *toolgate.Gateway, args string) *toolgate.Result {
	t.Helper()
	res, err := gw.Call(context.Background(), toolgate.Call{Tool: "native:fs.write", Principal: toolgate.Principal{ID: "alice", Tenant: "acme"}, Args: json.RawMessage(args)})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// The enforce hook decides: deny, allow, mutate (the decision runs again on
// the new arguments and the receipt verifies with mutationSource), timeout
// and HTTP 500 deny (fail closed). Every request is signed and content-free.
func TestEnforce(t *testing.T) {
	var mu sync.Mutex
	answer := ""
	var bodies []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if err := webhook.Verify(secret, r.Header.Get(webhook.SignatureHeader), body, time.Now(), time.Minute); err != nil {
			t.Errorf("signature: %v", err)
		}
		mu.Lock()
		a := answer
		bodies = append(bodies, string(body))
		mu.Unlock()
		var req map[string]any
		json.Unmarshal(body, &req)
		if req["phase"] != "before" {
			return
		}
		switch a {
		case "":
			io.WriteString(w, `{}`)
		case "deny":
			io.WriteString(w, `{"deny": true, "reason": "DLP: looks like a key"}`)
		case "mutate":
			io.WriteString(w, `{"args": {"path": "/tmp/safe", "content": "x"}}`)
		case "mutate-to-denied":
			io.WriteString(w, `{"args": {"path": "/etc/passwd"}}`)
		case "timeout":
			<-r.Context().Done()
		case "500":
			w.WriteHeader(500)
		case "redirect":
			http.Redirect(w, r, "http://127.0.0.1:1/elsewhere", http.StatusTemporaryRedirect)
		}
	}))
	defer srv.Close()
	h, err := webhook.New(webhook.Options{Name: "dlp", URL: srv.URL, Secret: secret, Mode: hook.Enforce})
	if err != nil {
		t.Fatal(err)
	}
	gw, got := gateway(t, hook.Registration{Name: "dlp", Hook: h, Mode: hook.Enforce, Mutating: true, Timeout: 200 * time.Millisecond})
	set := func(a string) { mu.Lock(); answer = a; mu.Unlock() }

	set("")
	if res := call(t, gw, `{"path":"/tmp/a","content":"sk-live-secret-value"}`); res.Status != audit.StatusOK {
		t.Fatalf("allow: %+v", res)
	}
	set("deny")
	if res := call(t, gw, `{"path":"/tmp/a"}`); res.Status != audit.StatusForbidden || !strings.Contains(res.Err.Message, "DLP") {
		t.Fatalf("deny: %+v", res.Err)
	}
	set("mutate")
	res := call(t, gw, `{"path":"/tmp/a","content":"y"}`)
	if res.Status != audit.StatusOK || res.MutationSource != "hook:dlp" || res.RequestedArgsHash == res.ExecutedArgsHash {
		t.Fatalf("mutate: %+v", res)
	}
	set("mutate-to-denied")
	if res := call(t, gw, `{"path":"/tmp/a"}`); res.Status != audit.StatusForbidden {
		t.Fatalf("a mutation into a denied call ran: %+v", res)
	}
	for _, a := range []string{"timeout", "500", "redirect"} {
		set(a)
		res := call(t, gw, `{"path":"/tmp/a"}`)
		if res.Status != audit.StatusForbidden || res.Err.Code != errcode.Forbidden || strings.Contains(res.Err.Message, "127.0.0.1") {
			t.Fatalf("%s: %+v", a, res)
		}
	}
	var compact bytes.Buffer
	if len(*got) == 2 {
		json.Compact(&compact, []byte((*got)[1]))
	}
	if len(*got) != 2 || compact.String() != `{"path":"/tmp/safe","content":"x"}` {
		t.Fatalf("the tool ran with %q; want the allowed call and the mutated arguments", *got)
	}
	var buf bytes.Buffer
	if err := gw.WriteReceipts(&buf); err != nil {
		t.Fatal(err)
	}
	text := buf.String()
	if _, err := receipt.Verify(&buf, gw.PublicKey(), receipt.VerifyOptions{}); err != nil {
		t.Fatalf("receipts: %v", err)
	}
	if !strings.Contains(text, `"mutationSource":"hook:dlp"`) {
		t.Fatalf("no receipt records the mutation:\n%s", text)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, b := range bodies {
		if strings.Contains(b, "sk-live") || strings.Contains(b, `"args"`) {
			t.Fatalf("a content-free webhook request carried arguments: %s", b)
		}
	}
}

// An observe hook whose receiver never answers does not hold calls up:
// each callback only enqueues; a full queue drops and counts.
func TestObserveNeverBlocks(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)
	h, err := webhook.New(webhook.Options{Name: "siem", URL: srv.URL, Secret: secret, Mode: hook.Observe, Queue: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	gw, got := gateway(t, hook.Registration{Name: "siem", Hook: h, Mode: hook.Observe})
	for range 10 {
		if res := call(t, gw, `{"path":"/tmp/a"}`); res.Status != audit.StatusOK {
			t.Fatalf("observe: %+v", res)
		}
	}
	if len(*got) != 10 || h.Dropped() == 0 {
		t.Fatalf("ran %d calls, dropped %d; want 10 calls and drops counted", len(*got), h.Dropped())
	}
}

func TestSignatureVerify(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	body := []byte(`{"phase":"before"}`)
	sig := webhook.Sign(secret, now, body)
	if err := webhook.Verify(secret, sig, body, now, time.Minute); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct {
		sig  string
		body []byte
		now  time.Time
	}{
		"tampered body": {sig, []byte(`{"phase":"after"}`), now},
		"other secret":  {webhook.Sign([]byte("other"), now, body), body, now},
		"replayed":      {sig, body, now.Add(time.Hour)},
		"malformed":     {"v1=abc", body, now},
	} {
		if err := webhook.Verify(secret, c.sig, c.body, c.now, time.Minute); err == nil {
			t.Errorf("%s: verified", name)
		}
	}
}

// Issue 12 point 11: an enforce webhook allows only with a JSON object.
// A 2xx answer with an empty body, null, another JSON value, a member of
// the wrong type, a repeated member or trailing data denies (fail closed),
// the refusal is recorded, and the tool does not run.
func TestEnforceOnlyObjectAllows(t *testing.T) {
	var mu sync.Mutex
	answer := ""
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var req map[string]any
		json.Unmarshal(body, &req)
		if req["phase"] != "before" {
			return
		}
		mu.Lock()
		a := answer
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, a)
	}))
	defer srv.Close()
	h, err := webhook.New(webhook.Options{Name: "gatekeeper", URL: srv.URL, Secret: secret, Mode: hook.Enforce})
	if err != nil {
		t.Fatal(err)
	}
	gw, got := gateway(t, hook.Registration{Name: "gatekeeper", Hook: h, Mode: hook.Enforce, Timeout: 5 * time.Second})
	ran := 0
	for _, c := range []struct {
		answer string
		allow  bool
	}{
		{"", false}, {"   \n", false}, {"null", false}, {" null\n", false}, {"[]", false}, {`"allow"`, false},
		{"true", false}, {"0", false}, {"<html>ok</html>", false}, {`{"deny": "no"}`, false},
		{`{"deny": null}`, false}, {`{"reason": 7}`, false}, {`{"deny": true, "deny": false}`, false},
		{`{} {}`, false}, {`{}x`, false}, {`{"deny": false`, false},
		{"{}", true}, {` {"deny": false, "note": "fine"} `, true}, {`{"args": null}`, true},
	} {
		mu.Lock()
		answer = c.answer
		mu.Unlock()
		res := call(t, gw, `{"path":"/tmp/a"}`)
		if c.allow {
			ran++
			if res.Status != audit.StatusOK {
				t.Errorf("answer %q: %s %+v, want the call allowed", c.answer, res.Status, res.Err)
			}
		} else if res.Status != audit.StatusForbidden || res.Err.Code != errcode.Forbidden || !strings.Contains(res.Err.Message, "gatekeeper") || res.ReceiptID == "" {
			t.Errorf("answer %q: %s %+v, want forbidden by the hook, recorded", c.answer, res.Status, res.Err)
		}
		if len(*got) != ran {
			t.Fatalf("answer %q: the tool ran %d times, want %d", c.answer, len(*got), ran)
		}
	}
	var buf bytes.Buffer
	if err := gw.WriteReceipts(&buf); err != nil {
		t.Fatal(err)
	}
	if _, err := receipt.Verify(&buf, gw.PublicKey(), receipt.VerifyOptions{}); err != nil {
		t.Fatalf("receipts: %v", err)
	}
}

// FuzzParseVerdict: ParseVerdict never panics, and it accepts only text
// that is one JSON object.
func FuzzParseVerdict(f *testing.F) {
	for _, s := range []string{"", "null", "{}", `{"deny":true,"reason":"x"}`, `{"args":{"a":1}}`, `[]`, `{"deny":1}`, `{} {}`, `{"deny":true,"deny":false}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		v, err := webhook.ParseVerdict(raw)
		if err != nil {
			return
		}
		trimmed := bytes.TrimSpace(raw)
		var obj map[string]json.RawMessage
		if len(trimmed) == 0 || trimmed[0] != '{' || json.Unmarshal(trimmed, &obj) != nil || obj == nil {
			t.Fatalf("accepted %q, which is not one JSON object", raw)
		}
		if v.Args != nil && !json.Valid(v.Args) {
			t.Fatalf("args %q are not JSON", v.Args)
		}
	})
}

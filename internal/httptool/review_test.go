package httptool

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/internal/config"
)

// buildAll builds every tool of a configuration document with opts.
func buildAll(t *testing.T, doc string, opts Options) map[string]Tool {
	t.Helper()
	cfg, err := config.Parse("t.yaml", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	tools, err := Build(context.Background(), cfg, opts)
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	out := map[string]Tool{}
	for _, tl := range tools {
		out[tl.Descriptor.ToolID] = tl
	}
	return out
}

// An oversized response is redacted before it is cut: a credential the
// API echoes across the max_response_bytes boundary leaves no prefix of
// itself in the result (wherever the cut falls in it), and one wholly
// before the cut is replaced.
func TestOversizedResponseRedactedBeforeCut(t *testing.T) {
	const key = "SECRETWXKEY-0123456789"
	t.Setenv("TG_WX_KEY", key)
	var lead atomic.Int64
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Api-Key") != key {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		w.Header().Set("Content-Type", "text/plain")
		w.Write([]byte(strings.Repeat("x", int(lead.Load())) + strings.Repeat(key, 3)))
	}))
	defer api.Close()
	tools := buildAll(t, `credentials: {wx-key: {env: TG_WX_KEY}}
http_tools:
  - {name: bigsec, url: "`+api.URL+`/big", headers: {X-Api-Key: "{{credential:wx-key}}"}, max_response_bytes: 100, egress: {allow_cidrs: [127.0.0.0/8]}}
`, Options{})
	for _, n := range []int{92, 99, 80, 79, 59, 81} {
		lead.Store(int64(n))
		out, err := tools["http:bigsec"].Invoker.Invoke(context.Background(), nil, json.RawMessage(`{}`))
		if errcode.CodeOf(err) != errcode.ResponseTooLarge {
			t.Fatalf("lead %d: %v", n, err)
		}
		var r result
		if json.Unmarshal(out, &r) != nil || len(r.Content) != 2 {
			t.Fatalf("lead %d: %s", n, out)
		}
		body := r.Content[0].Text
		if !strings.HasPrefix(body, strings.Repeat("x", n)) || len(body) > 100 {
			t.Errorf("lead %d: the cut text is %q", n, body)
		}
		for i := 4; i <= len(key); i++ {
			if strings.Contains(body, key[:i]) {
				t.Errorf("lead %d: the result holds %q, a prefix of the credential: %q", n, key[:i], body)
				break
			}
		}
		if n+len(key) <= 100 && !strings.Contains(body, "[REDACTED:wx-key]") {
			t.Errorf("lead %d: the whole credential before the cut is not redacted: %q", n, body)
		}
	}
}

// A path parameter of "", "." or ".." is refused with invalid_argument
// naming it before any request, for a declared tool and an OpenAPI
// operation; "..." (not a dot segment) is sent escaped.
func TestPathParamDotSegmentsRefused(t *testing.T) {
	var n atomic.Int64
	var last atomic.Value
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		last.Store(r.URL.EscapedPath())
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"ok":true}`))
	}))
	defer api.Close()
	doc := filepath.Join(t.TempDir(), "items.yaml")
	if err := os.WriteFile(doc, []byte(`openapi: 3.0.3
info: {title: items, version: '1'}
paths:
  /v1/items/{itemId}:
    get:
      operationId: getItem
      parameters: [{name: itemId, in: path, required: true, schema: {type: string}}]
      responses: {'200': {description: ok}}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	tools := buildAll(t, `http_tools:
  - {name: item, url: "`+api.URL+`/v1/items/{id}", egress: {allow_cidrs: [127.0.0.0/8]}}
openapi:
  - {file: "`+doc+`", server: "`+api.URL+`", egress: {allow_cidrs: [127.0.0.0/8]}}
`, Options{})
	for id, param := range map[string]string{"http:item": "id", "http:getItem": "itemId"} {
		for _, v := range []string{"..", ".", ""} {
			args, _ := json.Marshal(map[string]any{param: v})
			_, err := tools[id].Invoker.Invoke(context.Background(), nil, args)
			if errcode.CodeOf(err) != errcode.InvalidArgument || !strings.Contains(err.Error(), "path parameter "+param) {
				t.Errorf("%s %s=%q: %v", id, param, v, err)
			}
		}
		if got := n.Load(); got != 0 {
			t.Fatalf("%s: the API got %d requests for refused path parameters", id, got)
		}
	}
	out, err := tools["http:item"].Invoker.Invoke(context.Background(), nil, json.RawMessage(`{"id":"..."}`))
	if err != nil || !strings.Contains(string(out), `"ok":true`) || last.Load() != "/v1/items/..." {
		t.Errorf(`id "...": %s %v path %v`, out, err, last.Load())
	}
}

// A NUL in a header argument is refused naming a control character.
func TestHeaderNULRefused(t *testing.T) {
	tools := buildAll(t, `http_tools:
  - {name: h, url: "http://127.0.0.1:1/x", headers: {X-Tag: "{{args.tag}}"}}
`, Options{})
	_, err := tools["http:h"].Invoker.Invoke(context.Background(), nil, json.RawMessage(`{"tag":"a\u0000b"}`))
	if errcode.CodeOf(err) != errcode.InvalidArgument || !strings.Contains(err.Error(), "control character") {
		t.Errorf("NUL header: %v", err)
	}
}

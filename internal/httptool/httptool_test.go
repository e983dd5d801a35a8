package httptool

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/internal/config"
)

// buildOne builds the one tool of a configuration document.
func buildOne(t *testing.T, doc string) Tool {
	t.Helper()
	cfg, err := config.Parse("t.yaml", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	tools, err := Build(context.Background(), cfg, Options{})
	if err != nil || len(tools) != 1 {
		t.Fatalf("Build: %v %v", tools, err)
	}
	return tools[0]
}

// A redirect to another host drops the headers that carried a credential
// (net/http keeps custom ones), and more redirects than max_redirects
// fail the call without following them.
func TestRedirectsDropCredentialHeaders(t *testing.T) {
	t.Setenv("TG_HT_KEY", "k-redirect-1234")
	var mu sync.Mutex
	var gotKey []string
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		gotKey = append(gotKey, r.Header.Get("X-Api-Key")+"|"+r.Header.Get("X-Plain"))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"ok":true}`))
	}))
	defer target.Close()
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target.URL+"/landed", http.StatusTemporaryRedirect)
	}))
	defer origin.Close()
	doc := `credentials: {k: {env: TG_HT_KEY}}
http_tools:
  - {name: r, url: "` + origin.URL + `/go", headers: {X-Api-Key: "{{credential:k}}", X-Plain: "p"}, egress: {allow_cidrs: [127.0.0.0/8]%s}}
`
	tool := buildOne(t, strings.Replace(doc, "%s", "", 1))
	out, err := tool.Invoker.Invoke(context.Background(), nil, json.RawMessage(`{}`))
	if err != nil || !strings.Contains(string(out), `"ok":true`) {
		t.Fatalf("redirected call: %s %v", out, err)
	}
	mu.Lock()
	if len(gotKey) != 1 || gotKey[0] != "|p" {
		t.Errorf("the redirect target got X-Api-Key|X-Plain %q, want only the plain header", gotKey)
	}
	mu.Unlock()
	tool = buildOne(t, strings.Replace(doc, "%s", ", max_redirects: 0", 1))
	_, err = tool.Invoker.Invoke(context.Background(), nil, json.RawMessage(`{}`))
	if errcode.CodeOf(err) != errcode.ToolExecutionFailed || !strings.Contains(err.Error(), "more than 0 redirects") {
		t.Errorf("max_redirects 0: %v", err)
	}
	mu.Lock()
	if len(gotKey) != 1 {
		t.Errorf("the target was reached past the limit: %q", gotKey)
	}
	mu.Unlock()
}

// The environment's proxy is not used: HTTP_PROXY pointing at a server
// that would answer is ignored.
func TestNoEnvironmentProxy(t *testing.T) {
	proxied := false
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { proxied = true }))
	defer proxy.Close()
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("direct")) }))
	defer api.Close()
	t.Setenv("HTTP_PROXY", proxy.URL)
	t.Setenv("NO_PROXY", "")
	tool := buildOne(t, "http_tools:\n  - {name: d, url: \""+api.URL+"/\", egress: {allow_cidrs: [127.0.0.0/8]}}\n")
	out, err := tool.Invoker.Invoke(context.Background(), nil, json.RawMessage(`{}`))
	if err != nil || !strings.Contains(string(out), "direct") || proxied {
		t.Errorf("out %s err %v proxied %v", out, err, proxied)
	}
}

// OpenAPI schemas become self-contained JSON Schemas: references inlined,
// recursion cut, nullable as a null type, 3.0 exclusive bounds as numbers.
func TestOpenAPISchemaConversion(t *testing.T) {
	data, err := os.ReadFile("testdata/petstore.yaml")
	if err != nil {
		t.Fatal(err)
	}
	tools, err := convert(context.Background(), "petstore.yaml", data, config.OpenAPI{Timeout: "30s", MaxResponseBytes: 1 << 20},
		DefaultClient("", config.Egress{}), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	byID := map[string]Tool{}
	for _, tl := range tools {
		byID[tl.Descriptor.ToolID] = tl
	}
	if len(tools) != 5 {
		t.Fatalf("%d tools: %v", len(tools), byID)
	}
	create := string(byID["http:createPet"].Descriptor.InputSchema)
	for _, want := range []string{`"required":["body"]`, `"tag":{"type":["string","null"]}`, `"maxLength":40`, `"parent":{}`} {
		if !strings.Contains(create, want) {
			t.Errorf("createPet schema lacks %s: %s", want, create)
		}
	}
	list := string(byID["http:listPets"].Descriptor.InputSchema)
	if !strings.Contains(list, `"limit":{"description":"How many pets at most","maximum":100,"minimum":1,"type":"integer"}`) || !strings.Contains(list, `"X-Request-Id"`) {
		t.Errorf("listPets schema: %s", list)
	}
	if d := byID["http:deletePet"].Descriptor; d.SafetyTier != "write" || d.Description != "Remove a pet" {
		t.Errorf("deletePet: %+v", d)
	}
	// No server in config: the document's, variables at their defaults.
	s := byID["http:getPet"].Invoker.(*invoker).s
	if s.base != "http://pets.example.com/api" {
		t.Errorf("base %q", s.base)
	}
}

// A broken or hostile document is an error naming it, never a panic.
func TestOpenAPIBadDocuments(t *testing.T) {
	for name, doc := range map[string]string{
		"not yaml":     "{{{",
		"swagger 2":    "swagger: '2.0'\ninfo: {title: x, version: '1'}\npaths: {}\n",
		"invalid":      "openapi: 3.0.3\ninfo: {title: x}\npaths: {}\n",
		"external ref": "openapi: 3.0.3\ninfo: {title: x, version: '1'}\nservers: [{url: 'http://a.example'}]\npaths:\n  /a:\n    get:\n      operationId: a\n      parameters: [{$ref: 'http://127.0.0.1:1/p.yaml'}]\n      responses: {'200': {description: ok}}\n",
		"no server":    "openapi: 3.0.3\ninfo: {title: x, version: '1'}\npaths:\n  /a:\n    get:\n      operationId: a\n      responses: {'200': {description: ok}}\n",
	} {
		_, err := convert(context.Background(), "doc-"+strings.ReplaceAll(name, " ", "-")+".yaml", []byte(doc), config.OpenAPI{Timeout: "30s", MaxResponseBytes: 1},
			DefaultClient("", config.Egress{}), nil, nil)
		if err == nil || !strings.Contains(err.Error(), "doc-"+strings.ReplaceAll(name, " ", "-")+".yaml") {
			t.Errorf("%s: %v", name, err)
		}
	}
}

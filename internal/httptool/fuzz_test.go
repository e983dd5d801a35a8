package httptool

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/internal/config"
)

// FuzzConvert feeds untrusted OpenAPI documents to the import: it never
// panics (convert's recover would hide one, so the fuzzer calls the loader
// path and fails on the "cannot be read" message), and every tool it
// returns has a valid descriptor whose inputSchema is JSON.
func FuzzConvert(f *testing.F) {
	if b, err := os.ReadFile("testdata/petstore.yaml"); err == nil {
		f.Add(b)
	}
	f.Add([]byte(`{"openapi":"3.1.0","info":{"title":"t","version":"1"},"servers":[{"url":"http://x.example"}],"paths":{"/a/{b}":{"get":{"operationId":"a b","parameters":[{"name":"b","in":"path","required":true,"schema":{"type":"string","exclusiveMinimum":3}}],"responses":{"200":{"description":"ok"}}}}}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		tools, err := convert(context.Background(), "fuzz.yaml", data, config.OpenAPI{Server: "http://127.0.0.1:1", Timeout: "1s", MaxResponseBytes: 64},
			DefaultClient("", config.Egress{}), nil, nil)
		if err != nil {
			if strings.Contains(err.Error(), "cannot be read (") && strings.Contains(err.Error(), "runtime error") {
				t.Fatalf("panic in the import: %v", err)
			}
			return
		}
		for _, tl := range tools {
			if err := tl.Descriptor.Validate(); err != nil {
				t.Fatalf("invalid descriptor: %v", err)
			}
			if !json.Valid(tl.Descriptor.InputSchema) {
				t.Fatalf("inputSchema is not JSON: %s", tl.Descriptor.InputSchema)
			}
		}
	})
}

// FuzzAnswer feeds untrusted responses (status, Content-Type, body) to
// the result mapping: it never panics, its output is always a JSON
// CallToolResult, the credential never survives, and the error code is
// one of the documented ones.
func FuzzAnswer(f *testing.F) {
	f.Add(200, "application/json", []byte(`{"a":"sekret-value-1"}`))
	f.Add(200, "application/problem+json", []byte(`[1,2,"sekret-value-1"]`))
	f.Add(404, "text/plain", []byte("not here sekret-value-1"))
	f.Add(200, "text/plain; charset=utf-8", bytes.Repeat([]byte("é"), 100))
	f.Add(200, "application/octet-stream", []byte{0, 1, 2, 0xff})
	f.Add(204, "", []byte{})
	f.Fuzz(func(t *testing.T, status int, ct string, body []byte) {
		if status < 100 || status > 999 {
			return
		}
		s := spec{id: "http:f", maxBytes: 64}
		resp := &http.Response{StatusCode: status, Header: http.Header{"Content-Type": {ct}}, Body: io.NopCloser(bytes.NewReader(nil))}
		read := body
		if len(read) > 65 {
			read = read[:65]
		}
		out, err := answer(s, resp, read, map[string]string{"k": "sekret-value-1"})
		if !json.Valid(out) {
			t.Fatalf("output is not JSON: %q (%v)", out, err)
		}
		var r struct {
			Content []struct{ Text string } `json:"content"`
		}
		if json.Unmarshal(out, &r) != nil || len(r.Content) == 0 {
			t.Fatalf("output is not a CallToolResult: %s", out)
		}
		if bytes.Contains(out, []byte("sekret-value-1")) || (err != nil && strings.Contains(err.Error(), "sekret-value-1")) {
			t.Fatalf("credential survives: %s %v", out, err)
		}
		switch c := errcode.CodeOf(err); c {
		case "", errcode.ToolExecutionFailed, errcode.ResponseTooLarge:
		default:
			t.Fatalf("code %s", c)
		}
	})
}

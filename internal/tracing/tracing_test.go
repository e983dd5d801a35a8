package tracing_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/internal/config"
	"github.com/toolgate/toolgate/internal/tracing"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

// Off (the default, or OTEL_SDK_DISABLED=true) installs nothing: New
// returns nil, whose Tracer is nil (the pipeline then does no tracing).
func TestOffInstallsNothing(t *testing.T) {
	for _, c := range []struct {
		cfg config.Tracing
		env map[string]string
	}{
		{config.Tracing{}, nil},
		{config.Tracing{Enabled: true}, map[string]string{"OTEL_SDK_DISABLED": "true"}},
	} {
		p, err := tracing.New(t.Context(), c.cfg, tracing.Options{Getenv: env(c.env), Exporter: tracetest.NewInMemoryExporter()})
		if err != nil || p != nil || p.Tracer() != nil || p.Shutdown(t.Context()) != nil {
			t.Errorf("%+v %v: provider %v, err %v", c.cfg, c.env, p, err)
		}
	}
}

// The protocol: the config key, else the OTEL_* variables (traces first),
// else http; an unsupported one is invalid_config naming the variable.
func TestProtocol(t *testing.T) {
	for _, c := range []struct {
		cfg  string
		env  map[string]string
		want string
	}{
		{"", nil, "http"},
		{"grpc", map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}, "grpc"},
		{"", map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, "grpc"},
		{"", map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf"}, "http"},
	} {
		got, err := tracing.Protocol(config.Tracing{Protocol: c.cfg}, env(c.env))
		if err != nil || got != c.want {
			t.Errorf("%q %v: %q %v, want %q", c.cfg, c.env, got, err, c.want)
		}
	}
	_, err := tracing.New(t.Context(), config.Tracing{Enabled: true}, tracing.Options{Getenv: env(map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"})})
	if errcode.CodeOf(err) != errcode.InvalidConfig || !strings.Contains(err.Error(), "OTEL_EXPORTER_OTLP_PROTOCOL") {
		t.Errorf("http/json: %v", err)
	}
}

// W3C Trace Context in and out: a header's or _meta's traceparent becomes
// the parent; Transport sends the context's span as traceparent and leaves
// a request without one alone.
func TestPropagation(t *testing.T) {
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	h := http.Header{}
	h.Set("Traceparent", tp)
	sc := trace.SpanContextFromContext(tracing.Extract(context.Background(), h))
	if !sc.IsRemote() || sc.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || sc.SpanID().String() != "00f067aa0ba902b7" {
		t.Errorf("header: %v", sc)
	}
	meta := map[string]any{"traceparent": "00-5bf92f3577b34da6a3ce929d0e0e4736-10f067aa0ba902b7-01", "tracestate": "v=1"}
	ctx := tracing.ExtractMeta(tracing.Extract(context.Background(), h), meta)
	sc = trace.SpanContextFromContext(ctx)
	if sc.TraceID().String() != "5bf92f3577b34da6a3ce929d0e0e4736" || sc.TraceState().Get("v") != "1" {
		t.Errorf("_meta does not win over the header: %v", sc)
	}
	if sc := trace.SpanContextFromContext(tracing.ExtractMeta(context.Background(), map[string]any{"traceparent": "garbage"})); sc.IsValid() {
		t.Errorf("a malformed traceparent gave %v", sc)
	}
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got = append(got, r.Header.Get("Traceparent")) }))
	defer srv.Close()
	cl := &http.Client{Transport: tracing.Transport{}}
	for _, c := range []context.Context{context.Background(), ctx} {
		req, _ := http.NewRequestWithContext(c, http.MethodGet, srv.URL, nil)
		resp, err := cl.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if req.Header.Get("Traceparent") != "" {
			t.Error("Transport modified the caller's request")
		}
	}
	if len(got) != 2 || got[0] != "" || got[1] != "00-5bf92f3577b34da6a3ce929d0e0e4736-10f067aa0ba902b7-01" {
		t.Errorf("traceparents sent: %q", got)
	}
}

// An http endpoint as docs/CONFIG.md shows it (scheme, host and port, no
// path) exports to /v1/traces; an explicit path is kept as given. The
// receiver is an in-process OTLP/HTTP server recording each POST's path.
func TestHTTPEndpointDefaultsTracesPath(t *testing.T) {
	for _, c := range []struct{ suffix, want string }{
		{"", "/v1/traces"},
		{"/", "/v1/traces"},
		{"/custom/traces", "/custom/traces"},
	} {
		paths := make(chan string, 4)
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodPost {
				paths <- r.URL.Path
			}
			w.Header().Set("Content-Type", "application/x-protobuf")
			w.WriteHeader(http.StatusOK)
		}))
		p, err := tracing.New(t.Context(), config.Tracing{Enabled: true, Endpoint: srv.URL + c.suffix, Protocol: "http"}, tracing.Options{Syncer: true})
		if err != nil {
			t.Fatal(err)
		}
		_, span := p.Tracer().Start(t.Context(), "probe")
		span.End() // exported synchronously
		if err := p.Shutdown(t.Context()); err != nil {
			t.Errorf("endpoint %q: shutdown: %v", srv.URL+c.suffix, err)
		}
		select {
		case got := <-paths:
			if got != c.want {
				t.Errorf("endpoint %q: receiver got POST %s, want %s", srv.URL+c.suffix, got, c.want)
			}
		default:
			t.Errorf("endpoint %q: the receiver got no export", srv.URL+c.suffix)
		}
		srv.Close()
	}
}

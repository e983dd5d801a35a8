// Package tracing is toolgate's OpenTelemetry wiring (issue 16 point 2):
// the tracer provider built from the observability.tracing config block and
// the standard OTEL_* environment variables, and the W3C Trace Context
// propagation the transports use (HTTP headers, MCP params._meta).
//
// Tracing is off by default. Off, New returns a nil *Provider, whose Tracer
// is nil: the pipeline then starts no span at all (no SDK tracer provider
// is installed, not even the noop tracer is called), so tracing off costs
// a nil check per stage.
//
// The span tree of one call (see internal/pipeline):
//
//	execute_tool {toolId}            gen_ai.operation.name=execute_tool, …
//	├── toolgate.decide              one per decision (a re-decision after an approval or a mutating hook is another)
//	├── toolgate.approval_wait       when the decision is require_approval
//	├── toolgate.hook {name}         one per hook callback (before, after, on_error)
//	└── toolgate.invoke              the tool (an upstream MCP call: span kind client)
//
// No span attribute carries argument or result content: a call's
// arguments appear only as their argsHash.
package tracing

import (
	"context"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/internal/config"
)

// ScopeName is the instrumentation scope of toolgate's spans.
const ScopeName = "github.com/toolgate/toolgate"

// Options are the parts of New that are not configuration.
type Options struct {
	// ServiceVersion is the resource's service.version (version.String()).
	ServiceVersion string
	// Getenv reads the environment (nil: os.Getenv). Only the variables
	// toolgate itself interprets go through it (OTEL_SDK_DISABLED, the
	// protocol); the SDK and exporters read theirs from the process.
	Getenv func(string) string
	// Exporter, when set, replaces the OTLP exporter (tests: the SDK's
	// in-memory exporter behind the real config path).
	Exporter sdktrace.SpanExporter
	// Syncer exports each span as it ends instead of batching (tests).
	Syncer bool
}

// Provider is an installed SDK tracer provider. A nil *Provider is
// tracing off: Tracer returns nil and Shutdown does nothing. Safe for
// concurrent use.
type Provider struct {
	tp *sdktrace.TracerProvider
}

// New builds the tracer provider that cfg (with the OTEL_* variables)
// asks for, or nil when tracing is off (cfg.Enabled false, or
// OTEL_SDK_DISABLED=true). Errors (invalid_config): a protocol other than
// http, http/protobuf or grpc; an exporter that cannot be built. The
// exporter connects lazily: an unreachable receiver is not an error here
// (spans are dropped and the SDK logs it).
func New(ctx context.Context, cfg config.Tracing, o Options) (*Provider, error) {
	getenv := o.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	if !cfg.Enabled || strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return nil, nil
	}
	exp := o.Exporter
	if exp == nil {
		var err error
		if exp, err = newExporter(ctx, cfg, getenv); err != nil {
			return nil, err
		}
	}
	// service.name defaults to toolgate; OTEL_SERVICE_NAME and
	// OTEL_RESOURCE_ATTRIBUTES (WithFromEnv, merged after) win.
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", "toolgate"), attribute.String("service.version", o.ServiceVersion)),
		resource.WithTelemetrySDK(), resource.WithFromEnv())
	if err != nil {
		return nil, errcode.Wrap(errcode.InvalidConfig, err, "observability.tracing: resource from OTEL_RESOURCE_ATTRIBUTES")
	}
	opts := []sdktrace.TracerProviderOption{sdktrace.WithResource(res)}
	if o.Syncer {
		opts = append(opts, sdktrace.WithSyncer(exp))
	} else {
		opts = append(opts, sdktrace.WithBatcher(exp))
	}
	if r := cfg.SampleRatio; r != nil {
		opts = append(opts, sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(*r))))
	} // else the SDK reads OTEL_TRACES_SAMPLER (default parentbased_always_on)
	return &Provider{tp: sdktrace.NewTracerProvider(opts...)}, nil
}

// Protocol is the OTLP protocol cfg and the environment select: "http" or
// "grpc". Errors (invalid_config): any other value of
// OTEL_EXPORTER_OTLP_TRACES_PROTOCOL or OTEL_EXPORTER_OTLP_PROTOCOL.
func Protocol(cfg config.Tracing, getenv func(string) string) (string, error) {
	if cfg.Protocol != "" {
		return cfg.Protocol, nil
	}
	for _, k := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		switch v := strings.TrimSpace(getenv(k)); v {
		case "":
			continue
		case "grpc":
			return "grpc", nil
		case "http/protobuf", "http":
			return "http", nil
		default:
			return "", errcode.Errorf(errcode.InvalidConfig, "%s %q: toolgate exports grpc or http/protobuf", k, v)
		}
	}
	return "http", nil
}

func newExporter(ctx context.Context, cfg config.Tracing, getenv func(string) string) (sdktrace.SpanExporter, error) {
	proto, err := Protocol(cfg, getenv)
	if err != nil {
		return nil, err
	}
	var exp sdktrace.SpanExporter
	if proto == "grpc" {
		var opts []otlptracegrpc.Option
		if cfg.Endpoint != "" {
			opts = append(opts, otlptracegrpc.WithEndpointURL(cfg.Endpoint))
		}
		exp, err = otlptracegrpc.New(ctx, opts...)
	} else {
		var opts []otlptracehttp.Option
		if cfg.Endpoint != "" {
			opts = append(opts, otlptracehttp.WithEndpointURL(httpTracesURL(cfg.Endpoint)))
		}
		exp, err = otlptracehttp.New(ctx, opts...)
	}
	if err != nil {
		return nil, errcode.Wrap(errcode.InvalidConfig, err, "observability.tracing: building the OTLP "+proto+" exporter")
	}
	return exp, nil
}

// httpTracesURL is endpoint with the OTLP/HTTP traces path /v1/traces when
// its path is empty (or "/"), as docs/CONFIG.md documents: the exporter's
// WithEndpointURL takes the path as given. An explicit path is kept; a
// value that does not parse is passed on for the exporter to refuse.
func httpTracesURL(endpoint string) string {
	u, err := url.Parse(endpoint)
	if err != nil || u.Host == "" {
		return endpoint
	}
	if u.Path == "" || u.Path == "/" {
		u.Path, u.RawPath = "/v1/traces", ""
	}
	return u.String()
}

// Tracer is toolgate's tracer, or nil when p is nil (tracing off).
func (p *Provider) Tracer() trace.Tracer {
	if p == nil {
		return nil
	}
	return p.tp.Tracer(ScopeName)
}

// Shutdown flushes the spans not yet exported and stops the exporter,
// within ctx. Nil-safe.
func (p *Provider) Shutdown(ctx context.Context) error {
	if p == nil {
		return nil
	}
	return p.tp.Shutdown(ctx)
}

// propagator is W3C Trace Context (traceparent, tracestate).
var propagator = propagation.TraceContext{}

// Extract returns ctx with the remote span context of h's traceparent
// (and tracestate) as the parent of the spans started under it; ctx as is
// when h has no valid traceparent. W3C Trace Context.
func Extract(ctx context.Context, h http.Header) context.Context {
	if len(h) == 0 || len(h["Traceparent"]) == 0 {
		return ctx
	}
	return propagator.Extract(ctx, propagation.HeaderCarrier(h))
}

// Meta keys of W3C Trace Context in MCP params._meta.
const (
	MetaTraceparent = "traceparent"
	MetaTracestate  = "tracestate"
)

// ExtractMeta is Extract for an MCP request's params._meta (string values
// of keys traceparent and tracestate); a valid traceparent there wins over
// the HTTP header's.
func ExtractMeta(ctx context.Context, meta map[string]any) context.Context {
	tp, _ := meta[MetaTraceparent].(string)
	if tp == "" {
		return ctx
	}
	ts, _ := meta[MetaTracestate].(string)
	return propagator.Extract(ctx, metaCarrier{tp: tp, ts: ts})
}

// metaCarrier is a read-only TextMapCarrier over the two _meta values.
type metaCarrier struct{ tp, ts string }

func (c metaCarrier) Get(key string) string {
	switch key {
	case MetaTraceparent:
		return c.tp
	case MetaTracestate:
		return c.ts
	}
	return ""
}
func (metaCarrier) Set(string, string) {}
func (metaCarrier) Keys() []string     { return []string{MetaTraceparent, MetaTracestate} }

// Inject sets h's traceparent (and tracestate) from the span context of
// ctx; h is left as is when ctx carries none.
func Inject(ctx context.Context, h http.Header) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return
	}
	propagator.Inject(ctx, propagation.HeaderCarrier(h))
}

// Transport is an http.RoundTripper that sends the span context of each
// request's context as traceparent/tracestate headers (a request whose
// context has none goes out unchanged, without a copy). Base nil is
// http.DefaultTransport. Safe for concurrent use as Base is.
type Transport struct {
	Base http.RoundTripper
}

// RoundTrip adds the trace headers to a clone of r and sends it.
func (t Transport) RoundTrip(r *http.Request) (*http.Response, error) {
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	if !trace.SpanContextFromContext(r.Context()).IsValid() {
		return base.RoundTrip(r)
	}
	r = r.Clone(r.Context())
	propagator.Inject(r.Context(), propagation.HeaderCarrier(r.Header))
	return base.RoundTrip(r)
}

// LogAttrs returns the trace_id and span_id of the span context of ctx
// (lowercase hex), or nil when it has none: the operator log's hook
// (JSON lines carry them when tracing is on).
func LogAttrs(ctx context.Context) []slog.Attr {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return nil
	}
	return []slog.Attr{slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String())}
}

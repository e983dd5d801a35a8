package webhook_test

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/toolgate/toolgate/hook"
	"github.com/toolgate/toolgate/hook/webhook"
)

// spanRecorder is a slog.Handler sending each record's message and the
// span context of the context it was logged with.
type spanRecorder chan struct {
	msg string
	sc  trace.SpanContext
}

func (s spanRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (s spanRecorder) Handle(ctx context.Context, r slog.Record) error {
	s <- struct {
		msg string
		sc  trace.SpanContext
	}{r.Message, trace.SpanContextFromContext(ctx)}
	return nil
}
func (s spanRecorder) WithAttrs([]slog.Attr) slog.Handler { return s }
func (s spanRecorder) WithGroup(string) slog.Handler      { return s }

// A webhook's failure is logged with the callback's context, so the
// operator log's handler finds the call's span there: an enforce hook's
// request that fails (nothing listens) and an observe hook's request that
// its worker sends after the callback returned (answered 500).
func TestFailuresAreLoggedWithTheCallsSpan(t *testing.T) {
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5, 6}, TraceFlags: trace.FlagsSampled})
	ctx := trace.ContextWithSpanContext(context.Background(), sc)
	call := &hook.Call{CallID: "c1", ToolID: "native:t", Principal: "p"}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String() + "/h"
	ln.Close() // nothing listens there now
	rec := make(spanRecorder, 4)
	enf, err := webhook.New(webhook.Options{Name: "guard", Mode: hook.Enforce, URL: closed, Secret: secret, Logger: slog.New(rec)})
	if err != nil {
		t.Fatal(err)
	}
	defer enf.Close()
	if _, err := enf.Before(ctx, call); err == nil {
		t.Fatal("an enforce hook with nothing listening allowed the call")
	}
	if r := <-rec; r.msg != "webhook request failed" || r.sc.TraceID() != sc.TraceID() || r.sc.SpanID() != sc.SpanID() {
		t.Errorf("enforce failure logged as %q with span %v, want the call's %v", r.msg, r.sc, sc)
	}

	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "down", http.StatusInternalServerError)
	}))
	defer srv.Close()
	obs, err := webhook.New(webhook.Options{Name: "watcher", Mode: hook.Observe, URL: srv.URL, Secret: secret, Logger: slog.New(rec)})
	if err != nil {
		t.Fatal(err)
	}
	defer obs.Close()
	cctx, cancel := context.WithCancel(ctx)
	if err := obs.After(cctx, call, &hook.Outcome{Status: "ok"}); err != nil {
		t.Fatal(err)
	}
	cancel() // the call is over before the worker sends
	if r := <-rec; r.msg != "observe webhook failed" || r.sc.TraceID() != sc.TraceID() || r.sc.SpanID() != sc.SpanID() {
		t.Errorf("observe failure logged as %q with span %v, want the call's %v", r.msg, r.sc, sc)
	}
}

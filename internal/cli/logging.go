package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/internal/config"
)

// newLogger builds serve's operator log from the config's log: section:
// log/slog's TextHandler (format text) or JSONHandler (format json, one
// JSON object per line) on w at the configured level, behind a
// redactHandler so that no line, in either format, carries a registered
// credential value or a secret shape.
//
// Tracing (issue 16 point 2) adds trace_id and span_id to JSON lines by
// setting redactHandler.ctxAttrs; nothing else needs to change here.
//
// ctxAttrs, when given (serve passes tracing.LogAttrs when tracing is on),
// adds the attributes it takes from each record's context.
func newLogger(w io.Writer, lc config.Log, red *audit.Redactor, ctxAttrs ...func(context.Context) []slog.Attr) *slog.Logger {
	opts := &slog.HandlerOptions{Level: lc.SlogLevel()}
	var h slog.Handler
	if lc.Format == "json" {
		h = slog.NewJSONHandler(w, opts)
	} else {
		h = slog.NewTextHandler(w, opts)
	}
	rh := &redactHandler{next: h, red: red}
	if len(ctxAttrs) > 0 {
		rh.ctxAttrs = ctxAttrs[0]
	}
	return slog.New(rh)
}

// redactHandler is a slog.Handler that scrubs every record before the next
// handler formats it: the message and every string attribute value (also
// inside groups, and an error's or any other value's text when scrubbing
// changes it) go through the Redactor's identifier rules (registered
// secrets, then every secret shape but the long hex run, which would erase
// the argsHash, key hashes and ids a log line names; see
// audit.Redactor.RedactID). Attribute keys are toolgate's own and are not
// rewritten. Safe for concurrent use, as the next handler is.
type redactHandler struct {
	next slog.Handler
	red  *audit.Redactor
	// ctxAttrs, when set, adds attributes taken from a record's context
	// (the hook for trace_id and span_id); they are scrubbed like the rest.
	ctxAttrs func(context.Context) []slog.Attr
}

// Enabled reports whether the next handler writes records of level l.
func (h *redactHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.next.Enabled(ctx, l)
}

// Handle scrubs r (a copy) and passes it on.
func (h *redactHandler) Handle(ctx context.Context, r slog.Record) error {
	out := slog.NewRecord(r.Time, r.Level, h.red.RedactID(r.Message), r.PC)
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(h.attr(a))
		return true
	})
	if h.ctxAttrs != nil {
		for _, a := range h.ctxAttrs(ctx) {
			out.AddAttrs(h.attr(a))
		}
	}
	return h.next.Handle(ctx, out)
}

// WithAttrs scrubs attrs once, at the time they are bound.
func (h *redactHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	scrubbed := make([]slog.Attr, len(attrs))
	for i, a := range attrs {
		scrubbed[i] = h.attr(a)
	}
	return &redactHandler{next: h.next.WithAttrs(scrubbed), red: h.red, ctxAttrs: h.ctxAttrs}
}

// WithGroup opens a group on the next handler.
func (h *redactHandler) WithGroup(name string) slog.Handler {
	return &redactHandler{next: h.next.WithGroup(name), red: h.red, ctxAttrs: h.ctxAttrs}
}

// attr is a with its value scrubbed.
func (h *redactHandler) attr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		return slog.String(a.Key, h.red.RedactID(v.String()))
	case slog.KindGroup:
		g := v.Group()
		out := make([]slog.Attr, len(g))
		for i, ga := range g {
			out[i] = h.attr(ga)
		}
		return slog.Attr{Key: a.Key, Value: slog.GroupValue(out...)}
	case slog.KindAny:
		// An error, a Stringer or a struct: its text is what a handler
		// prints (an error's Error(), else fmt's %+v, close to both
		// handlers' forms). Kept as is unless scrubbing changes it.
		var text string
		if err, ok := v.Any().(error); ok {
			text = err.Error()
		} else {
			text = fmt.Sprintf("%+v", v.Any())
		}
		if s := h.red.RedactID(text); s != text {
			return slog.String(a.Key, s)
		}
		return slog.Attr{Key: a.Key, Value: v}
	default:
		return slog.Attr{Key: a.Key, Value: v} // numbers, bools, times, durations
	}
}

package pipeline

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolgate/toolgate/catalog"
	"github.com/toolgate/toolgate/errcode"
	"github.com/toolgate/toolgate/hook"
	"github.com/toolgate/toolgate/policy"
)

// Tracing (issue 16 point 2). With Options.Tracer nil nothing here runs
// beyond a nil check. Span names and attributes follow the OpenTelemetry
// GenAI semantic conventions for tool execution (span "execute_tool
// {gen_ai.tool.name}", kind internal, gen_ai.operation.name,
// gen_ai.tool.name, gen_ai.tool.call.id, gen_ai.tool.type, error.type),
// plus toolgate.* attributes. No attribute holds argument or result
// content: the arguments appear as toolgate.args_hash only.

// Span and attribute names of the call's spans.
const (
	SpanDecide       = "toolgate.decide"
	SpanApprovalWait = "toolgate.approval_wait"
	SpanHookPrefix   = "toolgate.hook "
	SpanInvoke       = "toolgate.invoke"
)

// startCallSpan starts the call's execute_tool span (a child of the span
// context in ctx, local or remote).
func (p *Pipeline) startCallSpan(ctx context.Context, cs *callState) (context.Context, trace.Span) {
	id := cs.res.ToolID
	return p.opts.Tracer.Start(ctx, "execute_tool "+id, trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(
		attribute.String("gen_ai.operation.name", "execute_tool"),
		attribute.String("gen_ai.tool.name", id),
		attribute.String("gen_ai.tool.call.id", cs.c.CallID),
		attribute.String("gen_ai.tool.type", "extension"),
		attribute.String("toolgate.tool_id", id),
		attribute.String("toolgate.transport", string(cs.c.Transport)),
		attribute.String("toolgate.run_id", cs.c.RunID),
		attribute.String("toolgate.args_hash", cs.res.RequestedArgsHash),
	))
}

// endCallSpan records the call's outcome on its span and ends it.
func endCallSpan(span trace.Span, res *Result, err error) {
	d := res.Decision
	attrs := []attribute.KeyValue{
		attribute.String("toolgate.decision", string(d.Effect)),
		attribute.String("toolgate.rule_id", d.RuleID),
		attribute.String("toolgate.status", string(res.Status)),
	}
	if res.ExecutedArgsHash != res.RequestedArgsHash {
		attrs = append(attrs, attribute.String("toolgate.executed_args_hash", res.ExecutedArgsHash))
	}
	if res.ReceiptID != "" {
		attrs = append(attrs, attribute.String("toolgate.receipt_id", res.ReceiptID))
	}
	if res.ApprovalID != "" {
		attrs = append(attrs, attribute.String("toolgate.approval_id", res.ApprovalID))
	}
	code := ""
	switch {
	case err != nil:
		code = string(errcode.CodeOf(err))
	case res.Err != nil:
		code = string(res.Err.Code)
	}
	if code != "" {
		attrs = append(attrs, attribute.String("error.type", code))
		// The code only: messages are for the audit record and the caller.
		span.SetStatus(codes.Error, code)
	}
	span.SetAttributes(attrs...)
	span.End()
}

// decideSpan starts a decision's span; nil when tracing is off.
func (p *Pipeline) decideSpan(ctx context.Context) trace.Span {
	if p.opts.Tracer == nil {
		return nil
	}
	_, span := p.opts.Tracer.Start(ctx, SpanDecide)
	return span
}

// endDecideSpan records decision d on span (nil: nothing).
func endDecideSpan(span trace.Span, d policy.Decision) {
	if span == nil {
		return
	}
	span.SetAttributes(attribute.String("toolgate.decision", string(d.Effect)), attribute.String("toolgate.rule_id", d.RuleID),
		attribute.String("toolgate.decision.layer", d.Layer), attribute.Bool("toolgate.decision.would_deny", d.WouldDeny))
	span.End()
}

// childSpan starts a child span of the call's span in ctx; the span is
// nil (and ctx unchanged) when tracing is off.
func (p *Pipeline) childSpan(ctx context.Context, name string, kind trace.SpanKind, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	if p.opts.Tracer == nil {
		return ctx, nil
	}
	return p.opts.Tracer.Start(ctx, name, trace.WithSpanKind(kind), trace.WithAttributes(attrs...))
}

// endSpan ends span (nil: nothing), with error.type code when code is set.
func endSpan(span trace.Span, code errcode.Code, attrs ...attribute.KeyValue) {
	if span == nil {
		return
	}
	if code != "" {
		attrs = append(attrs, attribute.String("error.type", string(code)))
		span.SetStatus(codes.Error, string(code))
	}
	span.SetAttributes(attrs...)
	span.End()
}

// hookSpan starts the span of one hook callback (phase before, after or
// on_error).
func (p *Pipeline) hookSpan(ctx context.Context, reg hook.Registration, phase string) (context.Context, trace.Span) {
	if p.opts.Tracer == nil {
		return ctx, nil
	}
	return p.childSpan(ctx, SpanHookPrefix+reg.Name, trace.SpanKindInternal, attribute.String("toolgate.hook.name", reg.Name),
		attribute.String("toolgate.hook.phase", phase), attribute.String("toolgate.hook.mode", string(reg.Mode)))
}

// invokeSpan starts the span of the tool's invocation: kind client for
// an upstream MCP server's tool (its request carries the span's context).
func (p *Pipeline) invokeSpan(ctx context.Context, t *catalog.Tool) (context.Context, trace.Span) {
	if p.opts.Tracer == nil {
		return ctx, nil
	}
	kind := trace.SpanKindInternal
	attrs := []attribute.KeyValue{attribute.String("toolgate.tool_id", t.Descriptor.ToolID)}
	if t.Server != "" {
		kind = trace.SpanKindClient
		attrs = append(attrs, attribute.String("toolgate.server", t.Server))
	}
	return p.childSpan(ctx, SpanInvoke, kind, attrs...)
}

// endHookSpan records a hook callback's outcome: error.type
// hook_failed when it failed (timed out, panicked, returned an error),
// toolgate.hook.denied and toolgate.hook.mutated for a before verdict.
func endHookSpan(span trace.Span, err error, denied, mutated bool) {
	var code errcode.Code
	if err != nil {
		code = "hook_failed"
	}
	endSpan(span, code, attribute.Bool("toolgate.hook.denied", denied), attribute.Bool("toolgate.hook.mutated", mutated))
}

package activities

// Spans of the calls that leave the process. A model turn's and a tool
// call's own span is the Temporal tracing interceptor's RunActivity span
// (the worker registers it, see worker.TracingInterceptor); these helpers
// add its attributes and a child span for the model call or the tool
// execution, with the OpenTelemetry GenAI semantic conventions.
//
// The tracer comes from the span in the context, not from the global
// provider: a worker without tracing pays nothing (the span is a no-op), and
// two workers in one process with two providers never mix their spans.

import (
	"cmp"
	"context"
	"errors"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/keyed"
	"github.com/agentsaga/agentsaga/internal/wire"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/trace"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
)

// tracerName is the instrumentation scope of agentsaga's own spans.
const tracerName = "github.com/agentsaga/agentsaga/activities"

// agentsaga's span attributes, beside the GenAI ones.
const (
	// attrIdempotencyKey is the call's key: workflow ID + "/" + activity ID.
	attrIdempotencyKey = attribute.Key("agentsaga.idempotency_key")
	// attrAttempt is the activity attempt, from 1.
	attrAttempt = attribute.Key("agentsaga.attempt")
	// attrRetryDenial names the budget that refused a retry (a budget.Deny*
	// value), on the span of the attempt that was refused.
	attrRetryDenial = attribute.Key("agentsaga.retry.denial")
	// attrCompensates is the forward key a compensation undoes.
	attrCompensates = attribute.Key("agentsaga.compensates")
	// attrFallbackFor, on a model call's span, is the spec's first model
	// (provider:name) when a fallback answers the turn for it.
	attrFallbackFor = attribute.Key("agentsaga.model.fallback_for")
)

// callAttributes are the key and attempt of the running activity.
func callAttributes(ctx context.Context) []attribute.KeyValue {
	return []attribute.KeyValue{
		attrIdempotencyKey.String(keyed.CallKey(ctx)),
		attrAttempt.Int(int(activity.GetInfo(ctx).Attempt)),
	}
}

// markCall puts the key and the attempt on the activity's span, so a trace
// can be matched to the ledger's rows for the same call.
func markCall(ctx context.Context) {
	trace.SpanFromContext(ctx).SetAttributes(callAttributes(ctx)...)
}

// markDenial records on the attempt's span which budget refused its retry.
func markDenial(ctx context.Context, reason string) {
	trace.SpanFromContext(ctx).SetAttributes(attrRetryDenial.String(reason))
}

// startSpan starts a child of the activity's span for one call to the
// outside world.
func startSpan(ctx context.Context, name string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	tracer := trace.SpanFromContext(ctx).TracerProvider().Tracer(tracerName)
	return tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(append(callAttributes(ctx), attrs...)...))
}

// startModelSpan starts the span of one model call, "chat <model>". A
// spec without a model name (the scripted model) is named by its provider.
func startModelSpan(ctx context.Context, call wire.ModelCall) (context.Context, trace.Span) {
	spec := call.Model
	model := cmp.Or(spec.Name, spec.Provider)
	attrs := []attribute.KeyValue{semconv.GenAIOperationNameChat,
		semconv.GenAIProviderNameKey.String(spec.Provider),
		semconv.GenAIRequestModel(model)}
	if call.TurnOf != "" {
		attrs = append(attrs, attrFallbackFor.String(call.TurnOf))
	}
	return startSpan(ctx, "chat "+model, attrs...)
}

// endModelSpan records what the model call cost, or how it failed.
func endModelSpan(span trace.Span, turn agentsagatype.ModelTurn, err error) {
	if err == nil {
		span.SetAttributes(
			semconv.GenAIUsageInputTokens(int(turn.Usage.InputTokens)),
			semconv.GenAIUsageOutputTokens(int(turn.Usage.OutputTokens)))
		if turn.Model != "" {
			span.SetAttributes(semconv.GenAIResponseModel(turn.Model))
		}
	}
	endSpan(span, err)
}

// startToolSpan starts the span of one tool execution: "execute_tool
// <name>", or "compensate <name>" for a compensation.
func startToolSpan(ctx context.Context, req wire.ToolCallRequest) (context.Context, trace.Span) {
	name := "execute_tool " + req.Tool.Name
	attrs := []attribute.KeyValue{semconv.GenAIOperationNameExecuteTool, semconv.GenAIToolName(req.Tool.Name)}
	if req.Compensates != "" {
		name = "compensate " + req.Tool.Name
		attrs = append(attrs, attrCompensates.String(req.Compensates))
	}
	if req.Record != nil && req.Record.ToolCallID != "" {
		attrs = append(attrs, semconv.GenAIToolCallID(req.Record.ToolCallID))
	}
	return startSpan(ctx, name, attrs...)
}

// endSpan ends span, marking it failed with err's activity error type (the
// type the UI and the retry hook see) as error.type.
func endSpan(span trace.Span, err error) {
	if err != nil {
		errType := wire.ErrTypeTransient
		var appErr *temporal.ApplicationError
		if errors.As(toActivityError(err), &appErr) {
			errType = appErr.Type()
		}
		span.SetAttributes(semconv.ErrorTypeKey.String(errType))
		span.RecordError(err)
		span.SetStatus(codes.Error, cleanText(err.Error()))
	}
	span.End()
}

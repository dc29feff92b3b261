package worker

// Tracing: OpenTelemetry spans for runs, activities and what they call.
// Workflow-side spans come only from Temporal's contrib/opentelemetry
// interceptor, which makes none for what a replay re-executes (the run's own
// RunWorkflow span excepted: a worker that rebuilds a run from history starts
// it anew); agentsaga's own spans (model and tool calls) are started in
// activities, which never replay.

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// serviceName is the service.name of the worker's spans unless
// OTEL_SERVICE_NAME (or OTEL_RESOURCE_ATTRIBUTES) says otherwise.
const serviceName = "agentsaga"

// tracerProviderFromEnv returns a tracer provider that exports over
// OTLP/HTTP when OTEL_EXPORTER_OTLP_ENDPOINT (or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) is set, and a nil provider otherwise:
// tracing is off unless someone collects it. The exporter reads the rest of
// the standard OTEL_EXPORTER_OTLP_* variables (headers, timeout, TLS), the
// SDK reads OTEL_TRACES_SAMPLER. shutdown flushes the spans still batched
// and is safe to call when the provider is nil.
func tracerProviderFromEnv(ctx context.Context) (tp trace.TracerProvider, shutdown func(context.Context) error, err error) {
	noop := func(context.Context) error { return nil }
	if os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
		return nil, noop, nil
	}
	exporter, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, noop, fmt.Errorf("worker: OTLP trace exporter (OTEL_EXPORTER_OTLP_ENDPOINT): %w", err)
	}
	// Later options win: the environment names the service over the default.
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", serviceName)),
		resource.WithTelemetrySDK(),
		resource.WithFromEnv())
	if err != nil {
		_ = exporter.Shutdown(ctx)
		return nil, noop, fmt.Errorf("worker: trace resource (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES): %w", err)
	}
	provider := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exporter), sdktrace.WithResource(res))
	return provider, provider.Shutdown, nil
}

// flushTraces shuts the tracer provider down when the worker stops, on a
// context of its own: the worker's has ended by then.
func flushTraces(logger *slog.Logger, shutdown func(context.Context) error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := shutdown(ctx); err != nil {
		logger.Warn("worker: could not flush the last spans to the OTLP endpoint", "error", err)
	}
}

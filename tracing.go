package agentsaga

import (
	"errors"
	"fmt"

	"go.opentelemetry.io/otel/trace"
	temporalotel "go.temporal.io/sdk/contrib/opentelemetry"
	"go.temporal.io/sdk/interceptor"
)

// tracingInterceptor is Temporal's OpenTelemetry interceptor on tp: a span
// per workflow run (RunWorkflow:AgentRun), per activity scheduled
// (StartActivity) and per activity attempt (RunActivity), linked through
// Temporal headers into one trace per run. Config.TracerProvider puts it on the
// engine's workers (WorkerOptions); do not also put it on the client the worker is built from: a client's interceptors
// reach its workers too, and each span would be made twice.
func tracingInterceptor(tp trace.TracerProvider) (interceptor.Interceptor, error) {
	if tp == nil {
		return nil, errors.New("agentsaga: tracing interceptor: the tracer provider is nil")
	}
	i, err := temporalotel.NewTracingInterceptor(temporalotel.TracerOptions{
		Tracer: tp.Tracer("go.temporal.io/sdk/contrib/opentelemetry"),
		// `agentsaga run --wait` and the UI query runs often; those spans
		// would bury the run's own.
		DisableQueryTracing: true,
	})
	if err != nil {
		return nil, fmt.Errorf("agentsaga: tracing interceptor: %w", err)
	}
	return i, nil
}

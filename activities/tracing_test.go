package activities_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	temporalotel "go.temporal.io/sdk/contrib/opentelemetry"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"

	"github.com/agentsaga/agentsaga/activities"
	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/budget"
	"github.com/agentsaga/agentsaga/internal/ledgertest"
	"github.com/agentsaga/agentsaga/internal/wire"
)

// tracedEnv is an activity environment traced as a worker with tracing
// traces: Temporal's interceptor first, then the retry hook on retry.
func tracedEnv(t *testing.T, acts *activities.Activities, retry activities.RetryStore) (*testsuite.TestActivityEnvironment, *tracetest.InMemoryExporter) {
	t.Helper()
	exporter := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exporter))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	tracing, err := temporalotel.NewTracingInterceptor(temporalotel.TracerOptions{Tracer: tp.Tracer("test")})
	require.NoError(t, err)
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestActivityEnvironment()
	env.SetWorkerOptions(worker.Options{DeadlockDetectionTimeout: tolerantDeadlock, Interceptors: []interceptor.WorkerInterceptor{
		tracing, activities.NewRetryHook(retry, activities.RetryHookConfig{Bucket: "fleet"}),
	}})
	activities.Register(env, acts, true)
	return env, exporter
}

// span returns the one ended span named name.
func span(t *testing.T, exporter *tracetest.InMemoryExporter, name string) tracetest.SpanStub {
	t.Helper()
	var found []tracetest.SpanStub
	for _, s := range exporter.GetSpans() {
		if s.Name == name {
			found = append(found, s)
		}
	}
	require.Len(t, found, 1, "spans named %q among %d", name, len(exporter.GetSpans()))
	return found[0]
}

func attrs(s tracetest.SpanStub) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes {
		m[kv.Key] = kv.Value
	}
	return m
}

// A tool call whose retry a budget refuses: the attempt's span names the
// budget, and the tool's span under it carries the GenAI attributes and
// the failure.
func TestToolCallSpanCarriesKeyAttemptAndDenial(t *testing.T) {
	t.Parallel()
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer ts.Close()
	acts := &activities.Activities{Ledger: ledgertest.NewStore(t)}
	env, exporter := tracedEnv(t, acts, &fakeRetryStore{breaker: "closed", decision: budget.DenyRunRatio})

	_, err := env.ExecuteActivity(acts.CallTool, wire.ToolCallRequest{
		Tool: agentsagatype.ToolSpec{Name: "charge", Kind: agentsagatype.ToolKindHTTP, URL: ts.URL}, Arguments: `{}`,
		Retry: agentsagatype.RetryPlan{Tool: "charge", Dependency: "tool:charge", MaxAttempts: 3, ToolRetryCap: 6, RunAllowance: 5,
			BackoffBase: 500 * time.Millisecond, BackoffCap: 8 * time.Second}})
	var appErr *temporal.ApplicationError
	require.ErrorAs(t, err, &appErr)
	require.Equal(t, budget.DenyRunRatio, appErr.Type())

	run := span(t, exporter, "RunActivity:CallTool")
	runAttrs := attrs(run)
	key := runAttrs[activities.AttrIdempotencyKey].AsString()
	assert.Regexp(t, `^default-test-workflow-id/.+`, key, "workflow ID + / + activity ID")
	assert.Equal(t, int64(1), runAttrs[activities.AttrAttempt].AsInt64())
	assert.Equal(t, budget.DenyRunRatio, runAttrs[activities.AttrRetryDenial].AsString())

	tool := span(t, exporter, "execute_tool charge")
	assert.Equal(t, run.SpanContext.SpanID(), tool.Parent.SpanID(), "the tool's span is a child of the attempt's")
	assert.Equal(t, run.SpanContext.TraceID(), tool.SpanContext.TraceID())
	toolAttrs := attrs(tool)
	assert.Equal(t, "execute_tool", toolAttrs["gen_ai.operation.name"].AsString())
	assert.Equal(t, "charge", toolAttrs["gen_ai.tool.name"].AsString())
	assert.Equal(t, key, toolAttrs[activities.AttrIdempotencyKey].AsString())
	assert.Equal(t, int64(1), toolAttrs[activities.AttrAttempt].AsInt64())
	assert.Equal(t, wire.ErrTypeHTTP, toolAttrs["error.type"].AsString())
	assert.Equal(t, codes.Error, tool.Status.Code)
	_, denied := toolAttrs[activities.AttrRetryDenial]
	assert.False(t, denied, "the denial belongs to the attempt, not to the request that failed")
}

// A compensation is its own span, named for what it is and pointing at the
// call it undoes; a call that succeeds is not marked failed or denied.
func TestCompensationSpan(t *testing.T) {
	t.Parallel()
	acts := &activities.Activities{Ledger: ledgertest.NewStore(t), Toolbox: activities.NewToolbox()}
	acts.Toolbox.Register("refund", func(context.Context, activities.ToolInvocation) (string, error) { return `{"refunded": true}`, nil })
	env, exporter := tracedEnv(t, acts, &fakeRetryStore{breaker: "closed", decision: budget.Granted})

	_, err := env.ExecuteActivity(acts.CallTool, wire.ToolCallRequest{
		Tool: agentsagatype.ToolSpec{Name: "refund", Kind: agentsagatype.ToolKindGo}, Arguments: `{}`,
		Compensates: "default-test-workflow-id/step-001-call-1-charge"})
	require.NoError(t, err)

	comp := span(t, exporter, "compensate refund")
	compAttrs := attrs(comp)
	assert.Equal(t, "execute_tool", compAttrs["gen_ai.operation.name"].AsString())
	assert.Equal(t, "refund", compAttrs["gen_ai.tool.name"].AsString())
	assert.Equal(t, "default-test-workflow-id/step-001-call-1-charge", compAttrs[activities.AttrCompensates].AsString())
	assert.Equal(t, codes.Unset, comp.Status.Code)
	assert.Equal(t, span(t, exporter, "RunActivity:CallTool").SpanContext.SpanID(), comp.Parent.SpanID())
	assert.Empty(t, exporter.GetSpans()[0].Events, "no error recorded")
	for _, s := range exporter.GetSpans() {
		_, denied := attrs(s)[activities.AttrRetryDenial]
		assert.False(t, denied, "%s: nothing was denied", s.Name)
	}
}

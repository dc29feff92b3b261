package worker_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/protobuf/proto"

	"github.com/agentsaga/agentsaga"
	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/ledgertest"
	"github.com/agentsaga/agentsaga/worker"
	"github.com/agentsaga/agentsaga/workflows"
)

// spanIndex reads a trace from the in-memory exporter.
type spanIndex struct {
	spans []tracetest.SpanStub
	byID  map[trace.SpanID]tracetest.SpanStub
}

func indexSpans(spans []tracetest.SpanStub) spanIndex {
	ix := spanIndex{spans: spans, byID: map[trace.SpanID]tracetest.SpanStub{}}
	for _, s := range spans {
		ix.byID[s.SpanContext.SpanID()] = s
	}
	return ix
}

// named returns the spans whose name matches.
func (ix spanIndex) named(match func(string) bool) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, s := range ix.spans {
		if match(s.Name) {
			out = append(out, s)
		}
	}
	return out
}

// activitySpans are the attempts of an activity type, prefixed or not
// (agentsagatype.NamePrefix).
func (ix spanIndex) activitySpans(activityType string) []tracetest.SpanStub {
	return ix.named(func(n string) bool {
		return strings.HasPrefix(n, "RunActivity:") && strings.HasSuffix(n, activityType)
	})
}

// children are the spans whose parent is s.
func (ix spanIndex) children(s tracetest.SpanStub) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, c := range ix.spans {
		if c.Parent.SpanID() == s.SpanContext.SpanID() {
			out = append(out, c)
		}
	}
	return out
}

// descends says whether s has ancestor among its parents, following the
// links the interceptor writes into Temporal headers.
func (ix spanIndex) descends(s, ancestor tracetest.SpanStub) bool {
	for s.Parent.IsValid() {
		parent, ok := ix.byID[s.Parent.SpanID()]
		if !ok {
			return false
		}
		if parent.SpanContext.SpanID() == ancestor.SpanContext.SpanID() {
			return true
		}
		s = parent
	}
	return false
}

func spanAttrs(s tracetest.SpanStub) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes {
		m[kv.Key] = kv.Value
	}
	return m
}

// A run that charges once and then fails is one trace: the run's span, a
// span per model turn with its model call under it, the charge's tool span
// and the refund's compensation span, each with its GenAI and agentsaga
// attributes.
func TestRunIsOneTraceOfTurnsToolCallsAndCompensations(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	store := ledgertest.NewHandle(t)
	pay, url := startPayments(t, func(*payments) {})
	queue := "trace-" + t.Name()
	const id = "trace-run"

	// The script has one turn, so the second model call fails for good and
	// the run compensates the charge.
	spec, err := workflows.ParseSpec([]byte(fmt.Sprintf(`
goal: charge ann, then fail
budget: {steps: 5}
model:
  provider: scripted
  script:
    - tool_calls: [{name: charge, arguments: {customer: ann, amount: 10}}]
`+paymentTools, url)))
	require.NoError(t, err)

	exporter := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exporter))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	w, err := worker.New(ctx, temporalClient, store, worker.Options{Config: agentsaga.Config{TaskQueue: queue, TracerProvider: tp}})
	require.NoError(t, err)
	require.NoError(t, w.Start())
	defer w.Stop()

	run, err := temporalClient.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: queue}, workflows.AgentRun, spec)
	require.NoError(t, err)
	var result workflows.RunResult
	require.NoError(t, run.Get(ctx, &result))
	require.Equal(t, agentsagatype.RunCompensated, result.Status, result.Reason)
	pay.mu.Lock()
	require.Equal(t, []string{"ann"}, pay.refundOrder)
	pay.mu.Unlock()

	// The run's span ends as the workflow function returns, which the
	// client may hear of first.
	var ix spanIndex
	require.Eventually(t, func() bool {
		ix = indexSpans(exporter.GetSpans())
		return len(ix.named(func(n string) bool { return n == "RunWorkflow:AgentRun" })) == 1
	}, 10*time.Second, 50*time.Millisecond, "the run's span")
	runSpan := ix.named(func(n string) bool { return n == "RunWorkflow:AgentRun" })[0]
	traceID := runSpan.SpanContext.TraceID()
	for _, s := range ix.spans {
		assert.Equal(t, traceID, s.SpanContext.TraceID(), "%s is in the run's trace", s.Name)
	}

	// Model turns: the first answers, the second finds the script spent.
	turns := ix.activitySpans("CallModel")
	require.Len(t, turns, 2, "a span per model turn")
	answered := 0
	for _, turn := range turns {
		assert.True(t, ix.descends(turn, runSpan), "%s under the run", turn.Name)
		turnAttrs := spanAttrs(turn)
		key := turnAttrs["agentsaga.idempotency_key"].AsString()
		assert.True(t, strings.HasPrefix(key, id+"/step-"), "key %q", key)
		assert.Equal(t, int64(1), turnAttrs["agentsaga.attempt"].AsInt64())

		calls := ix.children(turn)
		require.Len(t, calls, 1, "one model call under turn %s", key)
		call := calls[0]
		assert.Equal(t, "chat scripted", call.Name)
		assert.Equal(t, trace.SpanKindClient, call.SpanKind)
		callAttrs := spanAttrs(call)
		assert.Equal(t, "chat", callAttrs["gen_ai.operation.name"].AsString())
		assert.Equal(t, "scripted", callAttrs["gen_ai.provider.name"].AsString())
		assert.Equal(t, "scripted", callAttrs["gen_ai.request.model"].AsString())
		assert.Equal(t, key, callAttrs["agentsaga.idempotency_key"].AsString())
		if call.Status.Code == codes.Error {
			assert.Contains(t, call.Status.Description, "the script has 1 turns")
			continue
		}
		answered++
		assert.Positive(t, callAttrs["gen_ai.usage.input_tokens"].AsInt64(), "input tokens of %s", key)
		assert.Positive(t, callAttrs["gen_ai.usage.output_tokens"].AsInt64(), "output tokens of %s", key)
	}
	assert.Equal(t, 1, answered, "one turn answered, one failed")

	// The charge.
	forwardKey := id + "/step-001-call-1-charge"
	charges := ix.named(func(n string) bool { return n == "execute_tool charge" })
	require.Len(t, charges, 1)
	charge := charges[0]
	chargeAttrs := spanAttrs(charge)
	assert.Equal(t, "execute_tool", chargeAttrs["gen_ai.operation.name"].AsString())
	assert.Equal(t, "charge", chargeAttrs["gen_ai.tool.name"].AsString())
	assert.NotEmpty(t, chargeAttrs["gen_ai.tool.call.id"].AsString())
	assert.Equal(t, forwardKey, chargeAttrs["agentsaga.idempotency_key"].AsString())
	assert.Equal(t, int64(1), chargeAttrs["agentsaga.attempt"].AsInt64())
	chargeParent := ix.byID[charge.Parent.SpanID()]
	assert.True(t, strings.HasSuffix(chargeParent.Name, "CallTool"), "the charge runs in its CallTool attempt, not %q", chargeParent.Name)
	assert.Equal(t, forwardKey, spanAttrs(chargeParent)["agentsaga.idempotency_key"].AsString())
	assert.True(t, ix.descends(charge, runSpan))

	// Its refund.
	refunds := ix.named(func(n string) bool { return n == "compensate refund" })
	require.Len(t, refunds, 1)
	refund := refunds[0]
	refundAttrs := spanAttrs(refund)
	assert.Equal(t, "refund", refundAttrs["gen_ai.tool.name"].AsString())
	assert.Equal(t, forwardKey, refundAttrs["agentsaga.compensates"].AsString())
	assert.True(t, strings.HasPrefix(refundAttrs["agentsaga.idempotency_key"].AsString(), forwardKey+"/compensate"),
		"the compensation's own key, not %q", refundAttrs["agentsaga.idempotency_key"].AsString())
	assert.Equal(t, codes.Unset, refund.Status.Code)
	assert.True(t, ix.descends(refund, runSpan), "the compensation is in the run's trace")
	assert.True(t, refund.StartTime.After(charge.EndTime), "the refund follows the charge")
}

// The provider is off without an endpoint, and with one it posts OTLP
// protobuf there once a span ends and the provider is flushed.
func TestTracerProviderFromEnv(t *testing.T) {
	for _, name := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES"} {
		t.Setenv(name, "")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	tp, shutdown, err := worker.TracerProviderFromEnv(ctx)
	require.NoError(t, err)
	assert.Nil(t, tp, "no endpoint, no tracing")
	require.NotNil(t, shutdown)
	assert.NoError(t, shutdown(ctx))

	var mu sync.Mutex
	var got []*collectortrace.ExportTraceServiceRequest
	var paths, types []string
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		req := &collectortrace.ExportTraceServiceRequest{}
		if err == nil {
			err = proto.Unmarshal(body, req)
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		mu.Lock()
		got, paths, types = append(got, req), append(paths, r.Method+" "+r.URL.Path), append(types, r.Header.Get("Content-Type"))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer collector.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.URL)

	tp, shutdown, err = worker.TracerProviderFromEnv(ctx)
	require.NoError(t, err)
	require.NotNil(t, tp)
	_, span := tp.Tracer("test").Start(ctx, "probe")
	span.End()
	mu.Lock()
	assert.Empty(t, got, "spans are batched until the flush")
	mu.Unlock()
	require.NoError(t, shutdown(ctx))

	mu.Lock()
	defer mu.Unlock()
	require.Len(t, got, 1, "one export")
	assert.Equal(t, []string{"POST /v1/traces"}, paths)
	assert.Equal(t, []string{"application/x-protobuf"}, types)
	require.Len(t, got[0].ResourceSpans, 1)
	resourceSpans := got[0].ResourceSpans[0]
	service := ""
	for _, kv := range resourceSpans.Resource.Attributes {
		if kv.Key == "service.name" {
			service = kv.Value.GetStringValue()
		}
	}
	assert.Equal(t, worker.ServiceName, service)
	require.Len(t, resourceSpans.ScopeSpans, 1)
	require.Len(t, resourceSpans.ScopeSpans[0].Spans, 1)
	assert.Equal(t, "probe", resourceSpans.ScopeSpans[0].Spans[0].Name)
}

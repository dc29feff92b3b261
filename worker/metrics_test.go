package worker_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"

	"github.com/agentsaga/agentsaga"
	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/budget"
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/internal/ledgertest"
	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/worker"
	"github.com/agentsaga/agentsaga/workflows"
)

// scrape GETs url and returns its series as "name{labels}" -> value.
func scrape(t *testing.T, url string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	series := map[string]float64{}
	lines := bufio.NewScanner(strings.NewReader(string(body)))
	for lines.Scan() {
		line := lines.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		require.Positive(t, i, "malformed line %q", line)
		v, err := strconv.ParseFloat(line[i+1:], 64)
		require.NoError(t, err, "malformed line %q", line)
		series[line[:i]] = v
	}
	return series
}

// hasPrefix reports whether any series name starts with prefix.
func hasPrefix(series map[string]float64, prefix string) bool {
	for name := range series {
		if strings.HasPrefix(name, prefix) {
			return true
		}
	}
	return false
}

// One run whose tool answers 503 once: the endpoint shows the granted
// retry, the ledger's fleet figures and the Temporal SDK's own metrics.
func TestMetricsReportRetriesLedgerAndSDK(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	store := ledgertest.NewHandle(t)
	m, err := worker.NewMetrics(store)
	require.NoError(t, err)
	defer m.Close()
	_, err = store.SetSpendCap(ctx, ledger.SpendCap{Account: "acme", Period: ledger.SpendDay, USD: 50}, "ops")
	require.NoError(t, err)
	held, err := ledgerdb.Of(store).ReserveSpend(ctx, "wf/step-001-model", "acme/support", 0.25, time.Minute)
	require.NoError(t, err)
	require.True(t, held.Admitted)
	refused, err := ledgerdb.Of(store).ReserveSpend(ctx, "wf/step-002-model", "acme/support", 60, time.Minute)
	require.NoError(t, err)
	require.False(t, refused.Admitted, "more than the cap")

	// A client of its own on the dev server's connection, reporting to m,
	// as worker.Dial's client does once MetricsHandler is wired.
	c, err := client.NewClientFromExisting(temporalClient, client.Options{
		Namespace: "default", MetricsHandler: m.TemporalHandler()})
	require.NoError(t, err)
	defer c.Close()

	var requests atomic.Int32
	flaky := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if requests.Add(1) == 1 {
			http.Error(w, `{"error":"down"}`, http.StatusServiceUnavailable)
			return
		}
		fmt.Fprint(w, `{"ok": true}`)
	}))
	defer flaky.Close()

	queue := "metrics-" + t.Name()
	w, err := worker.New(ctx, c, store, worker.Options{Config: agentsaga.Config{TaskQueue: queue, Observe: m.ObserveRetry}})
	require.NoError(t, err)
	require.NoError(t, w.Start())
	defer w.Stop()

	spec, err := workflows.ParseSpec([]byte(fmt.Sprintf(`
goal: call a service that fails once
budget: {steps: 3}
retry: {max_attempts: 3, ratio: 1, floor: 10, tool_retry_cap: 10, backoff_base_seconds: 0.01, backoff_cap_seconds: 0.05}
model:
  provider: scripted
  script:
    - tool_calls: [{name: flaky, arguments: {n: 1}}]
    - content: the service answered
tools:
  - {name: flaky, kind: http, url: "%s/flaky"}
`, flaky.URL)))
	require.NoError(t, err)
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "metrics-run", TaskQueue: queue}, workflows.AgentRun, spec)
	require.NoError(t, err)
	var result workflows.RunResult
	require.NoError(t, run.Get(ctx, &result))
	require.Equal(t, agentsagatype.RunCompleted, result.Status)
	require.Equal(t, int32(2), requests.Load(), "one 503, one retry")

	serveCtx, stopServing := context.WithCancel(ctx)
	addr, err := m.Serve(serveCtx, "127.0.0.1:0")
	require.NoError(t, err)
	url := "http://" + addr.String() + worker.MetricsPath

	// The SDK's metrics reach the registry at tally's next report (1s).
	// Label values keep their characters: the task queue reads as named.
	completed := `temporal_workflow_completed_total{activity_type="none",client_name="temporal_go",namespace="default",` +
		`task_queue="` + queue + `",worker_type="none",workflow_type="AgentRun"}`
	var series map[string]float64
	require.Eventually(t, func() bool {
		series = scrape(t, url)
		return series[completed] == 1
	}, 15*time.Second, 200*time.Millisecond, "the Temporal SDK's metrics are served on the same endpoint")
	assert.True(t, hasPrefix(series, "temporal_request_total{"))
	assert.True(t, hasPrefix(series, "temporal_workflow_task_execution_latency_seconds_bucket{"))

	assert.GreaterOrEqual(t, series[`agentsaga_retry_decisions_total{decision="`+budget.Granted+`",tool="flaky"}`], 1.0)
	assert.Equal(t, 1.0, series["agentsaga_ledger_up"])
	assert.Greater(t, series[`agentsaga_retry_bucket_tokens{bucket="fleet"}`], 0.0)
	assert.Equal(t, budget.DefaultBucket.Capacity, series[`agentsaga_retry_bucket_capacity{bucket="fleet"}`])
	assert.Equal(t, 1.0, series[`agentsaga_runs{status="completed"}`])
	assert.Contains(t, series, `agentsaga_runs{status="failed"}`, "every status is reported, zero included")
	assert.Zero(t, series[`agentsaga_runs{status="running"}`])
	// Two model calls and two attempts of one tool call.
	assert.GreaterOrEqual(t, series["agentsaga_leaf_calls"], 3.0)
	assert.Less(t, series["agentsaga_logical_calls"], series["agentsaga_leaf_calls"])
	assert.Greater(t, series["agentsaga_amplification"], 1.0)
	assert.InDelta(t, series["agentsaga_leaf_calls"]/series["agentsaga_logical_calls"], series["agentsaga_amplification"], 1e-9)
	assert.Contains(t, series, "agentsaga_usd_spent")
	assert.Contains(t, series, "agentsaga_tokens_spent")
	assert.Equal(t, 50.0, series[`agentsaga_spend_cap_usd{account="acme",period="day"}`])
	assert.Equal(t, 0.25, series[`agentsaga_spend_reserved_usd{account="acme",period="day"}`])
	assert.Zero(t, series[`agentsaga_spend_spent_usd{account="acme",period="day"}`])
	assert.Equal(t, 1.0, series[`agentsaga_spend_refusals_total{account="acme",period="day"}`])
	assert.Contains(t, series, `agentsaga_spend_runs_waiting{account="acme",period="day"}`)
	for _, status := range []string{"pending", "failed", "delivered", "dead"} {
		assert.Contains(t, series, `agentsaga_webhook_deliveries{status="`+status+`"}`, "every status of the webhook outbox, zero included")
	}
	assert.Contains(t, series, "agentsaga_webhook_oldest_undelivered_seconds")
	assert.Zero(t, series["agentsaga_webhook_oldest_undelivered_seconds"])
	for name, v := range series {
		if strings.HasPrefix(name, "agentsaga_circuit_breaker_state{") && strings.Contains(name, `state="closed"`) {
			assert.Equal(t, 1.0, v, "%s: one 503 does not open a breaker", name)
		}
	}
	assert.True(t, hasPrefix(series, "go_goroutines"), "the Go runtime's metrics are served")

	// The server stops with its context.
	stopServing()
	require.Eventually(t, func() bool {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
		}
		return err != nil
	}, 10*time.Second, 50*time.Millisecond, "the metrics server shuts down when its context ends")
}

// A ledger that cannot be read fails only its own figures: the scrape
// still answers, with agentsaga_ledger_up 0 and the process's metrics.
func TestMetricsServeWhenLedgerIsDown(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	store := ledgertest.NewHandle(t)
	store.Close()
	m, err := worker.NewMetrics(store)
	require.NoError(t, err)
	defer m.Close()

	addr, err := m.Serve(ctx, "127.0.0.1:0")
	require.NoError(t, err)
	series := scrape(t, "http://"+addr.String()+worker.MetricsPath)
	assert.Equal(t, 0.0, series["agentsaga_ledger_up"])
	assert.NotContains(t, series, "agentsaga_leaf_calls")
	assert.True(t, hasPrefix(series, "go_goroutines"))
}

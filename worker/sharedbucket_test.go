package worker_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"

	"github.com/agentsaga/agentsaga"
	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/budget"
	"github.com/agentsaga/agentsaga/internal/ledgertest"
	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/worker"
	"github.com/agentsaga/agentsaga/workflows"
)

// Two workers pay for retries from one Postgres bucket during a full
// outage: together they are granted exactly what one bucket holds, and a
// 400 is never retried.
func TestTwoWorkersShareOneBucket(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	databaseURL := ledgertest.NewDatabase(t)

	var mu sync.Mutex
	requests := map[string]int{} // path -> requests
	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		requests[r.URL.Path]++
		mu.Unlock()
		if r.URL.Path == "/bad" {
			http.Error(w, `{"error":"bad request"}`, http.StatusBadRequest)
			return
		}
		http.Error(w, `{"error":"down"}`, http.StatusServiceUnavailable)
	}))
	defer down.Close()

	const capacity = 6
	var granted, fleetDenied atomic.Int32
	observe := func(_ agentsagatype.RetryPlan, decision string) {
		switch decision {
		case budget.Granted:
			granted.Add(1)
		case budget.DenyFleetBucket:
			fleetDenied.Add(1)
		}
	}
	queue := "shared-bucket-" + t.Name()
	for range 2 {
		// Each worker has its own pool: a separate process as far as the
		// bucket can tell.
		store, err := ledger.Open(ctx, databaseURL)
		require.NoError(t, err)
		defer store.Close()
		w, err := worker.New(ctx, temporalClient, store, worker.Options{Config: agentsaga.Config{TaskQueue: queue, Bucket: "shared", Observe: observe,
			// No refill and no bonus: the runs' model turns succeed, and
			// their bonuses would let a run whose retries come late take
			// a token another run's success earned.
			BucketConfig: budget.BucketConfig{Capacity: capacity, RefillPerSecond: 0, SuccessBonus: 0},
			Breaker:      budget.BreakerConfig{Threshold: 1000, Window: time.Minute, Cooldown: time.Minute},
		}})
		require.NoError(t, err)
		require.NoError(t, w.Start())
		defer w.Stop()
	}

	spec, err := workflows.ParseSpec([]byte(fmt.Sprintf(`
goal: call a service that is down
budget: {steps: 4}
retry: {max_attempts: 5, ratio: 1, floor: 100, tool_retry_cap: 100, backoff_base_seconds: 0.01, backoff_cap_seconds: 0.05}
model:
  provider: scripted
  script:
    - tool_calls:
        - {name: flaky, arguments: {n: 1}}
        - {name: flaky, arguments: {n: 2}}
        - {name: flaky, arguments: {n: 3}}
        - {name: bad, arguments: {}}
    - content: the service is down
tools:
  - {name: flaky, kind: http, url: "%s/flaky"}
  - {name: bad, kind: http, url: "%s/bad"}
`, down.URL, down.URL)))
	require.NoError(t, err)

	const runs = 6
	var handles []client.WorkflowRun
	for i := range runs {
		run, err := temporalClient.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
			ID: fmt.Sprintf("shared-bucket-%d", i), TaskQueue: queue}, workflows.AgentRun, spec)
		require.NoError(t, err)
		handles = append(handles, run)
	}
	var denied int
	for _, run := range handles {
		var result workflows.RunResult
		require.NoError(t, run.Get(ctx, &result))
		assert.Equal(t, agentsagatype.RunCompleted, result.Status)
		denied += result.Retries.Denials[budget.DenyFleetBucket]
		for _, e := range result.Trace {
			if e.Tool == "bad" {
				assert.Equal(t, 1, e.Attempts, "a 400 is never retried")
			}
			if e.Tool == "flaky" {
				assert.True(t, strings.Contains(e.Error, "HTTP 503"), e.Error)
			}
		}
	}

	// Demand was 6 runs x 3 calls x 4 retries = 72 retries; one bucket of
	// 6 tokens with no refill and no success bonus grants exactly 6.
	assert.Equal(t, int32(capacity), granted.Load(), "two workers were granted what one bucket holds")
	assert.Equal(t, runs*3, int(fleetDenied.Load()), "every flaky call ended on an empty fleet bucket")
	assert.Equal(t, runs*3, denied)
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, runs, requests["/bad"], "the 400 tool was called exactly once per run")
	assert.Equal(t, runs*3+capacity, requests["/flaky"], "downstream saw one request per call plus one per granted retry")
	t.Logf("outage: %d logical flaky calls, %d requests downstream (amplification %.2f), %d granted, %d denied by the fleet bucket",
		runs*3, requests["/flaky"], float64(requests["/flaky"])/float64(runs*3), granted.Load(), fleetDenied.Load())
}

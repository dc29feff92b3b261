package activities_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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

// A call refused by an open breaker says when it may go out again: the
// release slot the gate handed it, as it is. The gate's slots already
// spread the parked calls one per release interval; a jitter on top would
// bunch some of them together again. It also says since when the outage
// has kept the breaker open, which is what the run's wait is measured by.
func TestOpenBreakerSaysWhenToComeBack(t *testing.T) {
	t.Parallel()
	slot := time.Now().Add(3 * time.Second).UTC().Truncate(time.Millisecond)
	opened := slot.Add(-40 * time.Second)
	store := &fakeRetryStore{breaker: budget.BreakerOpen, retryAt: slot, openSince: opened}
	for _, random := range []float64{0, 0.5, 0.999} {
		failure := callThroughHook(t, store, activities.RetryHookConfig{Bucket: "fleet", Breaker: budget.DefaultBreaker,
			Random: func() float64 { return random }}, "http://127.0.0.1:1/never")
		assert.Equal(t, budget.DenyCircuitOpen, failure.Denial)
		assert.True(t, failure.AtGate, "the refused attempt was not made")
		assert.WithinDuration(t, slot, failure.RetryAt, time.Millisecond, "random %v", random)
		assert.WithinDuration(t, opened, failure.OpenSince, time.Millisecond)
	}
}

// A closed breaker is asked once per BreakerStaleness by a worker, however
// many calls it makes; once that has passed, a breaker another worker
// opened is seen, and this worker's own failure that opens it is seen at
// once.
func TestClosedBreakerIsAskedOncePerStaleness(t *testing.T) {
	t.Parallel()
	var requests atomic.Int32
	status := atomic.Int32{}
	status.Store(http.StatusOK)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		w.WriteHeader(int(status.Load()))
	}))
	t.Cleanup(ts.Close)
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); defer mu.Unlock(); now = now.Add(d) }

	store := &fakeRetryStore{breaker: budget.BreakerClosed, decision: budget.Granted}
	hook := activities.NewRetryHook(store, activities.RetryHookConfig{Bucket: "fleet", Breaker: budget.DefaultBreaker, Now: clock})
	call := func() error {
		_, err := executeWithHook(t, hook, ts.URL)
		return err
	}
	for range 5 {
		require.NoError(t, call())
	}
	assert.Equal(t, int32(1), store.gates.Load(), "five calls within the staleness ask the breaker once")

	store.breaker = budget.BreakerOpen // opened by another worker
	require.NoError(t, call(), "within the staleness, the closed answer stands")
	advance(activities.BreakerStaleness)
	err := call()
	var appErr *temporal.ApplicationError
	require.True(t, errors.As(err, &appErr), "%v", err)
	assert.Equal(t, budget.DenyCircuitOpen, appErr.Type(), "after the staleness the open breaker is seen")
	assert.Equal(t, int32(6), requests.Load(), "the refused call was not made")

	// This worker's own failure that opens the breaker is seen at once.
	store.breaker = budget.BreakerClosed
	advance(activities.BreakerStaleness)
	require.NoError(t, call())
	status.Store(http.StatusServiceUnavailable)
	store.breaker = budget.BreakerOpen // what BreakerRecord answers now
	_ = call()
	gates := store.gates.Load()
	err = call()
	require.True(t, errors.As(err, &appErr), "%v", err)
	assert.Equal(t, budget.DenyCircuitOpen, appErr.Type())
	assert.Equal(t, gates+1, store.gates.Load(), "the worker asks the ledger again after its own failure opened the breaker")
}

// executeWithHook runs one CallTool of an HTTP tool at url through hook.
func executeWithHook(t *testing.T, hook *activities.RetryHook, url string) (wire.ToolResult, error) {
	t.Helper()
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestActivityEnvironment()
	env.SetWorkerOptions(worker.Options{DeadlockDetectionTimeout: tolerantDeadlock, Interceptors: []interceptor.WorkerInterceptor{hook}})
	acts := &activities.Activities{Ledger: ledgertest.NewStore(t)}
	activities.Register(env, acts, true)
	value, err := env.ExecuteActivity(acts.CallTool, wire.ToolCallRequest{
		Tool: agentsagatype.ToolSpec{Name: "t", Kind: agentsagatype.ToolKindHTTP, URL: url}, Arguments: `{}`,
		Retry: agentsagatype.RetryPlan{Tool: "t", Dependency: "tool:t", MaxAttempts: 3, ToolRetryCap: 6, RunAllowance: 5,
			BackoffBase: time.Millisecond, BackoffCap: time.Millisecond}})
	var result wire.ToolResult
	if err == nil {
		require.NoError(t, value.Get(&result))
	}
	return result, err
}

// callThroughHook makes one call that the hook refuses or fails, and
// returns what the failure told the workflow.
func callThroughHook(t *testing.T, store *fakeRetryStore, cfg activities.RetryHookConfig, url string) wire.CallFailure {
	t.Helper()
	_, err := executeWithHook(t, activities.NewRetryHook(store, cfg), url)
	var appErr *temporal.ApplicationError
	require.True(t, errors.As(err, &appErr), "%v", err)
	var failure wire.CallFailure
	require.NoError(t, appErr.Details(&failure))
	return failure
}

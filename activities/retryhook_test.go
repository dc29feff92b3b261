package activities_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
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
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/internal/ledgertest"
	"github.com/agentsaga/agentsaga/internal/wire"
)

// fakeRetryStore answers the hook's questions from fixed values and counts
// what it was asked.
type fakeRetryStore struct {
	breaker string
	// recorded, when set, is the state a failure leaves the breaker in
	// (else breaker).
	recorded  string
	retryAt   time.Time // the open breaker's next probe
	openSince time.Time // when the outage opened it
	gates     atomic.Int32
	release   atomic.Int64  // the release interval the last gate was asked with
	pace      time.Duration // how far ahead the paced line books a released call
	paces     atomic.Int32
	// reported is what the bookings in the paced line carried: the
	// released calls seen succeeding since the worker's last booking.
	reported  atomic.Int32
	decision  string
	err       error
	decisions atomic.Int32
	successes atomic.Int32
	failures  atomic.Int32
}

func (f *fakeRetryStore) DecideRetry(context.Context, ledgerdb.RetryRequest) (string, error) {
	f.decisions.Add(1)
	return f.decision, f.err
}
func (f *fakeRetryStore) DepositUnlessFull(context.Context, string, float64) (bool, error) {
	f.successes.Add(1)
	return true, nil
}
func (f *fakeRetryStore) BreakerGate(_ context.Context, _ string, cfg budget.BreakerConfig) (ledgerdb.Gate, error) {
	f.gates.Add(1)
	f.release.Store(int64(cfg.ReleaseInterval()))
	gate := ledgerdb.Gate{State: f.breaker}
	if f.breaker == budget.BreakerOpen {
		gate.RetryAt, gate.OpenSince = f.retryAt, f.openSince
	}
	return gate, nil
}
func (f *fakeRetryStore) BreakerGateFirstSend(ctx context.Context, dependency string, cfg budget.BreakerConfig) (ledgerdb.Gate, error) {
	return f.BreakerGate(ctx, dependency, cfg)
}
func (f *fakeRetryStore) BreakerPace(_ context.Context, _ string, _ budget.BreakerConfig, successes int) (time.Time, error) {
	f.paces.Add(1)
	f.reported.Add(int32(successes))
	return time.Now().Add(f.pace), nil
}
func (f *fakeRetryStore) BreakerReport(_ context.Context, _ string, success, _ bool, _ budget.BreakerConfig) (ledgerdb.BreakerReport, error) {
	if success {
		return ledgerdb.BreakerReport{State: budget.BreakerClosed}, nil
	}
	f.failures.Add(1)
	report := ledgerdb.BreakerReport{State: cmp.Or(f.recorded, f.breaker)}
	if report.State == budget.BreakerOpen {
		report.RetryAt = f.retryAt
	}
	return report, nil
}

func TestRetryHookPaysOrDeniesByName(t *testing.T) {
	t.Parallel()
	statuses := map[string]int{"/down": http.StatusServiceUnavailable, "/bad": http.StatusBadRequest, "/ok": http.StatusOK}
	requests := map[string]*atomic.Int32{}
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests[r.URL.Query().Get("case")].Add(1)
		w.WriteHeader(statuses[r.URL.Path])
	}))
	t.Cleanup(ts.Close) // after the parallel subtests, not when this function returns

	plan := agentsagatype.RetryPlan{Tool: "t", Dependency: "tool:t", MaxAttempts: 3, ToolRetryCap: 6, RunAllowance: 5,
		BackoffBase: 500 * time.Millisecond, BackoffCap: 8 * time.Second}
	cases := []struct {
		name, path  string
		store       *fakeRetryStore
		plan        func(*agentsagatype.RetryPlan)
		wantType    string
		retryable   bool
		wantCalls   int32
		wantPayment int32
	}{
		{name: "granted", path: "/down", store: &fakeRetryStore{breaker: "closed", decision: budget.Granted},
			wantType: wire.ErrTypeHTTP, retryable: true, wantCalls: 1, wantPayment: 1},
		{name: "fleet bucket empty", path: "/down", store: &fakeRetryStore{breaker: "closed", decision: budget.DenyFleetBucket},
			wantType: budget.DenyFleetBucket, wantCalls: 1, wantPayment: 1},
		{name: "run ratio spent", path: "/down", store: &fakeRetryStore{breaker: "closed", decision: budget.DenyRunRatio},
			wantType: budget.DenyRunRatio, wantCalls: 1, wantPayment: 1},
		{name: "per-call cap", path: "/down", store: &fakeRetryStore{breaker: "closed", decision: budget.Granted},
			plan: func(p *agentsagatype.RetryPlan) { p.MaxAttempts = 1 }, wantType: budget.DenyCallAttempts, wantCalls: 1},
		// The dependency is down and this failure opened its breaker: the
		// caller is told to wait for it, not that its attempts are spent.
		{name: "last attempt opens the breaker", path: "/down", store: &fakeRetryStore{breaker: "closed", recorded: "open", decision: budget.Granted},
			plan: func(p *agentsagatype.RetryPlan) { p.MaxAttempts = 1 }, wantType: budget.DenyCircuitOpen, wantCalls: 1},
		{name: "deadline", path: "/down", store: &fakeRetryStore{breaker: "closed", decision: budget.Granted},
			plan: func(p *agentsagatype.RetryPlan) { p.Deadline = time.Now().Add(-time.Second) }, wantType: budget.DenyDeadline, wantCalls: 1},
		{name: "breaker open: not called", path: "/down", store: &fakeRetryStore{breaker: "open"},
			wantType: budget.DenyCircuitOpen, wantCalls: 0},
		{name: "400 is not paid for", path: "/bad", store: &fakeRetryStore{breaker: "closed", decision: budget.Granted},
			wantType: wire.ErrTypeHTTP, wantCalls: 1},
		{name: "ledger down", path: "/down", store: &fakeRetryStore{breaker: "closed", err: errors.New("connection refused")},
			wantType: wire.ErrTypeLedgerUnavailable, retryable: true, wantCalls: 1, wantPayment: 1},
	}
	for _, tc := range cases {
		requests[tc.name] = &atomic.Int32{}
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// Each subtest gets its own ledger: the test environment gives
			// every activity the same ID, so they would share one key.
			t.Parallel()
			store := ledgertest.NewStore(t)
			p := plan
			if tc.plan != nil {
				tc.plan(&p)
			}
			var suite testsuite.WorkflowTestSuite
			env := suite.NewTestActivityEnvironment()
			env.SetWorkerOptions(worker.Options{DeadlockDetectionTimeout: tolerantDeadlock, Interceptors: []interceptor.WorkerInterceptor{
				activities.NewRetryHook(tc.store, activities.RetryHookConfig{Bucket: "fleet"}),
			}})
			acts := &activities.Activities{Ledger: store}
			activities.Register(env, acts, true)
			_, err := env.ExecuteActivity(acts.CallTool, wire.ToolCallRequest{
				Tool: agentsagatype.ToolSpec{Name: "t", Kind: agentsagatype.ToolKindHTTP, URL: ts.URL + tc.path + "?case=" + url.QueryEscape(tc.name)}, Arguments: `{}`, Retry: p})
			var appErr *temporal.ApplicationError
			require.True(t, errors.As(err, &appErr), "%v", err)
			assert.Equal(t, tc.wantType, appErr.Type())
			assert.Equal(t, tc.retryable, !appErr.NonRetryable())
			assert.Equal(t, tc.wantCalls, requests[tc.name].Load(), "requests downstream")
			assert.Equal(t, tc.wantPayment, tc.store.decisions.Load(), "payments asked of the ledger")
			var failure wire.CallFailure
			require.NoError(t, appErr.Details(&failure))
			assert.Equal(t, 1, failure.Attempt)
			if tc.retryable {
				assert.Greater(t, appErr.NextRetryDelay(), time.Duration(0))
				assert.Less(t, appErr.NextRetryDelay(), 500*time.Millisecond, "full jitter under base*2^0 for the first retry")
			} else if tc.wantType != wire.ErrTypeHTTP {
				assert.Equal(t, tc.wantType, failure.Denial)
				assert.Contains(t, appErr.Message(), "retry denied")
			}
		})
	}
}

// A tool that declares the rate its dependency takes gets its parked
// calls back at that rate: the gate hands out release slots a request's
// interval apart (600 a minute, at 95%: 105 ms), not the breaker's own.
func TestDeclaredRateSetsTheReleaseInterval(t *testing.T) {
	t.Parallel()
	ts := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer ts.Close()
	for _, tc := range []struct {
		limit *agentsagatype.RateLimit
		want  time.Duration
	}{
		{nil, budget.DefaultBreaker.ReleaseInterval()},
		{&agentsagatype.RateLimit{RequestsPerMinute: 600}, 105263157 * time.Nanosecond}, // 95% of 10 a second
	} {
		store := &fakeRetryStore{breaker: budget.BreakerOpen, retryAt: time.Now().Add(time.Second)}
		var suite testsuite.WorkflowTestSuite
		env := suite.NewTestActivityEnvironment()
		env.SetWorkerOptions(worker.Options{DeadlockDetectionTimeout: tolerantDeadlock, Interceptors: []interceptor.WorkerInterceptor{
			activities.NewRetryHook(store, activities.RetryHookConfig{Bucket: "fleet", Breaker: budget.DefaultBreaker}),
		}})
		acts := &activities.Activities{Ledger: ledgertest.NewStore(t)}
		activities.Register(env, acts, true)
		_, err := env.ExecuteActivity(acts.CallTool, wire.ToolCallRequest{
			Tool:      agentsagatype.ToolSpec{Name: "echo", Kind: agentsagatype.ToolKindHTTP, URL: ts.URL, RateLimit: tc.limit},
			Arguments: `{}`, Retry: agentsagatype.RetryPlan{Tool: "echo", Dependency: "tool:echo", MaxAttempts: 3}})
		require.Error(t, err, "the open breaker refuses the call")
		assert.Equal(t, tc.want, time.Duration(store.release.Load()), "%+v", tc.limit)
	}
}

// The released calls a worker saw succeed reach the adaptive release rate
// with its next booking in the paced line, which carries them: no
// statement of their own. A first send that succeeds is no evidence about
// the release rate, and is not counted.
func TestReleasedSuccessesRideOnTheNextBooking(t *testing.T) {
	t.Parallel()
	ts := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer ts.Close()
	store := &fakeRetryStore{breaker: budget.BreakerClosed}
	hook := activities.NewRetryHook(store, activities.RetryHookConfig{Bucket: "fleet", Breaker: budget.DefaultBreaker})
	acts := &activities.Activities{Ledger: ledgertest.NewStore(t)}
	call := func(i int, released bool) {
		t.Helper()
		var suite testsuite.WorkflowTestSuite
		env := suite.NewTestActivityEnvironment()
		env.SetWorkerOptions(worker.Options{DeadlockDetectionTimeout: tolerantDeadlock, Interceptors: []interceptor.WorkerInterceptor{hook}})
		activities.Register(env, acts, true)
		_, err := env.ExecuteActivity(acts.CallTool, wire.ToolCallRequest{
			Tool:      agentsagatype.ToolSpec{Name: "echo", Kind: agentsagatype.ToolKindHTTP, URL: ts.URL},
			Arguments: fmt.Sprintf(`{"i":%d}`, i), Key: fmt.Sprintf("wf/call-%d", i),
			Retry: agentsagatype.RetryPlan{Tool: "echo", Dependency: "tool:echo", MaxAttempts: 3, Released: released}})
		require.NoError(t, err)
	}
	call(1, false)
	call(2, true)
	assert.EqualValues(t, 1, store.paces.Load())
	assert.Zero(t, store.reported.Load(), "the first booking has no released success to carry: a first send is none")
	call(3, true)
	call(4, true)
	assert.EqualValues(t, 3, store.paces.Load())
	assert.EqualValues(t, 2, store.reported.Load(), "each booking carried the released successes since the one before it")
}

// A call released from the breaker's queue once the breaker has closed
// waits for its place in the paced line before it goes; a first send does
// not ask for one.
func TestReleasedCallWaitsForItsPlaceInLine(t *testing.T) {
	t.Parallel()
	var sent atomic.Int64
	ts := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { sent.Store(time.Now().UnixNano()) }))
	defer ts.Close()
	for _, released := range []bool{false, true} {
		store := &fakeRetryStore{breaker: budget.BreakerClosed, pace: 600 * time.Millisecond}
		var suite testsuite.WorkflowTestSuite
		env := suite.NewTestActivityEnvironment()
		env.SetWorkerOptions(worker.Options{DeadlockDetectionTimeout: tolerantDeadlock, Interceptors: []interceptor.WorkerInterceptor{
			activities.NewRetryHook(store, activities.RetryHookConfig{Bucket: "fleet", Breaker: budget.DefaultBreaker}),
		}})
		acts := &activities.Activities{Ledger: ledgertest.NewStore(t)}
		activities.Register(env, acts, true)
		start := time.Now()
		_, err := env.ExecuteActivity(acts.CallTool, wire.ToolCallRequest{
			Tool:      agentsagatype.ToolSpec{Name: "echo", Kind: agentsagatype.ToolKindHTTP, URL: ts.URL},
			Arguments: `{}`, Retry: agentsagatype.RetryPlan{Tool: "echo", Dependency: "tool:echo", MaxAttempts: 3, Released: released}})
		require.NoError(t, err)
		waited := time.Duration(sent.Load() - start.UnixNano())
		if released {
			assert.EqualValues(t, 1, store.paces.Load())
			assert.GreaterOrEqual(t, waited, 500*time.Millisecond, "it waited for its place")
		} else {
			assert.Zero(t, store.paces.Load(), "a first send takes no place in line")
		}
	}
}

// A call that failed against a breaker it leaves open (a failed probe,
// which opened it again) waits for the breaker's next probe, which the
// report says: a probe interval after the failure, grown while the outage
// lasts, not a cooldown. The jitter of up to half a cooldown stays, to
// spread the calls that were in flight when it opened. A report that says
// nothing (an older ledger) leaves the call a cooldown from now.
func TestFailedProbeWaitsForTheNextProbe(t *testing.T) {
	t.Parallel()
	cfg := budget.DefaultBreaker
	next := time.Now().Add(cfg.MaxCooldown).UTC().Truncate(time.Millisecond)
	for _, random := range []float64{0, 0.5} {
		jitter := time.Duration(random * float64(cfg.Cooldown/2))
		store := &fakeRetryStore{breaker: ledgerdb.BreakerProbe, recorded: budget.BreakerOpen, retryAt: next}
		failure := callThroughHook(t, store, activities.RetryHookConfig{Bucket: "fleet", Breaker: cfg,
			Random: func() float64 { return random }}, "http://127.0.0.1:1/down")
		assert.Equal(t, budget.DenyCircuitOpen, failure.Denial)
		assert.False(t, failure.AtGate, "the probe was sent")
		assert.WithinDuration(t, next.Add(jitter), failure.RetryAt, time.Millisecond, "random %v", random)

		// Without a probe time from the ledger, a cooldown (and its jitter)
		// from when the hook saw the failure: between the send and the
		// return, however slow the machine.
		store = &fakeRetryStore{breaker: ledgerdb.BreakerProbe, recorded: budget.BreakerOpen}
		sent := time.Now()
		failure = callThroughHook(t, store, activities.RetryHookConfig{Bucket: "fleet", Breaker: cfg,
			Random: func() float64 { return random }}, "http://127.0.0.1:1/down")
		returned := time.Now()
		assert.False(t, failure.RetryAt.Before(sent.Add(cfg.Cooldown+jitter-time.Millisecond)), "random %v: %s", random, failure.RetryAt)
		assert.False(t, failure.RetryAt.After(returned.Add(cfg.Cooldown+jitter+time.Millisecond)), "random %v: %s", random, failure.RetryAt)
	}
}

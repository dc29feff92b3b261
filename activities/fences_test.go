package activities_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/agentsaga/agentsaga/activities"
	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/budget"
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/internal/ledgertest"
	"github.com/agentsaga/agentsaga/internal/toolcheck"
	"github.com/agentsaga/agentsaga/internal/wire"
)

// callToolWorkflow runs one CallTool with a heartbeat timeout, one attempt,
// as the AgentRun workflow would: the activity test environment cannot set
// a heartbeat timeout.

// tolerantDeadlock is the deadlock detector's bound in this package's test
// environments: its default, 1 s, is wall-clock time, which a machine
// loaded by -race and parallel tests spends without any deadlock (a CI run
// at load 12 met it).
const tolerantDeadlock = 10 * time.Second

func callToolWorkflow(ctx workflow.Context, req wire.ToolCallRequest, heartbeat time.Duration) (wire.ToolResult, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		ActivityID: "step-001-call-1-slow", StartToCloseTimeout: time.Minute, HeartbeatTimeout: heartbeat,
		RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: 1},
	})
	var acts *activities.Activities
	var result wire.ToolResult
	err := workflow.ExecuteActivity(ctx, acts.CallTool, req).Get(ctx, &result)
	return result, err
}

func runCallTool(t *testing.T, acts *activities.Activities, tool string, heartbeat time.Duration) (wire.ToolResult, error) {
	t.Helper()
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestWorkflowEnvironment()
	env.SetTestTimeout(time.Minute)
	env.SetWorkerOptions(worker.Options{DeadlockDetectionTimeout: tolerantDeadlock})
	env.RegisterWorkflow(callToolWorkflow)
	activities.Register(env, acts, true)
	env.ExecuteWorkflow(callToolWorkflow, wire.ToolCallRequest{
		Tool: agentsagatype.ToolSpec{Name: tool, Kind: agentsagatype.ToolKindGo}, Arguments: `{}`}, heartbeat)
	require.True(t, env.IsWorkflowCompleted())
	var result wire.ToolResult
	err := env.GetWorkflowError()
	if err == nil {
		require.NoError(t, env.GetWorkflowResult(&result))
	}
	return result, err
}

const slowKey = "default-test-workflow-id/step-001-call-1-slow"

func slowRequest() ledgerdb.ActionRequest {
	return ledgerdb.ActionRequest{Key: slowKey, WorkflowID: "default-test-workflow-id", ActivityID: "step-001-call-1-slow", Tool: "slow", Arguments: "{}"}
}

// The lease follows the attempt, not the tool's timeout: while a slow tool
// runs, its attempt renews the lease; once another attempt takes the key
// over, the first learns it at its next renewal, its tool's context ends,
// and its write is refused.
func TestSupersededAttemptStopsAndCannotWrite(t *testing.T) {
	t.Parallel()
	store := ledgertest.NewStore(t)
	started := make(chan struct{})
	var cause atomic.Value
	toolbox := activities.NewToolbox()
	toolbox.Register("slow", func(ctx context.Context, _ activities.ToolInvocation) (string, error) {
		close(started)
		select {
		case <-ctx.Done():
			cause.Store(context.Cause(ctx))
			return "", ctx.Err()
		case <-time.After(20 * time.Second):
			return "too late", nil
		}
	})
	go func() {
		<-started
		ctx := context.Background()
		// Another attempt finds the lease lapsed (as after a long pause)
		// and takes the key over.
		_, err := store.Pool().Exec(ctx, `UPDATE actions SET locked_until = clock_timestamp() - interval '1 second' WHERE idempotency_key = $1`, slowKey)
		assert.NoError(t, err)
		_, err = store.ClaimAction(ctx, slowRequest(), time.Minute)
		assert.NoError(t, err)
	}()
	began := time.Now()
	_, err := runCallTool(t, &activities.Activities{Ledger: store, Toolbox: toolbox}, "slow", time.Second)
	require.Error(t, err)
	assert.Less(t, time.Since(began), 5*time.Second, "stopped at a renewal, not at the tool's timeout")
	got, _ := cause.Load().(error)
	assert.ErrorIs(t, got, ledgerdb.ErrLeaseLost)
	action, err := store.GetAction(context.Background(), slowKey)
	require.NoError(t, err)
	assert.Equal(t, agentsagatype.ActionStarted, action.Status, "the superseded attempt's failure did not overwrite the holder's claim")
	assert.Equal(t, 2, action.Attempts)
}

// An attempt waiting for a key heartbeats, so it outlives its heartbeat
// timeout while the holder's lease is live, and takes the key over as soon
// as that lease lapses (a holder that died).
func TestWaitingClaimHeartbeatsAndTakesOverALapsedLease(t *testing.T) {
	t.Parallel()
	store := ledgertest.NewStore(t)
	_, err := store.ClaimAction(context.Background(), slowRequest(), 3*time.Second) // a worker that died holding it
	require.NoError(t, err)
	var ran atomic.Int32
	toolbox := activities.NewToolbox()
	toolbox.Register("slow", func(context.Context, activities.ToolInvocation) (string, error) {
		ran.Add(1)
		return "done", nil
	})
	began := time.Now()
	result, err := runCallTool(t, &activities.Activities{Ledger: store, Toolbox: toolbox}, "slow", time.Second)
	require.NoError(t, err, "the waiting attempt was not timed out by its 1 s heartbeat timeout")
	assert.Equal(t, "done", result.Output)
	assert.Equal(t, int32(1), ran.Load())
	waited := time.Since(began)
	assert.GreaterOrEqual(t, waited, 2*time.Second, "it waited for the live lease")
	assert.Less(t, waited, 6*time.Second, "and took over once it lapsed")
}

// A stored refusal replays as a refusal, so a duplicate delivery of a
// refused call escalates like the first.
func TestStoredRefusalReplaysAsRefusal(t *testing.T) {
	t.Parallel()
	acts := &activities.Activities{Ledger: ledgertest.NewStore(t), Toolbox: activities.NewToolbox()}
	acts.Toolbox.Register("charge", func(context.Context, activities.ToolInvocation) (string, error) {
		return `{"status":"declined"}`, nil
	})
	tool := agentsagatype.ToolSpec{Name: "charge", Kind: agentsagatype.ToolKindGo, Refusal: []agentsagatype.RefusalRule{{Field: "status", Equals: "declined"}}}
	require.NoError(t, toolcheck.Validate(tool))
	for i := range 2 {
		_, err := newEnv(t, acts).ExecuteActivity(acts.CallTool, wire.ToolCallRequest{Tool: tool, Arguments: `{}`})
		var appErr *temporal.ApplicationError
		require.True(t, errors.As(err, &appErr))
		assert.Equal(t, wire.ErrTypeRefusal, appErr.Type(), "delivery %d", i+1)
	}
}

// The ledger being unreachable says nothing about the tool: the breaker
// does not count it.
func TestLedgerErrorDoesNotCountAgainstTheBreaker(t *testing.T) {
	t.Parallel()
	store := ledgertest.NewStore(t)
	store.Close()
	retry := &fakeRetryStore{breaker: "closed", decision: budget.Granted}
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestActivityEnvironment()
	env.SetWorkerOptions(worker.Options{DeadlockDetectionTimeout: tolerantDeadlock, Interceptors: []interceptor.WorkerInterceptor{
		activities.NewRetryHook(retry, activities.RetryHookConfig{Bucket: "fleet"}),
	}})
	acts := &activities.Activities{Ledger: store, Toolbox: activities.NewToolbox()}
	acts.Toolbox.Register("t", func(context.Context, activities.ToolInvocation) (string, error) { return "ok", nil })
	activities.Register(env, acts, true)
	_, err := env.ExecuteActivity(acts.CallTool, wire.ToolCallRequest{
		Tool: agentsagatype.ToolSpec{Name: "t", Kind: agentsagatype.ToolKindGo}, Arguments: `{}`,
		Retry: agentsagatype.RetryPlan{Tool: "t", Dependency: "tool:t", MaxAttempts: 3, ToolRetryCap: 6, RunAllowance: 5,
			BackoffBase: 500 * time.Millisecond, BackoffCap: 8 * time.Second}})
	var appErr *temporal.ApplicationError
	require.True(t, errors.As(err, &appErr), "%v", err)
	assert.Equal(t, wire.ErrTypeLedgerUnavailable, appErr.Type())
	assert.True(t, !appErr.NonRetryable(), "retried once the ledger is back")
	assert.Zero(t, retry.failures.Load(), "no failure reported to the tool's breaker")
}

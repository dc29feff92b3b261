package workflows_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/agentsaga/agentsaga/activities"
	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/activityid"
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/internal/ledgertest"
	"github.com/agentsaga/agentsaga/internal/wire"
	"github.com/agentsaga/agentsaga/workflows"
)

const terminatedID = "run-terminated"

const terminatedReason = "the workflow was terminated in Temporal by ops: pulled the plug"

// stageTerminatedRun records, as a run would have, a run that charged once
// (its refund registered before the charge) and was then terminated from
// outside and marked so by the reconciler.
func stageTerminatedRun(t *testing.T, store *ledgerdb.Store, url string) {
	t.Helper()
	ctx := context.Background()
	spec := mustSpec(t, fmt.Sprintf(failingRunSpec, url))
	specJSON, err := json.Marshal(spec)
	require.NoError(t, err)
	require.NoError(t, store.StartRun(ctx, agentsagatype.Run{WorkflowID: terminatedID, RunID: "r1", Goal: spec.Goal, Spec: specJSON}))
	key := terminatedID + "/" + activityid.Tool(1, 1, "charge")
	claim, err := store.ClaimAction(ctx, ledgerdb.ActionRequest{Key: key, WorkflowID: terminatedID, ActivityID: activityid.Tool(1, 1, "charge"),
		Tool: "charge", Arguments: `{"amount": 10}`,
		Compensation: &wire.CompensationRequest{Tool: "refund", ArgumentsTemplate: `{"charge_id": "{{result.id}}"}`}}, time.Minute)
	require.NoError(t, err)
	_, err = store.CompleteAction(ctx, key, claim.Action.Attempts, `{"id": "ch_1"}`)
	require.NoError(t, err)
	marked, err := store.MarkTerminated(ctx, terminatedID, terminatedReason)
	require.NoError(t, err)
	require.True(t, marked)
}

// tolerantWorker is the worker options' part that lets a test environment
// live on a machine loaded by -race and parallel tests: the deadlock detector
// waits 10 s rather than 1 s.
var tolerantWorker = worker.Options{DeadlockDetectionTimeout: 10 * time.Second}

// newEnv is a test environment for a machine loaded by -race and parallel
// tests. The testsuite's own wall-clock bound (3 s) counts the real Postgres
// activities, and a CI run on two cores went past it in TestPayloadGuard
// (4.9 s), and in a CI run at load 14 it took more than a minute (its
// 257 KiB reply streams through the run's event log, 8 s alone under
// -race); three minutes still turn a hang into a failure.
func newEnv() *testsuite.TestWorkflowEnvironment {
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestWorkflowEnvironment()
	env.SetWorkerOptions(tolerantWorker)
	env.SetTestTimeout(3 * time.Minute)
	return env
}

func rollbackEnv(t *testing.T, store *ledgerdb.Store) *testsuite.TestWorkflowEnvironment {
	t.Helper()
	env := newEnv()
	env.RegisterWorkflow(workflows.RollbackRun)
	activities.Register(env, &activities.Activities{Ledger: store}, false)
	activities.Register(env, &activities.Reconciliation{Ledger: store}, false)
	env.SetStartWorkflowOptions(client.StartWorkflowOptions{ID: terminatedID})
	return env
}

func runRollback(t *testing.T, env *testsuite.TestWorkflowEnvironment) workflows.RunResult {
	t.Helper()
	env.ExecuteWorkflow(workflows.RollbackRun, wire.RollbackRequest{Reason: terminatedReason})
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
	var result workflows.RunResult
	require.NoError(t, env.GetWorkflowResult(&result))
	return result
}

// RollbackRun walks a terminated run's stack under the run's own workflow
// ID, so the refund's key is the one the run's own walk would have used,
// and ends the run compensated, keeping Temporal's reason. Run again, it
// does nothing.
func TestRollbackRunCompensatesATerminatedRunOnce(t *testing.T) {
	t.Parallel()
	desk := &brokenRefunds{refunds: map[string]int{}}
	server := httptest.NewServer(desk)
	t.Cleanup(server.Close)
	store := ledgertest.NewStore(t)
	stageTerminatedRun(t, store, server.URL)

	result := runRollback(t, rollbackEnv(t, store))
	assert.Equal(t, agentsagatype.RunCompensated, result.Status, result.Reason)
	assert.Equal(t, "terminated: "+terminatedReason+"; compensated 1 actions, 0 needed no undoing", result.Reason)
	assert.Equal(t, map[string]int{terminatedID + "/step-001-call-1-charge/compensate": 1}, desk.refunds)
	run, err := store.GetRun(t.Context(), terminatedID)
	require.NoError(t, err)
	assert.Equal(t, agentsagatype.RunCompensated, run.Status)
	assert.Equal(t, result.Reason, run.Reason)
	assert.NotNil(t, run.FinishedAt)

	again := runRollback(t, rollbackEnv(t, store))
	assert.Equal(t, agentsagatype.RunCompensated, again.Status)
	assert.Contains(t, again.Reason, "nothing to do")
	assert.Equal(t, map[string]int{terminatedID + "/step-001-call-1-charge/compensate": 1}, desk.refunds, "no second refund")
}

// A compensation of a terminated run that keeps failing waits for a human
// as any walk does (the Updates work on the RollbackRun), and the run ends
// needs-attention with Temporal's reason kept.
func TestRollbackRunEscalatesAFailingCompensation(t *testing.T) {
	t.Parallel()
	desk := &brokenRefunds{refunds: map[string]int{}}
	desk.broken.Store(true)
	server := httptest.NewServer(desk)
	t.Cleanup(server.Close)
	store := ledgertest.NewStore(t)
	stageTerminatedRun(t, store, server.URL)

	env := rollbackEnv(t, store)
	var skip *error
	var status string
	env.RegisterDelayedCallback(func() {
		run, err := store.GetRun(context.Background(), terminatedID)
		require.NoError(t, err)
		status = run.Status
		skip = update(env, workflows.UpdateSkip, workflows.ReasonInput{Reason: "alice refunded ch_1 by hand"})
	}, time.Hour)
	result := runRollback(t, env)
	require.NoError(t, *skip)
	assert.Equal(t, agentsagatype.RunNeedsAttention, status, "the ledger said it waits for a human")
	assert.Equal(t, agentsagatype.RunNeedsAttention, result.Status)
	assert.Contains(t, result.Reason, "terminated: "+terminatedReason)
	assert.Contains(t, result.Reason, "alice refunded ch_1 by hand")
	run, err := store.GetRun(t.Context(), terminatedID)
	require.NoError(t, err)
	assert.Equal(t, agentsagatype.RunNeedsAttention, run.Status)
	assert.Contains(t, run.Reason, terminatedReason)
}

// A run that is not marked terminated (it is running, or ended) is never
// walked by a RollbackRun.
func TestRollbackRunLeavesARunThatIsNotMarked(t *testing.T) {
	t.Parallel()
	store := ledgertest.NewStore(t)
	require.NoError(t, store.StartRun(t.Context(), agentsagatype.Run{WorkflowID: terminatedID, RunID: "r1", Goal: "g", Spec: []byte(`{}`)}))
	result := runRollback(t, rollbackEnv(t, store))
	assert.Equal(t, agentsagatype.RunRunning, result.Status)
	assert.Contains(t, result.Reason, "nothing to do")
	run, err := store.GetRun(t.Context(), terminatedID)
	require.NoError(t, err)
	assert.Equal(t, agentsagatype.RunRunning, run.Status)
	assert.Nil(t, run.FinishedAt)
}

// A rollback of a run the ledger has no row for (pruned, or never
// started) fails at once, saying so, instead of retrying the read forever.
func TestRollbackRunOfARunTheLedgerDoesNotHaveFails(t *testing.T) {
	t.Parallel()
	env := rollbackEnv(t, ledgertest.NewStore(t))
	env.ExecuteWorkflow(workflows.RollbackRun, wire.RollbackRequest{Reason: terminatedReason})
	require.True(t, env.IsWorkflowCompleted())
	err := env.GetWorkflowError()
	var appErr *temporal.ApplicationError
	require.ErrorAs(t, err, &appErr)
	assert.Equal(t, wire.ErrTypeRunNotFound, appErr.Type())
	assert.Contains(t, appErr.Error(), "the ledger has no run "+terminatedID)
}

// A terminated run whose spec cannot be read cannot be walked (the
// compensating tools are unknown): it ends needs-attention, saying so.
func TestRollbackRunWithoutASpecNeedsAttention(t *testing.T) {
	t.Parallel()
	store := ledgertest.NewStore(t)
	require.NoError(t, store.StartRun(t.Context(), agentsagatype.Run{WorkflowID: terminatedID, RunID: "r1", Goal: "g", Spec: []byte(`{"budget": "lots"}`)}))
	_, err := store.MarkTerminated(t.Context(), terminatedID, "the workflow vanished")
	require.NoError(t, err)
	result := runRollback(t, rollbackEnv(t, store))
	assert.Equal(t, agentsagatype.RunNeedsAttention, result.Status)
	assert.Contains(t, result.Reason, "terminated: the workflow vanished; its spec could not be read")
	run, err := store.GetRun(t.Context(), terminatedID)
	require.NoError(t, err)
	assert.Equal(t, agentsagatype.RunNeedsAttention, run.Status)
	assert.NotNil(t, run.FinishedAt)
}

// One pass pages through the ledger and starts a rollback for every run
// found terminated; a rollback that cannot be started is reported, and
// the run stays marked for the next pass.
func TestReconcilerPagesAndStartsRollbacks(t *testing.T) {
	t.Parallel()
	env := newEnv()
	env.RegisterWorkflow(workflows.Reconciler)
	activities.Register(env, &activities.Reconciliation{}, false)
	var pages []wire.FindAbandoned
	env.OnActivity(agentsagatype.NamePrefix+"FindAbandonedRuns", mock.Anything, mock.Anything).Return(
		func(_ context.Context, in wire.FindAbandoned) (wire.AbandonedPage, error) {
			pages = append(pages, in)
			if in.After == "" {
				return wire.AbandonedPage{Examined: 2, Live: 1, Next: "b",
					Rollbacks: []wire.AbandonedRun{{WorkflowID: "a", Reason: "terminated", Marked: true}}}, nil
			}
			return wire.AbandonedPage{Examined: 2, Covered: []string{"c/step-001-call-1-helper"},
				Rollbacks: []wire.AbandonedRun{{WorkflowID: "c", Reason: "vanished", Marked: true}}}, nil
		})
	env.OnActivity(agentsagatype.NamePrefix+"StartRollback", mock.Anything, mock.Anything).Return(
		func(_ context.Context, run wire.AbandonedRun) (string, error) {
			if run.WorkflowID == "c" {
				return "", errors.New("temporal is busy")
			}
			return "rollback-of-" + run.WorkflowID, nil
		})
	env.ExecuteWorkflow(workflows.Reconciler, workflows.ReconcileInput{PageSize: 2})
	require.NoError(t, env.GetWorkflowError())
	var result workflows.ReconcileResult
	require.NoError(t, env.GetWorkflowResult(&result))
	assert.Equal(t, []wire.FindAbandoned{{Limit: 2}, {After: "b", Limit: 2}}, pages)
	assert.Equal(t, 4, result.Examined)
	assert.Equal(t, 1, result.Live)
	assert.Equal(t, []workflows.ReconciledRun{{WorkflowID: "a", Reason: "terminated", RollbackRunID: "rollback-of-a"}}, result.Reconciled)
	assert.Equal(t, []string{"c/step-001-call-1-helper"}, result.Covered)
	require.Len(t, result.Errors, 1)
	assert.Contains(t, result.Errors[0], "c: temporal is busy")
}

// The reconciler makes a pass every interval in one execution, a failed
// pass only delays the next, and it continues as new after six hours of
// passes: a handful of entries a day in the operators' list.
func TestReconcilerLoopContinuesAsNewAfterSixHours(t *testing.T) {
	t.Parallel()
	env := newEnv()
	env.RegisterWorkflow(workflows.ReconcilerLoop)
	activities.Register(env, &activities.Reconciliation{}, false)
	passes := 0
	env.OnActivity(agentsagatype.NamePrefix+"FindAbandonedRuns", mock.Anything, mock.Anything).Return(
		func(context.Context, wire.FindAbandoned) (wire.AbandonedPage, error) {
			passes++
			if passes == 2 {
				return wire.AbandonedPage{}, temporal.NewNonRetryableApplicationError("the ledger is down", "LedgerUnavailable", nil)
			}
			return wire.AbandonedPage{Examined: 1, Live: 1}, nil
		})
	start := env.Now()
	env.ExecuteWorkflow(workflows.ReconcilerLoop, workflows.ReconcileLoopInput{})
	var next *workflow.ContinueAsNewError
	require.ErrorAs(t, env.GetWorkflowError(), &next)
	assert.Equal(t, 720, passes, "a pass every 30 s for six hours")
	assert.InDelta(t, (6 * time.Hour).Seconds(), env.Now().Sub(start).Seconds(), 60)
}

// The reconciler starts RollbackRun by its name.
func TestRollbackRunWorkflowName(t *testing.T) {
	t.Parallel()
	env := newEnv()
	env.RegisterWorkflow(workflows.RollbackRun)
	activities.Register(env, &activities.Reconciliation{}, false)
	env.OnActivity(agentsagatype.NamePrefix+"ReadTerminatedRun", mock.Anything, mock.Anything).Return(wire.TerminatedRun{Status: agentsagatype.RunCompleted, Finished: true}, nil)
	env.ExecuteWorkflow(wire.RollbackRunWorkflow, wire.RollbackRequest{})
	require.NoError(t, env.GetWorkflowError())
}

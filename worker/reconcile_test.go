package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/agentsaga/agentsaga"
	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/activityid"
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/internal/ledgertest"
	"github.com/agentsaga/agentsaga/internal/wire"
	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/worker"
	"github.com/agentsaga/agentsaga/workflows"
)

// chargeThenWait charges a customer, then asks for a human and waits.
const chargeThenWait = `
goal: charge %[2]s, then wait for a human
budget: {steps: 6}
model:
  provider: scripted
  script:
    - tool_calls: [{name: charge, arguments: {customer: %[2]s, amount: 10}}]
    - refusal: "the next step needs a human's approval"
    - content: never reached
` + paymentTools

func paymentSpec(t *testing.T, url, customer string) workflows.RunSpec {
	t.Helper()
	spec, err := workflows.ParseSpec([]byte(fmt.Sprintf(chargeThenWait, url, customer)))
	require.NoError(t, err)
	return spec
}

// waitForStatus polls the ledger until the run has status.
func waitForStatus(ctx context.Context, t *testing.T, store *ledger.Store, workflowID, status string) {
	t.Helper()
	for {
		run, err := ledgerdb.Of(store).GetRun(ctx, workflowID)
		if err == nil && run.Status == status {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("run %s never reached status %s (last: %+v, %v)", workflowID, status, run.Status, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// stageVanishedRun records a run that charged bob and whose workflow is
// unknown to Temporal (its retention passed, or its server lost it), as
// an abandoned ledger row.
func stageVanishedRun(ctx context.Context, t *testing.T, store *ledger.Store, workflowID string, spec workflows.RunSpec) {
	t.Helper()
	specJSON, err := json.Marshal(spec)
	require.NoError(t, err)
	require.NoError(t, ledgerdb.Of(store).StartRun(ctx, agentsagatype.Run{WorkflowID: workflowID, RunID: "lost", Goal: spec.Goal, Spec: specJSON}))
	charge := spec.Tools[0]
	activityID := activityid.Tool(1, 1, "charge")
	claim, err := ledgerdb.Of(store).ClaimAction(ctx, ledgerdb.ActionRequest{Key: workflowID + "/" + activityID, WorkflowID: workflowID, ActivityID: activityID,
		Tool: "charge", Arguments: `{"customer": "bob", "amount": 20}`,
		Compensation: &wire.CompensationRequest{Tool: charge.Compensate.Tool, ArgumentsTemplate: string(charge.Compensate.Arguments)}}, time.Minute)
	require.NoError(t, err)
	_, err = ledgerdb.Of(store).CompleteAction(ctx, workflowID+"/"+activityID, claim.Action.Attempts, `{"id": "ch_bob"}`)
	require.NoError(t, err)
}

func reconcilePass(ctx context.Context, t *testing.T, queue, id string) workflows.ReconcileResult {
	t.Helper()
	pass, err := temporalClient.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: queue},
		workflows.Reconciler, workflows.ReconcileInput{})
	require.NoError(t, err)
	var result workflows.ReconcileResult
	require.NoError(t, pass.Get(ctx, &result))
	return result
}

// Three runs end behind the engine's back: one escalated and terminated by
// an operator, one escalated past its workflow run timeout, and one whose
// workflow vanished. One reconciler pass marks each terminated with
// Temporal's reason and walks its stack: every charge is refunded exactly
// once, under the key the run's own walk would have used, and each run
// ends compensated with Temporal's reason kept. A second pass does
// nothing, and a run that completed is never touched.
func TestTerminatedRunsAreReconciledAndCompensatedOnce(t *testing.T) {
	t.Parallel()
	started := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	store := ledgertest.NewHandle(t)
	pay, url := startPayments(t, func(*payments) {})
	queue := "reconcile-" + t.Name()
	w := startWorker(ctx, t, store, queue)
	defer w.Stop()

	done, err := workflows.ParseSpec([]byte("goal: answer\nbudget: {steps: 2}\nmodel: {provider: scripted, script: [{content: done}]}\n"))
	require.NoError(t, err)
	completed, err := temporalClient.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "reconcile-completed", TaskQueue: queue}, workflows.AgentRun, done)
	require.NoError(t, err)
	require.NoError(t, completed.Get(ctx, nil))

	const terminated, timedOut, vanished = "reconcile-terminated", "reconcile-timed-out", "reconcile-vanished"
	_, err = temporalClient.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: terminated, TaskQueue: queue},
		workflows.AgentRun, paymentSpec(t, url, "ann"))
	require.NoError(t, err)
	// The run must reach its wait for a human before it times out: 3 s
	// was not enough at load 15, 12 s is (waitForStatus below says so
	// when it is not).
	timing, err := temporalClient.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: timedOut, TaskQueue: queue, WorkflowRunTimeout: 12 * time.Second},
		workflows.AgentRun, paymentSpec(t, url, "cat"))
	require.NoError(t, err)
	stageVanishedRun(ctx, t, store, vanished, paymentSpec(t, url, "bob"))

	waitForStatus(ctx, t, store, terminated, agentsagatype.RunEscalated)
	waitForStatus(ctx, t, store, timedOut, agentsagatype.RunEscalated)
	require.NoError(t, temporalClient.TerminateWorkflow(ctx, terminated, "", "operator pulled the plug"))
	require.Error(t, timing.Get(ctx, nil), "the run times out while it waits for a human")
	for _, id := range []string{terminated, timedOut} {
		run, err := ledgerdb.Of(store).GetRun(ctx, id)
		require.NoError(t, err)
		assert.Equal(t, agentsagatype.RunEscalated, run.Status, "%s: the ledger does not know yet", id)
	}

	first := reconcilePass(ctx, t, queue, "reconcile-pass-1")
	assert.Equal(t, 3, first.Examined, "the completed run is not looked at")
	reasons := map[string]string{}
	for _, r := range first.Reconciled {
		reasons[r.WorkflowID] = r.Reason
		require.NotEmpty(t, r.RollbackRunID, r.WorkflowID)
		var result workflows.RunResult
		require.NoError(t, temporalClient.GetWorkflow(ctx, r.WorkflowID, r.RollbackRunID).Get(ctx, &result), r.WorkflowID)
		assert.Equal(t, agentsagatype.RunCompensated, result.Status, result.Reason)
		assert.Contains(t, result.Reason, "terminated: "+r.Reason+"; compensated 1 actions")
	}
	require.Len(t, reasons, 3, "%+v", first)
	assert.Regexp(t, `^the workflow was terminated in Temporal by .+: operator pulled the plug$`, reasons[terminated])
	assert.Equal(t, "the workflow timed out in Temporal, run timeout 12s", reasons[timedOut])
	assert.Contains(t, reasons[vanished], "the workflow vanished")

	for id, reason := range reasons {
		run, err := ledgerdb.Of(store).GetRun(ctx, id)
		require.NoError(t, err)
		assert.Equal(t, agentsagatype.RunCompensated, run.Status, id)
		assert.Contains(t, run.Reason, "terminated: "+reason, id)
		assert.NotNil(t, run.FinishedAt, id)
		stack, err := ledgerdb.Of(store).CompensationStack(ctx, id)
		require.NoError(t, err)
		require.Len(t, stack, 1, id)
		assert.Equal(t, agentsagatype.CompensationDone, stack[0].Status, id)
	}

	second := reconcilePass(ctx, t, queue, "reconcile-pass-2")
	assert.Zero(t, second.Examined, "%+v", second)
	assert.Empty(t, second.Reconciled)

	pay.mu.Lock()
	assert.Equal(t, map[string]string{
		terminated + "/step-001-call-1-charge/compensate": "ch_ann",
		timedOut + "/step-001-call-1-charge/compensate":   "ch_cat",
		vanished + "/step-001-call-1-charge/compensate":   "ch_bob",
	}, pay.refunds, "each charge refunded under the key the run's own walk would have used")
	for key := range pay.refunds {
		assert.Equal(t, 1, pay.requests[key], "%s: one refund request, though two passes ran", key)
	}
	pay.mu.Unlock()

	run, err := ledgerdb.Of(store).GetRun(ctx, "reconcile-completed")
	require.NoError(t, err)
	assert.Equal(t, agentsagatype.RunCompleted, run.Status)
	assert.Equal(t, "the model answered", run.Reason)
	t.Logf("reasons: %q", reasons)
	t.Logf("three runs reconciled and compensated, and a second pass, in %s", time.Since(started).Round(time.Millisecond))
}

// A parent terminated while its sub-agent waits for a human: the sub-agent
// is terminated with it (the parent close policy), and the parent's
// rollback walks the whole tree's stack once: the sub-agent's charge is
// refunded once, and the sub-agent's ledger row ends with its parent's.
func TestTerminatedParentCompensatesItsSubAgents(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	store := ledgertest.NewHandle(t)
	pay, url := startPayments(t, func(*payments) {})
	queue := "reconcile-tree-" + t.Name()
	w := startWorker(ctx, t, store, queue)
	defer w.Stop()

	spec, err := workflows.ParseSpec([]byte(fmt.Sprintf(`
goal: let a helper charge dan
budget: {steps: 20}
model:
  provider: scripted
  script:
    - tool_calls: [{name: helper, arguments: {task: "charge dan"}}]
    - content: never reached
agents:
  helper:
    tools: [charge]
    model:
      provider: scripted
      script:
        - tool_calls: [{name: charge, arguments: {customer: dan, amount: 5}}]
        - refusal: "the next step needs a human's approval"
        - content: never reached
`+paymentTools+`
  - {name: helper, kind: agent, parameters: {type: object, properties: {task: {type: string}}, required: [task]}}
`, url)))
	require.NoError(t, err)
	const parent = "reconcile-parent"
	child := parent + "/" + activityid.Tool(1, 1, "helper")
	_, err = temporalClient.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: parent, TaskQueue: queue}, workflows.AgentRun, spec)
	require.NoError(t, err)
	waitForStatus(ctx, t, store, child, agentsagatype.RunEscalated)
	require.NoError(t, temporalClient.TerminateWorkflow(ctx, parent, "", "operator pulled the plug on the tree"))

	first := reconcilePass(ctx, t, queue, "reconcile-tree-pass-1")
	require.Len(t, first.Reconciled, 1, "%+v", first)
	assert.Equal(t, parent, first.Reconciled[0].WorkflowID, "the sub-agent is walked with its parent, not on its own")
	var result workflows.RunResult
	require.NoError(t, temporalClient.GetWorkflow(ctx, parent, first.Reconciled[0].RollbackRunID).Get(ctx, &result))
	assert.Equal(t, agentsagatype.RunCompensated, result.Status, result.Reason)
	assert.Contains(t, result.Reason, "operator pulled the plug on the tree; compensated 1 actions")

	for _, id := range []string{parent, child} {
		run, err := ledgerdb.Of(store).GetRun(ctx, id)
		require.NoError(t, err)
		assert.Equal(t, agentsagatype.RunCompensated, run.Status, id)
		assert.NotNil(t, run.FinishedAt, id)
		assert.Contains(t, run.Reason, "operator pulled the plug on the tree", id)
	}
	second := reconcilePass(ctx, t, queue, "reconcile-tree-pass-2")
	assert.Zero(t, second.Examined, "%+v", second)

	pay.mu.Lock()
	defer pay.mu.Unlock()
	refundKey := child + "/step-001-call-1-charge/compensate"
	assert.Equal(t, map[string]string{refundKey: "ch_dan"}, pay.refunds)
	assert.Equal(t, 1, pay.requests[refundKey])
}

// A worker made with ReconcileEvery makes sure the reconciler runs (a
// second worker finds it running), and deletes the Schedule older builds
// made; the reconciler's first pass reconciles a vanished run, and after
// the worker is replaced the next pass finds nothing left to do. One
// workflow makes every pass: the operators' list gains no entry per pass.
func TestWorkerEnsuresTheReconciler(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	store := ledgertest.NewHandle(t)
	pay, url := startPayments(t, func(*payments) {})
	queue := "reconcile-loop-" + t.Name()
	const vanished = "schedule-vanished"
	stageVanishedRun(ctx, t, store, vanished, paymentSpec(t, url, "bob"))
	// A pass leaves runs younger than 10 s (the engine's reconcileOlderThan).
	_, err := ledgerdb.Of(store).Pool().Exec(ctx, `UPDATE runs SET started_at = started_at - interval '1 minute' WHERE workflow_id = $1`, vanished)
	require.NoError(t, err)
	// What an older build made: a Schedule that starts a pass every 30 s,
	// under the ID the reconciler has now.
	old, err := temporalClient.ScheduleClient().Create(ctx, client.ScheduleOptions{ID: workflows.ReconcilerID,
		Spec: client.ScheduleSpec{Intervals: []client.ScheduleIntervalSpec{{Every: time.Hour}}},
		Action: &client.ScheduleWorkflowAction{ID: workflows.ReconcilerID, Workflow: agentsagatype.NamePrefix + "Reconciler",
			Args: []any{workflows.ReconcileInput{}}, TaskQueue: queue}})
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = old.Delete(context.Background())
		_ = temporalClient.TerminateWorkflow(context.Background(), workflows.ReconcilerID, "", "test over")
	})

	first, err := worker.New(ctx, temporalClient, store, worker.Options{Config: agentsaga.Config{TaskQueue: queue, ReconcileEvery: time.Hour}})
	require.NoError(t, err)
	idle, err := worker.New(ctx, temporalClient, store, worker.Options{Config: agentsaga.Config{TaskQueue: queue, ReconcileEvery: time.Hour}})
	require.NoError(t, err, "a reconciler that runs is not an error")
	t.Cleanup(idle.Stop) // its engine's admission loop ends with it
	_, err = old.Describe(ctx)
	var notFound *serviceerror.NotFound
	require.ErrorAs(t, err, &notFound, "the old Schedule is gone")
	desc, err := temporalClient.DescribeWorkflowExecution(ctx, workflows.ReconcilerID, "")
	require.NoError(t, err)
	assert.Equal(t, agentsagatype.NamePrefix+"ReconcilerLoop", desc.WorkflowExecutionInfo.GetType().GetName())
	assert.Equal(t, queue, desc.WorkflowExecutionInfo.GetTaskQueue())
	assert.Equal(t, enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, desc.WorkflowExecutionInfo.GetStatus())
	execution := desc.WorkflowExecutionInfo.GetExecution().GetRunId()

	require.NoError(t, first.Start())
	pass := reconcilerPass(ctx, t, 1)
	require.Len(t, pass.Reconciled, 1, "%+v", pass)
	assert.Equal(t, vanished, pass.Reconciled[0].WorkflowID)
	var result workflows.RunResult
	require.NoError(t, temporalClient.GetWorkflow(ctx, vanished, pass.Reconciled[0].RollbackRunID).Get(ctx, &result))
	assert.Equal(t, agentsagatype.RunCompensated, result.Status, result.Reason)
	assert.Contains(t, result.Reason, "terminated: the workflow vanished")
	first.Stop()

	// The reconciler lives in Temporal: a new worker's passes go on.
	second, err := worker.New(ctx, temporalClient, store, worker.Options{Config: agentsaga.Config{TaskQueue: queue, ReconcileEvery: time.Hour}})
	require.NoError(t, err)
	require.NoError(t, second.Start())
	defer second.Stop()
	require.NoError(t, temporalClient.SignalWorkflow(ctx, workflows.ReconcilerID, "", workflows.ReconcilePassSignal, nil))
	again := reconcilerPass(ctx, t, 2)
	assert.Zero(t, again.Examined, "%+v", again)
	desc, err = temporalClient.DescribeWorkflowExecution(ctx, workflows.ReconcilerID, "")
	require.NoError(t, err)
	assert.Equal(t, execution, desc.WorkflowExecutionInfo.GetExecution().GetRunId(), "one execution made both passes")

	pay.mu.Lock()
	defer pay.mu.Unlock()
	assert.Equal(t, map[string]string{vanished + "/step-001-call-1-charge/compensate": "ch_bob"}, pay.refunds)
	assert.Equal(t, 1, pay.requests[vanished+"/step-001-call-1-charge/compensate"])
	run, err := ledgerdb.Of(store).GetRun(ctx, vanished)
	require.NoError(t, err)
	assert.Equal(t, agentsagatype.RunCompensated, run.Status)
}

// reconcilerPass waits for the reconciler's nth pass and returns it.
func reconcilerPass(ctx context.Context, t *testing.T, n int) workflows.ReconcileResult {
	t.Helper()
	for {
		value, err := temporalClient.QueryWorkflow(ctx, workflows.ReconcilerID, "", workflows.ReconcileStateQuery)
		if err == nil {
			var state workflows.ReconcileLoopState
			require.NoError(t, value.Get(&state))
			if state.Passes >= n {
				require.Empty(t, state.LastError)
				return state.Last
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the reconciler never made pass %d", n)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// A sub-agent terminated on its own while its parent runs on is reconciled
// on its own: its charge is refunded at once. When the parent later rolls
// back, its walk finds that refund done and does not send it again.
func TestSubAgentTerminatedAloneIsReconciledOnItsOwn(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	store := ledgertest.NewHandle(t)
	pay, url := startPayments(t, func(*payments) {})
	queue := "reconcile-alone-" + t.Name()
	w := startWorker(ctx, t, store, queue)
	defer w.Stop()

	spec, err := workflows.ParseSpec([]byte(fmt.Sprintf(`
goal: let a helper charge eve
budget: {steps: 20}
model:
  provider: scripted
  script:
    - tool_calls: [{name: helper, arguments: {task: "charge eve"}}]
    - refusal: "the helper failed; a human must decide"
    - content: never reached
agents:
  helper:
    tools: [charge]
    model:
      provider: scripted
      script:
        - tool_calls: [{name: charge, arguments: {customer: eve, amount: 5}}]
        - refusal: "the next step needs a human's approval"
        - content: never reached
`+paymentTools+`
  - {name: helper, kind: agent, parameters: {type: object, properties: {task: {type: string}}, required: [task]}}
`, url)))
	require.NoError(t, err)
	const parent = "reconcile-alone-parent"
	child := parent + "/" + activityid.Tool(1, 1, "helper")
	parentRun, err := temporalClient.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: parent, TaskQueue: queue}, workflows.AgentRun, spec)
	require.NoError(t, err)
	waitForStatus(ctx, t, store, child, agentsagatype.RunEscalated)
	require.NoError(t, temporalClient.TerminateWorkflow(ctx, child, "", "operator stopped the helper"))
	waitForStatus(ctx, t, store, parent, agentsagatype.RunEscalated)

	first := reconcilePass(ctx, t, queue, "reconcile-alone-pass-1")
	require.Len(t, first.Reconciled, 1, "%+v", first)
	assert.Equal(t, child, first.Reconciled[0].WorkflowID)
	assert.Equal(t, 1, first.Live, "the parent runs on")
	var result workflows.RunResult
	require.NoError(t, temporalClient.GetWorkflow(ctx, child, first.Reconciled[0].RollbackRunID).Get(ctx, &result))
	assert.Equal(t, agentsagatype.RunCompensated, result.Status, result.Reason)
	assert.Contains(t, result.Reason, "operator stopped the helper; compensated 1 actions")

	update, err := temporalClient.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: parent, UpdateName: workflows.UpdateAbort,
		Args: []any{workflows.ReasonInput{Reason: "ops: stop it all"}}, WaitForStage: client.WorkflowUpdateStageCompleted})
	require.NoError(t, err)
	require.NoError(t, update.Get(ctx, nil))
	var parentResult workflows.RunResult
	require.NoError(t, parentRun.Get(ctx, &parentResult))
	assert.Equal(t, agentsagatype.RunCompensated, parentResult.Status, parentResult.Reason)
	second := reconcilePass(ctx, t, queue, "reconcile-alone-pass-2")
	assert.Zero(t, second.Examined, "%+v", second)

	pay.mu.Lock()
	defer pay.mu.Unlock()
	refundKey := child + "/step-001-call-1-charge/compensate"
	assert.Equal(t, map[string]string{refundKey: "ch_eve"}, pay.refunds)
	assert.Equal(t, 1, pay.requests[refundKey], "the parent's walk found the refund done")
}

package main

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"

	"github.com/agentsaga/agentsaga/agentsagatest"
	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/workflows"
)

const nsKillAwaitingApproval = "fault-kill-awaiting-approval"

// f. A worker process is SIGKILLed while a charge waits for a human's
// approval (issue 24). The approval is sent while no worker runs; a second
// worker takes the run over, records it, and the charge executes exactly
// once, under the key the request was recorded with.
func testWorkerKilledAwaitingApproval(t *testing.T, bin string, temporal *temporalServer) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	const id = "fault-kill-awaiting-approval-run"
	c := temporal.client(t, nsKillAwaitingApproval)
	databaseURL := agentsagatest.NewDatabase(t)
	tool := startToolServer(t, "")

	first := startWorkerProcess(t, bin, "worker-1", temporal.address(), nsKillAwaitingApproval, databaseURL)
	waitPolling(ctx, t, c, first)
	spec, err := workflows.ParseSpec([]byte(`
goal: charge ann, who asked for a large refund
budget: {steps: 4}
model:
  provider: scripted
  script:
    - tool_calls: [{name: charge, arguments: {customer: ann, amount: 900}}]
    - content: charged ann
tools:
  - name: charge
    kind: http
    url: ` + tool.URL + `/charge
    timeout_seconds: 3
    parameters: {type: object, properties: {customer: {type: string}, amount: {type: number}}, required: [customer, amount]}
    approval: {when: "amount > 100"}
`))
	require.NoError(t, err)
	run := startFaultRun(ctx, t, c, id, spec)

	var waiting []workflows.ApprovalWait
	require.Eventually(t, func() bool {
		value, err := c.QueryWorkflow(ctx, id, "", workflows.QueryApprovals)
		return err == nil && value.Get(&waiting) == nil && len(waiting) == 1
	}, 30*time.Second, 50*time.Millisecond, "the charge never waited for approval:\n%s", first.log())
	first.kill()
	require.True(t, killedBySIGKILL(first), "worker-1 died of SIGKILL: %v", first.err)

	decided := make(chan error, 1)
	go func() {
		handle, err := c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: id, UpdateName: workflows.UpdateApprove,
			Args: []any{workflows.ApprovalInput{Call: waiting[0].Call, By: "ops@example.com", Reason: "checked"}}, WaitForStage: client.WorkflowUpdateStageCompleted})
		if err == nil {
			err = handle.Get(ctx, nil)
		}
		decided <- err
	}()
	second := startWorkerProcess(t, bin, "worker-2", temporal.address(), nsKillAwaitingApproval, databaseURL)
	require.NoError(t, <-decided, "the approval applies on worker-2:\n%s", second.log())
	var result workflows.RunResult
	require.NoError(t, run.Get(ctx, &result), "the run finishes on worker-2:\n%s", second.log())
	assert.Equal(t, agentsagatype.RunCompleted, result.Status, result.Reason)

	key := id + "/" + waiting[0].Call
	counts := tool.counts()
	assert.Equal(t, map[string]int{key: 1}, counts.executions, "the approved charge executed exactly once")
	store, err := ledgerdb.Open(ctx, databaseURL)
	require.NoError(t, err)
	defer store.Close()
	approvals, err := store.RunApprovals(ctx, id)
	require.NoError(t, err)
	require.Len(t, approvals, 1)
	assert.Equal(t, agentsagatype.ApprovalApproved, approvals[0].Status)
	assert.Equal(t, "ops@example.com", approvals[0].DecidedBy)
	t.Logf("runs=1 completed=1 kills=1 (SIGKILL awaiting approval) executions of %s=%d; violations=%d",
		key, counts.executions[key], map[bool]int{true: 0, false: 1}[counts.executions[key] == 1])
}

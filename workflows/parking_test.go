package workflows_test

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/agentsaga/agentsaga/budget"
	"github.com/agentsaga/agentsaga/internal/wire"
	"github.com/agentsaga/agentsaga/workflows"
)

// A workflow that schedules its own tool calls shares AgentRun's way of
// meeting an open breaker: the first send is refused at the gate (as the
// retry hook refuses it), the call waits for the breaker's next probe on a
// durable timer, and the second send goes out.
func ExampleWaitOutBreaker() {
	sends := 0
	callCRM := func(ctx context.Context) (string, error) {
		sends++
		if sends == 1 {
			return "", temporal.NewNonRetryableApplicationError("circuit breaker for tool:crm is open", budget.DenyCircuitOpen, nil,
				wire.CallFailure{Attempt: 1, Denial: budget.DenyCircuitOpen, AtGate: true,
					RetryAt: time.Date(2026, 12, 1, 12, 0, 30, 0, time.UTC)})
		}
		return "updated", nil
	}
	run := func(ctx workflow.Context) (string, error) {
		send := func(ctx workflow.Context, activityID string) workflow.Future {
			return workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, workflow.ActivityOptions{ActivityID: activityID,
				StartToCloseTimeout: time.Minute, RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: 1}}), "callCRM")
		}
		var out string
		err := send(ctx, "crm").Get(ctx, &out)
		start := workflow.Now(ctx)
		err, outcome := workflows.WaitOutBreaker(ctx, err, workflows.BreakerWait{Limit: 5 * time.Minute, Summary: "parked: crm"},
			func(ctx workflow.Context, n int) workflow.Future {
				return send(ctx, fmt.Sprintf("crm/after-breaker-%d", n))
			}, &out)
		return fmt.Sprintf("%s after %s: parked %d times, %d leaf calls refused, err %v",
			out, workflow.Now(ctx).Sub(start), outcome.Parks, outcome.LeafCalls, err), nil
	}

	var suite testsuite.WorkflowTestSuite
	suite.SetLogger(log.NewStructuredLogger(slog.New(slog.DiscardHandler)))
	env := suite.NewTestWorkflowEnvironment()
	env.SetWorkerOptions(tolerantWorker)
	env.SetStartTime(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
	env.RegisterActivityWithOptions(callCRM, activity.RegisterOptions{Name: "callCRM"})
	env.RegisterWorkflowWithOptions(run, workflow.RegisterOptions{Name: "run"})
	env.ExecuteWorkflow("run")
	var result string
	_ = env.GetWorkflowResult(&result)
	fmt.Println(result)
	// Output: updated after 30s: parked 1 times, 0 leaf calls refused, err <nil>
}

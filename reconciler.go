package agentsaga

import (
	"context"
	"errors"
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/agentsaga/agentsaga/workflows"
)

// EnsureReconcilerSchedule makes sure the Temporal Schedule that runs the
// reconciler exists: every `every` it starts a reconciler pass
// (ReconcilerWorkflow) on queue, skipping a start while the previous pass
// still runs. A Schedule that already exists (another worker made it) is
// left as it is. The Schedule lives in Temporal, so it outlives every
// worker; watch it in the UI under Schedules, ID
// workflows.ReconcileScheduleID. New calls it for an engine with
// Config.Temporal.
func EnsureReconcilerSchedule(ctx context.Context, c client.Client, queue string, every time.Duration) error {
	_, err := c.ScheduleClient().Create(ctx, client.ScheduleOptions{
		ID:      workflows.ReconcileScheduleID,
		Spec:    client.ScheduleSpec{Intervals: []client.ScheduleIntervalSpec{{Every: every}}},
		Overlap: enumspb.SCHEDULE_OVERLAP_POLICY_SKIP,
		// A pass that was missed (no worker, Temporal down) is not made up
		// for: the next one looks at everything anyway.
		CatchupWindow: time.Minute,
		Note:          "agentsaga: finds runs that ended outside the engine (terminated, timed out, vanished), marks them terminated and walks their compensations",
		Action: &client.ScheduleWorkflowAction{
			ID:                 workflows.ReconcileScheduleID,
			Workflow:           ReconcilerWorkflow,
			Args:               []any{workflows.ReconcileInput{OlderThan: workflows.DefaultReconcileOlderThan}},
			TaskQueue:          queue,
			WorkflowRunTimeout: 10 * time.Minute,
		},
	})
	if errors.Is(err, temporal.ErrScheduleAlreadyRunning) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("agentsaga: create the reconciler's schedule %q: %w", workflows.ReconcileScheduleID, err)
	}
	return nil
}

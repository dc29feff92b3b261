package agentsaga

import (
	"context"
	"errors"
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/agentsaga/agentsaga/workflows"
)

const (
	// reconcileScheduleID is the Schedule that started a pass at a time
	// before the reconciler was one workflow; ensureReconciler deletes it.
	reconcileScheduleID = "agentsaga-reconciler"
	// reconcileOlderThan leaves runs younger than this out of the
	// reconciler's passes: a run that has just started may not have
	// recorded itself yet.
	reconcileOlderThan = 10 * time.Second
)

// ensureReconciler makes sure the reconciler runs: one ReconcilerLoop
// workflow (ID workflows.ReconcilerID) on queue, making a pass every
// `every`. A reconciler already running (another worker started it) is
// left as it is, on its own queue and interval. The workflow lives in
// Temporal, so it outlives every worker; it continues as new every six
// hours, so the workflow list holds a handful of its entries a day. The
// Schedule that builds before it made (a pass every 30 s, each an entry in
// the list) is deleted. New calls it for an engine with Config.Temporal.
func ensureReconciler(ctx context.Context, c client.Client, queue string, every time.Duration) error {
	err := c.ScheduleClient().GetHandle(ctx, reconcileScheduleID).Delete(ctx)
	var notFound *serviceerror.NotFound
	if err != nil && !errors.As(err, &notFound) {
		return fmt.Errorf("agentsaga: delete the reconciler's old schedule %q: %w", reconcileScheduleID, err)
	}
	_, err = c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID:                       workflows.ReconcilerID,
		TaskQueue:                queue,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
		StaticSummary:            "agentsaga reconciler: finds runs that ended outside the engine (terminated, timed out, vanished), marks them terminated and walks their compensations",
	}, reconcilerLoopWorkflow, workflows.ReconcileLoopInput{Every: every, Pass: workflows.ReconcileInput{OlderThan: reconcileOlderThan}})
	if err != nil {
		return fmt.Errorf("agentsaga: start the reconciler %q: %w", workflows.ReconcilerID, err)
	}
	return nil
}

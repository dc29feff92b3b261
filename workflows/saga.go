package workflows

import (
	"fmt"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/activityid"
	"github.com/agentsaga/agentsaga/internal/compensation"
	"github.com/agentsaga/agentsaga/internal/textclip"
	"github.com/agentsaga/agentsaga/internal/wire"
)

func (r *run) setStatus(ctx workflow.Context, status, detail string) {
	ctx, _ = workflow.NewDisconnectedContext(ctx)
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: 30 * time.Second})
	if err := workflow.ExecuteActivity(actx, r.versions.activity(wire.ActivitySetRunStatus),
		wire.RunStatus{WorkflowID: r.workflowID, Status: status, Detail: detail}).Get(ctx, nil); err != nil {
		if temporal.IsCanceledError(err) {
			// Cancelled with the run or its worker: nothing for an operator.
			workflow.GetLogger(ctx).Info("the run's status was not recorded: cancelled", "status", status, "error", err)
			return
		}
		workflow.GetLogger(ctx).Error("could not record the run's status", "status", status, "error", err)
	}
}

// outOfBudget ends a run whose budget or deadline ran out: with a partial
// result, or rolled back when the spec says so.
func (r *run) outOfBudget(ctx workflow.Context, answer, modelNote, reason string) RunResult {
	if r.spec.OnBudgetExhausted == OnBudgetCompensate {
		partial := r.partial(answer, modelNote, reason)
		return r.rollback(ctx, reason, partial.Answer, partial.HandoffNote)
	}
	return r.partial(answer, modelNote, reason)
}

// rollback walks the run's compensations (and its sub-agents') backwards
// and ends the run: compensated, failed (nothing to undo after a failure),
// or needs-attention when a human skipped a compensation or stopped the
// walk, or when an action that cannot be undone had happened.
func (r *run) rollback(ctx workflow.Context, reason, answer, handoff string) RunResult {
	return r.unwind(ctx, false, reason, answer, handoff)
}

func (r *run) unwind(ctx workflow.Context, failed bool, reason, answer, handoff string) RunResult {
	ctx, _ = workflow.NewDisconnectedContext(ctx)
	report, err := compensation.Walk(ctx, &sagaRunner{run: r})
	result := r.end(agentsagatype.RunCompensated, answer, "")
	result.HandoffNote = handoff
	switch {
	case err != nil:
		result.Status, result.Reason = agentsagatype.RunNeedsAttention, reason+"; compensation stopped: "+errorText(err)
	case report.Aborted:
		result.Status = agentsagatype.RunNeedsAttention
		result.Reason = fmt.Sprintf("%s; a human stopped the compensation; still to undo: %s", reason, strings.Join(report.Pending, ", "))
	case len(report.Skipped) > 0:
		result.Status = agentsagatype.RunNeedsAttention
		result.Reason = fmt.Sprintf("%s; resolved by a human: compensated %d, skipped %s", reason, report.Compensated, strings.Join(report.Skipped, "; "))
	case report.Stack == 0 && failed:
		result.Status, result.Reason = agentsagatype.RunFailed, reason+"; nothing to compensate"
	default:
		result.Reason = fmt.Sprintf("%s; compensated %d actions, %d needed no undoing", reason, report.Compensated, report.NotNeeded)
	}
	if len(report.Irreversible) > 0 {
		// The world is changed in a way the rollback cannot undo: say so.
		result.Status = agentsagatype.RunNeedsAttention
		result.Reason += "; not undone, because it cannot be: " + strings.Join(report.Irreversible, "; ")
	}
	result.Saga = &report
	return result
}

// sagaRunner runs compensations as activities, each with its own key
// (<forward key>/compensate) and its own bounded retry policy, outside
// the retry budget: recovery is never denied by the budget that ran out.
type sagaRunner struct{ run *run }

// Fence closes the run in the ledger and waits for attempts still at work
// (bounded by the longest tool timeout: no attempt outlives its own), then
// reads the plan.
func (s *sagaRunner) Fence(ctx workflow.Context) (wire.RollbackPlan, error) {
	longest := time.Duration(0)
	var irreversible []string
	for _, t := range s.run.spec.Tools {
		longest = max(longest, t.Timeout())
		if t.Irreversible {
			irreversible = append(irreversible, t.Name)
		}
	}
	closeCtx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		ActivityID:          "rollback-close",
		StartToCloseTimeout: longest + time.Minute,
		HeartbeatTimeout:    10 * time.Second,
		Summary:             "rollback: fence the run's actions and wait for attempts still at work",
	})
	if err := workflow.ExecuteActivity(closeCtx, s.run.versions.activity(wire.ActivityCloseRun), s.run.workflowID).Get(ctx, nil); err != nil {
		return wire.RollbackPlan{}, fmt.Errorf("the run could not be fenced for its rollback: %w", err)
	}
	planCtx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{ActivityID: "rollback-plan", StartToCloseTimeout: 30 * time.Second})
	var plan wire.RollbackPlan
	err := workflow.ExecuteActivity(planCtx, s.run.versions.activity(wire.ActivityRollbackPlan), wire.RollbackPlanRequest{
		WorkflowID: s.run.workflowID, IrreversibleTools: irreversible}).Get(ctx, &plan)
	if err != nil {
		return wire.RollbackPlan{}, fmt.Errorf("the compensation stack could not be read: %w", err)
	}
	return plan, nil
}

func (s *sagaRunner) Run(ctx workflow.Context, c agentsagatype.Compensation, arguments string, retry int) (string, error) {
	tool, ok := s.run.spec.tool(c.Tool)
	if !ok {
		return "", fmt.Errorf("compensating tool %q is not declared in the spec", c.Tool)
	}
	activityID := activityid.Compensation(compensation.ForwardActivityID(s.run.workflowID, c), retry)
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		ActivityID:          activityID,
		StartToCloseTimeout: tool.Timeout(),
		HeartbeatTimeout:    heartbeatTimeout(tool.Timeout()),
		Summary:             clip("compensate "+c.ForwardActivityID+": "+c.Tool+" "+arguments, 100),
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval: time.Second, BackoffCoefficient: 2, MaximumInterval: 10 * time.Second,
			MaximumAttempts: int32(s.run.spec.CompensationAttempts),
		},
	})
	var result wire.ToolResult
	err := workflow.ExecuteActivity(actx, s.run.versions.activity(wire.ActivityCallTool), wire.ToolCallRequest{
		Tool: tool, Arguments: arguments, Compensates: c.ForwardKey}).Get(ctx, &result)
	entry := TraceEntry{Step: 0, ActivityID: activityID, Kind: "compensation", Tool: c.Tool,
		Arguments: clip(arguments, textclip.PreviewBytes), Output: result.Output, Digest: result.Digest, Attempts: max(result.Attempt, 1)}
	switch failed := classify(err); {
	case err == nil:
		s.run.trace.record(entry)
		return agentsagatype.CompensationDone, nil
	case failed.nothingToUndo:
		entry.Output = "nothing to undo: " + failed.message
		s.run.trace.record(entry)
		return agentsagatype.CompensationNotNeeded, nil
	}
	entry.Error = errorText(err)
	s.run.trace.record(entry)
	return "", err
}

func (s *sagaRunner) Settle(ctx workflow.Context, c agentsagatype.Compensation, status, cause, reason string) error {
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: 30 * time.Second})
	return workflow.ExecuteActivity(actx, s.run.versions.activity(wire.ActivitySettleCompensation), wire.Settlement{
		ForwardKey: c.ForwardKey, Status: status, Error: cause, Reason: reason}).Get(ctx, nil)
}

func (s *sagaRunner) Escalate(ctx workflow.Context, c agentsagatype.Compensation, err error) compensation.Decision {
	why := fmt.Sprintf("The compensation of `%s` (%s) still fails after its retries: %s", c.ForwardKey, c.Tool, errorText(err))
	in := s.run.humans.waitForHuman(ctx, s.run, s.run.note, waitingCompensation, agentsagatype.RunNeedsAttention, why,
		"Update `retry`, `skip` {reason} or `abort` {reason}", 0)
	if in == nil {
		return compensation.Decision{Action: UpdateAbort}
	}
	return compensation.Decision{Action: in.action, Reason: in.reason}
}

// heartbeatTimeout lets a lost worker be noticed well before a long
// tool's timeout.
func heartbeatTimeout(timeout time.Duration) time.Duration {
	return min(timeout, 10*time.Second)
}

package workflows

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/budget"
	"github.com/agentsaga/agentsaga/compensation"
)

// Updates a run accepts while it waits for a human.
const (
	// UpdateResume continues an escalated run with an instruction (and
	// optionally more budget).
	UpdateResume = "resume"
	// UpdateAbort stops an escalated run (which then compensates) or a
	// compensation walk that a failed compensation stopped.
	UpdateAbort = "abort"
	// UpdateRetry runs a failed compensation again.
	UpdateRetry = "retry"
	// UpdateSkip records that a human took responsibility for a failed
	// compensation, and walks on.
	UpdateSkip = "skip"
)

// ResumeInput is the resume Update's argument.
type ResumeInput struct {
	Message  string  `json:"message"`
	AddUSD   float64 `json:"add_usd,omitempty"`
	AddSteps int     `json:"add_steps,omitempty"`
}

// maxInstruction bounds a human's instruction: it is pinned, sent whole in
// every model request, and carried across continue-as-new until then.
const maxInstruction = 16 << 10

// ReasonInput is the argument of skip and abort: who decided, and why.
type ReasonInput struct {
	Reason string `json:"reason"`
}

// What a waiting run waits for.
const (
	waitingNone         = ""
	waitingEscalation   = "escalation"
	waitingCompensation = "compensation"
)

var waitingText = map[string]string{
	waitingEscalation:   "an escalation (resume or abort)",
	waitingCompensation: "a failed compensation (retry, skip or abort)",
}

// humanInput is an accepted Update, for the waiting coroutine to act on.
type humanInput struct {
	action string
	resume ResumeInput
	reason string
}

// registerUpdates installs the Updates. Their validators reject anything
// that does not fit what the run is waiting for, so a rejected Update
// leaves no trace in history.
func (r *run) registerUpdates(ctx workflow.Context) error {
	accept := func(in humanInput) (string, error) {
		if r.input != nil {
			// Two Updates in one workflow task both passed their
			// validators before either handler ran: the second is refused,
			// never silently lost.
			return "", fmt.Errorf("%s: refused: %s was accepted first and is being acted on", in.action, r.input.action)
		}
		r.input = &in
		return "accepted: " + in.action, nil
	}
	waitingFor := func(update string, want ...string) error {
		if r.input != nil {
			return fmt.Errorf("%s: refused: another human input (%s) is pending; send it again once the run acted on it", update, r.input.action)
		}
		for _, w := range want {
			if r.waiting == w {
				return nil
			}
		}
		if r.waiting == waitingNone {
			return fmt.Errorf("%s: the run is not waiting for a human", update)
		}
		return fmt.Errorf("%s: the run is waiting on %s, where %s does not apply", update, waitingText[r.waiting], update)
	}
	needReason := func(update, reason string) error {
		if strings.TrimSpace(reason) == "" {
			return fmt.Errorf("%s: a reason is required (who decided, and why)", update)
		}
		return nil
	}
	updates := []struct {
		name        string
		description string
		handler     any
		validator   any
	}{
		{UpdateResume, "Continue an escalated run: {message} for the model, optional add_usd and add_steps.", func(ctx workflow.Context, in ResumeInput) (string, error) {
			return accept(humanInput{action: UpdateResume, resume: in})
		}, func(ctx workflow.Context, in ResumeInput) error {
			if err := waitingFor(UpdateResume, waitingEscalation); err != nil {
				return err
			}
			switch {
			case strings.TrimSpace(in.Message) == "":
				return errors.New("resume: a message for the model is required")
			case len(in.Message) > maxInstruction:
				return fmt.Errorf("resume: the message is %d KiB; at most %d KiB (an instruction is sent whole in every request)", len(in.Message)>>10, maxInstruction>>10)
			case in.AddUSD < 0 || in.AddSteps < 0:
				return fmt.Errorf("resume: add_usd %v and add_steps %d must not be negative", in.AddUSD, in.AddSteps)
			}
			return nil
		}},
		{UpdateAbort, "Stop an escalated run (it compensates) or a stalled compensation walk: {reason}.", func(ctx workflow.Context, in ReasonInput) (string, error) {
			return accept(humanInput{action: UpdateAbort, reason: in.Reason})
		}, func(ctx workflow.Context, in ReasonInput) error {
			if err := waitingFor(UpdateAbort, waitingEscalation, waitingCompensation); err != nil {
				return err
			}
			return needReason(UpdateAbort, in.Reason)
		}},
		{UpdateRetry, "Run the failed compensation again.", func(ctx workflow.Context) (string, error) {
			return accept(humanInput{action: UpdateRetry})
		}, func(ctx workflow.Context) error {
			return waitingFor(UpdateRetry, waitingCompensation)
		}},
		{UpdateSkip, "Take responsibility for a failed compensation and walk on: {reason}.", func(ctx workflow.Context, in ReasonInput) (string, error) {
			return accept(humanInput{action: UpdateSkip, reason: in.Reason})
		}, func(ctx workflow.Context, in ReasonInput) error {
			if err := waitingFor(UpdateSkip, waitingCompensation); err != nil {
				return err
			}
			return needReason(UpdateSkip, in.Reason)
		}},
	}
	for _, u := range updates {
		if err := workflow.SetUpdateHandlerWithOptions(ctx, u.name, u.handler, workflow.UpdateHandlerOptions{Validator: u.validator, Description: u.description}); err != nil {
			return err
		}
	}
	return nil
}

// waitForHuman records the run as status (escalated or needs-attention),
// shows why in the UI, and waits for an accepted Update, at most until
// timeout (zero: no limit). It returns nil on timeout.
func (r *run) waitForHuman(ctx workflow.Context, waiting, status, why, options string, timeout time.Duration) *humanInput {
	r.waiting, r.input = waiting, nil
	r.setStatus(ctx, status, why)
	r.showProgress(ctx, status, why+"\n\n**Waiting for:** "+options, r.budget.Note(workflow.Now(ctx), r.openBreakers()))
	condition := func() bool { return r.input != nil }
	if timeout > 0 {
		_, _ = workflow.AwaitWithTimeout(ctx, timeout, condition)
	} else {
		_ = workflow.Await(ctx, condition)
	}
	in := r.input
	r.waiting, r.input = waitingNone, nil
	if in != nil {
		r.setStatus(ctx, agentsagatype.RunRunning, "after "+in.action)
	}
	return in
}

func (r *run) setStatus(ctx workflow.Context, status, detail string) {
	ctx, _ = workflow.NewDisconnectedContext(ctx)
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: 30 * time.Second})
	if err := workflow.ExecuteActivity(actx, r.versions.activity(agentsagatype.ActivitySetRunStatus),
		agentsagatype.RunStatus{WorkflowID: r.workflowID, Status: status, Detail: detail}).Get(ctx, nil); err != nil {
		if temporal.IsCanceledError(err) {
			// Cancelled with the run or its worker: nothing for an operator.
			workflow.GetLogger(ctx).Info("the run's status was not recorded: cancelled", "status", status, "error", err)
			return
		}
		workflow.GetLogger(ctx).Error("could not record the run's status", "status", status, "error", err)
	}
}

// escalate pauses the run, budget intact, until a human resumes it (the
// model reads the instruction next turn) or aborts it, or the deadline
// passes. It returns a result when the run ends here.
func (r *run) escalate(ctx workflow.Context, why string) *RunResult {
	r.escalations++
	var timeout time.Duration
	if deadline := r.budget.Deadline(); !deadline.IsZero() {
		timeout = max(deadline.Sub(workflow.Now(ctx)), time.Millisecond)
	}
	escalated := workflow.Now(ctx)
	in := r.waitForHuman(ctx, waitingEscalation, agentsagatype.RunEscalated, why,
		"Update `resume` {message, add_usd, add_steps} or `abort` {reason} (`agentsaga resume` / `agentsaga abort`)", timeout)
	r.waits.escalated(why, escalated, workflow.Now(ctx))
	switch {
	case ctx.Err() != nil:
		result := r.rollback(ctx, "the run was cancelled while escalated ("+why+")", "", "")
		return &result
	case in == nil:
		result := r.outOfBudget(ctx, "", "", r.withWaits("the deadline passed while escalated ("+why+")", "the wall clock"))
		return &result
	case in.action == UpdateAbort:
		result := r.rollback(ctx, fmt.Sprintf("aborted by a human while escalated: %s (escalated because: %s)", in.reason, why), "", "")
		return &result
	}
	// More budget is added only where there is a limit (budget.RunBudget.Raise).
	r.budget.Raise(budget.Limits{USD: in.resume.AddUSD, Steps: in.resume.AddSteps})
	r.say(agentsagatype.Message{Role: "user", Content: "Instruction from a human: " + in.resume.Message, Pinned: true})
	return nil
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
	ctx, _ = workflow.NewDisconnectedContext(ctx)
	report, err := compensation.Walk(ctx, &sagaRunner{run: r})
	r.saga = &report
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
	case report.Stack == 0 && r.failed:
		result.Status, result.Reason = agentsagatype.RunFailed, reason+"; nothing to compensate"
	default:
		result.Reason = fmt.Sprintf("%s; compensated %d actions, %d needed no undoing", reason, report.Compensated, report.NotNeeded)
	}
	if len(report.Irreversible) > 0 {
		// The world is changed in a way the rollback cannot undo: say so.
		result.Status = agentsagatype.RunNeedsAttention
		result.Reason += "; not undone, because it cannot be: " + strings.Join(report.Irreversible, "; ")
	}
	result.Saga = r.saga
	return result
}

// sagaRunner runs compensations as activities, each with its own key
// (<forward key>/compensate) and its own bounded retry policy, outside
// the retry budget: recovery is never denied by the budget that ran out.
type sagaRunner struct{ run *run }

// Fence closes the run in the ledger and waits for attempts still at work
// (bounded by the longest tool timeout: no attempt outlives its own), then
// reads the plan.
func (s *sagaRunner) Fence(ctx workflow.Context) (agentsagatype.RollbackPlan, error) {
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
	if err := workflow.ExecuteActivity(closeCtx, s.run.versions.activity(agentsagatype.ActivityCloseRun), s.run.workflowID).Get(ctx, nil); err != nil {
		return agentsagatype.RollbackPlan{}, fmt.Errorf("the run could not be fenced for its rollback: %w", err)
	}
	planCtx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{ActivityID: "rollback-plan", StartToCloseTimeout: 30 * time.Second})
	var plan agentsagatype.RollbackPlan
	err := workflow.ExecuteActivity(planCtx, s.run.versions.activity(agentsagatype.ActivityRollbackPlan), agentsagatype.RollbackPlanRequest{
		WorkflowID: s.run.workflowID, IrreversibleTools: irreversible}).Get(ctx, &plan)
	if err != nil {
		return agentsagatype.RollbackPlan{}, fmt.Errorf("the compensation stack could not be read: %w", err)
	}
	return plan, nil
}

func (s *sagaRunner) Run(ctx workflow.Context, c agentsagatype.Compensation, arguments string, retry int) (string, error) {
	tool, ok := s.run.spec.tool(c.Tool)
	if !ok {
		return "", fmt.Errorf("compensating tool %q is not declared in the spec", c.Tool)
	}
	activityID := compensation.RetryActivityID(compensation.ForwardActivityID(s.run.workflowID, c), retry)
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		ActivityID:          activityID,
		StartToCloseTimeout: tool.Timeout(),
		HeartbeatTimeout:    heartbeatTimeout(tool.Timeout()),
		Summary:             clip("compensate "+c.ForwardActivityID+": "+c.Tool+" "+arguments, 100),
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval: time.Second, BackoffCoefficient: 2, MaximumInterval: 10 * time.Second,
			MaximumAttempts: int32(s.run.spec.compensationAttempts()),
		},
	})
	var result agentsagatype.ToolResult
	err := workflow.ExecuteActivity(actx, s.run.versions.activity(agentsagatype.ActivityCallTool), agentsagatype.ToolCallRequest{
		Tool: tool, Arguments: arguments, Compensates: c.ForwardKey}).Get(ctx, &result)
	entry := TraceEntry{Step: 0, ActivityID: activityID, Kind: "compensation", Tool: c.Tool,
		Arguments: clip(arguments, agentsagatype.PreviewBytes), Output: result.Output, Digest: result.Digest, Attempts: max(result.Attempt, 1)}
	switch failed := classify(err); {
	case err == nil:
		s.run.record(entry)
		return compensation.Done, nil
	case failed.nothingToUndo:
		entry.Output = "nothing to undo: " + failed.message
		s.run.record(entry)
		return compensation.NotNeeded, nil
	}
	entry.Error = errorText(err)
	s.run.record(entry)
	return "", err
}

func (s *sagaRunner) Settle(ctx workflow.Context, c agentsagatype.Compensation, status, cause, reason string) error {
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: 30 * time.Second})
	return workflow.ExecuteActivity(actx, s.run.versions.activity(agentsagatype.ActivitySettleCompensation), agentsagatype.Settlement{
		ForwardKey: c.ForwardKey, Status: status, Error: cause, Reason: reason}).Get(ctx, nil)
}

func (s *sagaRunner) Escalate(ctx workflow.Context, c agentsagatype.Compensation, err error) compensation.Decision {
	why := fmt.Sprintf("The compensation of `%s` (%s) still fails after its retries: %s", c.ForwardKey, c.Tool, errorText(err))
	in := s.run.waitForHuman(ctx, waitingCompensation, agentsagatype.RunNeedsAttention, why,
		"Update `retry`, `skip` {reason} or `abort` {reason}", 0)
	if in == nil {
		return compensation.Decision{Action: compensation.DecisionAbort}
	}
	return compensation.Decision{Action: in.action, Reason: in.reason}
}

// heartbeatTimeout lets a lost worker be noticed well before a long
// tool's timeout.
func heartbeatTimeout(timeout time.Duration) time.Duration {
	return min(timeout, 10*time.Second)
}

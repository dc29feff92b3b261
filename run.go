package agentsaga

import (
	"context"
	"errors"
	"fmt"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/workflows"
)

// Run is a handle on a run: its result, its budget and trace while it
// runs, its status in the ledger, and the decisions of the human it waits
// for.
type Run struct {
	ID    string
	RunID string
	c     client.Client
	// ledger is where Status reads the run; nil unless the handle came from
	// Start with StartOptions.Ledger or from WithLedger.
	ledger *ledger.Store
}

// Get is a handle on the run with this ID (its latest execution).
func Get(c client.Client, id string) *Run { return &Run{ID: id, c: c} }

// WithLedger is the handle reading its Status from store.
func (r *Run) WithLedger(store *ledger.Store) *Run {
	with := *r
	with.ledger = store
	return &with
}

// RunFailedError is what Run.Result returns for a run that ended failed:
// it carries the run's result (its reason, trace and saga report).
type RunFailedError struct{ Result RunResult }

func (e *RunFailedError) Error() string {
	return fmt.Sprintf("agentsaga: the run failed: %s", e.Result.Reason)
}

// Result waits for the run to end and returns how it ended: completed,
// partial, compensated, needs-attention or cancelled, with a nil error; a
// failed run as a *RunFailedError carrying its result; anything else (the
// run was terminated, or Temporal is unreachable) as the error it is.
func (r *Run) Result(ctx context.Context) (RunResult, error) {
	var result RunResult
	err := r.c.GetWorkflow(ctx, r.ID, r.RunID).Get(ctx, &result)
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) && appErr.Type() == workflows.ErrTypeRunFailed && appErr.Details(&result) == nil {
		return result, &RunFailedError{Result: result}
	}
	if err != nil {
		return result, fmt.Errorf("agentsaga: run %s: %w", r.ID, err)
	}
	return result, nil
}

// Status is the run's row in the ledger: its status (running, escalated,
// completed, ...), why, and what it used. It is there after the workflow
// has ended, and after Temporal has forgotten it.
func (r *Run) Status(ctx context.Context) (agentsagatype.Run, error) {
	if r.ledger == nil {
		return agentsagatype.Run{}, fmt.Errorf("agentsaga: status of run %s: the handle has no ledger (StartOptions.Ledger, Run.WithLedger)", r.ID)
	}
	run, err := r.ledger.GetRun(ctx, r.ID)
	if err != nil {
		return agentsagatype.Run{}, fmt.Errorf("agentsaga: status of run %s: %w", r.ID, err)
	}
	return run, nil
}

// Budget is the run's budget now: limits, used, remaining, the note the
// model reads and the retry counters. A worker answers it, so the run must
// not have ended.
func (r *Run) Budget(ctx context.Context) (BudgetView, error) {
	var view BudgetView
	return view, r.query(ctx, workflows.QueryBudget, &view)
}

// Trace is every model turn, tool call, sub-agent and compensation of the
// run so far, in order (outputs as previews; the whole ones are in the
// ledger). A worker answers it, as it does Budget.
func (r *Run) Trace(ctx context.Context) ([]TraceEntry, error) {
	var trace []TraceEntry
	return trace, r.query(ctx, workflows.QueryTrace, &trace)
}

func (r *Run) query(ctx context.Context, name string, into any) error {
	value, err := r.c.QueryWorkflow(ctx, r.ID, "", name) // the latest execution
	if err != nil {
		return fmt.Errorf("agentsaga: query %s of run %s: %w", name, r.ID, err)
	}
	if err := value.Get(into); err != nil {
		return fmt.Errorf("agentsaga: query %s of run %s: decode: %w", name, r.ID, err)
	}
	return nil
}

// ResumeInput is what a human sends an escalated run: an instruction the
// model reads next turn, and optionally more budget.
type ResumeInput = workflows.ResumeInput

// ErrRefused is what Resume, Abort, Retry and Skip return, in a
// *RefusedError, when the run refused the decision: it is not waiting for
// a human (not yet, or no longer), it waits for something the decision
// does not apply to (a retry while it is escalated), or the decision is
// incomplete (no reason). Nothing changed; the same decision may be sent
// again once the run waits for it (Status says escalated or
// needs-attention).
var ErrRefused = errors.New("the run refused the decision")

// RefusedError is a decision a run refused, with the run's reason.
type RefusedError struct {
	ID       string
	Decision string // workflows.UpdateResume, UpdateAbort, UpdateRetry, UpdateSkip, UpdateApprove or UpdateDeny
	Reason   string
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("agentsaga: %s run %s: %v: %s", e.Decision, e.ID, ErrRefused, e.Reason)
}

func (e *RefusedError) Unwrap() error { return ErrRefused }

// Resume continues an escalated run with in.Message for the model, adding
// in.AddUSD and in.AddSteps to its budget. The decision is recorded in the
// run's history; it returns once the run accepted it. A worker must be
// running: until one takes the run's workflow task, it waits (bound it
// with ctx).
func (r *Run) Resume(ctx context.Context, in ResumeInput) error {
	return r.decide(ctx, workflows.UpdateResume, in)
}

// Abort stops an escalated run, which then compensates, or a compensation
// walk a failed compensation stopped. reason says who decided and why.
func (r *Run) Abort(ctx context.Context, reason string) error {
	return r.decide(ctx, workflows.UpdateAbort, workflows.ReasonInput{Reason: reason})
}

// Retry runs a failed compensation again.
func (r *Run) Retry(ctx context.Context) error {
	return r.decide(ctx, workflows.UpdateRetry)
}

// Skip takes responsibility for a failed compensation and lets the walk go
// on. reason says who decided and why; it is recorded with the action.
func (r *Run) Skip(ctx context.Context, reason string) error {
	return r.decide(ctx, workflows.UpdateSkip, workflows.ReasonInput{Reason: reason})
}

// decide sends the decision as the run's Update and waits until the run
// accepted or refused it. A refusal (the Update's validator, or its
// handler when another decision came first) is an application error; a
// run that is gone is Temporal's error.
func (r *Run) decide(ctx context.Context, update string, args ...any) error {
	return r.decideInto(ctx, update, nil, args...)
}

// decideInto is decide, reading the Update's result into result.
func (r *Run) decideInto(ctx context.Context, update string, result any, args ...any) error {
	handle, err := r.c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		// The run's latest execution: the one Start began may have
		// continued as new.
		WorkflowID: r.ID, UpdateName: update, Args: args,
		WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	if err == nil {
		err = handle.Get(ctx, result)
	}
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) {
		return &RefusedError{ID: r.ID, Decision: update, Reason: appErr.Message()}
	}
	if err != nil {
		return fmt.Errorf("agentsaga: %s run %s: %w", update, r.ID, err)
	}
	return nil
}

// Approval is a call's approval request as the ledger keeps it, with its
// decision (who, when, why) once made.
type Approval = agentsagatype.Approval

// ApprovalWait is a call waiting for approval, as the run holds it.
type ApprovalWait = workflows.ApprovalWait

// Approvals lists the run's calls waiting for approval, oldest first.
func (r *Run) Approvals(ctx context.Context) ([]ApprovalWait, error) {
	var list []ApprovalWait
	return list, r.query(ctx, workflows.QueryApprovals, &list)
}

// Approve lets a call waiting for approval go: the run records the
// decision in the ledger (by says who decided, reason why, both kept) and
// then sends the call, once. It returns the ledger's record. A call that is
// not waiting (unknown, or decided already: two operators at once) is a
// *RefusedError naming why, and whose decision came first.
func (r *Run) Approve(ctx context.Context, call, by, reason string) (Approval, error) {
	var approval Approval
	err := r.decideInto(ctx, workflows.UpdateApprove, &approval, workflows.ApprovalInput{Call: call, By: by, Reason: reason})
	return approval, err
}

// Deny refuses a call waiting for approval: it is never sent, and the model
// reads reason (required) and is told not to ask again.
func (r *Run) Deny(ctx context.Context, call, by, reason string) (Approval, error) {
	var approval Approval
	err := r.decideInto(ctx, workflows.UpdateDeny, &approval, workflows.ApprovalInput{Call: call, By: by, Reason: reason})
	return approval, err
}

package agentsaga

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/activityid"
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
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
	run, err := ledgerdb.Of(r.ledger).GetRun(ctx, r.ID)
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

// RefusedError is what Resume, Abort, Retry and Skip return when the run
// refused the decision, with the run's reason: it is not waiting for a
// human (not yet, or no longer), it waits for something the decision does
// not apply to (a retry while it is escalated), or the decision is
// incomplete (no reason). Nothing changed; the same decision may be sent
// again once the run waits for it (Status says escalated or
// needs-attention). Find it with errors.As.
type RefusedError struct {
	ID       string
	Decision string // workflows.UpdateResume, UpdateAbort, UpdateRetry, UpdateSkip, UpdateApprove or UpdateDeny
	Reason   string
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("agentsaga: %s run %s: the run refused the decision: %s", e.Decision, e.ID, e.Reason)
}

// Resume continues an escalated run with in.Message for the model, adding
// in.AddUSD and in.AddSteps to its budget; a run that was forked is
// refused (its fork goes on in its place). The decision is recorded in the
// run's history; it returns once the run accepted it. A worker must be
// running: until one takes the run's workflow task, it waits (bound it
// with ctx).
func (r *Run) Resume(ctx context.Context, in ResumeInput) error {
	if err := r.refuseForked(ctx, workflows.UpdateResume); err != nil {
		return err
	}
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

// Approvals lists the run's calls waiting for approval, oldest first. A
// call whose request a fork of the run closed (the run waits on it,
// fenced, unaware) waits for nobody: with the handle's ledger, it is left
// out.
func (r *Run) Approvals(ctx context.Context) ([]ApprovalWait, error) {
	var list []ApprovalWait
	if err := r.query(ctx, workflows.QueryApprovals, &list); err != nil || r.ledger == nil || len(list) == 0 {
		return list, err
	}
	requests, err := ledgerdb.Of(r.ledger).RunApprovals(ctx, r.ID)
	if err != nil {
		return nil, fmt.Errorf("agentsaga: approvals of run %s: %w", r.ID, err)
	}
	return slices.DeleteFunc(list, func(w ApprovalWait) bool {
		return slices.ContainsFunc(requests, func(a Approval) bool { return a.Key == w.Key && a.Status == agentsagatype.ApprovalSuperseded })
	}), nil
}

// Approve lets a call waiting for approval go: the run records the
// decision in the ledger (by says who decided, reason why, both kept) and
// then sends the call, once. It returns the ledger's record. A call that
// another decision settled first (two operators at once, or a late
// approval after the run moved on) is an *AlreadyDecidedError carrying
// that first decision, read from the ledger when the handle has one; so is
// a call whose request a fork of the run closed (Decision
// agentsagatype.ApprovalSuperseded, By the fork). Any other call the run
// does not hold waiting is a *RefusedError naming why.
func (r *Run) Approve(ctx context.Context, call, by, reason string) (Approval, error) {
	return r.decideApproval(ctx, workflows.UpdateApprove, workflows.ApprovalInput{Call: call, By: by, Reason: reason})
}

// Deny refuses a call waiting for approval: it is never sent, and the model
// reads reason (required) and is told not to ask again. Its refusals are
// Approve's.
func (r *Run) Deny(ctx context.Context, call, by, reason string) (Approval, error) {
	return r.decideApproval(ctx, workflows.UpdateDeny, workflows.ApprovalInput{Call: call, By: by, Reason: reason})
}

// AlreadyDecidedError is what Approve and Deny return for a call that
// another decision settled first, with the decision that came first: who,
// what, when and why. The first decision stands; sending this one again
// changes nothing. Find it with errors.As. It is the
// same whether the run still waited (two operators raced) or had moved on
// (the call was settled and the run went on, or ended).
type AlreadyDecidedError struct {
	ID   string // the run
	Call string
	// Update is the decision that came second and was refused:
	// workflows.UpdateApprove or workflows.UpdateDeny.
	Update string
	// Decision is the first decision: agentsagatype.ApprovalApproved,
	// ApprovalDenied, ApprovalTimedOut (nobody decided in time) or
	// ApprovalSuperseded (the run was forked into By, which asks again).
	Decision string
	By       string
	// At and Reason are the ledger's; without the ledger (InLedger false)
	// At is zero and Reason empty.
	At     time.Time
	Reason string
	// InLedger says the first decision was read from the ledger. False when
	// the handle has no ledger (Get without WithLedger): then Decision and
	// By are what the run said, and when and why were not looked up.
	InLedger bool
	// err is what the run answered the second decision: its *RefusedError,
	// or Temporal's error for a run that has ended.
	err error
	// unread says why the ledger did not give the first decision.
	unread string
}

func (e *AlreadyDecidedError) Error() string {
	if e.Decision == agentsagatype.ApprovalSuperseded {
		return fmt.Sprintf("agentsaga: %s %s of run %s: approval %s: the run was forked into %s, which asks again for the call: decide the fork's request",
			e.Update, e.Call, e.ID, activityid.Key(e.ID, e.Call), e.By)
	}
	msg := fmt.Sprintf("agentsaga: %s %s of run %s: another decision came first: it was already %s by %s", e.Update, e.Call, e.ID, e.Decision, e.By)
	if !e.InLedger {
		return msg + " (as the run said; " + cmp.Or(e.unread, "when and why were not read from the ledger") + ")"
	}
	msg += " at " + e.At.UTC().Format(time.RFC3339)
	if e.Reason != "" {
		msg += fmt.Sprintf(": %q", e.Reason)
	}
	return msg + "; the first decision stands"
}

// Unwrap gives what the run answered, if it answered (a refusal is still
// a *RefusedError to errors.As).
func (e *AlreadyDecidedError) Unwrap() error { return e.err }

// firstDecisionWait bounds how long a decision that lost a race waits for
// the ledger to hold the winner's: the winning Update's handler records it
// in an activity, usually within milliseconds of the loser's refusal.
const firstDecisionWait = 10 * time.Second

// alreadyDecided matches the run's refusal of a decision on a call whose
// decision is pending or recorded (workflows/humans.go): "call X was
// already denied by bob", or the ledger's ErrDecided.
var alreadyDecided = regexp.MustCompile(`call (\S+) was already (\S+) by (.+)$`)

// decideApproval sends approve or deny. When the run refuses it, or has
// ended, the ledger is asked whether another decision came first, so a
// second operator learns whose it was, whether the run still waits or has
// moved on: the workflow forgets a call once it is settled; the ledger
// keeps it.
func (r *Run) decideApproval(ctx context.Context, update string, in workflows.ApprovalInput) (Approval, error) {
	if r.ledger != nil && in.Call != "" {
		// A request a fork closed is refused here, naming the fork: its
		// run still waits on it (fenced), and may have no worker left.
		closed, err := ledgerdb.Of(r.ledger).GetApproval(ctx, activityid.Key(r.ID, in.Call))
		if err == nil && closed.Status == agentsagatype.ApprovalSuperseded {
			return Approval{}, &AlreadyDecidedError{ID: r.ID, Call: in.Call, Update: update, Decision: closed.Status, By: closed.DecidedBy,
				At: closed.DecidedAt, Reason: closed.Reason, InLedger: true}
		}
	}
	var approval Approval
	err := r.decideInto(ctx, update, &approval, in)
	if err == nil || in.Call == "" || ctx.Err() != nil {
		return approval, err
	}
	var refused *RefusedError
	var gone *serviceerror.NotFound
	isRefused := errors.As(err, &refused)
	// fromRun is the run's own word on the first decision: who and what,
	// while the run still holds the call (two operators raced).
	fromRun := func(unread string) error {
		if m := alreadyDecided.FindStringSubmatch(refused.Reason); isRefused && m != nil && m[1] == in.Call {
			return &AlreadyDecidedError{ID: r.ID, Call: in.Call, Update: update, Decision: m[2], By: m[3], err: err, unread: unread}
		}
		return nil
	}
	if r.ledger == nil {
		if first := fromRun("the handle has no ledger, so the ledger was not consulted and when and why are not known: Run.WithLedger"); first != nil {
			return Approval{}, first
		}
		if (isRefused && strings.Contains(refused.Reason, "waits for approval")) || errors.As(err, &gone) {
			return Approval{}, fmt.Errorf("%w (the handle has no ledger, so the ledger was not consulted on whether another decision came first: Run.WithLedger)", err)
		}
		return Approval{}, err
	}
	key := activityid.Key(r.ID, in.Call)
	first, lerr := ledgerdb.Of(r.ledger).GetApproval(ctx, key)
	// A decision that lost a race is refused while the winner's is being
	// recorded: wait, briefly, for the ledger to have it.
	if lerr == nil && first.Status == agentsagatype.ApprovalAwaiting && isRefused && strings.Contains(refused.Reason, "already") {
		deadline := time.Now().Add(firstDecisionWait)
		for lerr == nil && first.Status == agentsagatype.ApprovalAwaiting && time.Now().Before(deadline) {
			select {
			case <-ctx.Done():
				return Approval{}, err
			case <-time.After(50 * time.Millisecond):
				first, lerr = ledgerdb.Of(r.ledger).GetApproval(ctx, key)
			}
		}
	}
	switch {
	case errors.Is(lerr, ledgerdb.ErrNotFound):
		return Approval{}, err // no such request: the run's refusal says what waits
	case lerr != nil:
		return Approval{}, fmt.Errorf("%w (and the ledger, asked whose decision came first: %v)", err, lerr)
	case first.Status == agentsagatype.ApprovalAwaiting:
		if won := fromRun(fmt.Sprintf("the ledger did not have it within %s", firstDecisionWait)); won != nil {
			return Approval{}, won
		}
		return Approval{}, err // still open: the run's refusal is the answer
	}
	return Approval{}, &AlreadyDecidedError{ID: r.ID, Call: in.Call, Update: update, Decision: first.Status, By: first.DecidedBy,
		At: first.DecidedAt, Reason: first.Reason, InLedger: true, err: err}
}

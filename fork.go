package agentsaga

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/internal/wire"
	"github.com/agentsaga/agentsaga/workflows"
)

// ForkAtFailed, as ForkOptions.At, forks at the step at which the source
// failed or escalated.
const ForkAtFailed = ledgerdb.ForkAtFailed

// ErrForkRefused is what Run.Fork returns, wrapped with the reason, for a
// source that cannot be forked as asked (compensated or being compensated,
// queued, a sub-agent, a replay, already forked, a step it did not make).
// Nothing changed. Find it with errors.Is.
var ErrForkRefused = ledgerdb.ErrForkRefused

// ForkOptions say where a fork begins and what it changes (Run.Fork).
type ForkOptions struct {
	// At is the first step the fork makes live, one the source made (from
	// 1, or from its own first step for a fork); ForkAtFailed is the
	// step at which the source failed or escalated.
	At int
	// Spec, when set, replaces the source's spec from At on; the goal
	// stays the source's.
	Spec *RunSpec
	// Model, when set, replaces the spec's model.
	Model *ModelSpec
	// Message, when set, is the operator's: the model reads it at step At,
	// after the source's conversation.
	Message string
	// ID is the fork's workflow ID; "" is the source's with "-fork"
	// appended (a run is forked once).
	ID string
	// StartedBy names who forked it, kept with its run (the HTTP API's
	// key).
	StartedBy string
	// Start is how the fork's workflow starts: its task queue, namespace,
	// model providers, account (the source's unless set) and priority.
	// Its Ledger is the handle's.
	Start StartOptions
}

// Fork starts a new run from step opts.At of this one (docs/forks.md).
// The fork's steps before At are the source's: its conversation is the
// source's up to At (plus opts.Message), answered from the ledger with no
// model call, no tool call and no spend, and from At on it runs live with
// opts' spec or model. The effects the source (and its sub-agents) made
// before At move to the fork in one ledger transaction: the fork's saga
// covers them, the source's no longer does, and the source can no longer
// act (its claims are fenced, Resume refuses). Approvals given before At
// stay given; a call that waited for one at At is asked again, and the
// source's request is closed in the same transaction, superseded by the
// fork (agentsagatype.ApprovalSuperseded): listings of what waits leave it
// out, and Approve or Deny on it is an *AlreadyDecidedError naming the
// fork. The source's admission ends with the move; a fork charged to an
// account is admitted before its first live turn as a new run is, and
// may wait queued (Run.CancelQueued walks back what it inherited).
//
// A running source is first asked to stop at its next step boundary
// (once its turn's calls settled; it then waits as an escalated run does),
// and Fork waits for it as long as ctx allows. The handle must have a
// ledger (Run.WithLedger). A sub-agent, a source compensated or being
// compensated, or one already forked is refused with ErrForkRefused,
// saying why. Fork asked again for the same fork (the same ID) after its
// workflow failed to start starts it; after it started, it returns it.
func (r *Run) Fork(ctx context.Context, opts ForkOptions) (*Run, error) {
	if r.ledger == nil {
		return nil, fmt.Errorf("agentsaga: fork run %s: the handle has no ledger (Run.WithLedger)", r.ID)
	}
	store := ledgerdb.Of(r.ledger)
	source, err := store.GetRun(ctx, r.ID)
	if err != nil {
		return nil, fmt.Errorf("agentsaga: fork run %s: %w", r.ID, err)
	}
	var spec RunSpec
	if err := json.Unmarshal(source.Spec, &spec); err != nil {
		return nil, fmt.Errorf("agentsaga: fork run %s: the spec recorded for it does not decode: %w", r.ID, err)
	}
	if spec.IsReplay() {
		return nil, fmt.Errorf("agentsaga: fork run %s: %w: it is a replay, whose calls were answered from a recording; fork its source", r.ID, ErrForkRefused)
	}
	if opts.Spec != nil {
		spec = *opts.Spec
	}
	if opts.Model != nil {
		spec.Model = *opts.Model
		spec.Version = 0 // resolved again: the new model's context window and price
	}
	if opts.Spec == nil && opts.Start.Account != "" {
		// The source's account gives way to the one the fork is charged to.
		spec.Budget.Account = opts.Start.Account
	}
	spec.Goal, spec.Carried = source.Goal, nil
	resolved, err := resolveFor(spec, opts.Start)
	if err != nil {
		return nil, err
	}
	recorded, err := json.Marshal(resolved)
	if err != nil {
		return nil, fmt.Errorf("agentsaga: fork run %s: %w", r.ID, err)
	}
	id := cmp.Or(opts.ID, r.ID+"-fork")
	if _, err := store.GetRun(ctx, id); errors.Is(err, ledgerdb.ErrNotFound) {
		// Temporal may have a workflow the ledger does not (a run started
		// without a ledger): the fork's effects must not move to it.
		if _, err := r.c.DescribeWorkflowExecution(ctx, id, ""); err == nil {
			return nil, &RunExistsError{ID: id}
		}
	}
	// A source forked already (this fork asked again) is fenced and stays
	// at rest; its approval requests the fork closed no longer say so.
	if len(source.Forks) == 0 && source.FinishedAt == nil && source.Status == agentsagatype.RunRunning && !awaitsApproval(ctx, store, r.ID) {
		if err := r.stopAtAStep(ctx, store); err != nil {
			return nil, err
		}
	}
	moved, err := store.ForkRun(ctx, ledgerdb.ForkRequest{Source: r.ID, Fork: id, At: opts.At, Spec: recorded, StartedBy: opts.StartedBy})
	if err != nil {
		return nil, fmt.Errorf("agentsaga: fork run %s: %w", r.ID, err)
	}
	forked, err := resolved.Forked(workflows.Fork{Source: r.ID, At: moved.At, Seq: moved.Seq, Message: opts.Message}, time.Now())
	if err != nil {
		return nil, fmt.Errorf("agentsaga: fork run %s: %w (the ledger moved its effects to %s: fork again with a spec that starts)", r.ID, err, id)
	}
	opts.Start.Ledger = r.ledger
	run, err := startResolved(ctx, r.c, id, forked, opts.Start,
		fmt.Sprintf("**Forked from:** %s at step %d (its effects before that step are this run's)\n\n", r.ID, moved.At), r.ID)
	if exists := (*RunExistsError)(nil); errors.As(err, &exists) {
		// Asked again after the fork started: it is the fork.
		return Get(r.c, id).WithLedger(r.ledger), nil
	}
	if err != nil {
		return nil, fmt.Errorf("agentsaga: fork run %s into %s: the ledger moved its effects to the fork, whose start failed (fork again to start it): %w", r.ID, id, err)
	}
	return run, nil
}

// stopAtAStep asks the running run to stop at its next step boundary
// (wire.SignalStopForFork) and waits, as long as ctx lets it, until
// the ledger says it no longer runs: escalated (stopped), waiting for an
// approval, or ended.
func (r *Run) stopAtAStep(ctx context.Context, store *ledgerdb.Store) error {
	if err := r.c.SignalWorkflow(ctx, r.ID, "", wire.SignalStopForFork, nil); err != nil {
		return fmt.Errorf("agentsaga: fork run %s: ask it to stop at a step boundary: %w", r.ID, err)
	}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		run, err := store.GetRun(ctx, r.ID)
		if err != nil {
			return fmt.Errorf("agentsaga: fork run %s: wait for it to stop: %w", r.ID, err)
		}
		if run.FinishedAt != nil || run.Status != agentsagatype.RunRunning {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("agentsaga: fork run %s: it did not stop at a step boundary in time (is a worker running it, on code that knows forks?): %w",
				r.ID, ctx.Err())
		case <-tick.C:
		}
	}
}

// awaitsApproval says whether a call of the run waits for an approval: the
// run is then at rest, and is forked as it is (the call is asked again by
// the fork).
func awaitsApproval(ctx context.Context, store *ledgerdb.Store, id string) bool {
	approvals, err := store.RunApprovals(ctx, id)
	return err == nil && slices.ContainsFunc(approvals, func(a agentsagatype.Approval) bool { return a.Status == agentsagatype.ApprovalAwaiting })
}

// refuseForked refuses decision on a run that was forked: its fork took
// over its effects before the fork's step, and it acts no more. A handle
// without a ledger cannot tell; the run's claims are fenced all the same.
func (r *Run) refuseForked(ctx context.Context, decision string) error {
	if r.ledger == nil {
		return nil
	}
	run, err := ledgerdb.Of(r.ledger).GetRun(ctx, r.ID)
	if err != nil || len(run.Forks) == 0 {
		return nil //nolint:nilerr // the run's own answer decides, as without a ledger
	}
	return &RefusedError{ID: r.ID, Decision: decision,
		Reason: fmt.Sprintf("it was forked into %s, which took over its effects and goes on in its place: %s that run", run.Forks[0], decision)}
}

// ParseForkAt reads where a fork begins as an operator writes it: a step
// number from 1, or "failed" (ForkAtFailed).
func ParseForkAt(s string) (int, error) {
	if s == "failed" {
		return ForkAtFailed, nil
	}
	step, err := strconv.Atoi(s)
	if err != nil || step < 1 {
		return 0, fmt.Errorf("at %q: give a step number from 1, or failed (the step at which the run failed or escalated)", s)
	}
	return step, nil
}

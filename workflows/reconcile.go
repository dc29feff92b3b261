package workflows

import (
	"cmp"
	"encoding/json"
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/budget"
	"github.com/agentsaga/agentsaga/internal/wire"
)

// The reconciler finds runs that ended behind the engine's back (terminated
// in Temporal, timed out, or whose workflow vanished), marks them
// terminated and walks their compensation stacks. It is one long-lived
// workflow (ReconcilerLoop) that every worker makes sure runs, so it
// outlives any one worker, and that continues as new every few hours: the
// operators' workflow list gets a handful of its entries a day, where a
// Schedule starting a pass every 30 s left 2,880 between the agent runs.
const (
	// ReconcilerID is the reconciler's workflow ID.
	ReconcilerID = "agentsaga-reconciler"
	// ReconcileInterval is how often the reconciler makes a pass.
	ReconcileInterval = 30 * time.Second
	// ReconcilePassSignal asks the reconciler for a pass now.
	ReconcilePassSignal = "pass-now"
	// ReconcileStateQuery answers with the reconciler's ReconcileLoopState.
	ReconcileStateQuery = "state"
	// reconcilePassesPerRun is how many passes one execution makes before
	// it continues as new: six hours at ReconcileInterval, four entries a
	// day in the list, some 6,000 events of history each.
	reconcilePassesPerRun = 720
	// defaultReconcilePageSize is how many runs one activity examines.
	defaultReconcilePageSize = 100
	// reconcileMaxPages bounds one pass (and its history); the next pass
	// starts over.
	reconcileMaxPages = 500
)

// ReconcileInput shapes one pass.
type ReconcileInput struct {
	// OlderThan leaves out runs that started less than this ago.
	OlderThan time.Duration `json:"older_than,omitempty"`
	// PageSize is how many runs each activity examines; 0 means
	// defaultReconcilePageSize.
	PageSize int `json:"page_size,omitempty"`
}

// ReconcileResult says what one pass did.
type ReconcileResult struct {
	// Examined counts the runs the ledger had not seen end.
	Examined int `json:"examined"`
	// Live counts those whose workflow (or rollback) still runs.
	Live int `json:"live"`
	// Reconciled are the runs marked terminated whose rollback started.
	Reconciled []ReconciledRun `json:"reconciled,omitempty"`
	// Covered are sub-agents walked by their parent's rollback.
	Covered []string `json:"covered,omitempty"`
	// Stalled are runs whose rollback ended before it finished them; they
	// are now needs-attention.
	Stalled []string `json:"stalled,omitempty"`
	// Errors are runs that could not be examined or whose rollback could
	// not be started; the next pass tries again.
	Errors []string `json:"errors,omitempty"`
}

// ReconciledRun is a run the pass found ended outside the engine.
type ReconciledRun struct {
	WorkflowID string `json:"workflow_id"`
	Reason     string `json:"reason"`
	// RollbackRunID is the run ID of its RollbackRun; "" when one was
	// already running.
	RollbackRunID string `json:"rollback_run_id,omitempty"`
}

// ReconcileLoopInput shapes the reconciler.
type ReconcileLoopInput struct {
	// Every is the time between passes; 0 means ReconcileInterval.
	Every time.Duration `json:"every,omitempty"`
	// Pass shapes each pass.
	Pass ReconcileInput `json:"pass"`
}

// ReconcileLoopState is what the reconciler answers to
// ReconcileStateQuery: the passes this execution made, and the last.
type ReconcileLoopState struct {
	Passes    int             `json:"passes"`
	Last      ReconcileResult `json:"last"`
	LastError string          `json:"last_error,omitempty"`
}

// ReconcilerLoop is the reconciler: a pass (Reconciler) at once, then one
// every in.Every, or sooner when ReconcilePassSignal asks, continuing as
// new after reconcilePassesPerRun passes (or when Temporal suggests it). A
// pass that fails is reported in its state, and the next one tries again.
func ReconcilerLoop(ctx workflow.Context, in ReconcileLoopInput) error {
	every := cmp.Or(in.Every, ReconcileInterval)
	var state ReconcileLoopState
	if err := workflow.SetQueryHandler(ctx, ReconcileStateQuery, func() (ReconcileLoopState, error) { return state, nil }); err != nil {
		return err
	}
	passNow := workflow.GetSignalChannel(ctx, ReconcilePassSignal)
	for {
		result, err := Reconciler(ctx, in.Pass)
		state.Passes, state.Last, state.LastError = state.Passes+1, result, ""
		if err != nil {
			state.LastError = errorText(err)
		}
		if state.Passes >= reconcilePassesPerRun || workflow.GetInfo(ctx).GetContinueAsNewSuggested() {
			// A pass asked for meanwhile is the next execution's first.
			return workflow.NewContinueAsNewError(ctx, ReconcilerLoop, in)
		}
		timerCtx, cancelTimer := workflow.WithCancel(ctx)
		wait := workflow.NewSelector(ctx)
		wait.AddFuture(workflow.NewTimerWithOptions(timerCtx, every, workflow.TimerOptions{Summary: "until the next reconciler pass"}), func(workflow.Future) {})
		wait.AddReceive(passNow, func(c workflow.ReceiveChannel, _ bool) { c.Receive(ctx, nil) })
		wait.Select(ctx)
		cancelTimer()
		for passNow.ReceiveAsync(nil) {
			// One pass answers every request made while it waited.
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

// Reconciler is one pass of the reconciler: it pages through the runs the
// ledger has not seen end, asks Temporal about each, marks the ones whose
// workflow closed without recording its end terminated (with Temporal's
// reason), and starts a RollbackRun for each under the run's own workflow
// ID. Marking is the gate: a run is marked once, and a run the engine ended
// itself is never looked at.
func Reconciler(ctx workflow.Context, in ReconcileInput) (ReconcileResult, error) {
	pageSize := in.PageSize
	if pageSize <= 0 {
		pageSize = defaultReconcilePageSize
	}
	v := readVersions(ctx)
	var result ReconcileResult
	after := ""
	for page := 0; page < reconcileMaxPages; page++ {
		actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
			StartToCloseTimeout: 5 * time.Minute,
			HeartbeatTimeout:    time.Minute,
			Summary:             "find runs that ended outside the engine",
			RetryPolicy:         &temporal.RetryPolicy{InitialInterval: time.Second, MaximumAttempts: 3},
		})
		var found wire.AbandonedPage
		if err := workflow.ExecuteActivity(actx, v.activity(wire.ActivityFindAbandonedRuns), wire.FindAbandoned{
			OlderThan: in.OlderThan, After: after, Limit: pageSize}).Get(ctx, &found); err != nil {
			return result, err
		}
		result.Examined += found.Examined
		result.Live += found.Live
		result.Covered = append(result.Covered, found.Covered...)
		result.Stalled = append(result.Stalled, found.Stalled...)
		result.Errors = append(result.Errors, found.Errors...)

		starts := make([]workflow.Future, len(found.Rollbacks))
		for i, run := range found.Rollbacks {
			sctx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
				StartToCloseTimeout: 30 * time.Second,
				Summary:             clip("start the rollback of "+run.WorkflowID, 100),
				RetryPolicy:         &temporal.RetryPolicy{InitialInterval: time.Second, MaximumAttempts: 5},
			})
			starts[i] = workflow.ExecuteActivity(sctx, v.activity(wire.ActivityStartRollback), run)
		}
		for i, run := range found.Rollbacks {
			var runID string
			if err := starts[i].Get(ctx, &runID); err != nil {
				// Still marked terminated: the next pass starts it.
				result.Errors = append(result.Errors, fmt.Sprintf("%s: %s", run.WorkflowID, errorText(err)))
				continue
			}
			result.Reconciled = append(result.Reconciled, ReconciledRun{WorkflowID: run.WorkflowID, Reason: run.Reason, RollbackRunID: runID})
		}
		if found.Next == "" {
			break
		}
		after = found.Next
	}
	workflow.SetCurrentDetails(ctx, fmt.Sprintf("## reconciler pass\n\nExamined %d runs that have not ended: %d live, %d reconciled, %d covered by their parent, %d stalled, %d errors.",
		result.Examined, result.Live, len(result.Reconciled), len(result.Covered), len(result.Stalled), len(result.Errors)))
	return result, nil
}

// RollbackRun walks the compensation stack (its sub-agents' included) of a
// run that ended behind the engine's back and was marked terminated. It
// runs under the run's own workflow ID, so each compensation's key is the
// one the run's own walk would have used (<forward key>/compensate) and a
// compensation the run had begun is finished, not repeated. It ends the run
// compensated or needs-attention, keeping Temporal's reason; a failed
// compensation waits for `agentsaga retry`, `skip` or `abort`, as in any
// walk. A run that is not marked terminated (it ended, or another rollback
// finished it) is left alone.
func RollbackRun(ctx workflow.Context, in wire.RollbackRequest) (RunResult, error) {
	workflowID := workflow.GetInfo(ctx).WorkflowExecution.ID
	v := readVersions(ctx)
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: 30 * time.Second})
	var stored wire.TerminatedRun
	if err := workflow.ExecuteActivity(actx, v.activity(wire.ActivityReadTerminatedRun), workflowID).Get(ctx, &stored); err != nil {
		return RunResult{}, err
	}
	if stored.Finished || stored.Status != agentsagatype.RunTerminated {
		return RunResult{Status: stored.Status,
			Reason: fmt.Sprintf("nothing to do: the run is %s and not marked terminated; its stack is not walked again", stored.Status)}, nil
	}
	reason := stored.Reason
	if reason == "" {
		reason = in.Reason
	}
	usage := budget.Usage{Steps: stored.Outcome.StepsUsed, Tokens: stored.Outcome.TokensUsed, USD: stored.Outcome.USDSpent}

	r, err := rollbackState(ctx, workflowID, stored.Spec)
	if r != nil {
		r.versions = v
	}
	var result RunResult
	if err != nil {
		// Without the spec the compensating tools are unknown: a human
		// must undo what the run did.
		result = RunResult{Status: agentsagatype.RunNeedsAttention,
			Reason: fmt.Sprintf("terminated: %s; its spec could not be read, so its compensations were not walked: %v", reason, err)}
	} else {
		if err := r.registerQueries(ctx); err != nil {
			return RunResult{}, err
		}
		if err := r.humans.registerUpdates(ctx); err != nil {
			return RunResult{}, err
		}
		r.showProgress(ctx, agentsagatype.RunTerminated, "The run ended outside the engine: "+reason, "walking its compensation stack")
		result = r.rollback(ctx, "terminated: "+reason, "", "")
	}
	result.Usage = usage
	result.Retries.Calls, result.Retries.Retries = stored.Outcome.Calls, stored.Outcome.Retries

	finishCtx, _ := workflow.NewDisconnectedContext(ctx)
	finishCtx = workflow.WithActivityOptions(finishCtx, workflow.ActivityOptions{StartToCloseTimeout: 30 * time.Second})
	if err := workflow.ExecuteActivity(finishCtx, v.activity(wire.ActivityFinishSubRuns), wire.SubRunsFinish{
		WorkflowID: workflowID, Status: result.Status,
		Reason: fmt.Sprintf("terminated with its parent %s; walked with its parent's stack: %s", workflowID, result.Reason),
	}).Get(finishCtx, nil); err != nil {
		return RunResult{}, err
	}
	outcome := stored.Outcome
	outcome.Status, outcome.Reason = result.Status, result.Reason
	if err := workflow.ExecuteActivity(finishCtx, v.activity(wire.ActivityRecordRunFinish), wire.RunFinish{
		WorkflowID: workflowID, Outcome: outcome}).Get(finishCtx, nil); err != nil {
		return RunResult{}, err
	}
	if r != nil {
		r.showProgress(ctx, result.Status, result.Reason, "compensation walk of a terminated run: done")
	} else {
		workflow.SetCurrentDetails(ctx, fmt.Sprintf("## %s\n\n%s\n", result.Status, result.Reason))
	}
	return result, nil
}

// rollbackState is the run state a RollbackRun walks with: the run's spec
// (its tools and compensation attempts) and its workflow ID; nothing of
// the run's progress is needed, because the stack lives in the ledger.
func rollbackState(ctx workflow.Context, workflowID string, specJSON []byte) (*run, error) {
	var spec RunSpec
	if err := json.Unmarshal(specJSON, &spec); err != nil {
		return nil, err
	}
	return newRun(spec, workflowID, workflow.Now(ctx))
}

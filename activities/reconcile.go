package activities

import (
	"context"
	"errors"
	"fmt"
	"sync"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/internal/textclip"
	"github.com/agentsaga/agentsaga/internal/wire"
)

// reconcileParallelism bounds the runs one page asks Temporal about at once.
const reconcileParallelism = 8

// Reconciliation holds the reconciler's activities: they read the ledger and
// ask Temporal whether the runs the ledger thinks are live still are. It is
// registered beside Activities (a struct of its own, so the activities that
// run tools need no Temporal client).
type Reconciliation struct {
	Ledger *ledgerdb.Store
	// Temporal is the client the worker polls with: it describes
	// workflows and starts RollbackRun.
	Temporal client.Client
}

// findAbandonedRuns reads one page of the runs the ledger has not seen end
// and asks Temporal about each. A run still running is left alone; one
// whose workflow was terminated, timed out, vanished or closed without
// recording its end is marked terminated with Temporal's reason and
// returned for its rollback. A run the engine ended itself is never read.
func (r *Reconciliation) findAbandonedRuns(ctx context.Context, in wire.FindAbandoned) (wire.AbandonedPage, error) {
	candidates, err := r.Ledger.AbandonedCandidates(ctx, in.OlderThan, in.After, in.Limit)
	if err != nil {
		return wire.AbandonedPage{}, err
	}
	page := wire.AbandonedPage{Examined: len(candidates)}
	if len(candidates) == in.Limit && in.Limit > 0 {
		page.Next = candidates[len(candidates)-1].WorkflowID
	}
	verdicts := make([]verdict, len(candidates))
	var wg sync.WaitGroup
	var heartbeat sync.Mutex
	slots := make(chan struct{}, reconcileParallelism)
	for i, run := range candidates {
		wg.Add(1)
		slots <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			verdicts[i] = r.examine(ctx, run)
			heartbeat.Lock()
			defer heartbeat.Unlock()
			activity.RecordHeartbeat(ctx, run.WorkflowID)
		}()
	}
	wg.Wait()
	log := activity.GetLogger(ctx)
	for i, v := range verdicts {
		id := candidates[i].WorkflowID
		switch {
		case v.err != nil:
			log.Warn("reconciler: could not examine a run; the next pass tries again", "workflow_id", id, "error", v.err)
			page.Errors = append(page.Errors, fmt.Sprintf("%s: %v", id, v.err))
		case v.live:
			page.Live++
		case v.covered:
			page.Covered = append(page.Covered, id)
		case v.stalled:
			log.Warn("reconciler: the rollback of a terminated run ended before it finished; the run needs attention", "workflow_id", id)
			page.Stalled = append(page.Stalled, id)
		case v.rollback != nil:
			log.Info("reconciler: a run ended outside the engine; it is marked terminated and its stack will be walked",
				"workflow_id", id, "reason", v.rollback.Reason)
			page.Rollbacks = append(page.Rollbacks, *v.rollback)
		}
	}
	return page, nil
}

// verdict is what examining one run decided.
type verdict struct {
	live, covered, stalled bool
	rollback               *wire.AbandonedRun
	err                    error
}

// execution is what Temporal says of a workflow ID's newest execution.
type execution struct {
	vanished bool
	running  bool
	kind     string // workflow type
	status   enumspb.WorkflowExecutionStatus
	runID    string
	desc     *workflowservice.DescribeWorkflowExecutionResponse
}

func (r *Reconciliation) describe(ctx context.Context, workflowID string) (execution, error) {
	desc, err := r.Temporal.DescribeWorkflowExecution(ctx, workflowID, "")
	var notFound *serviceerror.NotFound
	if errors.As(err, &notFound) {
		return execution{vanished: true}, nil
	}
	if err != nil {
		return execution{}, fmt.Errorf("describe workflow %s: %w", workflowID, err)
	}
	info := desc.GetWorkflowExecutionInfo()
	status := info.GetStatus()
	return execution{
		// A continued-as-new execution hands over to its successor: the
		// run is live.
		running: status == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING || status == enumspb.WORKFLOW_EXECUTION_STATUS_CONTINUED_AS_NEW,
		kind:    info.GetType().GetName(), status: status, runID: info.GetExecution().GetRunId(), desc: desc,
	}, nil
}

func (r *Reconciliation) examine(ctx context.Context, run agentsagatype.Run) verdict {
	ex, err := r.describe(ctx, run.WorkflowID)
	switch {
	case err != nil:
		return verdict{err: err}
	case ex.running:
		// The run, or the rollback walking its stack, is still at work.
		return verdict{live: true}
	case ex.kind == wire.RollbackRunWorkflow:
		// Its rollback ran and closed without ending the run: terminated or
		// timed out itself. It is not walked again; a human takes over.
		why, err := r.closeReason(ctx, run.WorkflowID, ex)
		if err != nil {
			return verdict{err: err}
		}
		reason := fmt.Sprintf("%s; its rollback (RollbackRun) ended before it finished: %s; `agentsaga show %s` lists what is still to undo",
			run.Reason, why, run.WorkflowID)
		err = r.Ledger.FinishRun(ctx, run.WorkflowID, agentsagatype.RunOutcome{Status: agentsagatype.RunNeedsAttention, Reason: reason,
			StepsUsed: run.StepsUsed, TokensUsed: run.TokensUsed, USDSpent: run.USDSpent, Calls: run.Calls, Retries: run.Retries})
		if err != nil {
			return verdict{err: err}
		}
		return verdict{stalled: true}
	}
	if run.ParentWorkflowID != "" {
		covered, err := r.coveredByParent(ctx, run.ParentWorkflowID)
		if err != nil {
			return verdict{err: err}
		}
		if covered {
			return verdict{covered: true}
		}
	}
	reason := "the workflow vanished: Temporal has no execution of it (its retention passed, or its server lost it)"
	if !ex.vanished {
		if reason, err = r.closeReason(ctx, run.WorkflowID, ex); err != nil {
			return verdict{err: err}
		}
	}
	marked, err := r.Ledger.MarkTerminated(ctx, run.WorkflowID, reason)
	if err != nil {
		return verdict{err: err}
	}
	if !marked {
		// Marked by an earlier pass that did not get to start its rollback
		// (a rollback that did start is the newest execution: see above),
		// or ended meanwhile.
		current, err := r.Ledger.GetRun(ctx, run.WorkflowID)
		if err != nil {
			return verdict{err: err}
		}
		if current.FinishedAt != nil || current.Status != agentsagatype.RunTerminated {
			return verdict{live: current.FinishedAt == nil}
		}
		reason = current.Reason
	}
	return verdict{rollback: &wire.AbandonedRun{WorkflowID: run.WorkflowID, Reason: reason, Marked: marked}}
}

// coveredByParent says whether a sub-agent whose workflow closed is walked
// by its parent's rollback: the parent has not ended and its workflow is
// closed too (the reconciler walks the parent's tree) or is a RollbackRun.
// A sub-agent terminated on its own while its parent runs on is reconciled
// on its own; so is one whose parent ended.
func (r *Reconciliation) coveredByParent(ctx context.Context, parentID string) (bool, error) {
	parent, err := r.Ledger.GetRun(ctx, parentID)
	if errors.Is(err, ledgerdb.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if parent.FinishedAt != nil {
		return false, nil
	}
	ex, err := r.describe(ctx, parentID)
	if err != nil {
		return false, err
	}
	return !ex.running || ex.kind == wire.RollbackRunWorkflow, nil
}

// closeReason is Temporal's account of how an execution closed, from its
// close event.
func (r *Reconciliation) closeReason(ctx context.Context, workflowID string, ex execution) (string, error) {
	iter := r.Temporal.GetWorkflowHistory(ctx, workflowID, ex.runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_CLOSE_EVENT)
	var event *historypb.HistoryEvent
	for iter.HasNext() {
		e, err := iter.Next()
		if err != nil {
			return "", fmt.Errorf("read the close event of workflow %s: %w", workflowID, err)
		}
		event = e
	}
	switch ex.status {
	case enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED:
		attrs := event.GetWorkflowExecutionTerminatedEventAttributes()
		who := ""
		if attrs.GetIdentity() != "" {
			who = " by " + attrs.GetIdentity()
		}
		why := attrs.GetReason()
		if why == "" {
			why = "no reason given"
		}
		return cleanText(fmt.Sprintf("the workflow was terminated in Temporal%s: %s", who, why)), nil
	case enumspb.WORKFLOW_EXECUTION_STATUS_TIMED_OUT:
		config := ex.desc.GetExecutionConfig()
		limits := ""
		if d := config.GetWorkflowRunTimeout().AsDuration(); d > 0 {
			limits += fmt.Sprintf(", run timeout %s", d)
		}
		if d := config.GetWorkflowExecutionTimeout().AsDuration(); d > 0 {
			limits += fmt.Sprintf(", execution timeout %s", d)
		}
		return "the workflow timed out in Temporal" + limits, nil
	case enumspb.WORKFLOW_EXECUTION_STATUS_FAILED:
		return cleanText("the workflow failed in Temporal without recording its end: " +
			event.GetWorkflowExecutionFailedEventAttributes().GetFailure().GetMessage()), nil
	case enumspb.WORKFLOW_EXECUTION_STATUS_CANCELED:
		return "the workflow was cancelled in Temporal without recording its end", nil
	case enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED:
		return "the workflow completed in Temporal without recording its end", nil
	}
	return fmt.Sprintf("the workflow closed in Temporal (%s) without recording its end", ex.status), nil
}

// startRollback starts RollbackRun for a run marked terminated, under the
// run's own workflow ID (its execution is closed, so a new one may use it)
// on this worker's task queue. A rollback already running under that ID is
// left to its work. RollbackRun itself does nothing for a run that is no
// longer marked terminated, so a rollback is never walked twice.
func (r *Reconciliation) startRollback(ctx context.Context, run wire.AbandonedRun) (string, error) {
	info := activity.GetInfo(ctx)
	started, err := r.Temporal.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID:                                       run.WorkflowID,
		TaskQueue:                                info.TaskQueue,
		WorkflowIDReusePolicy:                    enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
		WorkflowIDConflictPolicy:                 enumspb.WORKFLOW_ID_CONFLICT_POLICY_FAIL,
		WorkflowExecutionErrorWhenAlreadyStarted: true,
		StaticSummary:                            textclip.Clip("rollback of a run that ended outside the engine: "+run.Reason, 200),
	}, wire.RollbackRunWorkflow, wire.RollbackRequest{Reason: run.Reason})
	var already *serviceerror.WorkflowExecutionAlreadyStarted
	if errors.As(err, &already) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("start the rollback of run %s: %w", run.WorkflowID, err)
	}
	return started.GetRunID(), nil
}

// readTerminatedRun reads the run a RollbackRun walks.
func (r *Reconciliation) readTerminatedRun(ctx context.Context, workflowID string) (wire.TerminatedRun, error) {
	run, err := r.Ledger.GetRun(ctx, workflowID)
	if errors.Is(err, ledgerdb.ErrNotFound) {
		// No retry brings the row back (it was pruned, or the run never
		// started): a rollback started by hand for such an ID would
		// otherwise retry forever.
		return wire.TerminatedRun{}, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("the ledger has no run %s, so there is no compensation stack to walk", workflowID), wire.ErrTypeRunNotFound, err)
	}
	if err != nil {
		return wire.TerminatedRun{}, err
	}
	counters, err := r.Ledger.RunLiveCounters(ctx, workflowID)
	if err != nil {
		return wire.TerminatedRun{}, err
	}
	return wire.TerminatedRun{
		Status: run.Status, Reason: run.Reason, Finished: run.FinishedAt != nil, Spec: run.Spec,
		Outcome: agentsagatype.RunOutcome{StepsUsed: run.StepsUsed, TokensUsed: run.TokensUsed, USDSpent: run.USDSpent,
			Calls: counters.Calls, Retries: counters.Retries},
	}, nil
}

// finishSubRuns ends the sub-agents a terminated run's rollback walked with
// its own stack, when they never recorded their end.
func (r *Reconciliation) finishSubRuns(ctx context.Context, in wire.SubRunsFinish) (int, error) {
	return r.Ledger.FinishSubRuns(ctx, in.WorkflowID, in.Status, in.Reason)
}

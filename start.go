package agentsaga

import (
	"context"
	"errors"
	"fmt"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/agentsaga/agentsaga/workflows"
)

// StartOptions shape Start.
type StartOptions struct {
	// TaskQueue the run goes to; "" means workflows.TaskQueue.
	TaskQueue string
	// Namespace is the client's namespace, for the search-attribute check;
	// "" means "default".
	Namespace string
	// ModelProviders are custom providers the workers register
	// (Config.Models; Engine.Providers), so that a spec may name them.
	ModelProviders []string
}

// ErrRunExists is the error Start returns (wrapped in a *RunExistsError)
// for a workflow ID that a run, running or closed, already has: a second
// run under it would share the first one's idempotency keys and be
// answered from its stored results.
var ErrRunExists = errors.New("a run with this ID already exists")

// RunExistsError names the ID Start refused.
type RunExistsError struct{ ID string }

func (e *RunExistsError) Error() string {
	return fmt.Sprintf("agentsaga: start run %s: %v; pick a new ID", e.ID, ErrRunExists)
}

func (e *RunExistsError) Unwrap() error { return ErrRunExists }

// InvalidSpecError is what Start returns for a spec that fails validation;
// nothing was started.
type InvalidSpecError struct{ Err error }

func (e *InvalidSpecError) Error() string { return "agentsaga: " + e.Err.Error() }

func (e *InvalidSpecError) Unwrap() error { return e.Err }

// RunFailedError is what Run.Result returns for a run that ended failed:
// it carries the run's result (its reason, trace and saga report).
type RunFailedError struct{ Result RunResult }

func (e *RunFailedError) Error() string {
	return fmt.Sprintf("agentsaga: the run failed: %s", e.Result.Reason)
}

// Run is a handle on a run.
type Run struct {
	ID    string
	RunID string
	c     client.Client
}

// Start validates spec, writes out its defaults (so the run keeps them
// through deploys) and starts it under id, refusing an id already used.
func Start(ctx context.Context, c client.Client, id string, spec RunSpec, opts StartOptions) (*Run, error) {
	if id == "" {
		return nil, &InvalidSpecError{Err: errors.New("the run ID is empty")}
	}
	resolved, err := spec.ResolveFor(opts.ModelProviders...)
	if err != nil {
		return nil, &InvalidSpecError{Err: err}
	}
	if opts.Namespace == "" {
		opts.Namespace = "default"
	}
	if opts.TaskQueue == "" {
		opts.TaskQueue = workflows.TaskQueue
	}
	if !resolved.SearchAttributes {
		// Upsert them only where the namespace has them registered, or
		// every workflow task would fail.
		has, err := HasSearchAttributes(ctx, c, opts.Namespace)
		resolved.SearchAttributes = err == nil && has
	}
	summary := resolved.Goal
	if len(summary) > 200 {
		summary = summary[:200] + "..."
	}
	var attributes temporal.SearchAttributes
	if resolved.SearchAttributes {
		attributes = workflows.InitialSearchAttributes()
	}
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID: id,
		// A run's idempotency keys are its workflow ID plus each activity
		// ID, so a second run under a closed run's ID would share its keys
		// and replay its stored results: refused, as an error rather than
		// the SDK's default of handing back the earlier run.
		WorkflowIDReusePolicy:                    enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
		WorkflowExecutionErrorWhenAlreadyStarted: true,
		TaskQueue:                                opts.TaskQueue,
		TypedSearchAttributes:                    attributes,
		StaticSummary:                            summary,
		StaticDetails: fmt.Sprintf("**Goal:** %s\n\n**Model:** %s %s\n\n**Budget:** %+v",
			resolved.Goal, resolved.Model.Provider, resolved.Model.Name, resolved.Budget),
	}, workflows.AgentRun, resolved)
	var started *serviceerror.WorkflowExecutionAlreadyStarted
	if errors.As(err, &started) {
		return nil, &RunExistsError{ID: id}
	}
	if err != nil {
		return nil, fmt.Errorf("agentsaga: start run %s: %w", id, err)
	}
	return &Run{ID: id, RunID: run.GetRunID(), c: c}, nil
}

// Get is a handle on the run with this ID (its latest execution).
func Get(c client.Client, id string) *Run { return &Run{ID: id, c: c} }

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

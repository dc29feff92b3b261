package agentsagatest

import (
	"context"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/workflow"

	"github.com/agentsaga/agentsaga/internal/workertest"
)

// Execution is what one execution's history says about the workers that
// ran it, for a test of a deploy: a run started on one build of a worker
// and finished on another.
type Execution struct {
	// FailedTasks counts its failed workflow tasks, and Nondeterministic
	// those among them that failed with a non-determinism error: the
	// workflow code that replayed the history took another path.
	FailedTasks, Nondeterministic int
	// Builds lists, in order, the build ID of the worker that completed
	// each workflow task ("" for an unversioned worker).
	Builds []string
	// Version is the version the execution recorded for a change ID with
	// workflow.GetVersion; a change ID it recorded none for (it began on
	// code without the change) is absent, workflow.DefaultVersion.
	Version map[string]workflow.Version
	// GiveUps counts the give-ups (a failed call's key fenced) it
	// scheduled, and GaveUpAhead says whether one was scheduled while an
	// earlier call of its turn still ran.
	GiveUps     int
	GaveUpAhead bool
}

// ReadExecution reads the history of the execution runID of workflow id
// (its latest when runID is empty) and what it says.
func ReadExecution(ctx context.Context, c client.Client, id, runID string) (Execution, error) {
	history, err := workertest.History(ctx, c, id, runID)
	if err != nil {
		return Execution{}, err
	}
	events := history.GetEvents()
	e := Execution{Builds: workertest.WorkflowTaskBuilds(events)}
	e.FailedTasks, e.Nondeterministic = workertest.FailedWorkflowTasks(events)
	e.GiveUps, e.GaveUpAhead = workertest.GiveUps(events)
	e.Version, err = workertest.RecordedVersions(events)
	return e, err
}

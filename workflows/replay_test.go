package workflows_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/wire"
	"github.com/agentsaga/agentsaga/workflows"
)

// The replay corpus is the contract between today's workflow code and every
// run in flight: each recorded history (testdata/histories, one per path a
// run can take, recorded on a dev server by `make record-histories`) must
// replay without a non-determinism error. A change that alters the
// commands a workflow emits goes behind workflow.GetVersion; regenerating
// the corpus is done on purpose, and its commit says why.
func TestReplayCorpus(t *testing.T) {
	t.Parallel()
	// The top directory holds the histories of the code before the
	// namespaced-activities change; each subdirectory, a set recorded after
	// a change (`make record-histories SET=name`).
	files, err := filepath.Glob(filepath.Join("testdata", "histories", "*.json"))
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(files), 12, "the corpus covers every path a run can take")
	sets, err := filepath.Glob(filepath.Join("testdata", "histories", "*", "*.json"))
	require.NoError(t, err)
	files = append(files, sets...)
	for _, file := range files {
		name, _ := filepath.Rel(filepath.Join("testdata", "histories"), file)
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f, err := os.Open(file)
			require.NoError(t, err)
			defer f.Close()
			history, err := client.HistoryFromJSON(f, client.HistoryJSONOptions{})
			require.NoError(t, err)
			replayer := worker.NewWorkflowReplayer()
			replayer.RegisterWorkflow(workflows.AgentRun)
			replayer.RegisterWorkflow(workflows.RollbackRun)
			// A run agentsaga.Start started has the namespaced type.
			replayer.RegisterWorkflowWithOptions(namespacedAgentRun, workflow.RegisterOptions{Name: agentsagatype.NamePrefix + wire.AgentRunWorkflow})
			// The workflow ID is part of what the code decides on (a
			// sub-agent's ID extends its parent's), so the replay uses the
			// recorded one: corpus-<scenario>, the file name up to its first dot.
			scenario, _, _ := strings.Cut(filepath.Base(file), ".")
			require.NoError(t, replayer.ReplayWorkflowHistoryWithOptions(nil, history, worker.ReplayWorkflowHistoryOptions{
				OriginalExecution: workflow.Execution{ID: "corpus-" + scenario}}))
		})
	}
}

// namespacedAgentRun is workflows.AgentRun under a Go name of its own, as
// agentsaga registers it, so that the replayer takes both types.
func namespacedAgentRun(ctx workflow.Context, spec workflows.RunSpec) (workflows.RunResult, error) {
	return workflows.AgentRun(ctx, spec)
}

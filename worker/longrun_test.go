package worker_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"
	"google.golang.org/protobuf/proto"

	"github.com/agentsaga/agentsaga"
	"github.com/agentsaga/agentsaga/activities"
	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/internal/ledgertest"
	"github.com/agentsaga/agentsaga/internal/workertest"
	"github.com/agentsaga/agentsaga/worker"
	"github.com/agentsaga/agentsaga/workflows"
)

// lowLimits are a dev server's history and payload limits, lowered so far
// that an engine carrying the whole conversation in every model call would
// pass the 256 KiB blob limit near turn 31 of this test (by arithmetic: 31
// outputs of 8 KiB; not run on that engine), as production's 2 MiB
// terminated it at turn 41 (measured by bench long).
var lowLimits = []string{
	"limit.blobSize.error=262144",
	"limit.blobSize.warn=131072",
	"limit.historyCount.error=600",
	"limit.historyCount.suggestContinueAsNew=200",
	"limit.historySize.error=4194304",
	"limit.historySize.suggestContinueAsNew=1048576",
}

// A run of 60 turns, each reading an 8 KiB page, completes on a server
// with these limits: it continues as new when the server suggests it, and
// its history carries previews, never outputs whole.
func TestLongRunUnderLoweredHistoryLimits(t *testing.T) {
	t.Parallel()
	// Alone it takes about 15 s; under the suite's load its 121 activities
	// took 1-2 s each, and 3 minutes ended it at turn 56 of 61.
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	server, err := workertest.StartDevServerWithLimits(ctx, lowLimits...)
	require.NoError(t, err)
	defer server.Stop()
	c := server.Client()
	store := ledgertest.NewHandle(t)

	const turns, size = 60, 8 << 10
	box := activities.NewToolbox() // the engine adds the built-ins
	box.Register("page", func(_ context.Context, call activities.ToolInvocation) (string, error) {
		line := fmt.Sprintf("%s says: %s. ", call.Key, call.Arguments)
		return strings.Repeat(line, size/len(line)+1)[:size], nil
	})
	w, err := worker.New(ctx, c, store, worker.Options{Config: agentsaga.Config{TaskQueue: "long", Toolbox: box}})
	require.NoError(t, err)
	require.NoError(t, w.Start())
	defer w.Stop()

	var script strings.Builder
	for i := 1; i <= turns; i++ {
		fmt.Fprintf(&script, "    - tool_calls: [{name: page, arguments: {page: %d}}]\n", i)
	}
	spec, err := workflows.ParseSpec([]byte(`
goal: read every page
budget: {steps: 80}
finish_at: 0.05
model:
  provider: scripted
  script:
` + script.String() + `    - content: read them all
tools:
  - {name: page, kind: go, parameters: {type: object, properties: {page: {type: number}}, required: [page]}}
`))
	require.NoError(t, err)
	const id = "long-run-lowered-limits"
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: "long"}, workflows.AgentRun, spec)
	require.NoError(t, err)
	firstRun := run.GetRunID()
	var result workflows.RunResult
	require.NoError(t, run.Get(ctx, &result))
	assert.Equal(t, agentsagatype.RunCompleted, result.Status, result.Reason)
	assert.Equal(t, "read them all", result.Answer)
	assert.Equal(t, turns+1, result.Usage.Steps)

	// Walk the chain of executions: every one stays under the limits, and
	// no event carries a page whole.
	executions, events, largest := 0, 0, 0
	for runID := firstRun; runID != ""; executions++ {
		next := ""
		iter := c.GetWorkflowHistory(ctx, id, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
		for iter.HasNext() {
			event, err := iter.Next()
			require.NoError(t, err)
			events++
			largest = max(largest, proto.Size(event))
			if attrs := event.GetWorkflowExecutionContinuedAsNewEventAttributes(); attrs != nil {
				next = attrs.GetNewExecutionRunId()
			}
		}
		runID = next
	}
	assert.Greater(t, executions, 1, "the run continued as new")
	// The largest event is an execution's start, carrying the bounded state
	// (the trace's tail of previews), far under the 256 KiB blob limit.
	assert.Less(t, largest, 64<<10, "largest event %d bytes", largest)
	t.Logf("turns=%d executions=%d events=%d largest event=%d bytes", turns, executions, events, largest)

	msgs, err := ledgerdb.Of(store).Messages(ctx, id, 1<<30, ledgerdb.MessageWindow{})
	require.NoError(t, err)
	assert.Len(t, msgs, 2+2*turns+1, "the conversation is whole in the ledger")
	stored, err := ledgerdb.Of(store).GetRun(ctx, id)
	require.NoError(t, err)
	assert.Equal(t, agentsagatype.RunCompleted, stored.Status)
}

// A run that waits for a human across continue-as-new boundaries: its
// queries answer from whichever execution is current, the human's resume
// is accepted and read by the model, and every execution's history replays
// against today's workflow code.
func TestContinueAsNewWithAHumanInTheLoop(t *testing.T) {
	t.Parallel()
	// 36 turns and a dev server of its own: a minute was not enough at
	// load 15 under -race (the suite beside other builds); three still
	// turn a hang into a failure.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	server, err := workertest.StartDevServerWithLimits(ctx, lowLimits...)
	require.NoError(t, err)
	defer server.Stop()
	c := server.Client()
	store := ledgertest.NewHandle(t)
	box := activities.NewToolbox() // the engine adds the built-ins
	box.Register("page", func(_ context.Context, call activities.ToolInvocation) (string, error) {
		return strings.Repeat("page "+string(call.Arguments)+". ", 128), nil
	})
	w, err := worker.New(ctx, c, store, worker.Options{Config: agentsaga.Config{TaskQueue: "long-human", Toolbox: box}})
	require.NoError(t, err)
	require.NoError(t, w.Start())
	defer w.Stop()

	var script strings.Builder
	for i := 1; i <= 30; i++ {
		fmt.Fprintf(&script, "    - tool_calls: [{name: page, arguments: {page: %d}}]\n", i)
	}
	script.WriteString("    - refusal: I will not read page 31 without a human's go-ahead\n")
	for i := 31; i <= 35; i++ {
		fmt.Fprintf(&script, "    - tool_calls: [{name: page, arguments: {page: %d}}]\n", i)
	}
	script.WriteString("    - content: read all 35\n")
	spec, err := workflows.ParseSpec([]byte(`
goal: read every page
budget: {steps: 40}
finish_at: 0.02
history: {max_events: 100}
model:
  provider: scripted
  script:
` + script.String() + `tools:
  - {name: page, kind: go, parameters: {type: object, properties: {page: {type: number}}, required: [page]}}
`))
	require.NoError(t, err)
	const id = "long-run-human-in-the-loop"
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: "long-human"}, workflows.AgentRun, spec)
	require.NoError(t, err)
	firstRun := run.GetRunID()

	for {
		stored, err := ledgerdb.Of(store).GetRun(ctx, id)
		if err == nil && stored.Status == agentsagatype.RunEscalated {
			break
		}
		require.True(t, err == nil || errors.Is(err, ledgerdb.ErrNotFound), "%v", err)
		select {
		case <-ctx.Done():
			d, _ := c.DescribeWorkflowExecution(context.Background(), id, "")
			stored, _ := ledgerdb.Of(store).GetRun(context.Background(), id)
			t.Fatalf("the run never escalated: Temporal says %v; the ledger says %s (%s)", d.GetWorkflowExecutionInfo().GetStatus(), stored.Status, stored.Reason)
		case <-time.After(100 * time.Millisecond):
		}
	}
	answer, err := c.QueryWorkflow(ctx, id, "", workflows.QueryBudget)
	require.NoError(t, err, "the budget query answers from the current execution")
	var view workflows.BudgetView
	require.NoError(t, answer.Get(&view))
	assert.Equal(t, 31, view.Used.Steps, "the budget spent in earlier executions is carried")

	handle, err := c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: id, UpdateName: workflows.UpdateResume,
		Args:         []any{workflows.ResumeInput{Message: "go ahead with page 31", AddSteps: 5}},
		WaitForStage: client.WorkflowUpdateStageCompleted})
	require.NoError(t, err)
	var accepted string
	require.NoError(t, handle.Get(ctx, &accepted))
	assert.Equal(t, "accepted: resume", accepted)

	var result workflows.RunResult
	require.NoError(t, c.GetWorkflow(ctx, id, "").Get(ctx, &result))
	assert.Equal(t, agentsagatype.RunCompleted, result.Status, result.Reason)
	assert.Equal(t, "read all 35", result.Answer)

	msgs, err := ledgerdb.Of(store).Messages(ctx, id, 1<<30, ledgerdb.MessageWindow{})
	require.NoError(t, err)
	var instruction *ledgerdb.Message
	for i := range msgs {
		if strings.Contains(msgs[i].Content, "go ahead with page 31") {
			instruction = &msgs[i]
		}
	}
	require.NotNil(t, instruction, "the human's instruction is in the conversation")
	assert.True(t, instruction.Pinned)

	replayer := sdkworker.NewWorkflowReplayer()
	replayer.RegisterWorkflow(workflows.AgentRun)
	executions := 0
	for runID := firstRun; runID != ""; executions++ {
		var history historypb.History
		next := ""
		iter := c.GetWorkflowHistory(ctx, id, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
		for iter.HasNext() {
			event, err := iter.Next()
			require.NoError(t, err)
			history.Events = append(history.Events, event)
			if attrs := event.GetWorkflowExecutionContinuedAsNewEventAttributes(); attrs != nil {
				next = attrs.GetNewExecutionRunId()
			}
		}
		require.NoError(t, replayer.ReplayWorkflowHistory(nil, &history), "execution %d (%s) replays", executions+1, runID)
		runID = next
	}
	assert.Greater(t, executions, 2, "the run continued as new before and after the human")
}

package agentsaga_test

// What a team adopting the engine hit (issue 21), one test each.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/agentsaga/agentsaga"
	"github.com/agentsaga/agentsaga/agentsagatest"
	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/budget"
	"github.com/agentsaga/agentsaga/internal/activityid"
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/internal/ledgertest"
	"github.com/agentsaga/agentsaga/internal/workertest"
	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/workflows"
)

// AgentRun is a team's own workflow that happens to share the engine's
// old workflow name.
func AgentRun(_ workflow.Context, name string) (string, error) { return "the team's own: " + name, nil }

type pageArgs struct {
	Page int `json:"page"`
}

// startEngineWorker runs an engine on its own task queue on the dev
// server, with register adding the team's own workflows and activities.
func startEngineWorker(t *testing.T, cfg agentsaga.Config, register func(worker.Worker)) (*agentsaga.Engine, *ledger.Store) {
	t.Helper()
	store := agentsagatest.NewLedger(t)
	cfg.TaskQueue, cfg.Bucket = agentsagatest.RunID(t), "bucket-"+t.Name()
	engine, err := agentsaga.New(t.Context(), store, cfg)
	require.NoError(t, err)
	w := worker.New(devServer.Client(), engine.TaskQueue(), engine.WorkerOptions(worker.Options{}))
	engine.Register(w)
	if register != nil {
		register(w)
	}
	require.NoError(t, w.Start())
	t.Cleanup(func() {
		w.Stop()
		require.NoError(t, engine.Close())
	})
	return engine, store
}

// Item 1: a team's workflow named AgentRun is registered on the engine's
// worker without a panic and runs as itself, while the engine's run, its
// sub-agent and its continuations run under agentsaga.AgentRun.
func TestATeamsAgentRunBesideTheEngine(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	c := devServer.Client()
	page := agentsaga.MustTool(agentsaga.NewTool("page", "Read a page.", func(_ context.Context, args pageArgs) (string, error) {
		return fmt.Sprintf("page %d read", args.Page), nil
	}))
	engine, _ := startEngineWorker(t, agentsaga.Config{Tools: []agentsaga.Tool{page}}, func(w worker.Worker) {
		require.NotPanics(t, func() { w.RegisterWorkflow(AgentRun) })
	})

	var script strings.Builder
	script.WriteString("    - tool_calls: [{name: helper, arguments: {task: read page 1}}]\n")
	for i := 1; i <= 14; i++ {
		fmt.Fprintf(&script, "    - tool_calls: [{name: page, arguments: {page: %d}}]\n", i)
	}
	spec, err := workflows.ParseSpec([]byte(`goal: read
budget: {steps: 24}
history: {max_events: 100}
model:
  provider: scripted
  script:
` + script.String() + `    - content: read them all
tools:
  - {name: page, kind: go, parameters: {type: object, properties: {page: {type: number}}, required: [page]}}
  - {name: helper, kind: agent}
agents:
  helper:
    tools: [page]
    share: 0.5
    model: {provider: scripted, script: [{content: the helper read it}]}
`))
	require.NoError(t, err)
	id := agentsagatest.RunID(t)
	run, err := engine.Start(ctx, c, id, spec, agentsaga.StartOptions{})
	require.NoError(t, err)
	result, err := run.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, agentsagatype.RunCompleted, result.Status, result.Reason)
	require.Equal(t, "read them all", result.Answer)

	child, err := c.DescribeWorkflowExecution(ctx, id+"/step-001-call-1-helper", "")
	require.NoError(t, err)
	require.Equal(t, agentsaga.AgentRunWorkflow, child.GetWorkflowExecutionInfo().GetType().GetName(), "the sub-agent")
	executions, err := workertest.Executions(ctx, c, id, run.RunID)
	require.NoError(t, err)
	require.Greater(t, len(executions), 1, "the run continued as new")
	for _, history := range executions {
		started := history.Events[0].GetWorkflowExecutionStartedEventAttributes()
		require.Equal(t, agentsaga.AgentRunWorkflow, started.GetWorkflowType().GetName(), "every execution of the run")
	}

	team, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{TaskQueue: engine.TaskQueue()}, "AgentRun", "ann")
	require.NoError(t, err)
	var answer string
	require.NoError(t, team.Get(ctx, &answer))
	require.Equal(t, "the team's own: ann", answer)
}

// A worker with the legacy names still runs a run started under the bare
// type AgentRun before the names were namespaced; its commands are the
// same as ever (a sub-agent keeps the bare type).
func TestALegacyRunStillFindsItsWorker(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	c := devServer.Client()
	engine, _ := startEngineWorker(t, agentsaga.Config{LegacyNames: true}, nil)
	spec, err := agentsaga.RunSpec{Goal: "delegate", Budget: agentsaga.Budget{Steps: 6},
		Model:  agentsagatest.Script(agentsagatest.Call("helper", map[string]string{"task": "say hi"}), agentsagatest.Answer("delegated")),
		Tools:  []agentsaga.ToolSpec{{Name: "helper", Kind: "agent"}},
		Agents: map[string]workflows.AgentSpec{"helper": {Model: &agentsaga.ModelSpec{Provider: "scripted", Script: []agentsagatest.Turn{agentsagatest.Answer("hi")}}}},
	}.Resolve()
	require.NoError(t, err)
	id := agentsagatest.RunID(t)
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: engine.TaskQueue()}, "AgentRun", spec)
	require.NoError(t, err)
	var result agentsaga.RunResult
	require.NoError(t, run.Get(ctx, &result))
	require.Equal(t, "delegated", result.Answer, result.Reason)
	child, err := c.DescribeWorkflowExecution(ctx, id+"/step-001-call-1-helper", "")
	require.NoError(t, err)
	require.Equal(t, "AgentRun", child.GetWorkflowExecutionInfo().GetType().GetName())
}

// Item 2: an ID the ledger has a run for is refused, although Temporal
// has no workflow under it (a dev server restarted; the retention passed):
// the new run would be answered from the old one's stored results.
func TestStartRefusesAnIDTheLedgerHas(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	c := devServer.Client()
	store := agentsagatest.NewLedger(t)
	id := agentsagatest.RunID(t)
	require.NoError(t, ledgerdb.Of(store).StartRun(ctx, agentsagatype.Run{WorkflowID: id, Goal: "the first run, which Temporal forgot"}))

	spec := agentsaga.RunSpec{Goal: "the second", Budget: agentsaga.Budget{Steps: 2}, Model: agentsagatest.Script(agentsagatest.Answer("hi"))}
	_, err := agentsaga.Start(ctx, c, id, spec, agentsaga.StartOptions{TaskQueue: id, Ledger: store})
	require.ErrorAs(t, err, new(*agentsaga.RunExistsError))
	var exists *agentsaga.RunExistsError
	require.ErrorAs(t, err, &exists)
	require.Equal(t, agentsaga.RunExistsError{ID: id, InLedger: true}, *exists)
	require.ErrorContains(t, err, "in the ledger")

	_, err = c.DescribeWorkflowExecution(ctx, id, "")
	var notFound *serviceerror.NotFound
	require.ErrorAs(t, err, &notFound, "nothing was started")
}

// Item 4: an engine with a Temporal client makes sure of the reconciler's
// Schedule, as the CLI worker does, and the pass it starts runs on the
// engine's worker under its namespaced name.
func TestAnEmbeddedEngineMakesSureOfTheReconciler(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	c := devServer.Client()
	t.Cleanup(func() { _ = c.TerminateWorkflow(context.Background(), workflows.ReconcilerID, "", "test over") })
	engine, store := startEngineWorker(t, agentsaga.Config{Temporal: c}, nil)
	second, err := agentsaga.New(ctx, store, agentsaga.Config{Temporal: c, TaskQueue: "another-queue"})
	require.NoError(t, err, "a reconciler that runs is not an error")
	require.NoError(t, second.Close())

	desc, err := c.DescribeWorkflowExecution(ctx, workflows.ReconcilerID, "")
	require.NoError(t, err)
	require.Equal(t, agentsaga.ReconcilerLoopWorkflow, desc.WorkflowExecutionInfo.GetType().GetName())
	require.Equal(t, engine.TaskQueue(), desc.WorkflowExecutionInfo.GetTaskQueue(), "the first engine's queue; the second left it")

	require.NoError(t, c.SignalWorkflow(ctx, workflows.ReconcilerID, "", workflows.ReconcilePassSignal, nil))
	var state workflows.ReconcileLoopState
	require.Eventually(t, func() bool {
		value, err := c.QueryWorkflow(ctx, workflows.ReconcilerID, "", workflows.ReconcileStateQuery)
		return err == nil && value.Get(&state) == nil && state.Passes > 0
	}, 30*time.Second, 100*time.Millisecond, "the reconciler makes a pass")
	require.Empty(t, state.LastError)
	require.Empty(t, state.Last.Errors)
}

// Item 5: the success bonuses of a run's last calls, still waiting for
// their flush when the engine closes, reach the fleet bucket, rather than
// a closed pool a second later.
func TestCloseFlushesTheSuccessBonuses(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	store := agentsagatest.NewLedger(t)
	bucket := agentsagatest.RunID(t)
	engine, err := agentsaga.New(ctx, store, agentsaga.Config{Bucket: bucket,
		BucketConfig: budget.BucketConfig{Capacity: 10, RefillPerSecond: 0.001, SuccessBonus: 1}})
	require.NoError(t, err)
	for range 10 { // empty, so that every bonus raises it
		_, err := ledgertest.TakeRetryToken(ctx, ledgerdb.Of(store), bucket)
		require.NoError(t, err)
	}
	result := agentsagatest.Run(t, engine, agentsaga.RunSpec{Goal: "count", Budget: agentsaga.Budget{Steps: 3},
		Model: agentsagatest.Script(agentsagatest.Call("word_count", map[string]string{"text": "two words"}), agentsagatest.Answer("two")),
		Tools: []agentsaga.ToolSpec{{Name: "word_count", Kind: "go"}}})
	require.Equal(t, agentsagatype.RunCompleted, result.Status, result.Reason)

	// Two model turns and a tool call succeeded: three bonuses, whether
	// the timer flushed them already or Close does.
	require.NoError(t, engine.Close())
	level, err := ledgertest.BucketLevel(ctx, ledgerdb.Of(store), bucket)
	require.NoError(t, err)
	require.InDelta(t, 3, level, 0.1, "every bonus is in the bucket once Close returns")
}

// blockingTool blocks until release is closed, so that a test can act
// while the run is in a tool call.
func blockingTool(t *testing.T, entered chan<- struct{}, release <-chan struct{}) agentsaga.Tool {
	t.Helper()
	return agentsaga.MustTool(agentsaga.NewTool("prepare", "Prepare the change.", func(ctx context.Context, _ struct{}) (string, error) {
		select {
		case entered <- struct{}{}:
		default:
		}
		select {
		case <-release:
			return "prepared", nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}))
}

// waitForStatus polls the run's Status until it is want. Two minutes,
// where 30 s once ran out at load 15 before a 40-turn run escalated: the
// bound only says how long a run that never gets there is waited for.
func waitForStatus(t *testing.T, run *agentsaga.Run, want string) {
	t.Helper()
	require.Eventually(t, func() bool {
		status, err := run.Status(t.Context())
		return err == nil && status.Status == want
	}, 2*time.Minute, 50*time.Millisecond, "run %s never became %s", run.ID, want)
}

// Item 6: a run is resumed and aborted through its handle. A decision the
// run cannot take now (it is in a tool call, or waits for something else)
// is refused at once with a typed error and the run's reason.
func TestRunHandleResumesAndAborts(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	c := devServer.Client()
	entered, release := make(chan struct{}, 1), make(chan struct{})
	prepare := blockingTool(t, entered, release)
	engine, store := startEngineWorker(t, agentsaga.Config{Tools: []agentsaga.Tool{prepare}}, nil)
	opts := agentsaga.StartOptions{TaskQueue: engine.TaskQueue(), Ledger: store}

	spec := agentsaga.RunSpec{Goal: "delete the production database", Budget: agentsaga.Budget{Steps: 5},
		Model: agentsagatest.Script(agentsagatest.Call("prepare", struct{}{}),
			agentsagatest.Refuse("I will not do that without written approval."), agentsagatest.Answer("I archived it instead.")),
		Tools: []agentsaga.ToolSpec{prepare.Spec()}}
	run, err := agentsaga.Start(ctx, c, agentsagatest.RunID(t), spec, opts)
	require.NoError(t, err)
	select {
	case <-entered:
	case <-ctx.Done():
		t.Fatal("the run never called the tool")
	}
	err = run.Resume(ctx, agentsaga.ResumeInput{Message: "archive it"})
	require.ErrorAs(t, err, new(*agentsaga.RefusedError))
	var refused *agentsaga.RefusedError
	require.ErrorAs(t, err, &refused)
	require.Equal(t, workflows.UpdateResume, refused.Decision)
	require.Contains(t, refused.Reason, "not waiting for a human")
	close(release)

	waitForStatus(t, run, agentsagatype.RunEscalated)
	err = run.Retry(ctx)
	require.ErrorAs(t, err, &refused)
	require.Contains(t, refused.Reason, "where retry does not apply")
	view, err := run.Budget(ctx)
	require.NoError(t, err)
	require.Equal(t, 5, view.Limits.Steps)
	trace, err := run.Trace(ctx)
	require.NoError(t, err)
	require.NotEmpty(t, trace)

	require.NoError(t, run.Resume(ctx, agentsaga.ResumeInput{Message: "archive it instead", AddSteps: 1}))
	result, err := run.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, agentsagatype.RunCompleted, result.Status, result.Reason)
	require.Equal(t, "I archived it instead.", result.Answer)
	err = run.Abort(ctx, "too late")
	require.Error(t, err, "an ended run takes no decision")
	require.NotErrorAs(t, err, new(*agentsaga.RefusedError))

	spec.Model = agentsagatest.Script(agentsagatest.Refuse("I will not do that."))
	spec.Tools = nil
	run, err = agentsaga.Start(ctx, c, agentsagatest.RunID(t), spec, opts)
	require.NoError(t, err)
	waitForStatus(t, run, agentsagatype.RunEscalated)
	require.NoError(t, run.Abort(ctx, "ops@example.com: not without approval"))
	result, err = run.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, agentsagatype.RunCompensated, result.Status, result.Reason)
	status, err := run.Status(ctx)
	require.NoError(t, err)
	require.Equal(t, agentsagatype.RunCompensated, status.Status)
}

// keyModel is a team's own model: it asks for a word count, then answers,
// and records the key of each call it makes, as it would pass it to a
// provider that deduplicates by it.
type keyModel struct {
	mu   *sync.Mutex
	keys *[]string
}

func (m keyModel) Turn(ctx context.Context, req agentsaga.ModelRequest) (agentsaga.ModelTurn, error) {
	m.mu.Lock()
	*m.keys = append(*m.keys, agentsaga.CallKey(ctx))
	m.mu.Unlock()
	usage := agentsaga.Usage{InputTokens: 10, OutputTokens: 2}
	for _, m := range req.Messages {
		if m.Role == "tool" {
			return agentsaga.ModelTurn{Content: "counted: " + m.Content, Usage: usage}, nil
		}
	}
	args, _ := json.Marshal(map[string]string{"text": "three small words"})
	return agentsaga.ModelTurn{Usage: usage,
		ToolCalls: []agentsaga.ToolCall{{ID: "call-1", Name: req.Tools[0].Name, Arguments: string(args)}}}, nil
}

// Item 7: a custom model is written with the root package's types alone,
// and CallKey is the model call's idempotency key inside it.
func TestCallKeyInsideACustomModel(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var keys []string
	engine, err := agentsaga.New(t.Context(), agentsagatest.NewLedger(t), agentsaga.Config{Models: map[string]agentsaga.ModelFactory{
		"team": func(agentsaga.ModelSpec, string, *http.Client) (agentsaga.Model, error) {
			return keyModel{&mu, &keys}, nil
		}}})
	require.NoError(t, err)
	env, id := agentsagatest.NewEnvironment(t, engine)
	spec, err := agentsaga.RunSpec{Goal: "count", Budget: agentsaga.Budget{Steps: 3}, Model: agentsaga.ModelSpec{Provider: "team"},
		Tools: []agentsaga.ToolSpec{{Name: "word_count", Kind: "go"}}}.ResolveFor(engine.Providers()...)
	require.NoError(t, err)
	env.ExecuteWorkflow(agentsaga.AgentRunWorkflow, spec)
	require.NoError(t, env.GetWorkflowError())
	var result agentsaga.RunResult
	require.NoError(t, env.GetWorkflowResult(&result))
	require.Contains(t, result.Answer, `"words": 3`)
	require.Equal(t, []string{id + "/" + activityid.Model(1), id + "/" + activityid.Model(2)}, keys)
}

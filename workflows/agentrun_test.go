package workflows_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/testsuite"

	"github.com/agentsaga/agentsaga/activities"
	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/budget"
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/internal/ledgertest"
	"github.com/agentsaga/agentsaga/workflows"
)

const workflowID = "default-test-workflow-id"

// registerWithRetryHook registers the workflow with the retry hook paying
// from a bucket in store, as a worker does.
func registerWithRetryHook(t *testing.T, env *testsuite.TestWorkflowEnvironment, store *ledgerdb.Store) {
	t.Helper()
	require.NoError(t, store.EnsureBucket(context.Background(), "fleet", budget.DefaultBucket))
	options := tolerantWorker
	options.Interceptors = []interceptor.WorkerInterceptor{
		activities.NewRetryHook(store, activities.RetryHookConfig{Bucket: "fleet", BucketConfig: budget.DefaultBucket, Breaker: budget.DefaultBreaker}),
	}
	env.SetWorkerOptions(options)
	env.RegisterWorkflow(workflows.AgentRun)
}

func mustSpec(t *testing.T, yaml string) workflows.RunSpec {
	t.Helper()
	spec, err := workflows.ParseSpec([]byte(yaml))
	require.NoError(t, err)
	return spec
}

// runAgent executes AgentRun in the test environment with the real
// activities against a fresh ledger.
func runAgent(t *testing.T, spec workflows.RunSpec) (workflows.RunResult, error, *ledgerdb.Store) {
	t.Helper()
	return runAgentWith(t, spec, nil)
}

// runAgentWithAbort runs spec and aborts it once it waits for a human.
func runAgentWithAbort(t *testing.T, spec workflows.RunSpec) (workflows.RunResult, error, *ledgerdb.Store) {
	t.Helper()
	return runAgentWith(t, spec, func(env *testsuite.TestWorkflowEnvironment) {
		update(env, workflows.UpdateAbort, workflows.ReasonInput{Reason: "test: stop here"})
	})
}

func runAgentWith(t *testing.T, spec workflows.RunSpec, human func(env *testsuite.TestWorkflowEnvironment)) (workflows.RunResult, error, *ledgerdb.Store) {
	t.Helper()
	store := ledgertest.NewStore(t)
	box := activities.NewToolbox()
	box.Register("add", func(_ context.Context, call activities.ToolInvocation) (string, error) {
		return "5", nil
	})
	env := newEnv()
	registerWithRetryHook(t, env, store)
	activities.Register(env, &activities.Activities{Ledger: store, Toolbox: box}, false)
	if human != nil {
		env.RegisterDelayedCallback(func() { human(env) }, time.Hour)
	}
	env.ExecuteWorkflow(workflows.AgentRun, spec)
	require.True(t, env.IsWorkflowCompleted())
	var result workflows.RunResult
	err := env.GetWorkflowError()
	if err == nil {
		require.NoError(t, env.GetWorkflowResult(&result))
	}
	return result, err, store
}

// addTwoAndThree is a run that calls add once and answers; tools
// declares add (addTool, or add with an approval rule).
func addTwoAndThree(tools string) string {
	return `
goal: add two and three
budget: {steps: 5}
model:
  provider: scripted
  script:
    - tool_calls: [{name: add, arguments: {a: 2, b: 3}}]
    - content: "2 + 3 = 5"
` + tools
}

const addTool = `
tools:
  - name: add
    kind: go
    parameters: {type: object, properties: {a: {type: number}, b: {type: number}}, required: [a, b]}
`

func TestAgentRunCompletes(t *testing.T) {
	t.Parallel()
	spec := mustSpec(t, addTwoAndThree(addTool))
	result, err, store := runAgent(t, spec)
	require.NoError(t, err)
	assert.Equal(t, agentsagatype.RunCompleted, result.Status)
	assert.Equal(t, "2 + 3 = 5", result.Answer)
	assert.Equal(t, 2, result.Usage.Steps)

	actions, err := store.ListActions(context.Background(), workflowID)
	require.NoError(t, err)
	require.Len(t, actions, 1)
	assert.Equal(t, workflowID+"/step-001-call-1-add", actions[0].Key)
	assert.Equal(t, "5", actions[0].Result)

	run, err := store.GetRun(context.Background(), workflowID)
	require.NoError(t, err)
	assert.Equal(t, agentsagatype.RunCompleted, run.Status)
	assert.Equal(t, 2, run.StepsUsed)
	assert.Equal(t, 3, run.LeafCalls, "two model calls and one tool call left the process")
}

func TestAgentRunStopsAtStepCapWithHandoffNote(t *testing.T) {
	t.Parallel()
	spec := mustSpec(t, `
goal: keep adding
budget: {steps: 2}
model:
  provider: scripted
  script:
    - {content: "first I add", tool_calls: [{name: add, arguments: {a: 1, b: 1}}]}
    - {content: "then I add again", tool_calls: [{name: add, arguments: {a: 2, b: 2}}]}
    - content: never reached
`+addTool)
	result, err, store := runAgent(t, spec)
	require.NoError(t, err)
	assert.Equal(t, agentsagatype.RunPartial, result.Status)
	assert.Equal(t, "then I add again", result.Answer)
	assert.Contains(t, result.HandoffNote, "steps budget is spent")
	assert.Contains(t, result.HandoffNote, `succeeded: add {"a":1,"b":1}, add {"a":2,"b":2}`)
	run, err := store.GetRun(context.Background(), workflowID)
	require.NoError(t, err)
	assert.Equal(t, agentsagatype.RunPartial, run.Status)
	assert.Equal(t, result.HandoffNote, run.HandoffNote)
}

func TestAgentRunFeedsMalformedCallsBackWithoutTouchingTheLedger(t *testing.T) {
	t.Parallel()
	spec := mustSpec(t, `
goal: misbehave
budget: {steps: 3}
model:
  provider: scripted
  script:
    - tool_calls:
        - {name: delete_everything, arguments: {}}
        - {name: add, arguments: "{\"a\": 1,"}
    - content: sorry
`+addTool)
	result, err, store := runAgent(t, spec)
	require.NoError(t, err)
	assert.Equal(t, agentsagatype.RunCompleted, result.Status)
	var errs []string
	for _, e := range result.Trace {
		if e.Kind == "tool" {
			errs = append(errs, e.Error)
		}
	}
	require.Len(t, errs, 2)
	assert.Contains(t, errs[0], `unknown tool "delete_everything"; the tools are: add`)
	assert.Contains(t, errs[1], `arguments for tool "add" are not valid JSON`)
	actions, err := store.ListActions(context.Background(), workflowID)
	require.NoError(t, err)
	assert.Empty(t, actions)
}

func TestAgentRunRefusalEscalatesAndResumeContinuesWithTheBudgetLeft(t *testing.T) {
	t.Parallel()
	spec := mustSpec(t, `
goal: do something delicate
budget: {steps: 6}
model:
  provider: scripted
  script:
    - refusal: "I can't do that without approval."
    - content: done, with approval
`)
	store := ledgertest.NewStore(t)
	env := newEnv()
	registerWithRetryHook(t, env, store)
	activities.Register(env, &activities.Activities{Ledger: store}, false)

	var rejected, accepted *error
	env.RegisterDelayedCallback(func() {
		// A bad Update is rejected by its validator and changes nothing.
		rejected = update(env, workflows.UpdateResume, workflows.ResumeInput{Message: ""})
		accepted = update(env, workflows.UpdateResume, workflows.ResumeInput{Message: "approved by the account owner", AddSteps: 2})
	}, time.Minute)
	env.ExecuteWorkflow(workflows.AgentRun, spec)
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
	var result workflows.RunResult
	require.NoError(t, env.GetWorkflowResult(&result))

	require.Error(t, *rejected)
	assert.Contains(t, (*rejected).Error(), "a message for the model is required")
	require.NoError(t, *accepted)
	assert.Equal(t, agentsagatype.RunCompleted, result.Status)
	assert.Equal(t, "done, with approval", result.Answer)
	assert.Equal(t, 2, result.Usage.Steps, "the budget was left intact while escalated")
	last := result.Trace[len(result.Trace)-1]
	assert.Contains(t, last.Note, "7 steps", "6 steps + 2 added by the human - 1 used")
}

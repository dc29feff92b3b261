package main

import (
	"fmt"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"

	"github.com/agentsaga/agentsaga/activities"
	"github.com/agentsaga/agentsaga/agentsagatest"
	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/budget"
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/workflows"
)

// TestSeed002Demo reproduces the demo of seed 002 ("Retry budgets: how a
// well-meaning agent burns your whole budget") on the real workflow, the
// real retry hook and a real ledger, with Temporal's time skipping. It
// plays the demo three times in a row on one ledger, as `make demo` run
// again does: the search backend flaps (it fails 2 requests of every 3),
// which is not down, so its breaker never opens and the trace is the same
// every time. Under the old breaker rule (10 failures in 30 s, successes
// not counted) the second play found it open and parked "tax rules".
func TestSeed002Demo(t *testing.T) {
	t.Parallel()
	store := ledgerdb.Of(agentsagatest.NewLedger(t))
	require.NoError(t, store.EnsureBucket(t.Context(), "fleet", budget.DefaultBucket))
	for play := 1; play <= 3; play++ {
		t.Run(fmt.Sprintf("play-%d", play), func(t *testing.T) { playSeed002(t, store, fmt.Sprintf("seed002-play-%d", play)) })
	}
}

func playSeed002(t *testing.T, store *ledgerdb.Store, workflowID string) {
	desk := &seedDesk{}
	server := httptest.NewServer(desk)
	defer server.Close()
	spec, err := workflows.ParseSpec([]byte(fmt.Sprintf(seedSpec, server.URL, server.URL)))
	require.NoError(t, err)

	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestWorkflowEnvironment()
	// The testsuite's 3 s wall-clock bound counts the real Postgres
	// activities; a loaded two-core CI machine can pass it.
	env.SetTestTimeout(time.Minute)
	env.SetStartWorkflowOptions(client.StartWorkflowOptions{ID: workflowID})
	env.SetWorkerOptions(worker.Options{Interceptors: []interceptor.WorkerInterceptor{
		activities.NewRetryHook(store, activities.RetryHookConfig{Bucket: "fleet", BucketConfig: budget.DefaultBucket, Breaker: budget.DefaultBreaker}),
	}})
	env.RegisterWorkflow(workflows.AgentRun)
	activities.Register(env, &activities.Activities{Ledger: store}, false)
	env.ExecuteWorkflow(workflows.AgentRun, spec)
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
	var result workflows.RunResult
	require.NoError(t, env.GetWorkflowResult(&result))

	for _, e := range result.Trace {
		switch e.Kind {
		case "model":
			t.Logf("\n%s", e.Note)
		case "tool":
			outcome := ">> got: " + e.Output
			if e.Error != "" {
				outcome = ">> gave up: " + e.Error
			}
			t.Logf("%s %s (attempts %d) %s\n", e.Tool, e.Arguments, e.Attempts, outcome)
		}
	}
	t.Logf("PARTIAL RESULT: %s\nHANDOFF NOTE: %s", result.Answer, result.HandoffNote)
	t.Logf("calls %d, retries %d, per-tool %v, leaf calls %d, amplification %.2f, denials %v",
		result.Retries.Calls, result.Retries.Retries, result.Retries.ToolRetries, result.Usage.LeafCalls,
		result.Retries.Amplification, result.Retries.Denials)

	// The 400 is never retried: one request, one attempt.
	assert.Equal(t, 1, desk.lookups, "a 400 is malformed forever: never retried")
	lookup := toolEntries(result, "lookup")
	require.Len(t, lookup, 1)
	assert.Equal(t, 1, lookup[0].Attempts)
	assert.Contains(t, lookup[0].Error, "HTTP 400")

	// A topic is given up when the run's retry budget is spent.
	searches := toolEntries(result, "search")
	require.GreaterOrEqual(t, len(searches), 3)
	assert.Equal(t, budget.DenyRunRatio, searches[2].Denial, "tax rules is given up by the run retry budget")
	assert.Contains(t, searches[2].Error, "retry denied")
	assert.Equal(t, 5, result.Retries.Retries, "the floor of 5 retries, all spent")
	assert.Equal(t, 5, result.Retries.ToolRetries["search"])

	// The run wraps up early, with budget left, with a partial result and
	// a handoff note, instead of dying mid-thought.
	assert.Equal(t, agentsagatype.RunPartial, result.Status)
	assert.Contains(t, result.Reason, "graceful finish")
	assert.Len(t, searches, 4, "warranty terms is never reached: the run wrapped up first")
	assert.Less(t, result.Usage.LeafCalls, 18, "budget was left when the run wrapped up")
	assert.Contains(t, result.Answer, "refund policy")
	assert.Contains(t, result.HandoffNote, "covered 3 of 5 topics")
	assert.Contains(t, result.HandoffNote, "Tool calls that failed: lookup")
	last := result.Trace[len(result.Trace)-1]
	assert.Contains(t, last.Note, "Stop exploring", "the last turn's note switched the instructions")
	assert.Equal(t, 3+3+2+1+1, desk.searches+desk.lookups, "leaf calls at the tools: 3+3+2 searches, 1 more, 1 lookup")
	for _, e := range searches {
		assert.Zero(t, e.Parks, "search flaps, it is not down: no call waits for its breaker")
	}

	// The ledger holds the same story: retries charged once each.
	counters, err := store.RunRetryCounters(t.Context(), workflowID)
	require.NoError(t, err)
	assert.Equal(t, 5, counters.Retries)
	stored, err := store.GetRun(t.Context(), workflowID)
	require.NoError(t, err)
	assert.Equal(t, agentsagatype.RunPartial, stored.Status)
	assert.InDelta(t, 0.02*10, stored.USDSpent, 1e-9, "ten tool attempts at 0.02 USD")
}

func toolEntries(result workflows.RunResult, tool string) []workflows.TraceEntry {
	var out []workflows.TraceEntry
	for _, e := range result.Trace {
		if e.Kind == "tool" && e.Tool == tool {
			out = append(out, e)
		}
	}
	return out
}

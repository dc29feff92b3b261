package activities_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/agentsaga/agentsaga/activities"
	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/budget"
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/internal/ledgertest"
	"github.com/agentsaga/agentsaga/internal/providerwire"
	"github.com/agentsaga/agentsaga/internal/quota"
	"github.com/agentsaga/agentsaga/internal/wire"
)

// byActivity names each statement sent under an activity's context (the
// activity's, its retry hook's, its lease keeper's) by the activity's ID,
// and records no other: the hook's success deposits are flushed on their
// own timer, one statement per bucket per worker per DepositLag, off every
// call's path.
func byActivity(ctx context.Context) (string, bool) {
	if !activity.IsActivity(ctx) {
		return "", false
	}
	return activity.GetInfo(ctx).ActivityID, true
}

// countingHook is a retry hook on store as a worker configures it, with its
// clock stopped, so a closed breaker's answer stays fresh for the whole
// test however slowly it runs.
func countingHook(t *testing.T, store *ledgerdb.Store) *activities.RetryHook {
	t.Helper()
	require.NoError(t, store.EnsureBucket(context.Background(), "fleet", budget.DefaultBucket))
	// The successes' bonuses are flushed within DepositLag of the first:
	// let them land before the store closes.
	t.Cleanup(func() { time.Sleep(activities.DepositLag + 200*time.Millisecond) })
	now := time.Now()
	return activities.NewRetryHook(store, activities.RetryHookConfig{Bucket: "fleet", BucketConfig: budget.DefaultBucket,
		Breaker: budget.DefaultBreaker, Now: func() time.Time { return now }})
}

func toolPlan(tool string) agentsagatype.RetryPlan {
	return agentsagatype.RetryPlan{Tool: tool, Dependency: "tool:" + tool, MaxAttempts: 3, ToolRetryCap: 6, RunAllowance: 5,
		BackoffBase: time.Millisecond, BackoffCap: time.Millisecond}
}

// logStatements prints what a call sent, each statement's first 80
// characters, and returns how many.
func logStatements(t *testing.T, what string, sent []ledgertest.Statement) int {
	t.Helper()
	lines := make([]string, len(sent))
	for i, s := range sent {
		sql := strings.Join(strings.Fields(s.SQL), " ")
		if len(sql) > 80 {
			sql = sql[:80]
		}
		lines[i] = "    " + sql
	}
	t.Logf("%s: %d statements\n%s", what, len(sent), strings.Join(lines, "\n"))
	return len(sent)
}

// A successful tool call sends at most 3 Postgres statements and a model
// turn at most 2 (issue 15), counted with a pgx tracer over the whole
// activity, the retry hook included. Both are counted with the breaker's
// answer warm: a first call to the same dependency comes before the counted
// one, so the hook trusts the closed breaker (BreakerStaleness). A cold
// worker adds the one gate statement, once per dependency per second: the
// first calls below show it. What is left is the claim, which records the
// leaf call (and, for a model turn, writes the appended messages and reads
// the conversation), and the completion, which ends the leaf call and
// records the conversation message.
func TestStatementsPerSuccessfulCall(t *testing.T) {
	t.Parallel()
	statements := &ledgertest.Statements{Caller: byActivity}
	store := ledgertest.NewCountingStore(t, statements)
	toolbox := activities.NewToolbox()
	toolbox.Register("lookup", func(context.Context, activities.ToolInvocation) (string, error) {
		return `{"order":"o-1","status":"shipped"}`, nil
	})
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestActivityEnvironment()
	env.SetWorkerOptions(worker.Options{DeadlockDetectionTimeout: tolerantDeadlock, Interceptors: []interceptor.WorkerInterceptor{countingHook(t, store)}})
	acts := &activities.Activities{Ledger: store, Toolbox: toolbox}
	activities.Register(env, acts, true)
	const wf = "default-test-workflow-id" // the test environment's
	lookup := func(record int) wire.ToolCallRequest {
		return wire.ToolCallRequest{Tool: agentsagatype.ToolSpec{Name: "lookup", Kind: agentsagatype.ToolKindGo},
			Arguments: `{"order":"o-1"}`, Retry: toolPlan("lookup"),
			Record: &wire.MessageRef{Seq: record, ToolCallID: "call_1_1", Name: "lookup"}}
	}
	model := agentsagatype.ModelSpec{Provider: agentsagatype.ProviderScripted, Script: []agentsagatype.ScriptedTurn{
		{ToolCalls: []agentsagatype.ScriptedCall{{Name: "lookup", Arguments: []byte(`{"order":"o-1"}`)}}},
		{Content: "Order o-1 has shipped."},
		{Content: "Anything else?"},
	}}
	modelPlan := agentsagatype.RetryPlan{Tool: "model", Dependency: "model:scripted", MaxAttempts: 3, ToolRetryCap: 6,
		RunAllowance: 5, BackoffBase: time.Millisecond, BackoffCap: time.Millisecond}
	turn := func(through int, appended ...agentsagatype.Message) wire.ModelCall {
		return wire.ModelCall{Model: model, Retry: modelPlan, Note: "BUDGET LEFT: 9 steps",
			Conversation: wire.Conversation{WorkflowID: wf, Through: through, Append: appended}}
	}
	run := func(what string, fn any, arg any) int {
		t.Helper()
		statements.Take()
		_, err := env.ExecuteActivity(fn, arg)
		require.NoError(t, err, what)
		return logStatements(t, what, statements.Take())
	}

	// The run's first turn and a call: cold, each pays its breaker's gate.
	coldTurn := run("model turn, cold worker", acts.CallModel, turn(2,
		agentsagatype.Message{Seq: 0, Role: "system", Content: "You look orders up.", Pinned: true},
		agentsagatype.Message{Seq: 1, Role: "user", Content: "Where is order o-1?", Pinned: true}))
	coldCall := run("tool call, cold worker", acts.CallTool, lookup(3))
	assert.LessOrEqual(t, coldTurn, 3, "a cold model turn: the gate, the claim, the completion")
	assert.LessOrEqual(t, coldCall, 3, "a cold tool call: the gate, the claim, the completion")

	// The same dependencies again, warm: what a call costs a busy worker.
	call := run("tool call, warm", acts.CallTool, lookup(4))
	modelTurn := run("model turn, warm", acts.CallModel, turn(5))
	assert.LessOrEqual(t, call, 3, "a successful tool call")
	assert.LessOrEqual(t, modelTurn, 2, "a successful model turn")

	// What they did is all there: one leaf call each, ended ok, and the
	// conversation the turns and calls wrote, in order.
	leaves, err := store.ListLeafCalls(context.Background(), wf)
	require.NoError(t, err)
	require.Len(t, leaves, 4)
	for _, leaf := range leaves {
		assert.Equal(t, "ok", leaf.Outcome, "%s", leaf.ActivityID)
		assert.NotNil(t, leaf.FinishedAt)
	}
	msgs, err := store.Messages(context.Background(), wf, 100, ledgerdb.MessageWindow{})
	require.NoError(t, err)
	roles := make([]string, len(msgs))
	for i, m := range msgs {
		roles[i] = m.Role
	}
	assert.Equal(t, []string{"system", "user", "assistant", "tool", "tool", "assistant"}, roles)
	assert.Equal(t, "Order o-1 has shipped.", msgs[5].Content, "the second turn read the conversation the first and the calls wrote")

	// A turn charged to a capped account reserves in its claim and
	// settles in its completion: still two statements.
	ctx := context.Background()
	_, err = store.SetSpendCap(ctx, ledgerdb.SpendCap{Account: "acme", Period: ledgerdb.SpendDay, USD: 10}, "test")
	require.NoError(t, err)
	capped := turn(6)
	capped.Spend = &wire.SpendPlan{Account: "acme/support", InputPerMillion: 1000, OutputPerMillion: 1000}
	assert.LessOrEqual(t, run("model turn charged to a capped account, warm", acts.CallModel, capped), 2, "a capped model turn")
	caps, err := store.SpendCaps(ctx, "acme")
	require.NoError(t, err)
	require.Len(t, caps, 1)
	assert.Positive(t, caps[0].Spent, "the turn's usage was spent")
	assert.Zero(t, caps[0].Reserved, "and its reservation given back")
}

// longCallWorkflow makes a short call, then a long one, under a heartbeat
// timeout short enough that the long one renews its lease.
func longCallWorkflow(ctx workflow.Context, heartbeat time.Duration) error {
	var acts *activities.Activities
	for _, id := range []string{"step-001-call-1-quick", "step-002-call-1-slow"} {
		tool := id[strings.LastIndex(id, "-")+1:]
		actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{ActivityID: id, StartToCloseTimeout: time.Minute,
			HeartbeatTimeout: heartbeat, RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: 1}})
		req := wire.ToolCallRequest{Tool: agentsagatype.ToolSpec{Name: tool, Kind: agentsagatype.ToolKindGo}, Arguments: `{}`,
			Retry: toolPlan("shared")}
		if err := workflow.ExecuteActivity(actx, acts.CallTool, req).Get(ctx, nil); err != nil {
			return err
		}
	}
	return nil
}

// A call that outlives a third of its lease renews it, one statement per
// third: a long call costs its two statements plus one per renewal (no
// target; the lease follows the attempt's heartbeats, see lease.go).
func TestStatementsOfALongCallThatRenewsItsLease(t *testing.T) {
	t.Parallel()
	statements := &ledgertest.Statements{Caller: byActivity}
	store := ledgertest.NewCountingStore(t, statements)
	const heartbeat = 1500 * time.Millisecond // renewed every 500 ms
	const runs = 1300 * time.Millisecond
	toolbox := activities.NewToolbox()
	toolbox.Register("quick", func(context.Context, activities.ToolInvocation) (string, error) { return "done", nil })
	toolbox.Register("slow", func(ctx context.Context, _ activities.ToolInvocation) (string, error) {
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(runs):
			return "done, slowly", nil
		}
	})
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestWorkflowEnvironment()
	env.SetTestTimeout(time.Minute)
	env.SetWorkerOptions(worker.Options{DeadlockDetectionTimeout: tolerantDeadlock, Interceptors: []interceptor.WorkerInterceptor{countingHook(t, store)}})
	env.RegisterWorkflow(longCallWorkflow)
	activities.Register(env, &activities.Activities{Ledger: store, Toolbox: toolbox}, true)
	env.ExecuteWorkflow(longCallWorkflow, heartbeat)
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())

	var slow []ledgertest.Statement
	renewals := 0
	for _, s := range statements.Take() {
		if s.Caller != "step-002-call-1-slow" {
			continue
		}
		slow = append(slow, s)
		if strings.Contains(s.SQL, "SET locked_until") {
			renewals++
		}
	}
	logStatements(t, "a 1.3 s call under a 1.5 s lease, warm", slow)
	t.Logf("the long call cost %d statements: the claim, the completion and %d renewals", len(slow), renewals)
	assert.Equal(t, 2, len(slow)-renewals, "the claim and the completion")
	assert.GreaterOrEqual(t, renewals, 1, "renewed at least once in 1.3 s at one renewal per 500 ms")
	assert.LessOrEqual(t, renewals, 3)
}

// A model turn on its provider's quota costs no statement more when the
// quota has room (issue 22): the claim admits it, and the completion
// settles its tokens and learns the response's rate-limit headers.
func TestStatementsOfAModelTurnOnAQuota(t *testing.T) {
	t.Parallel()
	provider := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		request, _ := io.ReadAll(r.Body)
		w.Header().Set("x-ratelimit-limit-requests", "500")
		w.Header().Set("x-ratelimit-remaining-requests", "499")
		w.Header().Set("x-ratelimit-limit-tokens", "200000")
		w.Header().Set("x-ratelimit-remaining-tokens", "199000")
		_ = providerwire.WriteChatCompletion(w, providerwire.Streams(request), []byte(`{"id":"c1","object":"chat.completion","created":0,"model":"gpt-4o-mini",`+
			`"choices":[{"index":0,"message":{"role":"assistant","content":"shipped"},"finish_reason":"stop"}],`+
			`"usage":{"prompt_tokens":30,"completion_tokens":2,"total_tokens":32}}`))
	}))
	defer provider.Close()
	statements := &ledgertest.Statements{Caller: byActivity}
	store := ledgertest.NewCountingStore(t, statements)
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestActivityEnvironment()
	env.SetWorkerOptions(worker.Options{DeadlockDetectionTimeout: tolerantDeadlock, Interceptors: []interceptor.WorkerInterceptor{countingHook(t, store)}})
	acts := &activities.Activities{Ledger: store}
	activities.Register(env, acts, true)
	model := agentsagatype.ModelSpec{Provider: agentsagatype.ProviderOpenAI, Name: "gpt-4o-mini", BaseURL: provider.URL + "/v1"}
	plan := agentsagatype.RetryPlan{Tool: "model", Dependency: "model:openai:gpt-4o-mini", MaxAttempts: 3, ToolRetryCap: 6,
		RunAllowance: 5, BackoffBase: time.Millisecond, BackoffCap: time.Millisecond}
	turn := func(through int, appended ...agentsagatype.Message) wire.ModelCall {
		return wire.ModelCall{Model: model, Retry: plan, Quota: true,
			Conversation: wire.Conversation{WorkflowID: "default-test-workflow-id", Through: through, Append: appended}}
	}
	// The reply streams, so its first text goes out at once, in a
	// statement of its own (issue 46): counted apart from the turn's.
	run := func(what string, call wire.ModelCall) (turn, text int) {
		t.Helper()
		statements.Take()
		_, err := env.ExecuteActivity(acts.CallModel, call)
		require.NoError(t, err, what)
		sent := statements.Take()
		logStatements(t, what, sent)
		for _, s := range sent {
			if strings.Contains(s.SQL, "agentsaga_publish_events") {
				text++
			}
		}
		return len(sent) - text, text
	}
	run("model turn on a quota, cold worker", turn(1, agentsagatype.Message{Seq: 0, Role: "user", Content: "Where is order o-1?"}))
	warm, text := run("model turn on a quota, warm", turn(3, agentsagatype.Message{Seq: 2, Role: "user", Content: "And o-2?"}))
	assert.LessOrEqual(t, warm, 2, "the claim admits, the completion settles and learns")
	assert.Equal(t, 1, text, "the reply's first text, published as it came")

	st, err := store.QuotaState(context.Background(), quota.Key("openai", "gpt-4o-mini", ""))
	require.NoError(t, err)
	assert.InDelta(t, 500, st.RequestsPerMinute, 0.001, "learned from the headers")
	assert.InDelta(t, 200000, st.TokensPerMinute, 0.001)
	assert.Zero(t, st.Refused)
}

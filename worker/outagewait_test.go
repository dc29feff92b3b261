package worker_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/activityid"
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/internal/ledgertest"
	"github.com/agentsaga/agentsaga/internal/workertest"
	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/workflows"
)

// Issue 20's acceptance tests: an outage of a dependency is waited out by
// the worker's default breaker (budget.DefaultBreaker: open once the last 3
// requests fleet-wide all failed, probe every 5 s), not retried into the
// ground and not escalated, unless it outlasts
// escalate.after_breaker_open_seconds. Every test here runs the worker with
// its default breaker, on a queue and a ledger of its own.

// defaultBreakerWorker starts a worker with the default breaker on a queue
// of the test's own, against a ledger of its own; both stop with the test.
func defaultBreakerWorker(ctx context.Context, t *testing.T, prefix string) (*ledger.Store, string) {
	t.Helper()
	store := ledgertest.NewHandle(t)
	queue := prefix + "-" + t.Name()
	w := startWorker(ctx, t, store, queue)
	t.Cleanup(w.Stop)
	return store, queue
}

// resolvedSpec parses and resolves a spec written in YAML.
func resolvedSpec(t *testing.T, yaml string) workflows.RunSpec {
	t.Helper()
	spec, err := workflows.ParseSpec([]byte(yaml))
	require.NoError(t, err)
	spec, err = spec.Resolve()
	require.NoError(t, err)
	return spec
}

// runEvents is every event of a run, through each continue-as-new.
func runEvents(ctx context.Context, t *testing.T, id, runID string) []*historypb.HistoryEvent {
	t.Helper()
	chain, err := workertest.Executions(ctx, temporalClient, id, runID)
	require.NoError(t, err)
	var events []*historypb.HistoryEvent
	for _, h := range chain {
		events = append(events, h.Events...)
	}
	return events
}

// breakerWaits counts, in a run's events, the waits behind an open breaker
// (timers whose summary says "parked") and the sends after one (activities
// scheduled as <id>/after-breaker-N).
func breakerWaits(events []*historypb.HistoryEvent) (parks, resends int) {
	for _, e := range events {
		if e.GetTimerStartedEventAttributes() != nil && strings.Contains(string(e.GetUserMetadata().GetSummary().GetData()), "parked") {
			parks++
		}
		if a := e.GetActivityTaskScheduledEventAttributes(); a != nil && strings.Contains(a.GetActivityId(), "/after-breaker-") {
			resends++
		}
	}
	return parks, resends
}

// escalationsIn counts the times a run recorded itself escalated in the
// ledger (the SetRunStatus activities it scheduled with status escalated):
// every wait for a human goes through one.
func escalationsIn(events []*historypb.HistoryEvent) int {
	n := 0
	for _, e := range events {
		a := e.GetActivityTaskScheduledEventAttributes()
		if a == nil {
			continue
		}
		for _, p := range a.GetInput().GetPayloads() {
			if strings.Contains(string(p.GetData()), `"status":"`+agentsagatype.RunEscalated+`"`) {
				n++
			}
		}
	}
	return n
}

// waitForEscalation waits until the run is escalated, and fails the test
// at once if it ends (or its context does) before.
func waitForEscalation(ctx context.Context, t *testing.T, store *ledger.Store, id string) agentsagatype.Run {
	t.Helper()
	for {
		run, err := ledgerdb.Of(store).GetRun(ctx, id)
		if err == nil {
			switch run.Status {
			case agentsagatype.RunEscalated:
				return run
			case agentsagatype.RunRunning:
			default:
				t.Fatalf("run %s ended %s before it escalated: %s", id, run.Status, run.Reason)
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("run %s never escalated (last: %+v, %v)", id, run.Status, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// itemsSpec is a run that fetches items 1..n, one a turn, then answers.
func itemsSpec(t *testing.T, url string, n int, extra string) workflows.RunSpec {
	t.Helper()
	return resolvedSpec(t, fmt.Sprintf(`
goal: fetch %[1]d items
budget: {steps: 30}
retry: {max_attempts: 3, ratio: 0.2, floor: 5}
%[3]s
model:
  provider: scripted
  script:
%[2]s    - content: all %[1]d fetched
tools:
  - name: fetch
    kind: http
    url: %[4]s
    timeout_seconds: 10
    parameters: {type: object, properties: {item: {type: integer}}, required: [item]}
`, n, itemsScript("fetch", n), extra, url))
}

// One run writes 20 items one after the other to a tool that is down for
// the first 20 s and then acknowledges every write with the same
// {"ok": true}: the default breaker opens after 3 failures, the call waits
// behind it instead of failing (although its 3 attempts ran out), about one
// probe per cooldown reaches the tool, and the run completes with every
// item written once and without asking a human. The watchdog never fires:
// each turn changed the world with new arguments, which is progress
// although its answer was the same as the last (issue 30).
func TestOutageOfAToolIsWaitedOutByTheDefaultBreaker(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	store, queue := defaultBreakerWorker(ctx, t, "outage-wait")
	const items, outage = 20, 20 * time.Second
	tool := newOutage()
	tool.ack = true
	server := httptest.NewServer(tool)
	defer server.Close()
	recovered := make(chan struct{})
	go func() {
		defer close(recovered)
		select {
		case <-tool.firstSeen:
		case <-ctx.Done():
			return
		}
		select {
		case <-time.After(outage):
			tool.recover()
		case <-ctx.Done():
		}
	}()

	const id = "outage-wait-items"
	started := time.Now()
	run, err := temporalClient.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: queue}, workflows.AgentRun,
		itemsSpec(t, server.URL, items, "escalate: {after_breaker_open_seconds: 120}"))
	require.NoError(t, err)
	var result workflows.RunResult
	require.NoError(t, run.Get(ctx, &result))
	took := time.Since(started)
	<-recovered

	assert.Equal(t, agentsagatype.RunCompleted, result.Status, result.Reason)
	stored, err := ledgerdb.Of(store).GetRun(ctx, id)
	require.NoError(t, err)
	assert.Equal(t, agentsagatype.RunCompleted, stored.Status, stored.Reason)

	// Every item fetched, once, under its first key.
	requests, applied := tool.counts()
	total, succeeded := 0, 0
	for _, n := range requests {
		total += n
	}
	for key, n := range applied {
		succeeded += n
		assert.Equal(t, 1, n, key)
		assert.NotContains(t, key, "after-breaker", "a call sent again after a wait keeps its first idempotency key")
	}
	for i := 1; i <= items; i++ {
		assert.Contains(t, applied, id+"/"+activityid.Tool(i, 1, "fetch"), "item %d", i)
	}
	fetched := 0
	actions, err := ledgerdb.Of(store).ListActions(ctx, id)
	require.NoError(t, err)
	for _, a := range actions {
		if a.Tool == "fetch" && a.Status == agentsagatype.ActionCompleted {
			fetched++
		}
	}
	assert.Equal(t, items, fetched, "items fetched, by the ledger")

	// Nobody was asked.
	events := runEvents(ctx, t, id, run.GetRunID())
	escalations := escalationsIn(events)
	assert.Zero(t, escalations, "the run waited for a human")

	// During the outage: the 3 failures that opened the breaker, then about
	// one probe per 5 s cooldown.
	duringOutage := total - succeeded
	limit := 3 + int(outage/(5*time.Second)) + 2
	parks, resends := breakerWaits(events)
	t.Logf("completed in %s; %d of %d items fetched; %d requests reached the tool during its %s outage (limit %d), %d in all; "+
		"%d parks, %d sends after a wait; escalations %d; retries %d, denials %v",
		took.Round(100*time.Millisecond), fetched, items, duringOutage, outage, limit, total, parks, resends, escalations,
		result.Retries.Retries, result.Retries.Denials)
	assert.LessOrEqual(t, duringOutage, limit, "requests that reached the tool while it was down")
	assert.Positive(t, parks, "the call that met the outage waited on a timer")
}

// The same tool down for good: the run, which charged a customer first,
// escalates once the breaker has been open for
// escalate.after_breaker_open_seconds (15 s), with a reason that names the
// tool; aborted, it refunds the charge, once.
func TestOutageOfAToolEscalatesAfterTheThresholdAndAbortRefunds(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	store, queue := defaultBreakerWorker(ctx, t, "outage-escalate")
	pay, payURL := startPayments(t, func(*payments) {})
	tool := newOutage() // never recovers
	server := httptest.NewServer(tool)
	defer server.Close()
	firstFailure := make(chan time.Time, 1)
	go func() {
		select {
		case <-tool.firstSeen:
			firstFailure <- time.Now()
		case <-ctx.Done():
		}
	}()

	spec := resolvedSpec(t, fmt.Sprintf(`
goal: charge ann, then fetch an item
budget: {steps: 6}
escalate: {after_breaker_open_seconds: 15}
model:
  provider: scripted
  script:
    - tool_calls: [{name: charge, arguments: {customer: ann, amount: 10}}]
    - tool_calls: [{name: fetch, arguments: {item: 1}}]
    - content: charged and fetched
`+paymentTools+`  - name: fetch
    kind: http
    url: %[2]s
    timeout_seconds: 10
    parameters: {type: object, properties: {item: {type: integer}}, required: [item]}
`, payURL, server.URL))
	const id = "outage-escalate-run"
	run, err := temporalClient.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: queue}, workflows.AgentRun, spec)
	require.NoError(t, err)

	var first time.Time
	select {
	case first = <-firstFailure:
	case <-ctx.Done():
		t.Fatal("fetch never reached the tool")
	}
	stored := waitForEscalation(ctx, t, store, id)
	after := time.Since(first)
	requests, _ := tool.counts()
	total := 0
	for _, n := range requests {
		total += n
	}
	t.Logf("escalated %s after the first failure of fetch, %d requests reached it; status detail: %s",
		after.Round(100*time.Millisecond), total, stored.StatusDetail)
	assert.GreaterOrEqual(t, after, 14*time.Second, "nobody is asked before the breaker has been open 15 s")
	assert.Less(t, after, 60*time.Second)
	assert.Contains(t, stored.StatusDetail, "tool fetch")
	assert.Contains(t, stored.StatusDetail, "after_breaker_open_seconds")

	update, err := temporalClient.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: id, UpdateName: workflows.UpdateAbort,
		Args: []any{workflows.ReasonInput{Reason: "ops: the fetch service is gone"}}, WaitForStage: client.WorkflowUpdateStageCompleted})
	require.NoError(t, err)
	require.NoError(t, update.Get(ctx, nil))
	var result workflows.RunResult
	require.NoError(t, run.Get(ctx, &result))
	assert.Equal(t, agentsagatype.RunCompensated, result.Status, result.Reason)
	if assert.NotNil(t, result.Saga) {
		assert.Equal(t, 1, result.Saga.Compensated)
	}
	stored, err = ledgerdb.Of(store).GetRun(ctx, id)
	require.NoError(t, err)
	assert.Equal(t, agentsagatype.RunCompensated, stored.Status)
	assert.Equal(t, 1, escalationsIn(runEvents(ctx, t, id, run.GetRunID())), "the run asked a human once")

	refundKey := id + "/" + activityid.Tool(1, 1, "charge") + "/compensate"
	pay.mu.Lock()
	defer pay.mu.Unlock()
	assert.Len(t, pay.charges, 1)
	assert.Equal(t, map[string]string{refundKey: "ch_ann"}, pay.refunds, "the charge refunded")
	assert.Equal(t, []string{"ann"}, pay.refundOrder, "the refund applied once")
	assert.Equal(t, 1, pay.requests[refundKey])
}

// A model provider down for the first 20 s: the turn waits behind the
// model's breaker and goes out again under its first key, and the run
// completes; the provider answered each turn once, and the run was billed
// for the turns that answered, once each.
func TestOutageOfTheModelIsWaitedOutByTheDefaultBreaker(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	store, queue := defaultBreakerWorker(ctx, t, "outage-model")
	const outage = 20 * time.Second
	var model downModel
	server := model.serve(outage)
	defer server.Close()

	spec := resolvedSpec(t, fmt.Sprintf(`
goal: answer
budget: {steps: 6}
escalate: {after_breaker_open_seconds: 120}
model: {provider: openai, name: gpt-4o-mini, base_url: %q}
`, server.URL+"/v1"))
	const id = "outage-model-run"
	started := time.Now()
	run, err := temporalClient.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: queue}, workflows.AgentRun, spec)
	require.NoError(t, err)
	var result workflows.RunResult
	require.NoError(t, run.Get(ctx, &result))
	took := time.Since(started)
	assert.Equal(t, agentsagatype.RunCompleted, result.Status, result.Reason)
	assert.Equal(t, "all done", result.Answer)

	turns, err := ledgerdb.Of(store).ListModelTurns(ctx, id)
	require.NoError(t, err)
	keys := map[string]bool{}
	for _, turn := range turns {
		assert.Equal(t, agentsagatype.ActionCompleted, turn.Status, turn.Key)
		assert.False(t, keys[turn.Key], "turn %s stored twice", turn.Key)
		keys[turn.Key] = true
		assert.NotContains(t, turn.Key, "after-breaker", "a turn sent again after a wait keeps its first key")
	}
	answered := int(model.requests.Load() - model.refusals.Load())
	assert.NotEmpty(t, turns)
	assert.Equal(t, len(turns), answered, "the provider answered each turn once")
	assert.Equal(t, int64(12*answered), result.Usage.Tokens, "the run paid for the turns that answered, once each")
	stored, err := ledgerdb.Of(store).GetRun(ctx, id)
	require.NoError(t, err)
	assert.Equal(t, agentsagatype.RunCompleted, stored.Status)
	assert.Equal(t, result.Usage.Tokens, stored.TokensUsed)

	events := runEvents(ctx, t, id, run.GetRunID())
	parks, resends := breakerWaits(events)
	assert.Zero(t, escalationsIn(events))
	limit := 3 + int(outage/(5*time.Second)) + 2
	t.Logf("completed in %s; model requests %d, refused by the provider %d (limit %d), answered %d; turns %d; tokens %d; parks %d, sends after a wait %d",
		took.Round(100*time.Millisecond), model.requests.Load(), model.refusals.Load(), limit, answered, len(turns), result.Usage.Tokens, parks, resends)
	assert.LessOrEqual(t, int(model.refusals.Load()), limit, "requests that reached the provider while it was down")
	assert.Positive(t, parks, "the turn waited on a timer")
}

package worker_test

import (
	"context"
	"net/http/httptest"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/workflows"
)

// resumeWhileEscalated plays the operator who resumes the run each time it
// escalates, until it ends, and returns how often it did.
func resumeWhileEscalated(ctx context.Context, t *testing.T, store *ledger.Store, id string) <-chan int {
	resumed := make(chan int, 1)
	go func() {
		n := 0
		defer func() { resumed <- n }()
		for ctx.Err() == nil {
			run, err := ledgerdb.Of(store).GetRun(ctx, id)
			switch {
			case err != nil, run.Status == agentsagatype.RunRunning:
			case run.Status == agentsagatype.RunEscalated:
				update, err := temporalClient.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: id, UpdateName: workflows.UpdateResume,
					Args: []any{workflows.ResumeInput{Message: "carry on"}}, WaitForStage: client.WorkflowUpdateStageCompleted})
				// The ledger may still say escalated after the run moved on,
				// or again, when it escalated anew within a poll: a resume
				// the run is not waiting for is refused by its validator,
				// so each poll that reads escalated simply asks again.
				if err == nil && update.Get(ctx, nil) == nil {
					n++
				}
			default:
				return // ended
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	return resumed
}

// The run of issue 30: its only tool stays down, its call waits behind the
// open breaker until the wall clock cannot afford another wait, the run
// escalates and an operator resumes it, each time, until the graceful
// finish. Its reason names the wall clock, the tool and the seconds the
// waits took, with the breaker's since and the escalations, and the
// ledger, the UI's details and the result say the same.
func TestAnOutageThatSpendsTheWallClockIsNamedInTheReason(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	store, queue := defaultBreakerWorker(ctx, t, "wait-reasons")
	tool := newOutage() // never recovers
	server := httptest.NewServer(tool)
	defer server.Close()
	const wallClock = 40
	// More items than the wall clock can reach, however fast the turns go:
	// the run ends on its wall clock, never on the end of its script.
	spec := itemsSpec(t, server.URL, 60, "escalate: {after_breaker_open_seconds: 300}")
	spec.Budget.Seconds, spec.Budget.Steps = wallClock, 500

	id := "wait-reasons-" + t.Name()
	started := time.Now()
	run, err := temporalClient.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: queue}, workflows.AgentRun, spec)
	require.NoError(t, err)
	resumed := resumeWhileEscalated(ctx, t, store, id)
	var result workflows.RunResult
	require.NoError(t, run.Get(ctx, &result))
	took := time.Since(started)
	escalations := <-resumed

	assert.Equal(t, agentsagatype.RunPartial, result.Status, result.Reason)
	assert.Regexp(t, `^graceful finish: \d+% of the wall clock left \(finish_at 0\.20\); `, result.Reason)
	m := regexp.MustCompile(`; (\d+) s of it went waiting for tool fetch \(breaker open since \d\d:\d\d:\d\dZ, \d+ waits?(, escalated (once|\d+ times))?\)`).FindStringSubmatch(result.Reason)
	if assert.NotNil(t, m, "the reason names the tool and the seconds: %s", result.Reason) {
		waited, _ := strconv.Atoi(m[1])
		assert.GreaterOrEqual(t, waited, wallClock/2, "most of the wall clock went waiting")
		assert.LessOrEqual(t, float64(waited), took.Seconds()+1, "no more than the run lasted")
	}
	stored, err := ledgerdb.Of(store).GetRun(ctx, id)
	require.NoError(t, err)
	assert.Equal(t, result.Reason, stored.Reason, "the ledger's reason (agentsaga show prints it)")
	assert.Contains(t, currentDetails(ctx, t, id), result.Reason, "the UI's details")
	requests, _ := tool.counts()
	total := 0
	for _, n := range requests {
		total += n
	}
	t.Logf("ended after %s, resumed %d times, %d requests sent to the tool: %s", took.Round(time.Second), escalations, total, result.Reason)
}

// A model whose provider answers every request 429: the turn waits for
// the quota until the wall clock cannot afford another wait, and the run
// escalates; nobody answers, and the deadline passes. The reason says so,
// and names the quota and the seconds its waits took.
func TestAQuotaThatSpendsTheWallClockIsNamedInTheReason(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	store, queue := quotaWorker(ctx, t)
	model := &quotaModel{tooMany: func(int32) bool { return true }}
	server := model.serve()
	defer server.Close()
	spec := resolvedSpec(t, `
goal: answer
budget: {steps: 4, seconds: 12}
model: {provider: openai, name: gpt-4o-mini, base_url: "`+server.URL+`/v1"}
`)
	id := "wait-reasons-quota"
	run, err := temporalClient.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: queue}, workflows.AgentRun, spec)
	require.NoError(t, err)
	var result workflows.RunResult
	require.NoError(t, run.Get(ctx, &result))

	assert.Equal(t, agentsagatype.RunPartial, result.Status, result.Reason)
	assert.Regexp(t, `^the deadline passed while escalated \(The quota of the model openai:gpt-4o-mini has no room until [^)]*, and the run's budget cannot afford the wait\); `+
		`\d+ s of the wall clock went waiting for the quota of the model openai:gpt-4o-mini \(\d+ waits, escalated once\)$`, result.Reason)
	m := regexp.MustCompile(`; (\d+) s of the wall clock`).FindStringSubmatch(result.Reason)
	if assert.NotNil(t, m) {
		waited, _ := strconv.Atoi(m[1])
		assert.GreaterOrEqual(t, waited, 6, "the quota's waits and the escalation took most of the wall clock")
		assert.LessOrEqual(t, waited, 13, "no more than the wall clock")
	}
	stored, err := ledgerdb.Of(store).GetRun(ctx, id)
	require.NoError(t, err)
	assert.Equal(t, result.Reason, stored.Reason)
	t.Logf("%d requests, %d answered 429: %s", model.requests.Load(), model.refused.Load(), result.Reason)
}

package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/agentsaga/agentsaga/agentsagatest"
	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/workflows"
)

// Namespaces on the shared dev server: `agentsaga worker` always polls the
// same task queue, so tests that share a server are kept apart by
// namespace (TEMPORAL_NAMESPACE), each with its own database.
const (
	nsKillInToolCall     = "fault-kill-tool-call"
	nsKillInCompensation = "fault-kill-compensation"
	nsPostgresRestart    = "fault-postgres-restart"
	nsBadDatabaseURL     = "fault-bad-database-url"
)

// TestFaults runs the process-level fault tests against real processes: the
// agentsaga binary built once here, Temporal dev servers with a file
// database, Postgres, and an HTTP tool that is idempotent by key and counts
// every request and every execution.
func TestFaults(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bin := buildAgentsaga(t)
	shared := startTemporalServer(t, dir, nsKillInToolCall, nsKillInCompensation, nsPostgresRestart, nsBadDatabaseURL, nsKillAwaitingApproval,
		nsKillMidStream, nsKillBetweenThinkingAndResult)

	t.Run("WorkerKilledInToolCall", func(t *testing.T) {
		t.Parallel()
		testWorkerKilledInToolCall(t, bin, shared)
	})
	t.Run("WorkerKilledInCompensation", func(t *testing.T) {
		t.Parallel()
		testWorkerKilledInCompensation(t, bin, shared)
	})
	t.Run("PostgresRestart", func(t *testing.T) {
		t.Parallel()
		testPostgresRestart(t, bin, shared)
	})
	t.Run("TemporalRestart", func(t *testing.T) {
		t.Parallel()
		testTemporalRestart(t, bin)
	})
	t.Run("WorkerKilledAwaitingApproval", func(t *testing.T) {
		t.Parallel()
		testWorkerKilledAwaitingApproval(t, bin, shared)
	})
	t.Run("WorkerKilledMidStream", func(t *testing.T) {
		t.Parallel()
		testWorkerKilledMidStream(t, bin, shared)
	})
	t.Run("WorkerKilledBetweenThinkingAndResult", func(t *testing.T) {
		t.Parallel()
		testWorkerKilledBetweenThinkingAndResult(t, bin, shared)
	})
	t.Run("BadDatabaseURL", func(t *testing.T) {
		t.Parallel()
		testBadDatabaseURL(t, bin, shared)
	})
}

// faultTools are a charge and the refund that compensates it, served by a
// toolServer at %[1]s; %[2]d is each attempt's timeout in seconds.
const faultTools = `
tools:
  - name: charge
    kind: http
    url: %[1]s/charge
    timeout_seconds: %[2]d
    parameters: {type: object, properties: {customer: {type: string}, amount: {type: number}}, required: [customer, amount]}
    compensate:
      tool: refund
      arguments: {charge_id: "{{result.id}}", customer: "{{args.customer}}"}
  - name: refund
    kind: http
    url: %[1]s/refund
    timeout_seconds: %[2]d
`

// chargeTwice charges ann, then bob, then answers.
const chargeTwice = `
goal: charge ann, then bob, then report
budget: {steps: 6}
model:
  provider: scripted
  script:
    - tool_calls: [{name: charge, arguments: {customer: ann, amount: 10}}]
    - tool_calls: [{name: charge, arguments: {customer: bob, amount: 20}}]
    - content: charged ann and bob
`

// faultSpec parses body followed by faultTools at toolURL.
func faultSpec(t *testing.T, body, toolURL string, timeoutSeconds int) workflows.RunSpec {
	t.Helper()
	spec, err := workflows.ParseSpec([]byte(body + fmt.Sprintf(faultTools, toolURL, timeoutSeconds)))
	require.NoError(t, err)
	return spec
}

func startFaultRun(ctx context.Context, t *testing.T, c client.Client, id string, spec workflows.RunSpec) client.WorkflowRun {
	t.Helper()
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: workflows.TaskQueue}, workflows.AgentRun, spec)
	require.NoError(t, err, "start run %s", id)
	return run
}

// killAndTakeOver waits until the tool server holds the run's call, kills
// first with SIGKILL, lets the call answer, and starts a second worker; it
// returns the run's result and the time from the kill to the run's end.
func killAndTakeOver(ctx context.Context, t *testing.T, bin string, temporal *temporalServer, namespace, databaseURL string,
	first *process, tool *toolServer, run client.WorkflowRun) (workflows.RunResult, time.Duration) {
	t.Helper()
	tool.waitHeld(ctx, t)
	first.kill()
	killedAt := time.Now()
	require.True(t, killedBySIGKILL(first), "worker-1 died of SIGKILL: %v", first.err)
	tool.releaseHeld()

	second := startWorkerProcess(t, bin, "worker-2", temporal.address(), namespace, databaseURL)
	var result workflows.RunResult
	require.NoError(t, run.Get(ctx, &result), "the run finishes on worker-2:\n%s", second.log())
	return result, time.Since(killedAt)
}

// killedBySIGKILL reports whether p's exit was a SIGKILL.
func killedBySIGKILL(p *process) bool {
	var exitErr *exec.ExitError
	if !errors.As(p.err, &exitErr) {
		return false
	}
	status, ok := exitErr.Sys().(syscall.WaitStatus)
	return ok && status.Signaled() && status.Signal() == syscall.SIGKILL
}

// storedActions reads the run's ledger rows by key.
func storedActions(ctx context.Context, t *testing.T, databaseURL, workflowID string) (map[string]agentsagatype.Action, agentsagatype.Run) {
	t.Helper()
	store, err := ledgerdb.Open(ctx, databaseURL)
	require.NoError(t, err)
	defer store.Close()
	actions, err := store.ListActions(ctx, workflowID)
	require.NoError(t, err)
	byKey := map[string]agentsagatype.Action{}
	for _, a := range actions {
		byKey[a.Key] = a
	}
	run, err := store.GetRun(ctx, workflowID)
	require.NoError(t, err)
	return byKey, run
}

// a. A worker is SIGKILLed while its tool call is inside the tool server
// (which has executed it, so the outcome is ambiguous to the engine); a
// second worker process takes the run over. The call is retried under the
// same key and answered from the tool's stored result: one execution.
func testWorkerKilledInToolCall(t *testing.T, bin string, temporal *temporalServer) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	began := time.Now()
	const id = "fault-kill-tool-call-run"
	ann, bob := id+"/step-001-call-1-charge", id+"/step-002-call-1-charge"
	c := temporal.client(t, nsKillInToolCall)
	databaseURL := agentsagatest.NewDatabase(t)
	tool := startToolServer(t, bob)

	first := startWorkerProcess(t, bin, "worker-1", temporal.address(), nsKillInToolCall, databaseURL)
	waitPolling(ctx, t, c, first)
	run := startFaultRun(ctx, t, c, id, faultSpec(t, chargeTwice, tool.URL, 3))

	result, takeover := killAndTakeOver(ctx, t, bin, temporal, nsKillInToolCall, databaseURL, first, tool, run)
	assert.Equal(t, agentsagatype.RunCompleted, result.Status, result.Reason)
	assert.Equal(t, "charged ann and bob", result.Answer)

	counts := tool.counts()
	requests, executions, duplicates := counts.totals()
	assert.Equal(t, map[string]int{ann: 1, bob: 1}, counts.executions, "each charge executed exactly once")
	assert.Equal(t, 1, counts.requests[ann], "a completed call never reaches the tool again")
	assert.GreaterOrEqual(t, counts.requests[bob], 2, "worker-2 re-sent the lost call under the same key")

	actions, stored := storedActions(ctx, t, databaseURL, id)
	require.Len(t, actions, 2)
	assert.Equal(t, agentsagatype.ActionCompleted, actions[ann].Status)
	assert.Equal(t, agentsagatype.ActionCompleted, actions[bob].Status)
	assert.GreaterOrEqual(t, actions[bob].Attempts, 2, "the ledger saw the lost attempt and the one that finished")
	assert.Equal(t, agentsagatype.RunCompleted, stored.Status)

	t.Logf("runs=1 completed=1 kills=1 (SIGKILL mid-call) requests=%d executions=%d duplicates=%d replayed=%d; "+
		"held key %s: requests=%d executions=%d ledger attempts=%d; takeover after kill %s; total %s",
		requests, executions, duplicates, requests-executions, bob, counts.requests[bob], counts.executions[bob],
		actions[bob].Attempts, takeover.Round(time.Millisecond), time.Since(began).Round(time.Millisecond))
}

// b. A run charges three customers and fails permanently (its script runs
// out), so the charges are refunded newest first. The worker is SIGKILLed
// inside bob's refund; a second worker finishes the rollback, and every
// refund executes exactly once, in reverse order.
func testWorkerKilledInCompensation(t *testing.T, bin string, temporal *temporalServer) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	began := time.Now()
	const id = "fault-kill-compensation-run"
	charge := func(step int) string { return fmt.Sprintf("%s/step-%03d-call-1-charge", id, step) }
	refund := func(step int) string { return charge(step) + "/compensate" }
	c := temporal.client(t, nsKillInCompensation)
	databaseURL := agentsagatest.NewDatabase(t)
	tool := startToolServer(t, refund(2))

	first := startWorkerProcess(t, bin, "worker-1", temporal.address(), nsKillInCompensation, databaseURL)
	waitPolling(ctx, t, c, first)
	run := startFaultRun(ctx, t, c, id, faultSpec(t, `
goal: charge three customers, then do something that fails
budget: {steps: 8}
model:
  provider: scripted
  script:
    - tool_calls: [{name: charge, arguments: {customer: ann, amount: 10}}]
    - tool_calls: [{name: charge, arguments: {customer: bob, amount: 20}}]
    - tool_calls: [{name: charge, arguments: {customer: cat, amount: 30}}]
`, tool.URL, 3))

	result, takeover := killAndTakeOver(ctx, t, bin, temporal, nsKillInCompensation, databaseURL, first, tool, run)
	assert.Equal(t, agentsagatype.RunCompensated, result.Status, result.Reason)
	require.NotNil(t, result.Saga)
	assert.Equal(t, 3, result.Saga.Compensated)

	counts := tool.counts()
	requests, executions, duplicates := counts.totals()
	assert.Equal(t, map[string]int{charge(1): 1, charge(2): 1, charge(3): 1, refund(3): 1, refund(2): 1, refund(1): 1},
		counts.executions, "each charge and each refund executed exactly once")
	assert.Equal(t, []string{charge(1), charge(2), charge(3), refund(3), refund(2), refund(1)}, counts.executed,
		"charges in order, then refunds newest first")
	assert.GreaterOrEqual(t, counts.requests[refund(2)], 2, "worker-2 re-sent bob's refund under the same key")
	assert.Equal(t, 1, counts.requests[refund(3)], "a finished refund never reaches the tool again")

	store, err := ledgerdb.Open(ctx, databaseURL)
	require.NoError(t, err)
	defer store.Close()
	stack, err := store.CompensationStack(ctx, id)
	require.NoError(t, err)
	require.Len(t, stack, 3)
	for _, comp := range stack {
		assert.Equal(t, agentsagatype.CompensationDone, comp.Status, comp.ForwardKey)
	}
	stored, err := store.GetRun(ctx, id)
	require.NoError(t, err)
	assert.Equal(t, agentsagatype.RunCompensated, stored.Status)

	t.Logf("runs=1 compensated=1 kills=1 (SIGKILL mid-refund) requests=%d executions=%d duplicates=%d replayed=%d; "+
		"held key %s: requests=%d executions=%d; refunds executed=%d; takeover after kill %s; total %s",
		requests, executions, duplicates, requests-executions, refund(2), counts.requests[refund(2)],
		counts.executions[refund(2)], counts.executions[refund(1)]+counts.executions[refund(2)]+counts.executions[refund(3)],
		takeover.Round(time.Millisecond), time.Since(began).Round(time.Millisecond))
}

// c. Postgres goes down while a tool call is inside the tool server, and
// the call's answer arrives while it is down. The charge has happened, so
// the attempt keeps trying to record it, heartbeating, while it lasts;
// Postgres comes back on the same data after an outage longer than the
// ~1.5 s that used to exhaust the call's three attempts (the model was then
// told a charge had failed that had gone through). The charge completes on
// its first attempt, sent once, and the run goes on with the default retry
// policy. The server is the test's own: the shared one at :5432 is not
// touched.
func testPostgresRestart(t *testing.T, bin string, temporal *temporalServer) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	began := time.Now()
	pg := startPrivatePostgres(t)
	databaseURL := pg.url("agentsaga_fault")
	require.NoError(t, ledger.EnsureDatabase(ctx, databaseURL))

	const id, activityID = "fault-postgres-restart-run", "step-001-call-1-charge"
	ann, bob := id+"/"+activityID, id+"/step-002-call-1-charge"
	c := temporal.client(t, nsPostgresRestart)
	tool := startToolServer(t, ann)
	w := startWorkerProcess(t, bin, "worker", temporal.address(), nsPostgresRestart, databaseURL)
	waitPolling(ctx, t, c, w)
	// An attempt may last 30 s: the outage fits inside the attempt that
	// made the charge.
	run := startFaultRun(ctx, t, c, id, faultSpec(t, chargeTwice, tool.URL, 30))

	tool.waitHeld(ctx, t)
	stopStarted := time.Now()
	require.NoError(t, pg.stop())
	tool.releaseHeld() // the charge answers while its result cannot be stored
	const retrying = "could not record a tool's outcome; retrying while the attempt lasts"
	require.Eventually(t, func() bool { return strings.Contains(w.log(), retrying) }, 30*time.Second, 50*time.Millisecond,
		"the worker retries the ledger write while Postgres is down:\n%s", w.log())
	// The length of the outage, not an assertion: longer than the three
	// attempts used to survive.
	time.Sleep(3 * time.Second)
	require.NoError(t, pg.start())
	downFor := time.Since(stopStarted)

	var result workflows.RunResult
	require.NoError(t, run.Get(ctx, &result), "the run finishes after Postgres is back:\n%s", w.log())
	assert.Equal(t, agentsagatype.RunCompleted, result.Status, result.Reason)
	assert.Equal(t, "charged ann and bob", result.Answer)
	assert.False(t, w.exited(), "the worker rides out the outage: %v", w.err)

	counts := tool.counts()
	requests, executions, duplicates := counts.totals()
	assert.Equal(t, map[string]int{ann: 1, bob: 1}, counts.executions, "each charge executed exactly once")
	assert.Equal(t, 1, counts.requests[ann], "the charge was sent once: its result was recorded by the attempt that made it")

	actions, stored := storedActions(ctx, t, databaseURL, id)
	require.Len(t, actions, 2)
	assert.Equal(t, agentsagatype.ActionCompleted, actions[ann].Status)
	assert.Equal(t, agentsagatype.ActionCompleted, actions[bob].Status)
	assert.Equal(t, agentsagatype.RunCompleted, stored.Status)
	attempts := startedAttempts(ctx, t, c, id)
	assert.EqualValues(t, 1, attempts[activityID], "the charge finished on its first attempt")

	t.Logf("runs=1 completed=1 postgres restarts=%d (down %s) requests=%d executions=%d duplicates=%d; "+
		"%s finished on attempt %d, tool requests=%d executions=%d; ledger write retries logged=%d; total %s",
		pg.starts-1, downFor.Round(time.Millisecond), requests, executions, duplicates,
		activityID, attempts[activityID], counts.requests[ann], counts.executions[ann], strings.Count(w.log(), retrying),
		time.Since(began).Round(time.Millisecond))
}

// startedAttempts returns, for each activity of the run, the attempt its
// last ActivityTaskStarted event recorded.
func startedAttempts(ctx context.Context, t *testing.T, c client.Client, workflowID string) map[string]int32 {
	t.Helper()
	scheduled := map[int64]string{}
	attempts := map[string]int32{}
	history := c.GetWorkflowHistory(ctx, workflowID, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for history.HasNext() {
		event, err := history.Next()
		require.NoError(t, err)
		if attrs := event.GetActivityTaskScheduledEventAttributes(); attrs != nil {
			scheduled[event.GetEventId()] = attrs.GetActivityId()
		}
		if attrs := event.GetActivityTaskStartedEventAttributes(); attrs != nil {
			attempts[scheduled[attrs.GetScheduledEventId()]] = attrs.GetAttempt()
		}
	}
	return attempts
}

// d. The Temporal server is stopped (SIGTERM) while a tool call is inside
// the tool server and started again on the same port and database file.
// The same worker process reconnects on its own, the call's answer is
// recorded and the run completes, each charge executed once.
func testTemporalRestart(t *testing.T, bin string) { testTemporalRestartBy(t, bin, false) }

// testTemporalRestartBy is testTemporalRestart with the server stopped by
// SIGTERM, or, when kill is set, by SIGKILL, as a lost node stops it
// (cluster_test.go runs both on the real server).
func testTemporalRestartBy(t *testing.T, bin string, kill bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	began := time.Now()
	temporal := startTemporalServer(t, t.TempDir())
	c := temporal.client(t, "default")
	databaseURL := agentsagatest.NewDatabase(t)

	const id, activityID = "fault-temporal-restart-run", "step-001-call-1-charge"
	ann, bob := id+"/"+activityID, id+"/step-002-call-1-charge"
	tool := startToolServer(t, ann)
	w := startWorkerProcess(t, bin, "worker", temporal.address(), "default", databaseURL)
	waitPolling(ctx, t, c, w)
	// Ten seconds an attempt (and of heartbeat timeout) is room for the
	// restart, so the in-flight attempt can finish after it.
	run := startFaultRun(ctx, t, c, id, faultSpec(t, chargeTwice, tool.URL, 10))

	tool.waitHeld(ctx, t)
	stopStarted := time.Now()
	signal := "SIGTERM"
	if kill {
		signal = "SIGKILL"
		temporal.proc.kill()
	} else {
		require.NoError(t, temporal.stop(), "the dev server exits on SIGTERM")
	}
	stoppedIn := time.Since(stopStarted)
	require.NoError(t, temporal.start(), "the dev server starts again on %s", temporal.address())
	downFor := time.Since(stopStarted)
	tool.releaseHeld()
	require.False(t, w.exited(), "the worker survives losing Temporal: %v\n%s", w.err, w.log())
	repolled := time.Now()
	waitPolling(ctx, t, c, w)
	repolledIn := time.Since(repolled)

	var result workflows.RunResult
	require.NoError(t, c.GetWorkflow(ctx, id, run.GetRunID()).Get(ctx, &result), "the run finishes after the restart:\n%s", w.log())
	assert.Equal(t, agentsagatype.RunCompleted, result.Status, result.Reason)
	assert.Equal(t, "charged ann and bob", result.Answer)
	assert.False(t, w.exited(), "one worker process did the whole run: %v", w.err)

	counts := tool.counts()
	requests, executions, duplicates := counts.totals()
	assert.Equal(t, map[string]int{ann: 1, bob: 1}, counts.executions, "each charge executed exactly once")
	actions, stored := storedActions(ctx, t, databaseURL, id)
	require.Len(t, actions, 2)
	assert.Equal(t, agentsagatype.ActionCompleted, actions[ann].Status)
	assert.Equal(t, agentsagatype.ActionCompleted, actions[bob].Status)
	assert.Equal(t, agentsagatype.RunCompleted, stored.Status)
	attempts := startedAttempts(ctx, t, c, id)

	t.Logf("runs=1 completed=1 temporal restarts=%d (%s exit %s, down %s, worker polling again %s after) "+
		"worker processes=1 requests=%d executions=%d duplicates=%d replayed=%d; %s: requests=%d, Temporal attempts=%d, ledger attempts=%d; total %s",
		temporal.starts-1, signal, stoppedIn.Round(time.Millisecond), downFor.Round(time.Millisecond), repolledIn.Round(time.Millisecond),
		requests, executions, duplicates, requests-executions, activityID, counts.requests[ann], attempts[activityID],
		actions[ann].Attempts, time.Since(began).Round(time.Millisecond))
}

// e. A worker given a DATABASE_URL it cannot use exits non-zero, soon, with
// an error that names the database, and never takes a task: a run started
// on its task queue stays untouched.
func testBadDatabaseURL(t *testing.T, bin string, temporal *temporalServer) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := temporal.client(t, nsBadDatabaseURL)
	const id = "fault-bad-database-url-run"
	run := startFaultRun(ctx, t, c, id, faultSpec(t, "goal: g\nbudget: {steps: 2}\nmodel: {provider: scripted, script: [{content: x}]}\n", "http://127.0.0.1:1", 3))
	t.Cleanup(func() { _ = c.TerminateWorkflow(context.Background(), id, run.GetRunID(), "test over") })

	deadPort := freeTCPPort(t) // released: nothing listens on it
	shared, err := url.Parse(agentsagatest.NewDatabase(t))
	require.NoError(t, err)
	shared.Path = "/agentsaga_fault_no_such_database"
	cases := []struct {
		name, databaseURL string
		mentions          []string
	}{
		{"nothing-listening", fmt.Sprintf("postgres://postgres@127.0.0.1:%d/agentsaga_fault?sslmode=disable", deadPort),
			[]string{"127.0.0.1:" + strconv.Itoa(deadPort), "agentsaga_fault"}},
		{"missing-database", shared.String(), []string{shared.Host, "agentsaga_fault_no_such_database"}},
	}
	for _, tc := range cases {
		started := time.Now()
		w := startWorkerProcess(t, bin, "worker-"+tc.name, temporal.address(), nsBadDatabaseURL, tc.databaseURL)
		require.True(t, w.wait(30*time.Second), "%s: the worker exits within 30s:\n%s", tc.name, w.log())
		took := time.Since(started)
		var exitErr *exec.ExitError
		require.ErrorAs(t, w.err, &exitErr, "%s: the worker exits non-zero", tc.name)
		output := w.log()
		for _, m := range tc.mentions {
			assert.Contains(t, output, m, "%s: the error names the database", tc.name)
		}
		assert.NotContains(t, output, "goroutine ", "%s: an error, not a stack trace", tc.name)
		t.Logf("%s: exit code %d after %s: %s", tc.name, exitErr.ExitCode(), took.Round(time.Millisecond), strings.TrimSpace(output))
	}

	pollers := 0
	for _, kind := range []enumspb.TaskQueueType{enumspb.TASK_QUEUE_TYPE_WORKFLOW, enumspb.TASK_QUEUE_TYPE_ACTIVITY} {
		described, err := c.DescribeTaskQueue(ctx, workflows.TaskQueue, kind)
		require.NoError(t, err)
		pollers += len(described.GetPollers())
	}
	assert.Zero(t, pollers, "no worker ever polled the namespace's task queue")
	described, err := c.DescribeWorkflowExecution(ctx, id, "")
	require.NoError(t, err)
	assert.Equal(t, enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, described.GetWorkflowExecutionInfo().GetStatus())
	assert.Equal(t, enumspb.PENDING_WORKFLOW_TASK_STATE_SCHEDULED, described.GetPendingWorkflowTask().GetState(),
		"the run's first workflow task is still waiting for a worker")
	events := 0
	history := c.GetWorkflowHistory(ctx, id, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for history.HasNext() {
		event, err := history.Next()
		require.NoError(t, err)
		events++
		assert.NotEqual(t, enumspb.EVENT_TYPE_WORKFLOW_TASK_COMPLETED, event.GetEventType(), "no workflow task was completed")
	}
	t.Logf("bad workers=%d exited=%d pollers seen=%d; run %s: history events=%d, first workflow task %s",
		len(cases), len(cases), pollers, id, events, described.GetPendingWorkflowTask().GetState())
}

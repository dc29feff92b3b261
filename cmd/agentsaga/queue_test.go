package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"

	"github.com/agentsaga/agentsaga/agentsagatest"
	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/internal/runevents"
	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/workflows"
)

// An operator bounds an account to one run at a time; a second run waits
// queued, shows in `agentsaga queue` with its place, priority and reason,
// and `queue cancel` ends it at once without a turn. A run that is not
// queued, or unknown, is refused with what is wrong.
func TestQueueFromTheCLI(t *testing.T) {
	store := cliWorld(t)
	ctx := context.Background()
	// IDs of their own, so that -count=N does not meet the runs of the
	// first round on the shared dev server.
	suffix := strings.TrimPrefix(newRunID(), "run-")
	holderID, waiterID := "q-holder-"+suffix, "q-waiter-"+suffix

	out, err := runCLI(t, "queue")
	require.NoError(t, err, out)
	assert.Contains(t, out, "no run is queued")
	out, err = runCLI(t, "queue", "limits")
	require.NoError(t, err, out)
	assert.Contains(t, out, "no account has limits set")

	out, err = runCLI(t, "queue", "limit", "acme", "--max-concurrent-runs", "1", "--by", "ann")
	require.NoError(t, err, out)
	assert.Contains(t, out, "account acme: max_concurrent_runs 1 (was none), weight 1 (was 1)")
	out, err = runCLI(t, "queue", "limit", "acme", "--weight", "3", "--by", "ann")
	require.NoError(t, err, out)
	assert.Contains(t, out, "max_concurrent_runs 1 (was 1), weight 3 (was 1)", "a flag left out keeps its value")
	out, err = runCLI(t, "queue", "limits", "--json")
	require.NoError(t, err, out)
	var limits []ledgerdb.AccountLimits
	require.NoError(t, json.Unmarshal([]byte(out), &limits), out)
	require.Len(t, limits, 1)
	assert.Equal(t, ledgerdb.AccountLimits{Account: "acme", MaxConcurrentRuns: 1, Weight: 3, UpdatedBy: "ann", UpdatedAt: limits[0].UpdatedAt}, limits[0])

	// The first run escalates and keeps its place; the second waits.
	holder := writeFile(t, "holder.yaml", `
goal: hold the account's one place
budget: {steps: 4}
model: {provider: scripted, script: [{refusal: I will wait for a human.}]}
`)
	_, err = runCLI(t, "run", "--spec", holder, "--id", holderID, "--account", "acme")
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		run, err := store.GetRun(ctx, holderID)
		return err == nil && run.Status == agentsagatype.RunEscalated
	}, 30*time.Second, 100*time.Millisecond)
	waiter := writeFile(t, "waiter.yaml", `
goal: wait for a place
budget: {steps: 4}
model: {provider: scripted, script: [{content: done}]}
`)
	_, err = runCLI(t, "run", "--spec", waiter, "--id", waiterID, "--account", "acme/support", "--priority", "2")
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		run, err := store.GetRun(ctx, waiterID)
		return err == nil && run.Status == agentsagatype.RunQueued
	}, 30*time.Second, 100*time.Millisecond, "the second run waits for the account's one place")

	out, err = runCLI(t, "show", waiterID)
	require.NoError(t, err, out)
	assert.Contains(t, out, "run "+waiterID+": queued")
	assert.Regexp(t, `waiting to be admitted: .*account acme runs 1 of its 1 concurrent runs \(max_concurrent_runs\)`, out)
	out, err = runCLI(t, "queue")
	require.NoError(t, err, out)
	assert.Contains(t, out, "PLACE")
	assert.Regexp(t, `1\s+`+waiterID+`\s+acme/support\s+2\s+\$0\.0000\s+\d+s\s+in ~`, out, "its place, priority, estimate, wait, and when it may start")
	assert.Contains(t, out, "account acme runs 1 of its 1 concurrent runs (max_concurrent_runs)")
	out, err = runCLI(t, "queue", "--account", "acme/support", "--json")
	require.NoError(t, err, out)
	var queued []ledgerdb.QueuedRun
	require.NoError(t, json.Unmarshal([]byte(out), &queued), out)
	require.Len(t, queued, 1)
	assert.Equal(t, waiterID, queued[0].RunID)
	assert.Equal(t, 2, queued[0].Priority)
	out, err = runCLI(t, "queue", "--account", "other")
	require.NoError(t, err, out)
	assert.Contains(t, out, "no run of other is queued")

	out, err = runCLI(t, "queue", "cancel", waiterID)
	require.NoError(t, err, out)
	assert.Contains(t, out, waiterID+": taken out of the queue; it ends without a turn")
	var result workflows.RunResult
	err = devServer.Client().GetWorkflow(ctx, waiterID, "").Get(ctx, &result)
	var appErr *temporal.ApplicationError
	require.True(t, errors.As(err, &appErr), "the cancelled run ends failed at once: %v", err)
	require.NoError(t, appErr.Details(&result))
	assert.Equal(t, agentsagatype.RunFailed, result.Status)
	assert.Contains(t, result.Reason, "cancelled in the admission queue")
	assert.Empty(t, result.Trace, "no turn was taken")
	out, err = runCLI(t, "queue")
	require.NoError(t, err, out)
	assert.Contains(t, out, "no run is queued")

	_, err = runCLI(t, "queue", "cancel", waiterID)
	assert.ErrorContains(t, err, "queue cancel "+waiterID+": the run is not queued, so there is nothing to cancel")
	_, err = runCLI(t, "queue", "cancel", holderID)
	assert.ErrorContains(t, err, "it is admitted")
	require.NoError(t, store.StartRun(ctx, agentsagatype.Run{WorkflowID: "q-plain-" + suffix, RunID: "r", Goal: "g"}))
	_, err = runCLI(t, "queue", "cancel", "q-plain-"+suffix)
	assert.ErrorContains(t, err, "it is running and was never in an admission queue", "a run charged to no account")
	_, err = runCLI(t, "queue", "cancel", "no-such-run")
	assert.ErrorContains(t, err, "queue cancel no-such-run: no run with this ID in the ledger")
	_, err = runCLI(t, "abort", holderID, "--reason", "test over")
	require.NoError(t, err)
}

// `agentsaga watch` says where a queued run stands, and when it is
// admitted.
func TestWatchPrintsQueuedAndAdmitted(t *testing.T) {
	var out bytes.Buffer
	at := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	printEvent(&out, runevents.Event{Seq: 1, At: at, Kind: runevents.Queued,
		Data: json.RawMessage(`{"status":"queued","place":2,"reason":"account acme runs 1 of its 1 concurrent runs","estimate_usd":0.5}`)})
	printEvent(&out, runevents.Event{Seq: 2, At: at, Kind: runevents.Admitted, Data: json.RawMessage(`{"status":"admitted","estimate_usd":0.5}`)})
	assert.Equal(t, "    1  10:00:00  queued             place 2 in the admission queue, estimated at $0.5: account acme runs 1 of its 1 concurrent runs\n"+
		"    2  10:00:00  admitted           estimated at $0.5; its first turn follows\n", out.String())
}

// Bad flags are refused with what is wrong, before anything is changed or
// started.
func TestQueueAndPriorityBadInput(t *testing.T) {
	databaseURL := agentsagatest.NewDatabase(t)
	t.Setenv("DATABASE_URL", databaseURL)
	t.Setenv("TEMPORAL_ADDRESS", "127.0.0.1:1") // nothing may be started

	spec := writeFile(t, "spec.yaml", "goal: g\nbudget: {steps: 2}\nmodel: {provider: scripted, script: [{content: x}]}\n")
	for _, p := range []string{"0", "6", "-1"} {
		_, err := runCLI(t, "run", "--spec", spec, "--priority", p)
		assert.ErrorContains(t, err, "run: --priority "+p+": give 1 (first in the admission queue) to 5 (last)")
	}
	_, err := runCLI(t, "queue", "limit", "acme", "--weight", "0")
	assert.ErrorContains(t, err, "queue limit acme: --weight 0 is outside 1 to 1000")
	_, err = runCLI(t, "queue", "limit", "acme", "--max-concurrent-runs", "-2")
	assert.ErrorContains(t, err, "--max-concurrent-runs -2 is negative")
	_, err = runCLI(t, "queue", "limit", "acme")
	assert.ErrorContains(t, err, "give --max-concurrent-runs, --weight or both")
	_, err = runCLI(t, "queue", "limit", "acme//x", "--weight", "2")
	assert.ErrorContains(t, err, "queue limit:")
	_, err = runCLI(t, "queue", "--account", "acme//x")
	assert.ErrorContains(t, err, "queue: --account:")
	_, err = runCLI(t, "spend", "set", "acme", "--usd", "5", "--admit", "sometimes")
	assert.ErrorContains(t, err, `admit "sometimes" is not run (whole runs, queued when they do not fit) or turn (turn by turn)`)

	store, err := ledgerdb.Open(context.Background(), databaseURL)
	require.NoError(t, err)
	defer store.Close()
	limits, err := store.ListAccountLimits(context.Background())
	require.NoError(t, err)
	assert.Empty(t, limits, "nothing was set")
	caps, err := store.SpendCaps(context.Background(), "")
	require.NoError(t, err)
	assert.Empty(t, caps)
}

// A cap's admit is set with it and kept in its history; `agentsaga spend`
// shows how the cap admits, and how many runs of its account wait queued.
func TestSpendAdmitAndQueuedRuns(t *testing.T) {
	databaseURL := agentsagatest.NewDatabase(t)
	t.Setenv("DATABASE_URL", databaseURL)
	ctx := context.Background()
	out, err := runCLI(t, "spend", "set", "acme", "--usd", "1", "--per", "day", "--by", "ann")
	require.NoError(t, err, out)
	assert.Contains(t, out, "spend cap of acme per day: $1.00, admits runs, was none")

	handle, err := ledger.Open(ctx, databaseURL)
	require.NoError(t, err)
	defer handle.Close()
	store := ledgerdb.Of(handle)
	for _, id := range []string{"wf-1", "wf-2", "wf-3"} {
		require.NoError(t, store.StartRun(ctx, agentsagatype.Run{WorkflowID: id, RunID: "r", Goal: "g"}))
		t.Logf("%s: queued %t", id, agentsagatest.Admit(t, handle, id, "acme/support", 3, 0.5))
	}
	out, err = runCLI(t, "spend", "--json")
	require.NoError(t, err, out)
	var caps []ledgerdb.SpendCapState
	require.NoError(t, json.Unmarshal([]byte(out), &caps), out)
	require.Len(t, caps, 1)
	assert.Equal(t, ledgerdb.SpendAdmitRun, caps[0].Admit)
	assert.Equal(t, 2, caps[0].Queued, "$0.90 of room holds one run estimated at $0.50; two wait")
	out, err = runCLI(t, "spend")
	require.NoError(t, err, out)
	assert.Contains(t, out, "RUNS QUEUED")
	assert.Regexp(t, `acme\s+\$1\.00 a day \(UTC\)\s+runs\s+10%`, out)

	out, err = runCLI(t, "spend", "set", "acme", "--usd", "1", "--per", "day", "--admit", "turn", "--by", "bob")
	require.NoError(t, err, out)
	assert.Contains(t, out, "admits turns, was $1.00 (UTC, finish, admits runs)")
	changes, err := store.SpendCapChanges(ctx, "acme")
	require.NoError(t, err)
	require.Len(t, changes, 2, "a change of admit alone is a change")
	assert.Equal(t, ledgerdb.SpendAdmitRun, changes[1].Old.Admit)
	assert.Equal(t, ledgerdb.SpendAdmitTurn, changes[1].New.Admit)
	assert.Equal(t, "bob", changes[1].By)
}

// Over HTTP against a real dev server: a start's ?priority= reaches the
// run's place in the queue, GET /v1/queue shows it, and cancel-queued
// ends it at once.
func TestServeQueuesAndCancelsARun(t *testing.T) {
	base, key, store := apiWorld(t)
	ctx := context.Background()
	db := ledgerdb.Of(store)
	require.NoError(t, db.SetAccountLimits(ctx, ledgerdb.AccountLimits{Account: "acme", MaxConcurrentRuns: 1}, "ops"))
	suffix := strings.TrimPrefix(newRunID(), "run-")
	holder, waiter := "api-holder-"+suffix, "api-waiter-"+suffix
	status, run := call(t, "POST", base+"/v1/runs?id="+holder, key,
		"goal: hold the place\nbudget: {steps: 4}\nmodel: {provider: scripted, script: [{refusal: I will wait for a human.}]}\n",
		"Content-Type", "application/yaml")
	require.Equal(t, http.StatusCreated, status, "%v", run)
	require.Eventually(t, func() bool {
		r, err := db.GetRun(ctx, holder)
		return err == nil && r.Status == agentsagatype.RunEscalated
	}, 30*time.Second, 100*time.Millisecond)
	status, run = call(t, "POST", base+"/v1/runs?priority=1&id="+waiter, key,
		"goal: wait\nbudget: {steps: 4}\nmodel: {provider: scripted, script: [{content: done}]}\n", "Content-Type", "application/yaml")
	require.Equal(t, http.StatusCreated, status, "%v", run)
	var queued []any
	require.Eventually(t, func() bool {
		status, page := call(t, "GET", base+"/v1/queue", key, "")
		queued, _ = page["queued"].([]any)
		return status == http.StatusOK && len(queued) == 1
	}, 30*time.Second, 100*time.Millisecond)
	first := queued[0].(map[string]any)
	assert.Equal(t, waiter, first["run_id"])
	assert.EqualValues(t, 1, first["priority"], "?priority= reached the run")
	status, run = call(t, "GET", base+"/v1/runs/"+waiter, key, "")
	require.Equal(t, http.StatusOK, status)
	assert.Equal(t, "queued", run["status"])

	status, answer := call(t, "POST", base+"/v1/runs/"+waiter+"/cancel-queued", key, "")
	require.Equal(t, http.StatusOK, status, "%v", answer)
	err := devServer.Client().GetWorkflow(ctx, waiter, "").Get(ctx, nil)
	require.Error(t, err, "the run ends failed at once")
	require.Eventually(t, func() bool {
		r, err := db.GetRun(ctx, waiter)
		return err == nil && r.Status == agentsagatype.RunFailed
	}, 10*time.Second, 100*time.Millisecond)
	status, answer = call(t, "POST", base+"/v1/runs/"+holder+"/cancel-queued", key, "")
	assert.Equal(t, http.StatusConflict, status, "%v", answer)
	status, _ = call(t, "POST", base+"/v1/runs/"+holder+"/abort", key, `{"reason":"test over"}`)
	assert.Equal(t, http.StatusOK, status)
}

package main

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/agentsagatest"
	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
)

// An operator sets a cap, lists it, reads the report and removes it, from
// the CLI; a bad cap is refused with what is wrong, and nothing is set.
func TestSpendFromTheCLI(t *testing.T) {
	databaseURL := agentsagatest.NewDatabase(t)
	t.Setenv("DATABASE_URL", databaseURL)
	out, err := runCLI(t, "spend", "set", "acme", "--usd", "50", "--per", "day", "--tz", "Europe/Paris", "--by", "ann")
	require.NoError(t, err, out)
	assert.Contains(t, out, "spend cap of acme per day: $50.00, admits runs, was none")
	out, err = runCLI(t, "spend", "set", "acme", "--usd", "5", "--per", "week")
	require.Error(t, err)
	assert.Contains(t, err.Error(), `period "week" is not minute, hour, day, month or a rolling window`)
	out, err = runCLI(t, "spend", "set", "acme", "--usd", "80", "--rolling", "24h", "--on-exhausted", "wait")
	require.NoError(t, err, out)
	assert.Contains(t, out, "spend cap of acme per rolling 24h: $80.00, admits runs, was none")
	_, err = runCLI(t, "spend", "set", "acme", "--usd", "5", "--per", "hour", "--rolling", "1h")
	require.ErrorContains(t, err, "--per hour and --rolling 1h0m0s both name the period; give one")

	out, err = runCLI(t, "spend")
	require.NoError(t, err, out)
	assert.Contains(t, out, "acme")
	assert.Contains(t, out, "$50.00 a day (Europe/Paris)")
	assert.Contains(t, out, "10%", "the CLI keeps a tenth for finishing turns by default")
	assert.Contains(t, out, "$80.00 in any 24h")

	// A run waiting for the account's cap is counted beside it.
	store, err := ledgerdb.Open(context.Background(), databaseURL)
	require.NoError(t, err)
	defer store.Close()
	require.NoError(t, store.StartRun(context.Background(), agentsagatype.Run{WorkflowID: "wf-waiting", RunID: "r", Goal: "g"}))
	require.NoError(t, store.SetRunStatus(context.Background(), "wf-waiting", agentsagatype.RunRunning,
		"waiting for the spend cap of account acme to reset at 2026-12-04T00:00:00Z ($80.00 in any 24h; the turn goes out again then)"))
	out, err = runCLI(t, "spend", "--json")
	require.NoError(t, err, out)
	var caps []ledgerdb.SpendCapState
	require.NoError(t, json.Unmarshal([]byte(out), &caps), out)
	require.Len(t, caps, 2)
	for _, c := range caps {
		assert.Equal(t, 1, c.Waiting, "%s per %s: the run waiting on acme", c.Account, c.Period)
	}
	r, err := store.ReserveSpend(context.Background(), "wf/step-001-model", "acme/support", 0.4, time.Minute)
	require.NoError(t, err)
	require.True(t, r.Admitted)
	_, err = store.SettleSpend(context.Background(), "wf/step-001-model", 0.25)
	require.NoError(t, err)
	out, err = runCLI(t, "spend", "report", "--by", "account", "--json")
	require.NoError(t, err, out)
	var lines []ledgerdb.SpendLine
	require.NoError(t, json.Unmarshal([]byte(out), &lines), out)
	require.Len(t, lines, 1)
	assert.Equal(t, "acme/support", lines[0].Account)
	assert.InDelta(t, 0.25, lines[0].USD, 1e-9)

	out, err = runCLI(t, "spend", "remove", "acme", "--per", "day", "--by", "bob")
	require.NoError(t, err, out)
	assert.Contains(t, out, "removed (was $50.00)")
	changes, err := store.SpendCapChanges(context.Background(), "acme")
	require.NoError(t, err)
	require.Len(t, changes, 3)
	assert.Equal(t, "bob", changes[2].By)
}

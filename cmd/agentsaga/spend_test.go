package main

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/ledger/ledgertest"
)

// An operator sets a cap, lists it, reads the report and removes it, from
// the CLI; a bad cap is refused with what is wrong, and nothing is set.
func TestSpendFromTheCLI(t *testing.T) {
	databaseURL := ledgertest.NewDatabase(t)
	t.Setenv("DATABASE_URL", databaseURL)
	out, err := runCLI(t, "spend", "set", "acme", "--usd", "50", "--per", "day", "--tz", "Europe/Paris", "--by", "ann")
	require.NoError(t, err, out)
	assert.Contains(t, out, "spend cap of acme per day: $50.00, was none")
	out, err = runCLI(t, "spend", "set", "acme", "--usd", "5", "--per", "week")
	require.Error(t, err)
	assert.Contains(t, err.Error(), `period "week" is not minute, hour, day or month`)

	out, err = runCLI(t, "spend")
	require.NoError(t, err, out)
	assert.Contains(t, out, "acme")
	assert.Contains(t, out, "$50.00 a day (Europe/Paris)")
	assert.Contains(t, out, "10%", "the CLI keeps a tenth for finishing turns by default")

	store, err := ledger.Open(context.Background(), databaseURL)
	require.NoError(t, err)
	defer store.Close()
	r, err := store.ReserveSpend(context.Background(), "wf/step-001-model", "acme/support", 0.4, time.Minute)
	require.NoError(t, err)
	require.True(t, r.Admitted)
	_, err = store.SettleSpend(context.Background(), "wf/step-001-model", 0.25)
	require.NoError(t, err)
	out, err = runCLI(t, "spend", "report", "--by", "account", "--json")
	require.NoError(t, err, out)
	var lines []ledger.SpendLine
	require.NoError(t, json.Unmarshal([]byte(out), &lines), out)
	require.Len(t, lines, 1)
	assert.Equal(t, "acme/support", lines[0].Account)
	assert.InDelta(t, 0.25, lines[0].USD, 1e-9)

	out, err = runCLI(t, "spend", "remove", "acme", "--per", "day", "--by", "bob")
	require.NoError(t, err, out)
	assert.Contains(t, out, "removed (was $50.00)")
	changes, err := store.SpendCapChanges(context.Background(), "acme")
	require.NoError(t, err)
	require.Len(t, changes, 2)
	assert.Equal(t, "bob", changes[1].By)
}

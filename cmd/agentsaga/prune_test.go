package main

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/agentsagatest"
	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
)

// `agentsaga prune` deletes an old finished run and keeps a recent one;
// a duration that is missing or not positive is refused by name.
func TestPruneFromTheCLI(t *testing.T) {
	ctx := context.Background()
	databaseURL := agentsagatest.NewDatabase(t)
	t.Setenv("DATABASE_URL", databaseURL)
	store, err := ledgerdb.Open(ctx, databaseURL)
	require.NoError(t, err)
	defer store.Close()
	for _, id := range []string{"old", "recent"} {
		require.NoError(t, store.StartRun(ctx, agentsagatype.Run{WorkflowID: id, RunID: "r", Goal: "g", Spec: []byte(`{}`)}))
		require.NoError(t, store.FinishRun(ctx, id, agentsagatype.RunOutcome{Status: agentsagatype.RunCompleted}))
	}
	_, err = store.Pool().Exec(ctx, `UPDATE runs SET finished_at = now() - interval '90 days' WHERE workflow_id = 'old'`)
	require.NoError(t, err)

	_, err = runCLI(t, "prune")
	require.ErrorContains(t, err, "prune: --older-than 0s: give a positive duration")
	_, err = runCLI(t, "prune", "--older-than", "720h", "--charges-older-than", "-1h")
	require.ErrorContains(t, err, "--charges-older-than -1h0m0s")

	out, err := runCLI(t, "prune", "--older-than", "720h")
	require.NoError(t, err, out)
	require.Contains(t, out, "pruned 1 finished runs (older than 720h0m0s)")
	_, err = store.GetRun(ctx, "old")
	require.Error(t, err, "the old run is gone")
	_, err = store.GetRun(ctx, "recent")
	require.NoError(t, err, "the recent run is kept")
}

package worker

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/internal/ledgertest"
	"github.com/agentsaga/agentsaga/ledger"
)

// A worker's cleaner prunes on its schedule and stops with the worker.
func TestTheWorkersCleanerPrunesOldRuns(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	store := ledgertest.NewHandle(t)
	require.NoError(t, ledgerdb.Of(store).StartRun(ctx, agentsagatype.Run{WorkflowID: "old", RunID: "r", Goal: "g", Spec: []byte(`{}`)}))
	require.NoError(t, ledgerdb.Of(store).FinishRun(ctx, "old", agentsagatype.RunOutcome{Status: agentsagatype.RunCompleted}))

	done := make(chan struct{})
	go func() {
		defer close(done)
		keepPruning(ctx, ledgerdb.Of(store), slog.Default(), 20*time.Millisecond, time.Second)
	}()
	require.Eventually(t, func() bool {
		_, err := ledgerdb.Of(store).GetRun(ctx, "old")
		return err != nil
	}, 10*time.Second, 20*time.Millisecond, "the run finished more than the retention ago is pruned")
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the cleaner did not stop with its context")
	}
}

// A worker ends the spend holds a dead worker left, on its own schedule,
// without waiting for the account's next reservation.
func TestTheWorkerEndsDeadSpendHolds(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	store := ledgertest.NewHandle(t)
	_, err := store.SetSpendCap(ctx, ledger.SpendCap{Account: "acme", Period: ledger.SpendDay, USD: 10}, "ops")
	require.NoError(t, err)
	r, err := ledgerdb.Of(store).ReserveSpend(ctx, "dead-worker/step-001-model", "acme", 2, 200*time.Millisecond)
	require.NoError(t, err)
	require.True(t, r.Admitted)

	done := make(chan struct{})
	go func() {
		defer close(done)
		keepExpiringHolds(ctx, ledgerdb.Of(store), slog.Default(), 50*time.Millisecond)
	}()
	require.Eventually(t, func() bool {
		caps, err := store.SpendCaps(ctx, "acme")
		return err == nil && len(caps) == 1 && caps[0].Reserved == 0
	}, 10*time.Second, 20*time.Millisecond, "the hold whose call never reached the ledger is released")
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the expirer did not stop with its context")
	}
}

package ledgerdb_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/ledgertest"
)

// The fleet figures are counters kept by triggers as rows are written: a
// scrape agrees with counting the tables whole, leaf calls and spend stay
// counted after their rows are pruned, and a run's status moves between
// the gauges as it changes.
func TestFleetFiguresAreKeptAsRowsChange(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := ledgertest.NewStore(t)
	pool := store.Pool()
	for i := range 3 {
		_, err := pool.Exec(ctx, `INSERT INTO runs (workflow_id, run_id, goal, spec) VALUES ($1, 'r', 'g', '{}')`, fmt.Sprintf("wf-%d", i))
		require.NoError(t, err)
	}
	// Two logical calls, one of them retried twice; one statement inserts
	// two rows, as a batch would.
	_, err := pool.Exec(ctx, `INSERT INTO leaf_calls (workflow_id, activity_id, idempotency_key, attempt, kind, target)
		VALUES ('wf-0', 'a', 'wf-0/a', 1, 'tool', 't'), ('wf-0', 'a', 'wf-0/a', 2, 'tool', 't')`)
	require.NoError(t, err)
	for attempt, activity := range []string{"b", "a"} {
		_, err := pool.Exec(ctx, `INSERT INTO leaf_calls (workflow_id, activity_id, idempotency_key, attempt, kind, target)
			VALUES ('wf-1', $1, 'wf-1/' || $1, $2, 'model', 'm')`, activity, attempt+1)
		require.NoError(t, err)
	}
	_, err = pool.Exec(ctx, `UPDATE runs SET status = 'completed', finished_at = clock_timestamp(), usd_spent = 0.25, tokens_used = 100 WHERE workflow_id = 'wf-0'`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `UPDATE runs SET status = 'escalated' WHERE workflow_id = 'wf-2'`)
	require.NoError(t, err)

	figures, err := store.FleetFigures(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(4), figures.LeafCalls)
	assert.Equal(t, int64(2), figures.LogicalCalls, "first attempts: wf-0/a and wf-1/b")
	assert.InDelta(t, 0.25, figures.USDSpent, 1e-9)
	assert.Equal(t, int64(100), figures.TokensSpent)
	assert.Equal(t, int64(1), figures.RunsByStatus[agentsagatype.RunRunning])
	assert.Equal(t, int64(1), figures.RunsByStatus[agentsagatype.RunCompleted])
	assert.Equal(t, int64(1), figures.RunsByStatus[agentsagatype.RunEscalated])
	assert.Equal(t, int64(0), figures.RunsByStatus[agentsagatype.RunFailed], "every status is reported")

	// Pruning a finished run lowers its gauge, not the counters.
	_, err = pool.Exec(ctx, `DELETE FROM leaf_calls WHERE workflow_id = 'wf-0'`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `DELETE FROM runs WHERE workflow_id = 'wf-0'`)
	require.NoError(t, err)
	figures, err = store.FleetFigures(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(4), figures.LeafCalls)
	assert.InDelta(t, 0.25, figures.USDSpent, 1e-9)
	assert.Equal(t, int64(0), figures.RunsByStatus[agentsagatype.RunCompleted])
}

// Concurrent transactions that each write several leaf calls, in separate
// statements, never wait on one another for the counters (the triggers only
// append), and every call is counted once, however many scrapes fold the
// deltas meanwhile.
func TestFleetCountersUnderConcurrentWriters(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := ledgertest.NewStore(t)
	pool := store.Pool()
	const writers, transactions, perTransaction = 8, 20, 3
	var wg sync.WaitGroup
	errs := make(chan error, writers+1)
	for w := range writers {
		wg.Go(func() {
			for n := range transactions {
				err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
					for c := range perTransaction {
						if _, err := tx.Exec(ctx, `INSERT INTO leaf_calls (workflow_id, activity_id, idempotency_key, attempt, kind, target)
							VALUES ($1, $2, $1 || '/' || $2, 1, 'tool', 't')`, fmt.Sprintf("wf-%d", w), fmt.Sprintf("a-%d-%d", n, c)); err != nil {
							return err
						}
					}
					return nil
				})
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Go(func() {
		for range 20 {
			if _, err := store.FleetFigures(ctx); err != nil {
				errs <- err
				return
			}
		}
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	figures, err := store.FleetFigures(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(writers*transactions*perTransaction), figures.LeafCalls)
	assert.Equal(t, int64(writers*transactions*perTransaction), figures.LogicalCalls)
}

package ledger_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/budget"
	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/ledger/ledgertest"
)

// A store on the caller's own pool works like one Open made.
func TestNewOnTheCallersPool(t *testing.T) {
	_, err := ledger.New(nil)
	require.ErrorContains(t, err, "the pool is nil")

	ctx := context.Background()
	pool, err := pgxpool.New(ctx, ledgertest.NewDatabase(t))
	require.NoError(t, err)
	defer pool.Close()
	store, err := ledger.New(pool)
	require.NoError(t, err)
	require.NoError(t, store.EnsureBucket(ctx, "own-pool", budget.DefaultBucket))
	require.Same(t, pool, store.Pool())
}

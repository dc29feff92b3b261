package ledgerdb_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/budget"
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/internal/ledgertest"
	"github.com/agentsaga/agentsaga/migrations"
)

// A store on the caller's own pool works like one Open made.
func TestNewOnTheCallersPool(t *testing.T) {
	_, err := ledgerdb.New(nil)
	require.ErrorContains(t, err, "the pool is nil")

	ctx := context.Background()
	pool, err := pgxpool.New(ctx, ledgertest.NewDatabase(t))
	require.NoError(t, err)
	defer pool.Close()
	store, err := ledgerdb.New(pool)
	require.NoError(t, err)
	require.NoError(t, store.EnsureBucket(ctx, "own-pool", budget.DefaultBucket))
	require.Same(t, pool, store.Pool())
}

// Open sizes the pool for a worker unless DATABASE_URL says otherwise.
func TestOpenSizesThePool(t *testing.T) {
	ctx := context.Background()
	url := ledgertest.NewDatabase(t)
	store, err := ledgerdb.Open(ctx, url)
	require.NoError(t, err)
	defer store.Close()
	require.EqualValues(t, ledgerdb.DefaultMaxConns, store.Pool().Config().MaxConns)

	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	_, err = migrations.Apply(ctx, url+sep+"pool_max_conns=7")
	require.NoError(t, err, "a pool setting is not sent to the server")
	sized, err := ledgerdb.Open(ctx, url+sep+"pool_max_conns=7")
	require.NoError(t, err)
	defer sized.Close()
	require.EqualValues(t, 7, sized.Pool().Config().MaxConns)
}

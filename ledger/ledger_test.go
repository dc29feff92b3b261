package ledger_test

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/internal/ledgertest"
	"github.com/agentsaga/agentsaga/ledger"
)

// A handle on the caller's own pool is the store the rooms work on, on
// that pool.
func TestNewOnTheCallersPool(t *testing.T) {
	_, err := ledger.New(nil)
	require.ErrorContains(t, err, "the pool is nil")

	pool, err := pgxpool.New(t.Context(), ledgertest.NewDatabase(t))
	require.NoError(t, err)
	defer pool.Close()
	store, err := ledger.New(pool)
	require.NoError(t, err)
	require.Same(t, pool, ledgerdb.Of(store).Pool())
}

// EnsureDatabase creates a missing database, and takes the pool settings
// out of the URL rather than sending them to the server.
func TestEnsureDatabase(t *testing.T) {
	ctx := t.Context()
	u, err := url.Parse(ledgertest.NewDatabase(t))
	require.NoError(t, err)
	u.Path += "_ensured"
	q := u.Query()
	q.Set("pool_max_conns", "2")
	u.RawQuery = q.Encode()
	t.Cleanup(func() {
		admin, err := pgxpool.New(context.Background(), ledgertest.ServerURL())
		require.NoError(t, err)
		defer admin.Close()
		_, err = admin.Exec(context.Background(), `DROP DATABASE IF EXISTS "`+strings.TrimPrefix(u.Path, "/")+`" WITH (FORCE)`)
		require.NoError(t, err)
	})
	require.NoError(t, ledger.EnsureDatabase(ctx, u.String()))
	require.NoError(t, ledger.EnsureDatabase(ctx, u.String()), "a database that is there is left alone")
	store, err := ledger.Open(ctx, u.String())
	require.NoError(t, err)
	defer store.Close()
	require.EqualValues(t, 2, ledgerdb.Of(store).Pool().Config().MaxConns)
}

// What a team calls on the handle: the spend caps, set, read and removed,
// and pruning.
func TestTheHandle(t *testing.T) {
	ctx := t.Context()
	store := ledgertest.NewHandle(t)
	cap := ledger.SpendCap{Account: "acme", Period: ledger.SpendDay, USD: 5, OnExhausted: agentsagatype.OnExhaustedWait}
	old, err := store.SetSpendCap(ctx, cap, "ops")
	require.NoError(t, err)
	require.Nil(t, old)
	_, err = store.SetSpendCap(ctx, ledger.SpendCap{Account: "acme", Period: ledger.RollingPeriod(24 * time.Hour), USD: 20}, "ops")
	require.NoError(t, err)
	caps, err := store.SpendCaps(ctx, "acme")
	require.NoError(t, err)
	require.Len(t, caps, 2)
	removed, err := store.RemoveSpendCap(ctx, "acme", ledger.SpendDay, "ops")
	require.NoError(t, err)
	require.Equal(t, cap.USD, removed.USD)
	require.Equal(t, agentsagatype.OnExhaustedWait, removed.OnExhausted)
	_, err = store.SetSpendCap(ctx, ledger.SpendCap{Account: "acme", Period: "fortnight", USD: 1}, "ops")
	require.ErrorContains(t, err, "period")

	report, err := store.Prune(ctx, ledger.PruneOptions{})
	require.NoError(t, err)
	require.Zero(t, report.Runs)
	require.True(t, errors.Is(ledger.ErrPruneBusy, ledgerdb.ErrPruneBusy), "the same sentinel")
}

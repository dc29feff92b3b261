package ledgerdb_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/internal/ledgertest"
)

// A rolling cap counts what was spent in the last window, wherever the
// calendar is: spend leaves it a window after it settled, and the
// refusal says when room frees.
func TestARollingCapCountsItsLastWindow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := ledgertest.NewStore(t)
	day := ledgerdb.RollingPeriod(24 * time.Hour)
	require.Equal(t, "rolling 24h", day)
	_, err := store.SetSpendCap(ctx, ledgerdb.SpendCap{Account: "acme", Period: day, USD: 10}, "ops")
	require.NoError(t, err)

	r, err := store.ReserveSpend(ctx, "wf/a", "acme", 6, time.Minute)
	require.NoError(t, err)
	require.True(t, r.Admitted)
	_, err = store.SettleSpend(ctx, "wf/a", 6)
	require.NoError(t, err)
	settled := time.Now()

	r, err = store.ReserveSpend(ctx, "wf/b", "acme", 5, time.Minute)
	require.NoError(t, err)
	require.False(t, r.Admitted, "$6 spent and $5 more pass $10 in any 24h")
	assert.Equal(t, day, r.Cap.Period)
	// The $6 counts until its bucket (a sixtieth of the window, 24 min)
	// has left the window whole.
	assert.False(t, r.Resets.Before(settled.Add(24*time.Hour)), "room frees at %s, before the $6 leaves the window", r.Resets)
	assert.False(t, r.Resets.After(settled.Add(24*time.Hour+25*time.Minute)), "room frees at %s, a bucket after the $6 left the window", r.Resets)
	assert.Contains(t, r.Refusal(5).Reason(), "($10.00 in any 24h) has $6.00 spent and $0.00 reserved, and the next turn needs up to $5.0000; room frees at")

	// Twelve hours on, the $6 is still in the window; a day and a bucket
	// on, it has left it.
	require.NoError(t, store.AgeSpend(ctx, "acme", 12*time.Hour))
	r, err = store.ReserveSpend(ctx, "wf/b", "acme", 5, time.Minute)
	require.NoError(t, err)
	require.False(t, r.Admitted, "12 h later the $6 is in the last 24 h")
	require.NoError(t, store.AgeSpend(ctx, "acme", 12*time.Hour+25*time.Minute))
	r, err = store.ReserveSpend(ctx, "wf/b", "acme", 5, time.Minute)
	require.NoError(t, err)
	require.True(t, r.Admitted, "24 h and a bucket later the window is empty")

	states, err := store.SpendCaps(ctx, "acme")
	require.NoError(t, err)
	require.Len(t, states, 1)
	assert.InDelta(t, 0, states[0].Spent, 1e-9)
	assert.InDelta(t, 5, states[0].Reserved, 1e-9)
	assert.WithinDuration(t, time.Now().Add(-24*time.Hour), states[0].Starts, time.Minute, "a rolling cap's window starts a day ago")
}

// A calendar cap's reservation held across its reset still counts in
// the new period until it settles: a call admitted at 23:59 cannot let
// the new day's calls pass the cap while it is in flight.
func TestAHoldAcrossTheResetCountsUntilItSettles(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := ledgertest.NewStore(t)
	_, err := store.SetSpendCap(ctx, ledgerdb.SpendCap{Account: "acme", Period: ledgerdb.SpendDay, USD: 10}, "ops")
	require.NoError(t, err)
	r, err := store.ReserveSpend(ctx, "wf/late", "acme", 8, time.Hour)
	require.NoError(t, err)
	require.True(t, r.Admitted)
	require.NoError(t, store.AgeSpend(ctx, "acme", 24*time.Hour)) // the hold is now in yesterday's period
	r, err = store.ReserveSpend(ctx, "wf/next", "acme", 5, time.Minute)
	require.NoError(t, err)
	assert.False(t, r.Admitted, "yesterday's $8 in flight and $5 pass today's $10")
	_, err = store.SettleSpend(ctx, "wf/late", 1)
	require.NoError(t, err)
	r, err = store.ReserveSpend(ctx, "wf/next", "acme", 5, time.Minute)
	require.NoError(t, err)
	assert.True(t, r.Admitted, "settled into yesterday, it no longer holds today's room")
}

// Many pools reserve against a rolling 2 s window whose 1 s buckets turn
// over while they do: what settles in any 2 s never passes the cap,
// however the calls straddle the buckets, and nothing is left held.
func TestRollingCapHoldsAcrossBucketsAndPools(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const pools, goroutines, window, capUSD = 3, 4, 2 * time.Second, 2.0
	stores := openWorkers(t, pools, 4)
	_, err := stores[0].SetSpendCap(ctx, ledgerdb.SpendCap{Account: "roll", Period: ledgerdb.RollingPeriod(window), USD: capUSD}, "test")
	require.NoError(t, err)

	deadline := time.Now().Add(3500 * time.Millisecond)
	var wg sync.WaitGroup
	var mu sync.Mutex
	admitted, refused := 0, 0
	errs := make(chan error, pools*goroutines)
	for p := range pools {
		for g := range goroutines {
			wg.Go(func() {
				for n := 0; time.Now().Before(deadline); n++ {
					key := fmt.Sprintf("roll-%d-%d/step-%03d-model", p, g, n)
					usd := 0.05 + rand.Float64()*0.15
					r, err := stores[p].ReserveSpend(ctx, key, "roll", usd, time.Minute)
					if err != nil {
						errs <- err
						return
					}
					mu.Lock()
					if r.Admitted {
						admitted++
					} else {
						refused++
					}
					mu.Unlock()
					if !r.Admitted {
						time.Sleep(20 * time.Millisecond)
						continue
					}
					time.Sleep(time.Duration(rand.IntN(30)) * time.Millisecond) // the call
					if _, err := stores[p].SettleSpend(ctx, key, usd*(0.5+0.5*rand.Float64())); err != nil {
						errs <- err
						return
					}
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}

	at, usd, err := stores[0].SpendSettledAt(ctx, "roll")
	require.NoError(t, err)
	violations, most := 0, 0.0
	for i := range at {
		in := 0.0
		for j := range at {
			if !at[j].After(at[i]) && at[j].After(at[i].Add(-window)) {
				in += usd[j]
			}
		}
		most = max(most, in)
		if in > capUSD+1e-9 {
			violations++
		}
	}
	states, err := stores[0].SpendCaps(ctx, "roll")
	require.NoError(t, err)
	if r := states[0].Reserved; r > 1e-9 || r < -1e-9 {
		violations++
	}
	t.Logf("%d pools x %d goroutines for 3.5 s: %d admitted, %d refused; most settled in any %s: $%.4f of $%.2f; violations %d",
		pools, goroutines, admitted, refused, window, most, capUSD, violations)
	assert.Zero(t, violations, "a window passed the cap, or a reservation was left held")
	assert.Positive(t, refused, "the cap bound")
	assert.Greater(t, most, capUSD/2, "the cap was used")
}

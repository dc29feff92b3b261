package ledgerdb_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/budget"
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/internal/ledgertest"
)

// An open breaker spaces its release slots at what the calls that keep
// arriving leave of the release rate (migration 00032, issue 46 item 7):
// in `agentsaga bench storm`, 8 new calls a second on a service that takes
// 10, a backlog released at 10 a second on top of them met 503s and opened
// the breaker again. The outage runs on the moved clock of skip: a second
// of it is a skip, so nothing here depends on how fast the machine is.
func TestReleaseLeavesRoomForFreshDemand(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg := budget.DefaultBreaker // a 5 s cooldown; released at 10 a second to start with, never below one a cooldown
	store := ledgertest.NewStore(t)
	open := func(dependency string) {
		t.Helper()
		for range cfg.Threshold {
			_, err := store.BreakerReport(ctx, dependency, false, false, cfg)
			require.NoError(t, err)
		}
	}
	// gate asks as a call would; a probe it lets out fails: the outage
	// goes on.
	gate := func(dependency string, firstSend bool) ledgerdb.Gate {
		t.Helper()
		for {
			ask := store.BreakerGate
			if firstSend {
				ask = store.BreakerGateFirstSend
			}
			g, err := ask(ctx, dependency, cfg)
			require.NoError(t, err)
			if g.State != ledgerdb.BreakerProbe {
				require.Equal(t, budget.BreakerOpen, g.State)
				return g
			}
			_, err = store.BreakerReport(ctx, dependency, false, true, cfg)
			require.NoError(t, err)
		}
	}
	// arrive runs seconds of the outage, perSecond new calls meeting the
	// breaker in each. A second is the statements' own time and then the
	// clock moved to the second's end: on a machine loaded by a parallel
	// suite, seven statements took 400 ms, and a skip of a whole second
	// after them thinned the demand measured to 5 a second; once they took
	// over a second, and a second that overran thinned it to 6.3. So the
	// clock moves back by an overrun, as it moves on by what is left.
	arrive := func(dependency string, perSecond, seconds int) {
		t.Helper()
		for range seconds {
			began := time.Now()
			for range perSecond {
				gate(dependency, true)
			}
			moveBreakerClock(t, store, dependency, time.Second-time.Since(began))
		}
	}
	// spacing is the gap between the release slots of two parked calls
	// refused one after the other.
	spacing := func(dependency string) time.Duration {
		t.Helper()
		a, b := gate(dependency, false), gate(dependency, false)
		return b.RetryAt.Sub(a.RetryAt)
	}
	const rate = 10 // a second: the adaptive release rate's start
	full := time.Second / rate

	// The storm's shape: 7 new calls a second, on and on. For the first two
	// cooldowns the slots are spaced at the whole rate; then at the 2 a
	// second the new calls leave of nine tenths of it.
	open("storm")
	arrive("storm", 7, 1)
	assert.Equal(t, full, spacing("storm"), "before the demand is known, the whole rate")
	arrive("storm", 7, 11)
	// The statements of spacing's own two asks add a little to the
	// moved clock: a gap about 500 ms.
	gap := spacing("storm")
	assert.InDelta(t, (time.Second / (0.9*rate - 7)).Seconds(), gap.Seconds(), 0.12,
		"7 new calls a second leave 2 a second of 9 to the backlog")
	assert.Greater(t, gap, 3*full)
	t.Logf("7 new calls a second for 12 s: release slots %v apart (10 a second before the change: %v)", gap, full)

	// The drain's shape: a burst that met the outage together, then
	// nothing. A burst is a backlog, not a rate that goes on: the whole
	// rate.
	open("drain")
	arrive("drain", 150, 1)
	arrive("drain", 0, 11)
	assert.Equal(t, full, spacing("drain"), "a burst in the outage's first cooldown is not counted")

	// More new calls than the dependency takes: the backlog still leaves,
	// at the floor, one release a cooldown.
	open("flood")
	arrive("flood", 15, 12)
	assert.InDelta(t, cfg.Cooldown.Seconds(), spacing("flood").Seconds(), 0.01, "the floor")

	// The next outage counts its own demand: the storm's closes, opens
	// again, and starts at the whole rate.
	g := gate("storm", false)
	skip(t, store, "storm", time.Until(g.RetryAt)+time.Second)
	state, err := stateOf(store.BreakerGate(ctx, "storm", cfg))
	require.NoError(t, err)
	require.Equal(t, ledgerdb.BreakerProbe, state)
	report, err := store.BreakerReport(ctx, "storm", true, true, cfg)
	require.NoError(t, err)
	require.Equal(t, budget.BreakerClosed, report.State)
	open("storm")
	arrive("storm", 7, 1)
	assert.Equal(t, full, spacing("storm"), "an earlier outage's demand counts for nothing")
}

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

// A probe that closes the breaker after an outage in which new calls kept
// coming starts the drain slow (migration 00037, issue 46 item 7): the
// paced line lets the released calls out at one a second, not at the
// learned rate (10 a second for DefaultBreaker), and ramps while they
// succeed, by a quarter release a second per success, up to the room the
// new calls leave (nine tenths of the learned rate less their rate, as the
// gate of 00033 measures it), and by the 0.05 step past it; the first
// failure while the line is in use halves the slow rate and leaves the
// learned one, which spaces the next outage's slots, alone; once the slow
// rate catches up with the learned rate, the line runs at the learned rate
// again; the line holds no call more than about 5 s; and an outage that no new call met after its first cooldown (a
// burst) drains at the learned rate, as before. Before 00037 the second
// place in the line was 100 ms after the first.
func TestDrainStartsSlowAfterAnOutage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg := budget.DefaultBreaker // adaptive: 10 a second to start with, a 0.05 step, a 1 s hold, a 5 s cooldown
	store := ledgertest.NewStore(t)
	// outage lets the dependency's line go idle, opens its breaker, has
	// fresh new calls meet it in the cooldown after its first one (their
	// first sends, counted over that cooldown: fresh/5 a second), and
	// closes it with a probe that finds the dependency well.
	outage := func(dependency string, fresh int) {
		t.Helper()
		skip(t, store, dependency, 3*time.Second) // the line idle, a cut's hold over: the failures cut nothing
		for range cfg.Threshold {
			_, err := store.BreakerReport(ctx, dependency, false, false, cfg)
			require.NoError(t, err)
		}
		if fresh > 0 {
			state, err := stateOf(store.BreakerGateFirstSend(ctx, dependency, cfg)) // the first, not counted
			require.NoError(t, err)
			require.Equal(t, budget.BreakerOpen, state)
		}
		skip(t, store, dependency, cfg.Cooldown)
		state, err := stateOf(store.BreakerGate(ctx, dependency, cfg))
		require.NoError(t, err)
		require.Equal(t, ledgerdb.BreakerProbe, state)
		for range fresh {
			// The probe is out: new calls still meet the open breaker.
			state, err := stateOf(store.BreakerGateFirstSend(ctx, dependency, cfg))
			require.NoError(t, err)
			require.Equal(t, budget.BreakerOpen, state)
		}
		state, err = reportState(store.BreakerReport(ctx, dependency, true, true, cfg))
		require.NoError(t, err)
		require.Equal(t, budget.BreakerClosed, state)
	}
	// gap books two places in the line, the first carrying successes, and
	// returns the time between them.
	gap := func(dependency string, successes int) time.Duration {
		t.Helper()
		a, err := store.BreakerPace(ctx, dependency, cfg, successes)
		require.NoError(t, err)
		b, err := store.BreakerPace(ctx, dependency, cfg, 0)
		require.NoError(t, err)
		return b.Sub(a)
	}
	const learned = 10.0 // a second: the adaptive start, nothing learned yet

	// The storm's shape: 7 new calls a second leave 0.9 x 10 - 7 = 2 a
	// second to the backlog.
	outage("storm", 35)
	assert.InDelta(t, 1.0, gap("storm", 0).Seconds(), 0.001, "the drain starts at one release a second, not at the learned 10")
	// The line is in use (the last place is a second ahead): four released
	// successes raise the slow rate by a quarter each, to the room.
	assert.InDelta(t, 0.5, gap("storm", 4).Seconds(), 0.001, "1 + 4 x 0.25 = 2 a second, the room")
	assert.InDelta(t, 1/2.2, gap("storm", 4).Seconds(), 0.001, "past the room by steps: 2 + 4 x 0.05, not 2 + 4 x 0.25")
	assert.InDelta(t, learned, releaseRate(t, store, "storm", cfg), 1e-9, "the slow start leaves the learned rate alone")

	// A 503 while the line is in use halves the slow rate (the learned
	// rate stays), and the breaker stays closed.
	state, err := reportState(store.BreakerReport(ctx, "storm", false, false, cfg))
	require.NoError(t, err)
	require.Equal(t, budget.BreakerClosed, state)
	skip(t, store, "storm", 3*time.Second) // the line's end 1 s ahead, not 4: below the bound on its wait (see "queue")
	assert.InDelta(t, 1/1.1, gap("storm", 0).Seconds(), 0.001, "cut from 2.2 to 1.1 a second")
	assert.InDelta(t, learned, releaseRate(t, store, "storm", cfg), 1e-9, "the cut is the slow rate's, not the learned rate's")
	// After the cut a success adds a tenth of the way back to nine tenths
	// of the rate that failed (1.98), or the 0.05 step when that is more.
	assert.InDelta(t, 1/1.188, gap("storm", 1).Seconds(), 0.001, "1.1 + (1.98 - 1.1) / 10")

	// Few new calls leave much room (9 - 0.2): the slow start ramps to it,
	// the steps past it catch up with the learned rate, and the line runs
	// at the learned rate from then on.
	outage("ramp", 1)
	assert.InDelta(t, 1.0, gap("ramp", 0).Seconds(), 0.001)
	assert.InDelta(t, 1/8.8, gap("ramp", 40).Seconds(), 0.001, "1 + 40 x 0.25, but no more than the room, 8.8")
	assert.InDelta(t, 0.1, gap("ramp", 30).Seconds(), 0.001, "8.8 + 30 x 0.05 >= 10: the learned rate")
	assert.InDelta(t, 0.1, gap("ramp", 0).Seconds(), 0.001, "and stays at it")

	// Released calls that come faster than the slow rate queue in the
	// line, but no more than about 5 s deep: past that each booking raises
	// the slow rate by a quarter (the hook would send a call held past its
	// attempt's timeout unpaced).
	outage("queue", 35)
	places := make([]time.Time, 12)
	for i := range places {
		places[i], err = store.BreakerPace(ctx, "queue", cfg, 0)
		require.NoError(t, err)
	}
	assert.InDelta(t, 1.0, places[1].Sub(places[0]).Seconds(), 0.001, "the first places a second apart")
	// Places 0-6 are a second apart (the seventh is 6 s ahead); each
	// booking after raises the slow rate by a quarter: 1.25, 1.5, ...
	assert.InDelta(t, 1/1.25, places[7].Sub(places[6]).Seconds(), 0.001, "past 5 s of wait, a quarter more")
	assert.InDelta(t, 1/2.25, places[11].Sub(places[10]).Seconds(), 0.001, "and a quarter more per booking")
	assert.Less(t, places[11].Sub(places[0]), 10*time.Second, "at one a second the twelfth place would be 11 s after the first")

	// A line that no probe closed (a paced line in use without an outage's
	// close) runs at the learned rate, as before.
	breakerRow(t, store, "no-outage", cfg)
	assert.InDelta(t, 0.1, gap("no-outage", 0).Seconds(), 0.001)

	// An outage that no new call met after its first cooldown (a burst,
	// as in `bench drain`) has nobody to share the dependency with: its
	// drain runs at the learned rate. And it forgets an earlier drain's
	// slow rate: the storm's next outage, with no new calls, drains fast.
	outage("drain", 0)
	assert.InDelta(t, 0.1, gap("drain", 0).Seconds(), 0.001, "a burst's backlog: the learned rate")
	outage("storm", 0)
	assert.InDelta(t, 0.1, gap("storm", 0).Seconds(), 0.001, "no earlier slow rate left over")

	// The next outage with new calls starts slow again.
	outage("storm", 35)
	assert.InDelta(t, 1.0, gap("storm", 0).Seconds(), 0.001, "slow again after the next outage with new calls")
}

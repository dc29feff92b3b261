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
// coming starts the drain slow (migration 00037, issue 46 item 7): the paced line lets the released
// calls out at one a second, not at the learned rate (10 a second for
// DefaultBreaker), and ramps while they succeed, by a quarter release a
// second per success; the first failure while the line is in use halves
// the slow rate and leaves the learned one, which spaces the next outage's
// slots, alone; and once the slow rate catches up with the learned rate,
// the line runs at the learned rate again. Before 00037 the second place
// in the line was 100 ms after the first.
func TestDrainStartsSlowAfterAnOutage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg := budget.DefaultBreaker // adaptive: 10 a second to start with, a 0.05 step, a 1 s hold
	store := ledgertest.NewStore(t)
	// outage opens the dependency's breaker; with fresh, a new call's
	// first send meets it after its first cooldown (new calls keep coming,
	// as in the storm); then a probe finds the dependency well and closes
	// it.
	outage := func(dependency string, fresh bool) {
		t.Helper()
		for range cfg.Threshold {
			_, err := store.BreakerReport(ctx, dependency, false, false, cfg)
			require.NoError(t, err)
		}
		if fresh {
			state, err := stateOf(store.BreakerGateFirstSend(ctx, dependency, cfg))
			require.NoError(t, err)
			require.Equal(t, budget.BreakerOpen, state)
		}
		skip(t, store, dependency, cfg.Cooldown)
		state, err := stateOf(store.BreakerGate(ctx, dependency, cfg))
		require.NoError(t, err)
		require.Equal(t, ledgerdb.BreakerProbe, state)
		if fresh {
			// The probe is out: a first send a cooldown after the
			// first one is counted as fresh demand (migration 00033).
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

	outage("storm", true)
	first := gap("storm", 0)
	assert.InDelta(t, time.Second.Seconds(), first.Seconds(), 0.001, "the drain starts at one release a second, not at the learned 10")
	// The line is in use (the last place is a second ahead): four released
	// successes raise the slow rate by a quarter each, to 2 a second.
	assert.InDelta(t, 0.5, gap("storm", 4).Seconds(), 0.001, "1 + 4 x 0.25 = 2 a second")
	assert.InDelta(t, learned, releaseRate(t, store, "storm", cfg), 1e-9, "the slow start leaves the learned rate alone")

	// A 503 while the line is in use ends the slow start: it halves the
	// slow rate (the learned rate stays), and the breaker stays closed.
	state, err := reportState(store.BreakerReport(ctx, "storm", false, false, cfg))
	require.NoError(t, err)
	require.Equal(t, budget.BreakerClosed, state)
	assert.InDelta(t, 1.0, gap("storm", 0).Seconds(), 0.001, "cut from 2 to 1 a second")
	assert.InDelta(t, learned, releaseRate(t, store, "storm", cfg), 1e-9, "the cut is the slow rate's, not the learned rate's")
	// After the cut a success adds a tenth of the way back to nine tenths
	// of the rate that failed (1.8), or the 0.05 step when that is more.
	assert.InDelta(t, 1/1.08, gap("storm", 1).Seconds(), 0.001, "1 + (1.8 - 1) / 10")

	// Once the slow rate reaches the learned rate, the line runs at it.
	outage("ramp", true)
	assert.InDelta(t, 1.0, gap("ramp", 0).Seconds(), 0.001)
	assert.InDelta(t, 0.1, gap("ramp", 40).Seconds(), 0.001, "1 + 40 x 0.25 = 11 >= 10: the learned rate")
	assert.InDelta(t, 0.1, gap("ramp", 0).Seconds(), 0.001, "and stays at it")

	// A line that no probe closed (a paced line in use without an outage's
	// close) runs at the learned rate, as before.
	breakerRow(t, store, "no-outage", cfg)
	assert.InDelta(t, 0.1, gap("no-outage", 0).Seconds(), 0.001)

	// An outage that no new call met after its first cooldown (a burst,
	// as in `bench drain`) has nobody to share the dependency with: its
	// drain runs at the learned rate. And it forgets an earlier drain's
	// slow rate: the storm's next outage, with no new calls, drains fast.
	outage("drain", false)
	assert.InDelta(t, 0.1, gap("drain", 0).Seconds(), 0.001, "a burst's backlog: the learned rate")
	outage("storm", false)
	assert.InDelta(t, 0.1, gap("storm", 0).Seconds(), 0.001, "no earlier slow rate left over")

	// The next outage with new calls starts slow again.
	outage("ramp", true)
	assert.InDelta(t, 1.0, gap("ramp", 0).Seconds(), 0.001, "slow again after the next outage with new calls")
}

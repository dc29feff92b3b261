package ledgerdb_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/budget"
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/internal/ledgertest"
)

// adaptiveBreaker is a breaker whose adaptive release rate starts at 2 a
// second (500 ms apart, long enough that the line is still in use when the
// next statement of a loaded machine comes), with a floor of 0.1 (one per
// 10 s cooldown) and a ceiling of 8.
var adaptiveBreaker = budget.BreakerConfig{Threshold: 3, Window: time.Minute, Cooldown: 10 * time.Second,
	Adaptive: budget.AdaptiveRelease{Start: 2, Ceiling: 8, Step: 0.25, Hold: 300 * time.Millisecond}}

// breakerRow gives the dependency a closed breaker row (one failure, below
// the threshold; the line is not in use, so nothing is cut).
func breakerRow(t *testing.T, store *ledgerdb.Store, dependency string, cfg budget.BreakerConfig) {
	t.Helper()
	state, err := reportState(store.BreakerReport(context.Background(), dependency, false, false, cfg))
	require.NoError(t, err)
	require.Equal(t, budget.BreakerClosed, state)
}

func releaseRate(t *testing.T, store *ledgerdb.Store, dependency string, cfg budget.BreakerConfig) float64 {
	t.Helper()
	rate, err := store.ReleaseRate(context.Background(), dependency, cfg)
	require.NoError(t, err)
	return rate
}

// waitIdle waits until the line's last booking has left and the hold of a
// cut has passed, so that the line is no longer in use.
func waitIdle(last time.Time, cfg budget.BreakerConfig, rate float64) {
	time.Sleep(time.Until(last) + time.Duration(float64(time.Second)/rate) + cfg.AdaptiveRate().Hold + 100*time.Millisecond)
}

// Additive increase: the released successes a booking carries raise the
// rate by a step each while the line is in use, and the booking after them
// is spaced at the new rate; successes that come while nobody waits in the
// line say nothing about a higher rate and raise nothing; the rate never
// passes its ceiling.
func TestAdaptiveReleaseRisesWithSuccesses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := ledgertest.NewStore(t)
	cfg := adaptiveBreaker
	breakerRow(t, store, "crm", cfg)
	assert.Equal(t, 2.0, releaseRate(t, store, "crm", cfg), "nothing learned yet: the start")

	first, err := store.BreakerPace(ctx, "crm", cfg, 0)
	require.NoError(t, err)
	second, err := store.BreakerPace(ctx, "crm", cfg, 2)
	require.NoError(t, err)
	assert.Equal(t, 500*time.Millisecond, second.Sub(first), "the second waits one interval at the rate the first was booked at")
	assert.InDelta(t, 2.5, releaseRate(t, store, "crm", cfg), 1e-9, "two successes while the line was in use: two steps of 0.25")
	third, err := store.BreakerPace(ctx, "crm", cfg, 0)
	require.NoError(t, err)
	assert.Equal(t, 400*time.Millisecond, third.Sub(second), "booked after it at the new rate, 2.5 a second")

	_, err = store.BreakerPace(ctx, "crm", cfg, 1000)
	require.NoError(t, err)
	assert.Equal(t, 8.0, releaseRate(t, store, "crm", cfg), "the ceiling")

	// The line empties: a success reported now raises nothing.
	last, err := store.BreakerPace(ctx, "crm", cfg, 0)
	require.NoError(t, err)
	waitIdle(last, cfg, 8)
	idle, err := store.BreakerPace(ctx, "crm", cfg, 0)
	require.NoError(t, err)
	assert.WithinDuration(t, time.Now(), idle, time.Second, "an empty line books now")
	breakerRow(t, store, "cms", cfg)
	first, err = store.BreakerPace(ctx, "cms", cfg, 0)
	require.NoError(t, err)
	waitIdle(first, cfg, 2)
	_, err = store.BreakerPace(ctx, "cms", cfg, 3)
	require.NoError(t, err)
	assert.Equal(t, 2.0, releaseRate(t, store, "cms", cfg), "successes of calls that did not wait raise nothing")
}

// Multiplicative decrease: a failure while the line is in use halves the
// rate, once per congestion (the failures of the calls already in line
// and within the hold count once), and again for a failure after that; the
// rate never goes under its floor. A failure while no released call is in
// line cuts nothing: the dependency's failures are the drain's only while
// it drains.
func TestAdaptiveReleaseHalvesOnFailure(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := ledgertest.NewStore(t)
	cfg := adaptiveBreaker
	cfg.Threshold = 1000           // the breaker stays closed: this is about the rate
	cfg.Cooldown = 2 * time.Second // a floor of 0.5 a second
	cfg.Adaptive.Step = 0.05
	breakerRow(t, store, "crm", cfg)
	_, err := store.BreakerPace(ctx, "crm", cfg, 0)
	require.NoError(t, err)
	_, err = store.BreakerPace(ctx, "crm", cfg, 20) // 2 + 20 x 0.05
	require.NoError(t, err)
	require.InDelta(t, 3.0, releaseRate(t, store, "crm", cfg), 1e-9)

	for range 3 {
		breakerRow(t, store, "crm", cfg)
	}
	assert.InDelta(t, 1.5, releaseRate(t, store, "crm", cfg), 1e-9, "three failures of one congestion halve it once")

	// Fast recovery: below nine tenths of the rate of the last cut, each
	// success closes a tenth of the gap to it when that is more than a step.
	last, err := store.BreakerPace(ctx, "crm", cfg, 10)
	require.NoError(t, err)
	recovered := 1.5 + (2.7-1.5)*(1-pow(0.9, 10))
	require.Greater(t, recovered, 1.5+10*0.05)
	assert.InDelta(t, recovered, releaseRate(t, store, "crm", cfg), 1e-9, "ten successes close 1-0.9^10 of the gap to 2.7, nine tenths of 3")

	// After the hold, with the line in use, the next failure cuts again,
	// down to the floor and no further.
	rate := recovered
	for range 4 {
		waitIdle(last, cfg, rate)
		last, err = store.BreakerPace(ctx, "crm", cfg, 0)
		require.NoError(t, err)
		breakerRow(t, store, "crm", cfg)
		got := releaseRate(t, store, "crm", cfg)
		assert.InDelta(t, max(rate/2, 0.5), got, 1e-9, "halved from %v", rate)
		rate = got
	}
	assert.InDelta(t, 0.5, rate, 1e-9, "the floor: one release per cooldown")

	// No released call in line: a failure is not the drain's.
	breakerRow(t, store, "cms", cfg)
	first, err := store.BreakerPace(ctx, "cms", cfg, 0)
	require.NoError(t, err)
	waitIdle(first, cfg, 2)
	breakerRow(t, store, "cms", cfg)
	assert.Equal(t, 2.0, releaseRate(t, store, "cms", cfg), "a failure with nobody in line cuts nothing")
}

func pow(x float64, n int) float64 {
	p := 1.0
	for range n {
		p *= x
	}
	return p
}

// The rate the drain learned spaces the next outage's release slots, and
// the failure that reopens the breaker while released calls are in line
// is a cut too. A declared rate wins at the gate and in the line, and
// leaves the learned rate alone.
func TestAdaptiveReleaseSpacesTheNextOutage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := ledgertest.NewStore(t)
	cfg := adaptiveBreaker
	cfg.Cooldown = time.Second
	breakerRow(t, store, "crm", cfg)
	_, err := store.BreakerPace(ctx, "crm", cfg, 0)
	require.NoError(t, err)
	_, err = store.BreakerPace(ctx, "crm", cfg, 8) // 2 + 8 x 0.25
	require.NoError(t, err)
	require.InDelta(t, 4.0, releaseRate(t, store, "crm", cfg), 1e-9)
	// The streak was one failure; two more, with released calls in line,
	// reopen the breaker, and the first of them cuts the rate.
	for range 2 {
		_, err = reportState(store.BreakerReport(ctx, "crm", false, false, cfg))
		require.NoError(t, err)
	}
	gate, err := store.BreakerGate(ctx, "crm", cfg)
	require.NoError(t, err)
	require.Equal(t, budget.BreakerOpen, gate.State, "three failures in a row reopened it")
	assert.InDelta(t, 2.0, releaseRate(t, store, "crm", cfg), 1e-9, "the failures that reopened it cut the rate once")

	slots := []time.Time{gate.RetryAt}
	for range 3 {
		gate, err := store.BreakerGate(ctx, "crm", cfg)
		require.NoError(t, err)
		require.Equal(t, budget.BreakerOpen, gate.State)
		slots = append(slots, gate.RetryAt)
	}
	for i := 1; i < len(slots); i++ {
		assert.Equal(t, 500*time.Millisecond, slots[i].Sub(slots[i-1]), "slot %d: the learned 2 a second", i)
	}

	// Declared slower than the learned rate, and far apart enough that two
	// statements a loaded machine runs 50 ms apart still book back to back
	// (a gap wider than the rate starts the next slot from now).
	declared := cfg
	declared.Release = 2 * time.Second
	gate, err = store.BreakerGate(ctx, "crm", declared)
	require.NoError(t, err)
	next, err := store.BreakerGate(ctx, "crm", declared)
	require.NoError(t, err)
	assert.Equal(t, 2*time.Second, next.RetryAt.Sub(gate.RetryAt), "a declared rate wins at the gate")
	a, err := store.BreakerPace(ctx, "crm", declared, 0)
	require.NoError(t, err)
	b, err := store.BreakerPace(ctx, "crm", declared, 100)
	require.NoError(t, err)
	assert.Equal(t, 2*time.Second, b.Sub(a), "and in the line")
	assert.InDelta(t, 2.0, releaseRate(t, store, "crm", cfg), 1e-9, "and leaves the learned rate alone")
}

// Several workers' pools book and report at once: every booking raises
// the rate by its successes, none lost, the bookings never share a place,
// and the failures of one congestion cut the rate once.
func TestAdaptiveReleaseAcrossPools(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	stores := openWorkers(t, 4, 3)
	cfg := budget.BreakerConfig{Threshold: 1000, Window: time.Minute, Cooldown: 10 * time.Second,
		Adaptive: budget.AdaptiveRelease{Start: 1, Ceiling: 100, Step: 0.01, Hold: time.Minute}}
	breakerRow(t, stores[0], "crm", cfg)
	_, err := stores[0].BreakerPace(ctx, "crm", cfg, 0) // the line is in use for a second at least
	require.NoError(t, err)

	const bookings = 48
	slots := make([]time.Time, bookings)
	errs := make([]error, bookings)
	var wg sync.WaitGroup
	for i := range bookings {
		wg.Go(func() { slots[i], errs[i] = stores[i%len(stores)].BreakerPace(ctx, "crm", cfg, 1) })
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	assert.InDelta(t, 1+bookings*0.01, releaseRate(t, stores[0], "crm", cfg), 1e-9, "every booking's success counted once")
	slices.SortFunc(slots, func(a, b time.Time) int { return a.Compare(b) })
	for i := 1; i < bookings; i++ {
		gap := slots[i].Sub(slots[i-1])
		assert.True(t, gap > 600*time.Millisecond && gap < time.Second,
			"place %d is one interval (at a rate between 1 and %v) after place %d: %v", i, 1+bookings*0.01, i-1, gap)
	}

	const failures = 24
	for i := range failures {
		wg.Go(func() {
			_, errs[i] = stores[i%len(stores)].BreakerReport(ctx, "crm", false, false, cfg)
		})
	}
	wg.Wait()
	for _, err := range errs[:failures] {
		require.NoError(t, err)
	}
	assert.InDelta(t, (1+bookings*0.01)/2, releaseRate(t, stores[0], "crm", cfg), 1e-9,
		"%d concurrent failures of one congestion halve it once", failures)
}

// Bounds that could not shape a rate are refused, by the ledger and by the
// database alike.
func TestAdaptiveReleaseRejectsBadBounds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := ledgertest.NewStore(t)
	for _, a := range []budget.AdaptiveRelease{
		{Start: 2, Floor: 3},
		{Start: 30, Ceiling: 20},
		{Step: -1},
		{Floor: -1},
	} {
		cfg := adaptiveBreaker
		cfg.Adaptive = a
		_, err := store.BreakerPace(ctx, "crm", cfg, 0)
		assert.Error(t, err, "%+v", a)
		_, err = store.BreakerGate(ctx, "crm", cfg)
		assert.Error(t, err, "%+v", a)
	}
	_, err := store.BreakerPace(ctx, "crm", adaptiveBreaker, -1)
	assert.Error(t, err, "negative successes")
	for _, q := range []string{
		`SELECT agentsaga_breaker_pace('crm', 0, 0, 2, 3, 8, 0.25)`,
		`SELECT agentsaga_breaker_pace('crm', 0, -1, 2, 0.1, 8, 0.25)`,
		`SELECT * FROM agentsaga_breaker_gate('crm', 1000, 0, 1000, 9, 0.1, 8)`,
		`SELECT * FROM agentsaga_breaker_report('crm', false, false, 3, 1000, 2, 0.1, 8, -1)`,
	} {
		_, err := store.Pool().Exec(ctx, q)
		assert.Error(t, err, q)
	}
}

package ledgerdb_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/budget"
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/internal/ledgertest"
)

// The probe backoff of migration 00020 is tested on a clock that the test
// moves: skip moves every timestamp of the dependency's breaker row back
// by d, which, to the statements that compare them with
// clock_timestamp(), is d passing. A ten-minute outage takes a second.

// skip moves the dependency's breaker row d into the past.
func skip(t *testing.T, store *ledgerdb.Store, dependency string, d time.Duration) {
	t.Helper()
	if d <= 0 {
		return
	}
	moveBreakerClock(t, store, dependency, d)
}

// moveBreakerClock is skip of any d: a negative d moves the breaker's clock back,
// as if less time had passed than did.
func moveBreakerClock(t *testing.T, store *ledgerdb.Store, dependency string, d time.Duration) {
	t.Helper()
	_, err := store.Pool().Exec(context.Background(), `
		UPDATE circuit_breakers
		SET window_started_at = window_started_at - $2 * interval '1 microsecond',
		    opened_at = opened_at - $2 * interval '1 microsecond',
		    updated_at = updated_at - $2 * interval '1 microsecond',
		    open_since = open_since - $2 * interval '1 microsecond',
		    release_next = release_next - $2 * interval '1 microsecond',
		    paced_until = paced_until - $2 * interval '1 microsecond',
		    release_hold_until = release_hold_until - $2 * interval '1 microsecond',
		    failed_probes_window = failed_probes_window - $2 * interval '1 microsecond',
		    fresh_from = fresh_from - $2 * interval '1 microsecond',
		    fresh_window = fresh_window - $2 * interval '1 microsecond'
		WHERE dependency = $1`, dependency, d.Microseconds())
	require.NoError(t, err)
}

// breakerFuncs is how an outage simulation asks the breaker: the store's
// methods (migration 00020), or 00018's functions as the build before it
// called them.
type breakerFuncs struct {
	gate func(dependency string) (ledgerdb.Gate, error)
	// report reports a failure and returns when the failed call comes back.
	report func(dependency string, probe bool) (state string, back time.Time, err error)
}

func currentBreaker(store *ledgerdb.Store, cfg budget.BreakerConfig) breakerFuncs {
	ctx := context.Background()
	return breakerFuncs{
		gate: func(dependency string) (ledgerdb.Gate, error) { return store.BreakerGate(ctx, dependency, cfg) },
		report: func(dependency string, probe bool) (string, time.Time, error) {
			r, err := store.BreakerReport(ctx, dependency, false, probe, cfg)
			return r.State, r.RetryAt, err // the retry hook parks the failed call until RetryAt
		},
	}
}

// breakerBefore is 00018's gate and report, as the build before 00020
// called them: its retry hook parked a failed probe's call for a cooldown.
func breakerBefore(store *ledgerdb.Store, cfg budget.BreakerConfig) breakerFuncs {
	ctx := context.Background()
	a := cfg.AdaptiveRate()
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	return breakerFuncs{
		gate: func(dependency string) (ledgerdb.Gate, error) {
			var g ledgerdb.Gate
			var retryAt *time.Time
			err := store.Pool().QueryRow(ctx, `SELECT state, retry_at FROM agentsaga_breaker_gate($1, $2, $3, $4, $5, $6, $7)`,
				dependency, ms(cfg.Cooldown), ms(cfg.Release), ms(cfg.Window), a.Start, a.Floor, a.Ceiling).Scan(&g.State, &retryAt)
			if retryAt != nil {
				g.RetryAt = *retryAt
			}
			return g, err
		},
		report: func(dependency string, probe bool) (string, time.Time, error) {
			var state string
			err := store.Pool().QueryRow(ctx, `SELECT state FROM agentsaga_breaker_report($1, false, $2, $3, $4, $5, $6, $7, $8)`,
				dependency, probe, cfg.Threshold, ms(cfg.Window), a.Start, a.Floor, a.Ceiling, ms(a.Hold)).Scan(&state)
			return state, time.Now().Add(cfg.Cooldown), err
		},
	}
}

// outageRun is what a simulated outage cost: the probes (each a request
// to the dependency that is down), when they left, from the breaker's
// opening, and how often the calls parked behind it woke to be refused
// again.
type outageRun struct {
	probes []time.Duration
	wakes  int
}

// simulateOutage opens the dependency's breaker, parks `parked` calls
// behind it, and lets the outage last `outage` on the moved clock: each
// call sleeps until the time it was told (its release slot, or the next
// probe after its own failed probe: no jitter, the worst case), then
// meets the gate; a probe fails at once.
func simulateOutage(t *testing.T, store *ledgerdb.Store, b breakerFuncs, dependency string, cfg budget.BreakerConfig, parked int, outage time.Duration) outageRun {
	t.Helper()
	for range cfg.Threshold {
		_, _, err := b.report(dependency, false)
		require.NoError(t, err)
	}
	start, moved := time.Now(), time.Duration(0)
	now := func() time.Duration { return time.Since(start) + moved } // on the moved clock, since the opening
	at := func(rowTime time.Time) time.Duration { return rowTime.Sub(start) + moved }

	wakes := make([]time.Duration, parked)
	for i := range wakes {
		gate, err := b.gate(dependency)
		require.NoError(t, err)
		require.Equal(t, budget.BreakerOpen, gate.State, "call %d", i)
		wakes[i] = at(gate.RetryAt)
	}
	var run outageRun
	for {
		i := slices.Index(wakes, slices.Min(wakes))
		if wakes[i] >= outage {
			return run
		}
		if d := wakes[i] - now(); d > 0 {
			skip(t, store, dependency, d)
			moved += d
		}
		run.wakes++
		gate, err := b.gate(dependency)
		require.NoError(t, err)
		switch gate.State {
		case ledgerdb.BreakerProbe:
			run.probes = append(run.probes, now())
			state, back, err := b.report(dependency, true)
			require.NoError(t, err)
			require.Equal(t, budget.BreakerOpen, state, "the failed probe opens it again")
			wakes[i] = at(back)
		case budget.BreakerOpen:
			wakes[i] = at(gate.RetryAt)
		default:
			require.Failf(t, "the breaker closed during the outage", "at %v: %s", now(), gate.State)
		}
		require.Less(t, run.wakes, 100_000, "the simulation does not end")
	}
}

// A ten-minute outage is probed no more often than the policy says
// (budget.BreakerConfig.OutageProbes: 18 probes for DefaultBreaker, one
// per cooldown for the first 35 s, then 10 s, 20 s, 40 s and a minute
// apart), where the functions before migration 00020 probed it every
// cooldown: 119 times. The calls parked behind the breaker wake about
// once per probe, not once per cooldown.
func TestLongOutageIsProbedLessOften(t *testing.T) {
	t.Parallel()
	const outage, parked = 10 * time.Minute, 3
	cfg := budget.DefaultBreaker
	store := ledgertest.NewStore(t)

	bound := cfg.OutageProbes(outage)
	require.Len(t, bound, 18, "the bound stated in budget.DefaultBreaker's doc")
	after := simulateOutage(t, store, currentBreaker(store, cfg), "crm", cfg, parked, outage)
	assert.LessOrEqual(t, len(after.probes), len(bound), "probes sent in a %v outage", outage)
	require.Len(t, after.probes, len(bound), "the simulation probes as soon as the breaker lets it")
	for i, want := range bound {
		// The real time the statements take adds to the moved clock, and
		// adds up: under a loaded suite 18 probes drifted 1.4 s behind
		// the policy. So each probe is held to its gap after the one
		// before, where the drift does not add up.
		var prevWant, prevGot time.Duration
		if i > 0 {
			prevWant, prevGot = bound[i-1], after.probes[i-1]
		}
		assert.InDelta(t, (want - prevWant).Seconds(), (after.probes[i] - prevGot).Seconds(), 1,
			"probe %d at %v, %v after the one before; the policy says %v, %v after", i+1, after.probes[i], after.probes[i]-prevGot, want, want-prevWant)
	}
	assert.LessOrEqual(t, after.wakes, parked*(len(bound)+1), "parked calls wake once per probe interval")

	steady := cfg
	steady.MaxCooldown = cfg.Cooldown
	before := simulateOutage(t, store, breakerBefore(store, cfg), "cms", cfg, parked, outage)
	// The real time of some 1,000 statements adds to the moved clock: the
	// last probe of 119 may fall past the ten minutes.
	assert.InDelta(t, len(steady.OutageProbes(outage)), len(before.probes), 2, "00018's functions probed once per cooldown")
	assert.Less(t, len(after.probes)*6, len(before.probes))
	t.Logf("a %v outage, %d calls parked: %d probes before migration 00020 (one per cooldown: %d), %d after (the bound, budget.DefaultBreaker.OutageProbes: %d); the parked calls woke %d times before, %d after",
		outage, parked, len(before.probes), len(steady.OutageProbes(outage)), len(after.probes), len(bound), before.wakes, after.wakes)
}

// A probe that succeeds closes the breaker, and the next outage is probed
// a cooldown after it opens again, whatever the last one had grown to;
// an outage that a worker of an older build closed starts again at the
// cooldown too. The release rate learned before still spaces the parked
// calls' slots (migration 00018).
func TestProbeSuccessResetsTheProbeInterval(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg := budget.DefaultBreaker
	store := ledgertest.NewStore(t)

	grow := func(dependency string, b breakerFuncs) {
		t.Helper()
		run := simulateOutage(t, store, b, dependency, cfg, 1, 2*time.Minute)
		require.Len(t, run.probes, len(cfg.OutageProbes(2*time.Minute)))
		gate, err := store.BreakerGate(ctx, dependency, cfg)
		require.NoError(t, err)
		require.Equal(t, budget.BreakerOpen, gate.State)
		require.Greater(t, time.Until(gate.RetryAt), 10*cfg.Cooldown, "a two-minute outage is probed a minute apart")
		skip(t, store, dependency, time.Until(gate.RetryAt))
		state, err := stateOf(store.BreakerGate(ctx, dependency, cfg))
		require.NoError(t, err)
		require.Equal(t, ledgerdb.BreakerProbe, state)
	}
	reopen := func(dependency string) {
		t.Helper()
		opened := time.Now()
		for range cfg.Threshold {
			_, err := store.BreakerReport(ctx, dependency, false, false, cfg)
			require.NoError(t, err)
		}
		gate, err := store.BreakerGate(ctx, dependency, cfg)
		require.NoError(t, err)
		require.Equal(t, budget.BreakerOpen, gate.State)
		assert.WithinDuration(t, opened.Add(cfg.Cooldown), gate.RetryAt, 500*time.Millisecond, "the next outage's first probe is a cooldown away")
		skip(t, store, dependency, time.Until(gate.RetryAt))
		state, err := stateOf(store.BreakerGate(ctx, dependency, cfg))
		require.NoError(t, err)
		require.Equal(t, ledgerdb.BreakerProbe, state)
		failed := time.Now()
		report, err := store.BreakerReport(ctx, dependency, false, true, cfg)
		require.NoError(t, err)
		require.Equal(t, budget.BreakerOpen, report.State)
		assert.WithinDuration(t, failed.Add(cfg.Cooldown), report.RetryAt, 500*time.Millisecond, "and so is the one after its first failed probe")
	}

	grow("crm", currentBreaker(store, cfg))
	report, err := store.BreakerReport(ctx, "crm", true, true, cfg)
	require.NoError(t, err)
	require.Equal(t, budget.BreakerClosed, report.State, "the probe's success closes it")
	reopen("crm")

	// A worker of an older build closes it with 00018's report, which
	// knows nothing of the count.
	grow("cms", currentBreaker(store, cfg))
	a := cfg.AdaptiveRate()
	var state string
	require.NoError(t, store.Pool().QueryRow(ctx, `SELECT state FROM agentsaga_breaker_report('cms', true, true, 3, 30000, $1, $2, $3, 1000)`,
		a.Start, a.Floor, a.Ceiling).Scan(&state))
	require.Equal(t, budget.BreakerClosed, state)
	reopen("cms")

	// The rate learned while the line was in use still spaces the next
	// outage's release slots: three released successes raise 10 a second
	// by three steps.
	rate := releaseRate(t, store, "crm", cfg)
	require.InDelta(t, a.Start, rate, 1e-9, "nothing learned yet")
	skip(t, store, "crm", time.Hour)
	state, err = stateOf(store.BreakerGate(ctx, "crm", cfg))
	require.NoError(t, err)
	require.Equal(t, ledgerdb.BreakerProbe, state)
	report, err = store.BreakerReport(ctx, "crm", true, true, cfg)
	require.NoError(t, err)
	require.Equal(t, budget.BreakerClosed, report.State)
	for range 5 { // the line is in use for half a second, on a loaded machine too
		_, err = store.BreakerPace(ctx, "crm", cfg, 0)
		require.NoError(t, err)
	}
	_, err = store.BreakerPace(ctx, "crm", cfg, 3)
	require.NoError(t, err)
	learned := a.Start + 3*a.Step
	require.InDelta(t, learned, releaseRate(t, store, "crm", cfg), 1e-9)
	for range cfg.Threshold {
		_, err := store.BreakerReport(ctx, "crm", false, false, cfg)
		require.NoError(t, err)
	}
	var slots []time.Time
	for range 3 {
		gate, err := store.BreakerGate(ctx, "crm", cfg)
		require.NoError(t, err)
		require.Equal(t, budget.BreakerOpen, gate.State)
		slots = append(slots, gate.RetryAt)
	}
	// The failures that opened it again came while the line was in use,
	// and the first halved the rate (00018): the slots are spaced at it.
	cut := learned / 2
	for i := 1; i < len(slots); i++ {
		assert.InDelta(t, 1/cut, slots[i].Sub(slots[i-1]).Seconds(), 1e-3, "slot %d", i)
	}
}

// The SQL interval is the Go policy's, and the functions refuse a backoff
// that could not shape one.
func TestProbeIntervalAgreesWithTheBudget(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := ledgertest.NewStore(t)
	for _, cfg := range []budget.BreakerConfig{
		budget.DefaultBreaker,
		{Threshold: 3, Window: time.Minute, Cooldown: time.Second},
		{Threshold: 3, Window: time.Minute, Cooldown: 3 * time.Second, MaxCooldown: 50 * time.Second, SteadyProbes: 1},
		{Threshold: 3, Window: time.Minute, Cooldown: 5 * time.Second, MaxCooldown: 5 * time.Second},
	} {
		steady, maxCooldown := cfg.ProbeBackoff()
		for failed := range 40 {
			var ms float64
			require.NoError(t, store.Pool().QueryRow(ctx, `SELECT agentsaga_probe_interval($1, $2, $3, $4)`,
				float64(cfg.Cooldown.Milliseconds()), float64(maxCooldown.Milliseconds()), steady, failed).Scan(&ms))
			assert.Equal(t, cfg.ProbeInterval(failed), time.Duration(ms*float64(time.Millisecond)), "%+v after %d failed probes", cfg, failed)
		}
	}
	var ms float64
	require.NoError(t, store.Pool().QueryRow(ctx, `SELECT agentsaga_probe_interval(5000, 60000, 6, 1000000)`).Scan(&ms))
	assert.Equal(t, 60000.0, ms, "a count in the millions stays at the cap")

	for _, args := range [][3]any{{0.0, 60000.0, 6}, {5000.0, 4000.0, 6}, {5000.0, 60000.0, -1}} {
		_, err := store.Pool().Exec(ctx, `SELECT * FROM agentsaga_breaker_gate('crm', $1, 0, 30000, 10, 0.2, 20, $2, $3)`, args[0], args[1], args[2])
		assert.ErrorContains(t, err, "probe backoff", fmt.Sprint(args))
		_, err = store.Pool().Exec(ctx, `SELECT * FROM agentsaga_breaker_report('crm', false, false, 3, 30000, 10, 0.2, 20, 1000, $1, $2, $3)`, args[0], args[1], args[2])
		assert.ErrorContains(t, err, "probe backoff", fmt.Sprint(args))
	}
}

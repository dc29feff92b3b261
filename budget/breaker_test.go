package budget_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/budget"
)

var testBreaker = budget.BreakerConfig{Threshold: 3, Window: 10 * time.Second, Cooldown: 5 * time.Second}

func newTestBreaker(t *testing.T) (*budget.Breaker, *fakeClock) {
	t.Helper()
	clock := newFakeClock()
	b, err := budget.NewBreaker(testBreaker, clock.Now)
	require.NoError(t, err)
	return b, clock
}

func fail(b *budget.Breaker, n int) {
	for range n {
		b.Record(false, false)
	}
}

type allowed struct{ allowed, probe bool }

func allow(b *budget.Breaker) allowed {
	a, p := b.Allow()
	return allowed{a, p}
}

var (
	pass  = allowed{true, false}
	probe = allowed{true, true}
	deny  = allowed{false, false}
)

func TestBreakerOpensAtThreshold(t *testing.T) {
	b, _ := newTestBreaker(t)
	assert.Equal(t, budget.BreakerClosed, b.State())
	fail(b, 2)
	assert.Equal(t, pass, allow(b))
	assert.Equal(t, budget.BreakerClosed, b.State())
	fail(b, 1)
	assert.Equal(t, budget.BreakerOpen, b.State())
	assert.Equal(t, deny, allow(b))
}

// A dependency that flaps is not down: seed 002's search fails two
// requests of every three, for ever, and its breaker stays closed; the
// retry budget deals with it.
func TestBreakerFlappingDependencyIsNotDown(t *testing.T) {
	b, _ := newTestBreaker(t)
	for range 10 {
		fail(b, 2)
		b.Record(true, false)
	}
	assert.Equal(t, budget.BreakerClosed, b.State())
	fail(b, 3) // down: three in a row
	assert.Equal(t, budget.BreakerOpen, b.State())
}

func TestBreakerWindowRestarts(t *testing.T) {
	b, clock := newTestBreaker(t)
	fail(b, 2)
	clock.Advance(10 * time.Second) // the window has passed: those two are forgotten
	fail(b, 2)
	assert.Equal(t, budget.BreakerClosed, b.State())
	clock.Advance(9 * time.Second) // still inside the window the third failure began
	fail(b, 1)
	assert.Equal(t, budget.BreakerOpen, b.State())
}

func TestBreakerProbeSuccessCloses(t *testing.T) {
	b, clock := newTestBreaker(t)
	fail(b, 3)
	clock.Advance(4 * time.Second)
	assert.Equal(t, deny, allow(b), "cooling down")
	clock.Advance(time.Second)
	assert.Equal(t, budget.BreakerHalfOpen, b.State(), "a probe is due")
	assert.Equal(t, probe, allow(b))
	assert.Equal(t, deny, allow(b), "one probe at a time")
	b.Record(true, false) // a straggler from before the breaker opened
	assert.Equal(t, budget.BreakerHalfOpen, b.State(), "only the probe is heard")
	b.Record(true, true)
	assert.Equal(t, budget.BreakerClosed, b.State())
	assert.Equal(t, pass, allow(b))
	fail(b, 2)
	assert.Equal(t, budget.BreakerClosed, b.State(), "closing reset the failure count")
}

func TestBreakerProbeFailureReopensWithFreshCooldown(t *testing.T) {
	b, clock := newTestBreaker(t)
	fail(b, 3)
	clock.Advance(5 * time.Second)
	require.Equal(t, probe, allow(b))
	clock.Advance(2 * time.Second)
	b.Record(false, true)
	assert.Equal(t, budget.BreakerOpen, b.State())
	clock.Advance(4 * time.Second)
	assert.Equal(t, deny, allow(b), "the cooldown restarted at the probe's failure")
	clock.Advance(time.Second)
	assert.Equal(t, probe, allow(b))
}

func TestBreakerLostProbeRearms(t *testing.T) {
	b, clock := newTestBreaker(t)
	fail(b, 3)
	clock.Advance(5 * time.Second)
	require.Equal(t, probe, allow(b)) // and its caller never reports
	clock.Advance(4 * time.Second)
	assert.Equal(t, deny, allow(b), "the probe may still report")
	clock.Advance(time.Second)
	assert.Equal(t, probe, allow(b), "given up on: the next caller probes")
	assert.Equal(t, deny, allow(b))
	b.Record(true, true)
	assert.Equal(t, budget.BreakerClosed, b.State())
}

func TestBreakerIgnoresReportsWhileOpen(t *testing.T) {
	b, clock := newTestBreaker(t)
	fail(b, 3)
	b.Record(true, false)
	b.Record(true, true) // a late probe from an earlier half-open spell
	assert.Equal(t, budget.BreakerOpen, b.State())
	clock.Advance(2 * time.Second)
	fail(b, 10)
	clock.Advance(3 * time.Second)
	assert.Equal(t, probe, allow(b), "failures while open did not extend the cooldown")
}

func TestNewBreakerValidates(t *testing.T) {
	for name, cfg := range map[string]budget.BreakerConfig{
		"zero":           {},
		"no threshold":   {Window: time.Second, Cooldown: time.Second},
		"no window":      {Threshold: 1, Cooldown: time.Second},
		"no cooldown":    {Threshold: 1, Window: time.Second},
		"negative times": {Threshold: 1, Window: -time.Second, Cooldown: time.Second},
	} {
		t.Run(name, func(t *testing.T) {
			b, err := budget.NewBreaker(cfg, nil)
			assert.Nil(t, b)
			assert.ErrorContains(t, err, "circuit breaker")
		})
	}
	b, err := budget.NewBreaker(budget.DefaultBreaker, nil)
	require.NoError(t, err, "the default breaker is valid, with the real clock")
	assert.Equal(t, pass, allow(b))
}

// TestBreakerGrantsExactlyOneProbe races callers on a breaker whose
// cooldown is over: exactly one becomes the probe and nobody else gets
// through, however the scheduler interleaves them.
func TestBreakerGrantsExactlyOneProbe(t *testing.T) {
	for range 20 {
		b, clock := newTestBreaker(t)
		fail(b, 3)
		clock.Advance(testBreaker.Cooldown)

		var probes, passes atomic.Int64
		var wg sync.WaitGroup
		start := make(chan struct{})
		for range 50 {
			wg.Go(func() {
				<-start
				ok, isProbe := b.Allow()
				switch {
				case isProbe:
					probes.Add(1)
				case ok:
					passes.Add(1)
				}
				_ = b.State()
			})
		}
		close(start)
		wg.Wait()
		require.Equal(t, int64(1), probes.Load())
		require.Equal(t, int64(0), passes.Load())
		require.Equal(t, budget.BreakerHalfOpen, b.State())
	}
}

// The probe interval is the cooldown for the first SteadyProbes failed
// probes of an outage, then doubles with each up to MaxCooldown; zero
// fields take the defaults, scaled to the cooldown.
func TestProbeIntervalGrowsToItsCap(t *testing.T) {
	d := budget.DefaultBreaker
	for failed, want := range []time.Duration{5, 5, 5, 5, 5, 5, 5, 10, 20, 40, 60, 60} {
		assert.Equal(t, want*time.Second, d.ProbeInterval(failed), "after %d failed probes", failed)
	}
	assert.Equal(t, time.Minute, d.ProbeInterval(1<<20), "a count in the millions stays at the cap")

	zero := budget.BreakerConfig{Threshold: 3, Window: time.Minute, Cooldown: time.Second}
	steady, maxCooldown := zero.ProbeBackoff()
	assert.Equal(t, budget.DefaultSteadyProbes, steady)
	assert.Equal(t, 12*time.Second, maxCooldown, "twelve cooldowns, as the default's minute is")
	assert.Equal(t, 12*time.Second, zero.ProbeInterval(100))

	flat := d
	flat.MaxCooldown = d.Cooldown
	for failed := range 50 {
		assert.Equal(t, d.Cooldown, flat.ProbeInterval(failed), "a max cooldown of one cooldown never grows")
	}
	for name, cfg := range map[string]budget.BreakerConfig{
		"negative steady probes":     {Threshold: 1, Window: time.Second, Cooldown: time.Second, SteadyProbes: -1},
		"negative max cooldown":      {Threshold: 1, Window: time.Second, Cooldown: time.Second, MaxCooldown: -time.Second},
		"max cooldown under the one": {Threshold: 1, Window: time.Second, Cooldown: 2 * time.Second, MaxCooldown: time.Second},
	} {
		assert.ErrorContains(t, cfg.Validate(), "max cooldown", name)
	}
}

// The bound: an outage of ten minutes from the breaker's opening is probed
// at most 18 times by DefaultBreaker, where one probe per cooldown made 119,
// and an outage of up to 35 s is still probed every cooldown, so that a
// dependency back from it waits at most a cooldown for its probe. Run with
// -v, it prints the figures.
func TestOutageProbesBound(t *testing.T) {
	d := budget.DefaultBreaker
	s := func(secs ...int) []time.Duration {
		var ds []time.Duration
		for _, n := range secs {
			ds = append(ds, time.Duration(n)*time.Second)
		}
		return ds
	}
	after := d.OutageProbes(10 * time.Minute)
	assert.Equal(t, s(5, 10, 15, 20, 25, 30, 35, 45, 65, 105, 165, 225, 285, 345, 405, 465, 525, 585), after)
	flat := d
	flat.MaxCooldown = d.Cooldown
	before := flat.OutageProbes(10 * time.Minute)
	assert.Len(t, before, 119)
	assert.Equal(t, flat.OutageProbes(40*time.Second), d.OutageProbes(40*time.Second), "the first 35 s are probed every cooldown")
	assert.Empty(t, d.OutageProbes(d.Cooldown), "an outage shorter than a cooldown is not probed")
	for _, outage := range []time.Duration{time.Minute, 5 * time.Minute, 10 * time.Minute, time.Hour} {
		t.Logf("an outage of %v from the breaker's opening: %d probes at one per cooldown (before), %d with the backoff (after)",
			outage, len(flat.OutageProbes(outage)), len(d.OutageProbes(outage)))
	}
}

// The in-process breaker follows the same policy: a ten-minute outage,
// met by four callers at once every 100 ms on a fake clock, is probed at
// the times OutageProbes says; the probe that succeeds closes it, and the
// next outage is probed a cooldown after it opens.
func TestBreakerBacksOffWhileTheOutageLasts(t *testing.T) {
	b, clock := newTestBreaker(t)
	cfg := testBreaker
	fail(b, cfg.Threshold)
	opened := clock.Now()
	var probes []time.Duration
	for clock.Now().Sub(opened) < 10*time.Minute {
		var mu sync.Mutex
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				if ok, isProbe := b.Allow(); isProbe {
					mu.Lock()
					probes = append(probes, clock.Now().Sub(opened))
					mu.Unlock()
					b.Record(false, true)
				} else {
					assert.False(t, ok, "an open breaker lets only its probe through")
				}
			})
		}
		wg.Wait()
		clock.Advance(100 * time.Millisecond)
	}
	assert.Equal(t, cfg.OutageProbes(10*time.Minute), probes)

	for b.State() != budget.BreakerHalfOpen {
		clock.Advance(100 * time.Millisecond)
	}
	require.Equal(t, probe, allow(b))
	b.Record(true, true)
	require.Equal(t, budget.BreakerClosed, b.State())
	fail(b, cfg.Threshold)
	clock.Advance(cfg.Cooldown - time.Millisecond)
	assert.Equal(t, deny, allow(b))
	clock.Advance(time.Millisecond)
	assert.Equal(t, probe, allow(b), "the next outage is probed a cooldown after it opens")
	b.Record(false, true)
	clock.Advance(cfg.Cooldown)
	assert.Equal(t, probe, allow(b), "and its first failed probe is followed a cooldown later")
}

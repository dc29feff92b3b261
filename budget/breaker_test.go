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

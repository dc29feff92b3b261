package retrydelay_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/budget"
	"github.com/agentsaga/agentsaga/internal/retrydelay"
)

func TestFullJitterCeiling(t *testing.T) {
	b := budget.Backoff{Base: 500 * time.Millisecond, Cap: 8 * time.Second}
	justUnderOne := func() float64 { return math.Nextafter(1, 0) }
	for _, tc := range []struct {
		retry   int
		ceiling time.Duration
	}{
		{-1, 500 * time.Millisecond}, // treated as the first retry
		{0, 500 * time.Millisecond},
		{1, time.Second},
		{2, 2 * time.Second},
		{4, 8 * time.Second},
		{5, 8 * time.Second},
		{62, 8 * time.Second},
		{63, 8 * time.Second},
		{1 << 40, 8 * time.Second}, // no overflow into a negative ceiling
	} {
		assert.Equal(t, time.Duration(0), retrydelay.FullJitter(b, tc.retry, func() float64 { return 0 }), "retry %d", tc.retry)
		got := retrydelay.FullJitter(b, tc.retry, justUnderOne)
		assert.Less(t, got, tc.ceiling, "retry %d", tc.retry)
		assert.Greater(t, got, tc.ceiling-time.Microsecond, "retry %d", tc.retry)
		assert.Equal(t, tc.ceiling/2, retrydelay.FullJitter(b, tc.retry, func() float64 { return 0.5 }), "retry %d", tc.retry)
	}

	huge := budget.Backoff{Base: time.Duration(math.MaxInt64 / 4), Cap: time.Duration(math.MaxInt64)}
	assert.Less(t, retrydelay.FullJitter(huge, 3, justUnderOne), time.Duration(math.MaxInt64), "rounding never reaches the ceiling")
	assert.Equal(t, time.Duration(0), retrydelay.FullJitter(budget.Backoff{}, 3, nil), "a zero backoff never waits")
	assert.Equal(t, time.Duration(0), retrydelay.FullJitter(b, 0, func() float64 { return -0.5 }), "a bad source is clamped")
}

func TestFullJitterIsUniformBelowTheCeiling(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	b := budget.Backoff{Base: 100 * time.Millisecond, Cap: 2 * time.Second}
	for retry, ceiling := range []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond, 1600 * time.Millisecond, 2 * time.Second, 2 * time.Second} {
		const n = 20_000
		seen := map[time.Duration]bool{}
		var sum float64
		var lowHalf int
		for range n {
			d := retrydelay.FullJitter(b, retry, rng.Float64)
			require.GreaterOrEqual(t, d, time.Duration(0))
			require.Less(t, d, ceiling)
			seen[d] = true
			sum += float64(d)
			if d < ceiling/2 {
				lowHalf++
			}
		}
		assert.Greater(t, len(seen), n*9/10, "retry %d: jitter must not be constant", retry)
		// A uniform draw has mean ceiling/2 (standard error about 0.2% of
		// the ceiling at this n) and puts half its mass below the middle.
		assert.InDelta(t, 0.5, sum/n/float64(ceiling), 0.01, "retry %d: mean", retry)
		assert.InDelta(t, 0.5, float64(lowHalf)/n, 0.02, "retry %d: median", retry)
	}
}

func TestFullJitterNilRandomUsesTheDefaultSource(t *testing.T) {
	b := budget.Backoff{Base: time.Second, Cap: time.Second}
	seen := map[time.Duration]bool{}
	for range 100 {
		d := retrydelay.FullJitter(b, 0, nil)
		require.GreaterOrEqual(t, d, time.Duration(0))
		require.Less(t, d, time.Second)
		seen[d] = true
	}
	assert.Greater(t, len(seen), 1)
}

func TestFit(t *testing.T) {
	const noDeadline = -1
	for name, tc := range map[string]struct {
		jitter, retryAfter, timeLeft time.Duration
		want                         time.Duration
		fits                         bool
	}{
		"jitter fits":                    {2 * time.Second, 0, 10 * time.Second, 2 * time.Second, true},
		"jitter exactly fits":            {2 * time.Second, 0, 2 * time.Second, 2 * time.Second, true},
		"jitter outlives the deadline":   {3 * time.Second, 0, 2 * time.Second, 0, false},
		"retry-after wins over jitter":   {time.Second, 5 * time.Second, 10 * time.Second, 5 * time.Second, true},
		"retry-after outlives deadline":  {time.Second, 5 * time.Second, 4 * time.Second, 0, false},
		"no deadline, jitter":            {time.Hour, 0, noDeadline, time.Hour, true},
		"no deadline, retry-after":       {0, 90 * time.Second, noDeadline, 90 * time.Second, true},
		"deadline now, zero jitter fits": {0, 0, 0, 0, true},
		"deadline now, any wait fails":   {time.Millisecond, 0, 0, 0, false},
	} {
		t.Run(name, func(t *testing.T) {
			got, fits := retrydelay.Fit(tc.jitter, tc.retryAfter, tc.timeLeft)
			assert.Equal(t, tc.want, got)
			assert.Equal(t, tc.fits, fits)
		})
	}
}

func ExampleFullJitter() {
	b := budget.RetryPolicy{}.Backoff() // 0.5 s doubling to 8 s
	rng := rand.New(rand.NewPCG(11, 11))
	for retry := range 6 {
		d := retrydelay.FullJitter(b, retry, rng.Float64)
		fmt.Printf("retry %d: %v (ceiling %v)\n", retry, d.Round(time.Millisecond), min(b.Cap, b.Base<<retry))
	}
	// Output:
	// retry 0: 385ms (ceiling 500ms)
	// retry 1: 986ms (ceiling 1s)
	// retry 2: 1.299s (ceiling 2s)
	// retry 3: 716ms (ceiling 4s)
	// retry 4: 2.487s (ceiling 8s)
	// retry 5: 7.273s (ceiling 8s)
}

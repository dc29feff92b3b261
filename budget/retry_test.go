package budget_test

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/budget"
)

func TestRetryPolicyWithDefaults(t *testing.T) {
	assert.Equal(t, budget.RetryPolicy{
		MaxAttempts: 3, ToolRetryCap: 10, Ratio: 0.2, Floor: 10, BackoffBaseSeconds: 0.5, BackoffCapSeconds: 8,
	}, budget.RetryPolicy{}.WithDefaults())

	written := budget.RetryPolicy{MaxAttempts: 5, Floor: 4, BackoffCapSeconds: 2}
	assert.Equal(t, budget.RetryPolicy{
		MaxAttempts: 5, ToolRetryCap: 10, Ratio: 0.2, Floor: 4, BackoffBaseSeconds: 0.5, BackoffCapSeconds: 2,
	}, written.WithDefaults(), "written fields are kept")
}

func TestRetryPolicyJSONRoundTrip(t *testing.T) {
	var p budget.RetryPolicy
	require.NoError(t, json.Unmarshal([]byte(`{"ratio": 0.1, "tool_retry_caps": {"search": 2}}`), &p))
	assert.Equal(t, budget.RetryPolicy{Ratio: 0.1, ToolRetryCaps: map[string]int{"search": 2}}, p)
	out, err := json.Marshal(p)
	require.NoError(t, err)
	assert.JSONEq(t, `{"ratio": 0.1, "tool_retry_caps": {"search": 2}}`, string(out))
}

func TestRetryPolicyValidate(t *testing.T) {
	for name, tc := range map[string]struct {
		policy  budget.RetryPolicy
		wantErr string
	}{
		"negative ratio":        {budget.RetryPolicy{Ratio: -0.1}, "retry.ratio: -0.1 is negative"},
		"NaN ratio":             {budget.RetryPolicy{Ratio: math.NaN()}, "retry.ratio: NaN is not a finite number"},
		"negative floor":        {budget.RetryPolicy{Floor: -1}, "retry.floor: -1 is negative"},
		"negative attempts":     {budget.RetryPolicy{MaxAttempts: -2}, "retry.max_attempts: -2 is negative"},
		"negative tool cap":     {budget.RetryPolicy{ToolRetryCap: -1}, "retry.tool_retry_cap: -1 is negative"},
		"negative per-tool cap": {budget.RetryPolicy{ToolRetryCaps: map[string]int{"ok": 1, "search": -3}}, `retry.tool_retry_caps["search"]: -3 is negative`},
		"negative base":         {budget.RetryPolicy{BackoffBaseSeconds: -1}, "retry.backoff_base_seconds: -1 is negative"},
		"infinite cap":          {budget.RetryPolicy{BackoffCapSeconds: math.Inf(1)}, "retry.backoff_cap_seconds: +Inf is not a finite number"},
		"base above cap":        {budget.RetryPolicy{BackoffBaseSeconds: 4, BackoffCapSeconds: 2}, "retry.backoff_base_seconds: 4 is more than backoff_cap_seconds 2"},
		"base above default":    {budget.RetryPolicy{BackoffBaseSeconds: 10}, "retry.backoff_base_seconds: 10 is more than backoff_cap_seconds 8"},
	} {
		t.Run(name, func(t *testing.T) {
			assert.EqualError(t, tc.policy.Validate(), tc.wantErr)
		})
	}
	assert.NoError(t, budget.RetryPolicy{}.Validate())
	assert.NoError(t, budget.DefaultRetryPolicy().Validate())
	assert.NoError(t, budget.RetryPolicy{ToolRetryCaps: map[string]int{"charge": 0}}.Validate(), "0 means never retry that tool")
}

func TestRetryPolicyToolCap(t *testing.T) {
	p := budget.RetryPolicy{ToolRetryCaps: map[string]int{"search": 2, "charge": 0}}
	assert.Equal(t, 2, p.ToolCap("search"))
	assert.Equal(t, 0, p.ToolCap("charge"), "a listed 0 is a cap of 0, not the default")
	assert.Equal(t, 10, p.ToolCap("lookup"), "unlisted tools get the default cap")
	assert.Equal(t, 4, budget.RetryPolicy{ToolRetryCap: 4}.ToolCap("lookup"))
}

func TestRetryPolicyRunAllowance(t *testing.T) {
	p := budget.RetryPolicy{}
	for _, tc := range []struct {
		calls int
		want  float64
	}{{0, 10}, {1, 10}, {50, 10}, {51, 10.2}, {100, 20}} {
		assert.InDelta(t, tc.want, p.RunAllowance(tc.calls), 1e-9, "calls %d", tc.calls)
	}
	assert.InDelta(t, 5.0, budget.RetryPolicy{Ratio: 0.5, Floor: 1}.RunAllowance(10), 1e-9)
}

// TestRunAllowanceBoundsAmplification plays the worst case, every call
// failing and retried while retries < allowance, and checks the documented
// bound: retries <= Ratio*calls + Floor.
func TestRunAllowanceBoundsAmplification(t *testing.T) {
	for _, p := range []budget.RetryPolicy{{}, {Ratio: 0.5, Floor: 1}, {Ratio: 1, Floor: 7}, {Ratio: 0.05, Floor: 2}} {
		d := p.WithDefaults()
		retries := 0
		for calls := 1; calls <= 1000; calls++ {
			for float64(retries) < p.RunAllowance(calls) { // each call fails and retries while allowed
				retries++
			}
			bound := d.Ratio*float64(calls) + float64(d.Floor)
			require.LessOrEqual(t, float64(retries), bound, "policy %+v after %d calls", d, calls)
		}
	}
}

func TestRetryPolicyBackoff(t *testing.T) {
	assert.Equal(t, budget.Backoff{Base: 500 * time.Millisecond, Cap: 8 * time.Second}, budget.RetryPolicy{}.Backoff())
	assert.Equal(t, budget.Backoff{Base: 250 * time.Millisecond, Cap: 30 * time.Second},
		budget.RetryPolicy{BackoffBaseSeconds: 0.25, BackoffCapSeconds: 30}.Backoff())
}

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
		assert.Equal(t, time.Duration(0), b.FullJitter(tc.retry, func() float64 { return 0 }), "retry %d", tc.retry)
		got := b.FullJitter(tc.retry, justUnderOne)
		assert.Less(t, got, tc.ceiling, "retry %d", tc.retry)
		assert.Greater(t, got, tc.ceiling-time.Microsecond, "retry %d", tc.retry)
		assert.Equal(t, tc.ceiling/2, b.FullJitter(tc.retry, func() float64 { return 0.5 }), "retry %d", tc.retry)
	}

	huge := budget.Backoff{Base: time.Duration(math.MaxInt64 / 4), Cap: time.Duration(math.MaxInt64)}
	assert.Less(t, huge.FullJitter(3, justUnderOne), time.Duration(math.MaxInt64), "rounding never reaches the ceiling")
	assert.Equal(t, time.Duration(0), budget.Backoff{}.FullJitter(3, nil), "a zero backoff never waits")
	assert.Equal(t, time.Duration(0), b.FullJitter(0, func() float64 { return -0.5 }), "a bad source is clamped")
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
			d := b.FullJitter(retry, rng.Float64)
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
		d := b.FullJitter(0, nil)
		require.GreaterOrEqual(t, d, time.Duration(0))
		require.Less(t, d, time.Second)
		seen[d] = true
	}
	assert.Greater(t, len(seen), 1)
}

func TestRetryDelay(t *testing.T) {
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
			got, fits := budget.RetryDelay(tc.jitter, tc.retryAfter, tc.timeLeft)
			assert.Equal(t, tc.want, got)
			assert.Equal(t, tc.fits, fits)
		})
	}
}

func ExampleBackoff_FullJitter() {
	b := budget.RetryPolicy{}.Backoff() // 0.5 s doubling to 8 s
	rng := rand.New(rand.NewPCG(11, 11))
	for retry := range 6 {
		d := b.FullJitter(retry, rng.Float64)
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

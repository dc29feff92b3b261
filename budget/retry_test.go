package budget_test

import (
	"encoding/json"
	"math"
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
	assert.NoError(t, budget.RetryPolicy{}.WithDefaults().Validate())
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

package budget_test

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/budget"
)

func TestLimitsRejectZeroNegativeAndUnknown(t *testing.T) {
	for _, tc := range []struct{ in, wantErr string }{
		{`{"steps": 0}`, "budget.steps: 0 is not a budget"},
		{`{"steps": 5, "tokens": -1}`, "budget.tokens: -1"},
		{`{"steps": 5, "usd": 0}`, "budget.usd: 0"},
		{`{"steps": 5, "dollars": 2}`, `unknown field "dollars"`},
	} {
		var l budget.Limits
		err := json.Unmarshal([]byte(tc.in), &l)
		require.Error(t, err, tc.in)
		assert.Contains(t, err.Error(), tc.wantErr)
	}
	var l budget.Limits
	require.NoError(t, json.Unmarshal([]byte(`{"steps": 5, "tokens": 1000}`), &l))
	assert.Equal(t, budget.Limits{Steps: 5, Tokens: 1000}, l)
	assert.ErrorContains(t, budget.Limits{}.Validate(), "budget.steps")
}

func TestExhausted(t *testing.T) {
	l := budget.Limits{Steps: 3, Tokens: 100}
	assert.Equal(t, "", l.Exhausted(budget.Usage{Steps: 2, Tokens: 99}))
	assert.Equal(t, "steps", l.Exhausted(budget.Usage{Steps: 3}))
	assert.Equal(t, "tokens", l.Exhausted(budget.Usage{Steps: 1, Tokens: 100}))
	assert.Equal(t, "", budget.Limits{Steps: 3}.Exhausted(budget.Usage{Steps: 1, Tokens: 1e9, USD: 1e9}), "zero means no limit")
}

func TestClassifyStatus(t *testing.T) {
	yes, no := true, false
	for status, want := range map[int]budget.Class{
		400: budget.NonRetryable, 401: budget.NonRetryable, 403: budget.NonRetryable, 404: budget.NonRetryable,
		422: budget.NonRetryable,
		// 409: a request with the same idempotency key is in progress
		// (Stripe's meaning); another attempt finds it finished (ARCHITECTURE.md decision 2).
		408: budget.Retryable, 409: budget.Retryable, 425: budget.Retryable, 429: budget.Retryable,
		500: budget.Retryable, 502: budget.Retryable, 503: budget.Retryable, 504: budget.Retryable,
	} {
		assert.Equal(t, want, budget.ClassifyStatus(status, nil), "status %d", status)
	}
	assert.Equal(t, budget.NonRetryable, budget.ClassifyStatus(503, &no), "x-should-retry: false wins")
	assert.Equal(t, budget.Retryable, budget.ClassifyStatus(400, &yes), "x-should-retry: true wins")
}

func ExampleLimits_Exhausted() {
	limits := budget.Limits{Steps: 10, Tokens: 5000}
	fmt.Printf("%q\n", limits.Exhausted(budget.Usage{Steps: 4, Tokens: 5200}))
	// Output: "tokens"
}

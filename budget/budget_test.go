package budget_test

import (
	"encoding/json"
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

func TestRetryableStatus(t *testing.T) {
	yes, no := true, false
	for status, want := range map[int]bool{
		400: false, 401: false, 403: false, 404: false,
		422: false,
		// 409: a request with the same idempotency key is in progress
		// (Stripe's meaning); another attempt finds it finished (ARCHITECTURE.md decision 2).
		408: true, 409: true, 425: true, 429: true,
		500: true, 502: true, 503: true, 504: true,
	} {
		assert.Equal(t, want, budget.RetryableStatus(status, nil), "status %d", status)
	}
	assert.Equal(t, false, budget.RetryableStatus(503, &no), "x-should-retry: false wins")
	assert.Equal(t, true, budget.RetryableStatus(400, &yes), "x-should-retry: true wins")
}

package budget_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/budget"
)

// The default table prices the built-in providers' models by genai-prices'
// rules: exact names, dated snapshots and families; a model it does not
// know, or another provider's, has no default price.
func TestDefaultPricesFromGenAIPrices(t *testing.T) {
	assert.Contains(t, budget.DefaultPricesSource(), "genai-prices")
	for _, tc := range []struct {
		provider, model string
		in, out, cached float64
	}{
		{"openai", "gpt-4o-mini", 0.15, 0.6, 0.075},
		{"openai", "gpt-4o", 2.5, 10, 1.25},
		{"anthropic", "claude-sonnet-4-5", 3, 15, 0.3},
	} {
		price, ok := budget.DefaultModelPrice(tc.provider, tc.model)
		require.True(t, ok, "%s %s", tc.provider, tc.model)
		assert.Equal(t, budget.ModelPrice{InputPerMillion: tc.in, OutputPerMillion: tc.out, CachedInputPerMillion: tc.cached}, price, tc.model)
	}
	for _, tc := range []struct{ provider, model string }{{"openai", "no-such-model"}, {"ollama", "gpt-4o"}, {"openai", ""}} {
		_, ok := budget.DefaultModelPrice(tc.provider, tc.model)
		assert.False(t, ok, "%s %q", tc.provider, tc.model)
	}
}

// Input read from the provider's cache is billed at the cached price,
// where there is one, and at the input price where there is none.
func TestCachedInputIsPricedAtTheCachedRate(t *testing.T) {
	price := budget.ModelPrice{InputPerMillion: 3, OutputPerMillion: 15, CachedInputPerMillion: 0.3}
	u := agentsagatype.Usage{InputTokens: 1_000_000, OutputTokens: 100_000, CachedInputTokens: 800_000}
	assert.InDelta(t, 0.2*3+0.8*0.3+0.1*15, price.USD(u), 1e-12)
	price.CachedInputPerMillion = 0
	assert.InDelta(t, 3+0.1*15, price.USD(u), 1e-12, "no cached price: the input price")
	u.CachedInputTokens = 5_000_000
	assert.InDelta(t, 3+0.1*15, price.USD(u), 1e-12, "a cached count past the input is the input")
	prices := budget.Prices{Models: map[string]budget.ModelPrice{"m": {InputPerMillion: 1, OutputPerMillion: 2}}}
	assert.InDelta(t, 1+2, prices.ModelUSD("m", agentsagatype.Usage{InputTokens: 1_000_000, OutputTokens: 1_000_000}), 1e-12)
	assert.Zero(t, prices.ModelUSD("unpriced", u))
}

// Input written to the prompt cache costs the cache-write price: the
// table's, or 1.25 times the input price (Anthropic's documented rate)
// without one; reads cost the cached price, the rest the input price.
func TestCacheWritesArePricedAtTheirRate(t *testing.T) {
	u := agentsagatype.Usage{InputTokens: 1_000_000, CachedInputTokens: 600_000, CacheWriteTokens: 300_000, OutputTokens: 0}
	sonnet := budget.ModelPrice{InputPerMillion: 3, OutputPerMillion: 15, CachedInputPerMillion: 0.30}
	// 0.1M plain at 3, 0.6M read at 0.30, 0.3M written at 3.75.
	assert.InDelta(t, 0.3+0.18+1.125, sonnet.USD(u), 1e-9)
	sonnet.CacheWritePerMillion = 6 // a one-hour cache write, 2x input
	assert.InDelta(t, 0.3+0.18+1.8, sonnet.USD(u), 1e-9)
	// Writes are never counted beyond the input that was not read.
	u.CacheWriteTokens = 900_000
	assert.InDelta(t, 0.18+0.4*6, sonnet.USD(u), 1e-9)
}

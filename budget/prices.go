package budget

import (
	"fmt"

	"github.com/agentsaga/agentsaga/agentsagatype"
)

// Prices turn usage into USD: a per-model table for tokens, and a price
// per tool call (a default, plus per-tool overrides) charged for every
// leaf call, since every attempt costs the far side.
type Prices struct {
	Models      map[string]ModelPrice `json:"models,omitempty"`
	ToolCallUSD float64               `json:"tool_call_usd,omitempty"`
	Tools       map[string]float64    `json:"tools,omitempty"`
}

// ModelPrice is a model's price in USD per million tokens.
type ModelPrice struct {
	InputPerMillion  float64 `json:"input_per_million"`
	OutputPerMillion float64 `json:"output_per_million"`
	// CachedInputPerMillion is the price of input tokens the provider
	// read from its prompt cache (0: the input price).
	CachedInputPerMillion float64 `json:"cached_input_per_million,omitempty"`
	// CacheWritePerMillion is the price of input tokens the provider wrote
	// to its prompt cache (0: 1.25 times the input price, Anthropic's
	// documented rate for a five-minute cache write).
	CacheWritePerMillion float64 `json:"cache_write_per_million,omitempty"`
}

// cacheWriteMultiplier is what a cache write costs against plain input
// when the table gives no price of its own: Anthropic's documented rate
// for its default, five-minute cache.
const cacheWriteMultiplier = 1.25

// cacheWritePrice is the price of a million tokens written to the cache.
func (price ModelPrice) cacheWritePrice() float64 {
	if price.CacheWritePerMillion > 0 {
		return price.CacheWritePerMillion
	}
	return price.InputPerMillion * cacheWriteMultiplier
}

// maxPrice bounds every price in the table (USD per million tokens, or
// per tool call): a larger one is a typo, and would turn a turn's cost
// into +Inf.
const maxPrice = 1e9

// Validate rejects a price that is negative, not a number or absurdly
// large, naming the entry.
func (p Prices) Validate() error {
	if !isPrice(p.ToolCallUSD) {
		return fmt.Errorf("prices.tool_call_usd: %v is not a price in [0, %g]", p.ToolCallUSD, maxPrice)
	}
	for model, price := range p.Models {
		if !isPrice(price.InputPerMillion) || !isPrice(price.OutputPerMillion) || !isPrice(price.CachedInputPerMillion) ||
			!isPrice(price.CacheWritePerMillion) {
			return fmt.Errorf("prices.models.%s: a price is not in [0, %g] USD per million tokens", model, maxPrice)
		}
	}
	for tool, usd := range p.Tools {
		if !isPrice(usd) {
			return fmt.Errorf("prices.tools.%s: %v is not a price in [0, %g]", tool, usd, maxPrice)
		}
	}
	return nil
}

func isPrice(usd float64) bool { return usd >= 0 && usd <= maxPrice } // false for NaN

// ModelUSD is what a model call with this usage cost: the input tokens
// read from the provider's cache at the cached price, where the table has
// one. A model missing from the table costs nothing (RunSpec.Resolve
// writes out the default table's prices, and a run charged to an account
// must price every model).
func (p Prices) ModelUSD(model string, u agentsagatype.Usage) float64 {
	return p.Models[model].USD(u)
}

// USD is what a call with this usage costs at price: the input read from
// the cache at the cached price, the input written to it at the
// cache-write price, the rest of the input at the input price.
func (price ModelPrice) USD(u agentsagatype.Usage) float64 {
	cached := min(max(u.CachedInputTokens, 0), u.InputTokens)
	written := min(max(u.CacheWriteTokens, 0), u.InputTokens-cached)
	cachedPrice := price.InputPerMillion
	if price.CachedInputPerMillion > 0 {
		cachedPrice = price.CachedInputPerMillion
	}
	return (float64(u.InputTokens-cached-written)*price.InputPerMillion + float64(cached)*cachedPrice +
		float64(written)*price.cacheWritePrice() + float64(u.OutputTokens)*price.OutputPerMillion) / 1e6
}

// ToolUSD is what leafCalls attempts of tool cost.
func (p Prices) ToolUSD(tool string, leafCalls int) float64 {
	usd, ok := p.Tools[tool]
	if !ok {
		usd = p.ToolCallUSD
	}
	return usd * float64(leafCalls)
}

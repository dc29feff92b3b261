package budget

import "fmt"

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
}

// Validate rejects negative prices, naming the entry.
func (p Prices) Validate() error {
	if p.ToolCallUSD < 0 {
		return fmt.Errorf("prices.tool_call_usd: %v is negative", p.ToolCallUSD)
	}
	for model, price := range p.Models {
		if price.InputPerMillion < 0 || price.OutputPerMillion < 0 {
			return fmt.Errorf("prices.models.%s: a price is negative", model)
		}
	}
	for tool, usd := range p.Tools {
		if usd < 0 {
			return fmt.Errorf("prices.tools.%s: %v is negative", tool, usd)
		}
	}
	return nil
}

// ModelUSD is what a model call with these token counts cost; a model
// missing from the table costs nothing.
func (p Prices) ModelUSD(model string, inputTokens, outputTokens int64) float64 {
	price := p.Models[model]
	return (float64(inputTokens)*price.InputPerMillion + float64(outputTokens)*price.OutputPerMillion) / 1e6
}

// ToolUSD is what leafCalls attempts of tool cost.
func (p Prices) ToolUSD(tool string, leafCalls int) float64 {
	usd, ok := p.Tools[tool]
	if !ok {
		usd = p.ToolCallUSD
	}
	return usd * float64(leafCalls)
}

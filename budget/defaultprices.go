package budget

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"sync"
)

// The default price table (issue 31): what the built-in providers'
// models cost, taken from Pydantic's genai-prices data, so that a model
// the spec does not price is not free. RunSpec.Resolve writes a model's
// default price into the spec's prices at the start, so a run keeps the
// price it started with through deploys; the spec's own prices win.

//go:embed defaultprices.json
var defaultPricesJSON []byte

// defaultPrices is the table, read once.
var defaultPrices = sync.OnceValues(func() (priceTable, error) {
	var t priceTable
	if err := json.Unmarshal(defaultPricesJSON, &t); err != nil {
		return priceTable{}, fmt.Errorf("budget: the default price table: %w", err)
	}
	return t, nil
})

type priceTable struct {
	Source    string                   `json:"source"`
	Providers map[string][]pricedModel `json:"providers"`
}

type pricedModel struct {
	ID     string     `json:"id"`
	Match  priceMatch `json:"match"`
	Input  float64    `json:"input_mtok"`
	Output float64    `json:"output_mtok"`
	Cached float64    `json:"cache_read_mtok"`
}

// priceMatch is genai-prices' rule for the model names a price applies to.
type priceMatch struct {
	Equals     string       `json:"equals,omitempty"`
	StartsWith string       `json:"starts_with,omitempty"`
	EndsWith   string       `json:"ends_with,omitempty"`
	Contains   string       `json:"contains,omitempty"`
	Regex      string       `json:"regex,omitempty"`
	Or         []priceMatch `json:"or,omitempty"`
	And        []priceMatch `json:"and,omitempty"`
}

func (m priceMatch) matches(name string) bool {
	switch {
	case m.Equals != "":
		return name == m.Equals
	case m.StartsWith != "":
		return strings.HasPrefix(name, m.StartsWith)
	case m.EndsWith != "":
		return strings.HasSuffix(name, m.EndsWith)
	case m.Contains != "":
		return strings.Contains(name, m.Contains)
	case m.Regex != "":
		re, err := regexp.Compile(m.Regex)
		return err == nil && re.MatchString(name)
	case len(m.Or) > 0:
		for _, o := range m.Or {
			if o.matches(name) {
				return true
			}
		}
		return false
	case len(m.And) > 0:
		for _, a := range m.And {
			if !a.matches(name) {
				return false
			}
		}
		return true
	}
	return false
}

// DefaultModelPrice is the default table's price of provider's model
// (the first entry whose rule matches its name, as genai-prices reads
// it), and whether the table has one.
func DefaultModelPrice(provider, model string) (ModelPrice, bool) {
	table, err := defaultPrices()
	if err != nil || model == "" {
		return ModelPrice{}, false
	}
	for _, m := range table.Providers[provider] {
		if m.Match.matches(model) {
			return ModelPrice{InputPerMillion: m.Input, OutputPerMillion: m.Output, CachedInputPerMillion: m.Cached}, true
		}
	}
	return ModelPrice{}, false
}

// DefaultPricesSource says where the default price table came from, and
// when it was taken.
func DefaultPricesSource() string {
	table, err := defaultPrices()
	if err != nil {
		return err.Error()
	}
	return table.Source
}

package workflows_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/workflows"
)

const validSpec = `
goal: g
budget: {steps: 3}
model: {provider: openai, name: gpt-4o-mini, base_url: "http://127.0.0.1:11434/v1"}
tools:
  - {name: search, kind: http, url: "http://127.0.0.1:9/search"}
`

func TestParseSpecRejectsBadInputByName(t *testing.T) {
	for name, tc := range map[string]struct{ spec, want string }{
		"unknown top-level field": {"goal: g\nbudgett: {steps: 3}\nmodel: {provider: scripted, script: [{content: x}]}", `unknown field "budgett"`},
		"unknown tool field":      {"goal: g\nbudget: {steps: 3}\nmodel: {provider: scripted, script: [{content: x}]}\ntools: [{name: a, kind: go, urll: x}]", `unknown field "urll"`},
		"tool with no url":        {"goal: g\nbudget: {steps: 3}\nmodel: {provider: scripted, script: [{content: x}]}\ntools: [{name: search, kind: http}]", "tools[0]: tool search: an http tool needs a url"},
		"relative url":            {"goal: g\nbudget: {steps: 3}\nmodel: {provider: scripted, script: [{content: x}]}\ntools: [{name: s, kind: http, url: /x}]", "is not an absolute http(s) URL"},
		"bad schema":              {"goal: g\nbudget: {steps: 3}\nmodel: {provider: scripted, script: [{content: x}]}\ntools: [{name: s, kind: go, parameters: {type: 7}}]", "not a valid JSON schema"},
		"duplicate tool":          {"goal: g\nbudget: {steps: 3}\nmodel: {provider: scripted, script: [{content: x}]}\ntools: [{name: s, kind: go}, {name: s, kind: go}]", `"s" is declared twice`},
		"zero steps":              {"goal: g\nbudget: {steps: 0}\nmodel: {provider: scripted, script: [{content: x}]}", "budget.steps: 0 is not a budget"},
		"negative usd":            {"goal: g\nbudget: {steps: 3, usd: -1}\nmodel: {provider: scripted, script: [{content: x}]}", "budget.usd: -1"},
		"missing budget":          {"goal: g\nmodel: {provider: scripted, script: [{content: x}]}", "budget.steps: 0; a run needs a positive step cap"},
		"unknown provider":        {"goal: g\nbudget: {steps: 3}\nmodel: {provider: palm}", `model.provider: unknown provider "palm"`},
		"openai without name":     {"goal: g\nbudget: {steps: 3}\nmodel: {provider: openai}", "model.name"},
		"empty script":            {"goal: g\nbudget: {steps: 3}\nmodel: {provider: scripted}", "model.script"},
		"missing goal":            {"budget: {steps: 3}\nmodel: {provider: scripted, script: [{content: x}]}", "goal: missing"},
		"not yaml":                {"goal: [unclosed", "not valid YAML"},
		"finish_at of 1":          {"goal: g\nbudget: {steps: 3}\nfinish_at: 1\nmodel: {provider: scripted, script: [{content: x}]}", "finish_at: 1 is outside (0, 1)"},
		"negative ratio":          {"goal: g\nbudget: {steps: 3}\nretry: {ratio: -0.5}\nmodel: {provider: scripted, script: [{content: x}]}", "retry.ratio: -0.5 is negative"},
		"refusal rule bad regexp": {"goal: g\nbudget: {steps: 3}\nmodel: {provider: scripted, script: [{content: x}]}\ntools: [{name: pay, kind: go, refusal: [{pattern: \"(\"}]}]", "refusal[0]: pattern"},
		"negative price":          {"goal: g\nbudget: {steps: 3}\nprices: {tool_call_usd: -1}\nmodel: {provider: scripted, script: [{content: x}]}", "prices.tool_call_usd: -1 is not a price in [0, 1e+09]"},
		"api key in spec":         {"goal: g\nbudget: {steps: 3}\nmodel: {provider: openai, name: m, api_key: sk-123}", `unknown field "api_key"`},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := workflows.ParseSpec([]byte(tc.spec))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
	_, err := workflows.ParseSpec([]byte(validSpec))
	require.NoError(t, err)
}

func ExampleParseSpec() {
	spec, err := workflows.ParseSpec([]byte(`
goal: Summarise the refund policy
budget: {steps: 8, tokens: 20000}
model: {provider: openai, name: llama3.1, base_url: "http://localhost:11434/v1"}
tools:
  - name: search
    kind: http
    url: http://localhost:8080/search
    parameters: {type: object, properties: {q: {type: string}}, required: [q]}
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(spec.Model.Name, spec.Budget.Steps, spec.Tools[0].Name)
	_, err = workflows.ParseSpec([]byte("goal: g\nbudget: {steps: -2}\nmodel: {provider: scripted, script: [{content: hi}]}"))
	fmt.Println(err)
	// Output:
	// llama3.1 8 search
	// spec: budget.steps: -2 is not a budget; it must be positive (omit it for no limit)
}

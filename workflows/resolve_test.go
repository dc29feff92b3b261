package workflows_test

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/workflows"
)

func ExampleRunSpec_Resolve() {
	spec, _ := workflows.ParseSpec([]byte(`
goal: add two and three
budget: {steps: 5}
model: {provider: openai, name: gpt-4o-mini}
`))
	resolved, _ := spec.Resolve()
	out, _ := json.Marshal(map[string]any{"version": resolved.Version, "finish_at": resolved.FinishAt,
		"max_attempts": resolved.Retry.MaxAttempts, "context_tokens": resolved.Model.ContextWindow,
		"max_events": resolved.History.MaxEvents, "after_breaker_open_seconds": resolved.Escalate.AfterBreakerOpenSeconds,
		"price": resolved.Prices.Models["gpt-4o-mini"], "escalate": resolved.Escalate})
	fmt.Println(string(out))
	// Output: {"after_breaker_open_seconds":300,"context_tokens":128000,"escalate":{"after_breaker_open_seconds":300,"timeout":"24h0m0s","on_timeout":"abort"},"finish_at":0.2,"max_attempts":3,"max_events":1000,"price":{"input_per_million":0.15,"output_per_million":0.6,"cached_input_per_million":0.075},"version":4}
}

// A resolved spec carries every default, so the run it starts never reads
// one from the code it runs on: what it carries is what it does.
func TestResolvedSpecCarriesItsDefaults(t *testing.T) {
	t.Parallel()
	spec := mustSpec(t, addTwoAndThree(addTool))
	resolved, err := spec.Resolve()
	require.NoError(t, err)
	assert.Equal(t, workflows.SpecVersion, resolved.Version)
	assert.Equal(t, workflows.DefaultSystemPrompt, resolved.System)
	assert.Equal(t, 0.2, resolved.FinishAt)
	assert.Equal(t, 3, resolved.Retry.MaxAttempts)
	assert.Equal(t, 10, resolved.Retry.Floor)
	assert.Equal(t, 5, resolved.CompensationAttempts)
	assert.Equal(t, workflows.OnBudgetKeep, resolved.OnBudgetExhausted)
	assert.Equal(t, 3, resolved.Watchdog.NoProgressTurns)
	assert.Equal(t, 1000, resolved.History.MaxEvents)
	assert.Equal(t, 32000, resolved.Model.ContextWindow)
	again, err := resolved.Resolve()
	require.NoError(t, err)
	assert.Equal(t, resolved, again, "resolving is idempotent")

	// A resolved spec from an older build, whose defaults differ from
	// today's, keeps its own: here a retry floor of 3.
	old := resolved
	old.Retry.Floor = 3
	result, err, _ := runAgent(t, old)
	require.NoError(t, err)
	assert.Equal(t, agentsagatype.RunCompleted, result.Status)
	assert.Equal(t, "2 + 3 = 5", result.Answer)
}

// The workflow trusts a resolved spec: a rule made stricter after the run
// started (here, shown by a spec today's Validate refuses) does not fail
// the run in flight.
func TestResolvedSpecIsNotValidatedAgainInTheWorkflow(t *testing.T) {
	t.Parallel()
	spec := mustSpec(t, `
goal: answer
budget: {steps: 3}
model: {provider: scripted, script: [{content: done}]}
`)
	resolved, err := spec.Resolve()
	require.NoError(t, err)
	resolved.History.MaxEvents = 50 // under today's minimum of 100
	require.Error(t, resolved.Validate(), "today's rules refuse it")
	result, err, _ := runAgent(t, resolved)
	require.NoError(t, err, "the run started under older rules goes on")
	assert.Equal(t, agentsagatype.RunCompleted, result.Status)

	unresolved := spec
	unresolved.History.MaxEvents = 50
	_, err, _ = runAgent(t, unresolved)
	require.Error(t, err, "an unresolved spec is validated in the workflow, as before")
}

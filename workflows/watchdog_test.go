package workflows_test

import (
	"testing"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestWatchdogCatchesThrashAndRepeats(t *testing.T) {
	t.Parallel()
	t.Run("A-B-A-B alternation finishes gracefully", func(t *testing.T) {
		t.Parallel()
		spec := mustSpec(t, `
goal: add things, going back and forth
budget: {steps: 10}
model:
  provider: scripted
  script:
    - tool_calls: [{name: add, arguments: {a: 1, b: 1}}]
    - tool_calls: [{name: add, arguments: {a: 2, b: 2}}]
    - tool_calls: [{name: add, arguments: {a: 1, b: 1}}]
    - tool_calls: [{name: add, arguments: {a: 2, b: 2}}]
    - content: never reached
  script_finish: {content: "PARTIAL ANSWER: 5\nHANDOFF NOTE: I was going in circles."}
`+addTool)
		result, err, _ := runAgent(t, spec)
		require.NoError(t, err)
		assert.Equal(t, agentsagatype.RunPartial, result.Status)
		assert.Contains(t, result.Reason, "alternating between two approaches")
		assert.Contains(t, result.HandoffNote, "I was going in circles.")
		assert.Equal(t, 2, result.Retries.Retries, "the two repeated calls were charged as retries")
		assert.Equal(t, 2, result.Retries.ToolRetries["add"])
		notes := ""
		for _, e := range result.Trace {
			notes += e.Note
		}
		assert.Contains(t, notes, "WATCHDOG: you called add with the same arguments again", "the model was told")
	})
	t.Run("repeated identical call with nothing new escalates", func(t *testing.T) {
		t.Parallel()
		spec := mustSpec(t, `
goal: add, again and again
budget: {steps: 10}
watchdog: {no_progress_turns: 2, on_fire: escalate}
model:
  provider: scripted
  script:
    - tool_calls: [{name: add, arguments: {a: 1, b: 1}}]
    - tool_calls: [{name: add, arguments: {a: 1, b: 1}}]
    - tool_calls: [{name: add, arguments: {a: 1, b: 1}}]
    - content: never reached
`+addTool)
		result, err, _ := runAgentWithAbort(t, spec)
		require.NoError(t, err)
		assert.Equal(t, agentsagatype.RunCompensated, result.Status)
		assert.Contains(t, result.Reason, "The watchdog fired: no progress: 2 turns in a row returned nothing new")
		assert.Equal(t, 2, result.Retries.Retries)
	})
}

package workflows_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/budget"
	"github.com/agentsaga/agentsaga/workflows"
)

// A parent runs two sub-agents in parallel: their allocations come out of
// the parent's remaining budget and never add up to more than it had, and
// the parent's counters are the exact total of its own spending and theirs.
func TestParallelSubAgentsAddUpExactly(t *testing.T) {
	t.Parallel()
	spec := mustSpec(t, `
goal: research two topics with helpers
budget: {steps: 20, leaf_calls: 60, tokens: 50000}
model:
  provider: scripted
  script:
    - tool_calls:
        - {name: researcher, arguments: {task: "topic A"}}
        - {name: researcher, arguments: {task: "topic B"}}
    - content: both topics covered
agents:
  researcher:
    system: You research one topic.
    share: 0.25
    tools: [add]
    model:
      provider: scripted
      script:
        - tool_calls: [{name: add, arguments: {a: 1, b: 2}}]
        - content: found it
tools:
  - {name: researcher, kind: agent, parameters: {type: object, properties: {task: {type: string}}, required: [task]}}
  - {name: add, kind: go}
`)
	result, err, store := runAgent(t, spec)
	require.NoError(t, err)
	assert.Equal(t, agentsagatype.RunCompleted, result.Status)
	assert.Equal(t, "both topics covered", result.Answer)

	ctx := context.Background()
	var childUsage budget.Usage
	var childSteps []int
	for _, id := range []string{"step-001-call-1-researcher", "step-001-call-2-researcher"} {
		child, err := store.GetRun(ctx, workflowID+"/"+id)
		require.NoError(t, err, id)
		assert.Equal(t, workflowID, child.ParentWorkflowID, "the child's ledger rows link to the parent")
		assert.Equal(t, agentsagatype.RunCompleted, child.Status)
		childUsage.Steps += child.StepsUsed
		childUsage.LeafCalls += child.LeafCalls
		childUsage.Tokens += child.TokensUsed
		var childSpec workflows.RunSpec
		require.NoError(t, json.Unmarshal(child.Spec, &childSpec))
		childSteps = append(childSteps, childSpec.Budget.Steps)
		actions, err := store.ListActions(ctx, workflowID+"/"+id)
		require.NoError(t, err)
		require.Len(t, actions, 1)
		assert.Equal(t, workflowID+"/"+id+"/step-001-call-1-add", actions[0].Key, "the child's keys are namespaced under the parent's")
	}
	// 19 steps were left when the turn carved them: 19*0.25 = 4, then (19-4)*0.25 = 3.
	assert.Equal(t, []int{4, 3}, childSteps)
	assert.LessOrEqual(t, childSteps[0]+childSteps[1], 19)

	parent, err := store.GetRun(ctx, workflowID)
	require.NoError(t, err)
	assert.Equal(t, 2+childUsage.Steps, result.Usage.Steps, "parent steps = its own 2 + its children's")
	assert.Equal(t, parent.LeafCalls+childUsage.LeafCalls, result.Usage.LeafCalls, "leaf calls: parent's own rows + children's")
	assert.Equal(t, 2+2*3, result.Usage.LeafCalls)
	assert.Greater(t, childUsage.Tokens, int64(0))
	assert.Equal(t, 2+2+2*3, result.Retries.Calls, "logical calls: 2 model turns and 2 agent calls, plus each child's 2 turns and 1 tool call")
}

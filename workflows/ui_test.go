package workflows_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"

	"github.com/agentsaga/agentsaga/activities"
	"github.com/agentsaga/agentsaga/workflows"
)

// A run upserts its search attributes when its status changes, and its
// progress at most every searchProgressInterval (10 s): each upsert is
// an event and a visibility write on the server. A run whose starter set
// them (agentsaga.Start sets workflows.InitialSearchAttributes) skips its
// first step's, which would set what the start already did; a run started
// without them still gets them at its first step. Here the steps take no
// workflow time, so the second step's progress waits for the end.
func TestSearchAttributesAreUpsertedOnlyWhenTheyChange(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		start temporal.SearchAttributes
		want  []string
	}{
		"set by the starter":     {start: workflows.InitialSearchAttributes(), want: []string{"completed/2/3"}},
		"not set by the starter": {want: []string{"running/0/0", "completed/2/3"}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			box := activities.NewToolbox()
			box.Register("lookup", func(context.Context, activities.ToolInvocation) (string, error) { return "found", nil })
			env, _ := newRunEnv(t, box)
			if tc.start.Size() > 0 {
				require.NoError(t, env.SetTypedSearchAttributesOnStart(tc.start))
			}
			var upserts []string
			env.OnUpsertTypedSearchAttributes(mock.Anything).Run(func(args mock.Arguments) {
				attributes := args.Get(0).(temporal.SearchAttributes)
				status, _ := attributes.GetKeyword(temporal.NewSearchAttributeKeyKeyword("AgentStatus"))
				steps, _ := attributes.GetInt64(temporal.NewSearchAttributeKeyInt64("StepsUsed"))
				leafCalls, _ := attributes.GetInt64(temporal.NewSearchAttributeKeyInt64("LeafCalls"))
				upserts = append(upserts, fmt.Sprintf("%s/%d/%d", status, steps, leafCalls))
			}).Return(nil)
			spec := mustSpec(t, `
goal: look the order up
budget: {steps: 4, seconds: 600}
model:
  provider: scripted
  script:
    - tool_calls: [{name: lookup, arguments: {id: 1}}]
    - content: found it
tools:
  - {name: lookup, kind: go}
`)
			spec.SearchAttributes = true
			env.ExecuteWorkflow(workflows.AgentRun, spec)
			require.True(t, env.IsWorkflowCompleted())
			require.NoError(t, env.GetWorkflowError())
			assert.Equal(t, tc.want, upserts, "status/steps used/leaf calls (model turns and tool calls) of each upsert, in order")
		})
	}
}

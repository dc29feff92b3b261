package agentsagatest_test

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga"
	"github.com/agentsaga/agentsaga/agentsagatest"
)

// A scripted model: it calls a tool, then answers.
func ExampleScript() {
	model := agentsagatest.Script(
		agentsagatest.Call("lookup_customer", map[string]string{"customer": "ann"}),
		agentsagatest.Answer("ann is on the pro plan"),
	)
	out, _ := json.Marshal(model)
	fmt.Println(string(out))
	// Output:
	// {"provider":"scripted","script":[{"tool_calls":[{"name":"lookup_customer","arguments":{"customer":"ann"}}]},{"content":"ann is on the pro plan"}]}
}

// A refusal escalates the run to a human; in the test environment the run
// then waits, and the test can send the resume Update.
func ExampleRefuse() {
	model := agentsagatest.Script(agentsagatest.Refuse("I need a human's go-ahead"), agentsagatest.Answer("done"))
	fmt.Println(model.Script[0].Refusal)
	// Output:
	// I need a human's go-ahead
}

// Two tests, or two runs of one test binary, never share a workflow ID,
// and so never share idempotency keys or ledger rows.
func TestEachRunHasItsOwnID(t *testing.T) {
	require.NotEqual(t, agentsagatest.RunID(t), agentsagatest.RunID(t))
	engine, err := agentsaga.New(t.Context(), agentsagatest.NewLedger(t), agentsaga.Config{})
	require.NoError(t, err)
	_, first := agentsagatest.NewEnvironment(t, engine)
	env, second := agentsagatest.NewEnvironment(t, engine)
	require.NotEqual(t, first, second)

	spec, err := agentsaga.RunSpec{Goal: "say hi", Budget: agentsaga.Budget{Steps: 2}, Model: agentsagatest.Script(agentsagatest.Answer("hi"))}.Resolve()
	require.NoError(t, err)
	env.ExecuteWorkflow(agentsaga.AgentRunWorkflow, spec)
	require.NoError(t, env.GetWorkflowError())
	var result agentsaga.RunResult
	require.NoError(t, env.GetWorkflowResult(&result))
	require.Equal(t, "hi", result.Answer)
}

// Run runs a spec to its end in the test environment, in one call.
func TestRunInOneCall(t *testing.T) {
	engine, err := agentsaga.New(t.Context(), agentsagatest.NewLedger(t), agentsaga.Config{})
	require.NoError(t, err)
	result := agentsagatest.Run(t, engine, agentsaga.RunSpec{Goal: "say hi", Budget: agentsaga.Budget{Steps: 2},
		Model: agentsagatest.Script(agentsagatest.Answer("hi"))})
	require.Equal(t, "completed", result.Status, result.Reason)
	require.Equal(t, "hi", result.Answer)
}

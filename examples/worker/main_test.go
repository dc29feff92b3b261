package main

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga"
	"github.com/agentsaga/agentsaga/agentsagatest"
	"github.com/agentsaga/agentsaga/workflows"
)

// runSpec is a run offered the team's tools, with a scripted model.
func runSpec(t *testing.T, h *Helpdesk, turns ...agentsagatest.Turn) agentsaga.RunSpec {
	t.Helper()
	tools, err := h.Tools()
	require.NoError(t, err)
	spec := agentsaga.RunSpec{Goal: "help ann", Budget: agentsaga.Budget{Steps: 5}, Model: agentsagatest.Script(turns...)}
	for _, tool := range tools {
		spec.Tools = append(spec.Tools, tool.Spec())
	}
	spec, err = spec.Resolve()
	require.NoError(t, err)
	return spec
}

func execute(t *testing.T, h *Helpdesk, spec agentsaga.RunSpec) agentsaga.RunResult {
	t.Helper()
	engine, err := NewEngine(context.Background(), agentsagatest.NewLedger(t), nil, h)
	require.NoError(t, err)
	env, _ := agentsagatest.NewEnvironment(t, engine)
	env.ExecuteWorkflow(workflows.AgentRun, spec)
	require.True(t, env.IsWorkflowCompleted())
	var result agentsaga.RunResult
	if err := env.GetWorkflowError(); err != nil {
		var failed *agentsaga.RunFailedError
		require.ErrorAs(t, err, &failed)
		return failed.Result
	}
	require.NoError(t, env.GetWorkflowResult(&result))
	return result
}

func TestTheTeamsToolsRun(t *testing.T) {
	h := NewHelpdesk()
	result := execute(t, h, runSpec(t, h,
		agentsagatest.Call("lookup_customer", LookupArgs{Customer: "ann"}),
		agentsagatest.Call("open_ticket", OpenTicketArgs{Customer: "ann", Subject: "cannot log in"}),
		agentsagatest.Answer("opened T-1 for ann")))
	require.Equal(t, "completed", result.Status, result.Reason)
	require.True(t, h.Open("T-1"))
}

// A run that runs out of steps after opening a ticket, with a spec that
// says to undo, closes it again: the compensation the tool declared.
func TestAFailedRunClosesItsTicket(t *testing.T) {
	h := NewHelpdesk()
	spec := runSpec(t, h,
		agentsagatest.Call("open_ticket", OpenTicketArgs{Customer: "ann", Subject: "cannot log in"}),
		agentsagatest.Call("lookup_customer", LookupArgs{Customer: "ann"}))
	spec.Budget.Steps = 2
	spec.OnBudgetExhausted = workflows.OnBudgetCompensate
	result := execute(t, h, spec)
	require.Equal(t, "compensated", result.Status, result.Reason)
	require.False(t, h.Open("T-1"), "the compensation closed the ticket")
}

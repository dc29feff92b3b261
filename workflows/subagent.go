package workflows

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/agentsaga/agentsaga/budget"
	"github.com/agentsaga/agentsaga/internal/activityid"
	"github.com/agentsaga/agentsaga/internal/runbudget"
)

// defaultShare is the fraction of the parent's remaining budget a
// sub-agent call gets when its AgentSpec does not say.
const defaultShare = 0.25

// childResult reads a finished sub-agent: its result whether it succeeded
// or failed (a failed child has compensated its own actions already).
func childResult(err error, result RunResult) (RunResult, error) {
	if err == nil {
		return result, nil
	}
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) && appErr.Type() == ErrTypeRunFailed && appErr.Details(&result) == nil {
		return result, fmt.Errorf("sub-agent failed: %s", result.Reason)
	}
	return result, err
}

// childOutput is what the parent's model reads from a sub-agent.
func childOutput(child RunResult) string {
	out := fmt.Sprintf("sub-agent %s: %s", child.Status, child.Answer)
	if child.HandoffNote != "" {
		out += "\nhandoff note: " + child.HandoffNote
	}
	return out
}

// startChild starts a sub-agent as a child workflow whose ID extends the
// call's activity ID, so its idempotency keys are namespaced under the
// parent's and its ledger rows link to the parent run.
func (tt *toolTurn) startChild(ctx workflow.Context, activityID string, spec RunSpec) workflow.Future {
	r := tt.r
	ctx = workflow.WithChildOptions(ctx, workflow.ChildWorkflowOptions{
		WorkflowID:    activityid.Key(r.workflowID, activityID), // the child is the call
		StaticSummary: clip("sub-agent: "+spec.Goal, 200),
	})
	return workflow.ExecuteChildWorkflow(ctx, AgentRun, spec)
}

// childSpec builds a sub-agent's run: its budget is granted out of what
// the parent has left after the grants it already handed out
// (runbudget.RunBudget.Grant), so parallel sub-agents never add up to more
// than the parent had; the deadline is the parent's. It returns the spec
// and the limits to reserve once the child starts.
func (tt *toolTurn) childSpec(now time.Time, name, arguments string) (RunSpec, budget.Limits, error) {
	r := tt.r
	agent := r.spec.Agents[name]
	share := agent.Share
	if share == 0 {
		share = defaultShare
	}
	limits, err := r.budget.Grant(now, share)
	if err != nil {
		return RunSpec{}, budget.Limits{}, fmt.Errorf("sub-agent %s: %w", name, err)
	}

	goal := arguments
	var task struct {
		Task string `json:"task"`
	}
	if json.Unmarshal([]byte(arguments), &task) == nil && task.Task != "" {
		goal = task.Task
	}
	child := r.spec
	child.Goal, child.System, child.Budget, child.Agents = goal, agent.System, limits, nil
	if agent.Model != nil {
		child.Model = *agent.Model
	}
	child.Tools = nil
	wanted := map[string]bool{}
	for _, t := range agent.Tools {
		wanted[t] = true
		if tool, _ := r.spec.tool(t); tool.Compensate != nil {
			wanted[tool.Compensate.Tool] = true
		}
	}
	for _, t := range r.spec.Tools {
		// A server entry the sub-agent names stands for the tools it listed.
		if wanted[t.Name] || (t.MCPServer != "" && wanted[t.MCPServer]) {
			child.Tools = append(child.Tools, t)
		}
	}
	return child, limits, nil
}

// absorb adds a finished sub-agent's spending to the parent's counters and
// releases its reservation: the parent's counters are the true total.
func (tt *toolTurn) absorb(reservation runbudget.Reservation, child RunResult) {
	r := tt.r
	r.budget.Release(reservation, child.Usage)
	r.calls.Stats.Calls += child.Retries.Calls
	r.calls.Stats.Retries += child.Retries.Retries
	for tool, n := range child.Retries.ToolRetries {
		r.calls.Stats.ToolRetries[tool] += n
	}
	for denial, n := range child.Retries.Denials {
		r.calls.Stats.Denials[denial] += n
	}
}

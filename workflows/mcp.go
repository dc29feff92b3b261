package workflows

import (
	"fmt"
	"slices"
	"time"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/wire"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
)

// mcpToolsActivityID names the activity that lists the tools of the MCP
// server entry called server, once per run.
func mcpToolsActivityID(server string) string { return "mcp-tools-" + server }

// listMCPTools replaces each MCP server entry of the run's tools with the
// tools the server offers, listed once, at the run's start, by an activity
// whose answer is frozen in history: a replay, and every later execution
// (continue-as-new passes the listed tools on in the spec), offers the
// model the same tools whatever the server offers by then. A sub-agent
// gets its tools from the parent's list. A run without MCP server entries
// schedules nothing here, so its commands are what they were before MCP.
func (r *run) listMCPTools(ctx workflow.Context, spec *RunSpec) error {
	if !slices.ContainsFunc(spec.Tools, agentsagatype.ToolSpec.IsMCPServer) {
		return nil
	}
	backoff := r.spec.Retry.Backoff()
	futures := make([]workflow.Future, len(spec.Tools))
	for i, tool := range spec.Tools {
		if !tool.IsMCPServer() {
			continue
		}
		actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
			ActivityID:          mcpToolsActivityID(tool.Name),
			StartToCloseTimeout: tool.Timeout(),
			Summary:             clip("list the tools of MCP server "+tool.Name, 100),
			RetryPolicy: &temporal.RetryPolicy{
				InitialInterval: max(backoff.Base, time.Millisecond), BackoffCoefficient: 2,
				MaximumInterval: max(backoff.Cap, time.Millisecond), MaximumAttempts: int32(r.spec.Retry.MaxAttempts),
			},
		})
		futures[i] = workflow.ExecuteActivity(actx, r.versions.activity(wire.ActivityListMCPTools), tool)
	}
	var tools []agentsagatype.ToolSpec
	for i, tool := range spec.Tools {
		if futures[i] == nil {
			tools = append(tools, tool)
			continue
		}
		var listed []agentsagatype.ToolSpec
		if err := futures[i].Get(ctx, &listed); err != nil {
			return fmt.Errorf("MCP server %s: could not list its tools: %s", tool.Name, errorText(err))
		}
		tools = append(tools, listed...)
	}
	seen := map[string]bool{}
	for _, tool := range tools {
		if seen[tool.Name] || (tool.MCPServer != "" && tool.Name == wire.ReadResultTool) {
			return fmt.Errorf("MCP server %s offers a tool named %s, like another tool of the run (rename the server entry or use allow)", tool.MCPServer, tool.Name)
		}
		seen[tool.Name] = true
	}
	spec.Tools, r.spec.Tools = tools, tools
	return nil
}

// failAtStart ends a run that could not begin (its MCP tools could not be
// listed): nothing was done, so there is nothing to roll back.
func (r *run) failAtStart(ctx workflow.Context, reason string) (RunResult, error) {
	result := r.end(agentsagatype.RunFailed, "", reason)
	r.showProgress(ctx, result.Status, reason, r.budget.Note(workflow.Now(ctx), nil))
	finishCtx, _ := workflow.NewDisconnectedContext(ctx)
	if err := r.bookkeeping(finishCtx, "run-finish", wire.ActivityRecordRunFinish, wire.RunFinish{
		WorkflowID: r.workflowID, Outcome: agentsagatype.RunOutcome{Status: result.Status, Reason: reason},
	}); err != nil {
		return RunResult{}, err
	}
	return result, temporal.NewNonRetryableApplicationError(reason, ErrTypeRunFailed, nil, result)
}

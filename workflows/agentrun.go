// Package workflows owns the AgentRun workflow: the loop of model turns and
// the tool calls each turn asks for, the explicit activity IDs that make
// every call's idempotency key, and the way a run ends. Workflow code is
// deterministic: no I/O, no wall clock, no global state; everything that
// touches the world is an activity.
package workflows

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/agentsaga/agentsaga/activities"
	"github.com/agentsaga/agentsaga/budget"
	"github.com/agentsaga/agentsaga/ledger"
)

// TaskQueue is where agentsaga workers poll.
const TaskQueue = "agentsaga"

// ErrTypeRunFailed is the error type of a run that ended failed; its
// details hold the RunResult.
const ErrTypeRunFailed = "RunFailed"

// DefaultSystemPrompt is used when the spec sets none.
const DefaultSystemPrompt = "You are an agent working toward the user's goal. Call the tools when they help. " +
	"When you are done, answer in plain text without calling a tool."

// RunResult is how a run ended.
type RunResult struct {
	Status      string       `json:"status"`
	Answer      string       `json:"answer,omitempty"`
	HandoffNote string       `json:"handoff_note,omitempty"`
	Reason      string       `json:"reason,omitempty"`
	Usage       budget.Usage `json:"usage"`
	Trace       []TraceEntry `json:"trace"`
}

// TraceEntry is one model turn or tool call, in the order the run made them.
type TraceEntry struct {
	Step       int    `json:"step"`
	ActivityID string `json:"activity_id,omitempty"`
	Kind       string `json:"kind"` // "model" or "tool"
	Tool       string `json:"tool,omitempty"`
	Arguments  string `json:"arguments,omitempty"`
	Output     string `json:"output,omitempty"`
	Error      string `json:"error,omitempty"`
	Replayed   bool   `json:"replayed,omitempty"`
}

// ModelActivityID names a step's model call.
func ModelActivityID(step int) string { return fmt.Sprintf("step-%03d-model", step) }

// ToolActivityID names the call-th tool call of a step, e.g.
// step-003-call-1-search. With the workflow ID it is the idempotency key.
func ToolActivityID(step, call int, tool string) string {
	return fmt.Sprintf("step-%03d-call-%d-%s", step, call, tool)
}

// activitiesRef lets the workflow name activity methods without a value.
var activitiesRef *activities.Activities

// AgentRun runs one agent: model turn, then the tool calls that turn asked
// for, then their results back to the model, until the model answers or the
// budget is spent.
func AgentRun(ctx workflow.Context, spec RunSpec) (RunResult, error) {
	if err := spec.Validate(); err != nil {
		return RunResult{}, temporal.NewNonRetryableApplicationError("spec: "+err.Error(), "InvalidSpec", nil)
	}
	r := &run{spec: spec, workflowID: workflow.GetInfo(ctx).WorkflowExecution.ID}
	specJSON, err := json.Marshal(spec)
	if err != nil {
		return RunResult{}, err
	}
	bookkeeping := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		ActivityID:          "run-start",
		StartToCloseTimeout: 30 * time.Second,
	})
	if err := workflow.ExecuteActivity(bookkeeping, activitiesRef.RecordRunStart,
		ledger.Run{Goal: spec.Goal, Spec: specJSON}).Get(ctx, nil); err != nil {
		return RunResult{}, err
	}

	result := r.loop(ctx)

	finish := activities.RunFinish{WorkflowID: r.workflowID, Outcome: ledger.RunOutcome{
		Status: result.Status, Answer: result.Answer, HandoffNote: result.HandoffNote, Reason: result.Reason,
		StepsUsed: result.Usage.Steps, TokensUsed: result.Usage.Tokens,
	}}
	bookkeeping = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		ActivityID:          "run-finish",
		StartToCloseTimeout: 30 * time.Second,
	})
	if err := workflow.ExecuteActivity(bookkeeping, activitiesRef.RecordRunFinish, finish).Get(ctx, nil); err != nil {
		return RunResult{}, err
	}
	if result.Status == ledger.RunFailed {
		return result, temporal.NewNonRetryableApplicationError(result.Reason, ErrTypeRunFailed, nil, result)
	}
	return result, nil
}

type run struct {
	spec       RunSpec
	workflowID string
	usage      budget.Usage
	trace      []TraceEntry
	messages   []activities.Message
}

func (r *run) loop(ctx workflow.Context) RunResult {
	system := r.spec.System
	if system == "" {
		system = DefaultSystemPrompt
	}
	r.messages = []activities.Message{{Role: "system", Content: system}, {Role: "user", Content: r.spec.Goal}}
	var defs []activities.ToolDef
	for _, t := range r.spec.Tools {
		defs = append(defs, t.Def())
	}

	lastContent := ""
	for step := 1; ; step++ {
		if dimension := r.spec.Budget.Exhausted(r.usage); dimension != "" {
			return r.partial(lastContent, dimension)
		}
		turn, err := r.modelTurn(ctx, step, defs)
		if err != nil {
			return r.end(ledger.RunFailed, "", fmt.Sprintf("model call at step %d failed: %s", step, errorText(err)))
		}
		if turn.Refusal != "" {
			return r.end(ledger.RunFailed, "", fmt.Sprintf("the model refused at step %d: %s", step, turn.Refusal))
		}
		if len(turn.ToolCalls) == 0 {
			return r.end(ledger.RunCompleted, turn.Content, "the model answered")
		}
		lastContent = turn.Content
		r.messages = append(r.messages, activities.Message{Role: "assistant", Content: turn.Content, ToolCalls: turn.ToolCalls})
		r.toolCalls(ctx, step, turn.ToolCalls)
	}
}

func (r *run) modelTurn(ctx workflow.Context, step int, defs []activities.ToolDef) (activities.ModelTurn, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		ActivityID:          ModelActivityID(step),
		StartToCloseTimeout: 2 * time.Minute,
		RetryPolicy:         r.retryPolicy(),
		Summary:             fmt.Sprintf("model turn %d (%s %s)", step, r.spec.Model.Provider, r.spec.Model.Name),
	})
	var turn activities.ModelTurn
	err := workflow.ExecuteActivity(ctx, activitiesRef.CallModel, activities.ModelCall{
		Model: r.spec.Model, Request: activities.ModelRequest{Messages: r.messages, Tools: defs},
	}).Get(ctx, &turn)
	r.usage.Steps++
	entry := TraceEntry{Step: step, ActivityID: ModelActivityID(step), Kind: "model", Output: turn.Content}
	if err != nil {
		entry.Error = errorText(err)
	}
	if turn.Refusal != "" {
		entry.Error = "refusal: " + turn.Refusal
	}
	for _, c := range turn.ToolCalls {
		entry.Output += fmt.Sprintf("\n-> %s %s", c.Name, c.Arguments)
	}
	r.trace = append(r.trace, entry)
	r.usage.Tokens += turn.Usage.Total()
	return turn, err
}

// toolCalls runs one turn's tool calls in parallel and appends their
// results, in call order, for the model to read. A call the workflow can
// see is malformed (unknown tool, arguments that are not JSON) never
// becomes an activity: the model gets the error instead, and nothing
// reaches the ledger.
func (r *run) toolCalls(ctx workflow.Context, step int, calls []activities.ToolCall) {
	futures := make([]workflow.Future, len(calls))
	entries := make([]TraceEntry, len(calls))
	for i, call := range calls {
		activityID := ToolActivityID(step, i+1, call.Name)
		entries[i] = TraceEntry{Step: step, Kind: "tool", Tool: call.Name, Arguments: call.Arguments}
		tool, ok := r.spec.tool(call.Name)
		if !ok {
			entries[i].Error = fmt.Sprintf("the model asked for unknown tool %q; the tools are: %s", call.Name, r.toolNames())
			continue
		}
		if !json.Valid([]byte(call.Arguments)) {
			entries[i].Error = fmt.Sprintf("the arguments for tool %q are not valid JSON: %s", call.Name, clip(call.Arguments, 200))
			continue
		}
		entries[i].ActivityID = activityID
		actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
			ActivityID:          activityID,
			StartToCloseTimeout: tool.Timeout(),
			RetryPolicy:         r.retryPolicy(),
			Summary:             clip(call.Name+" "+call.Arguments, 100),
		})
		futures[i] = workflow.ExecuteActivity(actx, activitiesRef.CallTool,
			activities.ToolCallRequest{Tool: tool, Arguments: call.Arguments})
	}
	for i, call := range calls {
		if futures[i] != nil {
			var result activities.ToolResult
			if err := futures[i].Get(ctx, &result); err != nil {
				entries[i].Error = errorText(err)
			} else {
				entries[i].Output, entries[i].Replayed = result.Output, result.Replayed
			}
		}
		content := entries[i].Output
		if entries[i].Error != "" {
			content = "error: " + entries[i].Error
		}
		r.messages = append(r.messages, activities.Message{Role: "tool", ToolCallID: call.ID, Name: call.Name, Content: content})
	}
	r.trace = append(r.trace, entries...)
}

func (r *run) retryPolicy() *temporal.RetryPolicy {
	return &temporal.RetryPolicy{
		InitialInterval:    time.Second,
		BackoffCoefficient: 2,
		MaximumInterval:    30 * time.Second,
		MaximumAttempts:    r.spec.maxAttempts(),
	}
}

func (r *run) end(status, answer, reason string) RunResult {
	return RunResult{Status: status, Answer: answer, Reason: reason, Usage: r.usage, Trace: r.trace}
}

// partial ends a run whose budget ran out, with what it has and a note for
// whoever picks it up.
func (r *run) partial(lastContent, dimension string) RunResult {
	result := r.end(ledger.RunPartial, lastContent, fmt.Sprintf("the %s budget is spent", dimension))
	var done, failed []string
	for _, e := range r.trace {
		if e.Kind != "tool" {
			continue
		}
		if e.Error != "" {
			failed = append(failed, fmt.Sprintf("%s (%s)", e.Tool, clip(e.Error, 80)))
		} else {
			done = append(done, e.Tool)
		}
	}
	var note strings.Builder
	fmt.Fprintf(&note, "Stopped after %d model turns because the %s budget is spent (limits: %+v).", r.usage.Steps, dimension, r.spec.Budget)
	fmt.Fprintf(&note, " Tool calls that succeeded: %s.", listOrNone(done))
	fmt.Fprintf(&note, " Tool calls that failed: %s.", listOrNone(failed))
	if lastContent != "" {
		fmt.Fprintf(&note, " The model's last words: %q.", clip(lastContent, 200))
	}
	result.HandoffNote = note.String()
	return result
}

func (r *run) toolNames() string {
	names := make([]string, len(r.spec.Tools))
	for i, t := range r.spec.Tools {
		names[i] = t.Name
	}
	return listOrNone(names)
}

func listOrNone(items []string) string {
	if len(items) == 0 {
		return "none"
	}
	return strings.Join(items, ", ")
}

// errorText is the application error's message when there is one: the
// part that says what went wrong, without the activity wrapper around it.
func errorText(err error) string {
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) {
		return appErr.Error()
	}
	return err.Error()
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

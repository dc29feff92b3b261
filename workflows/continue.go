package workflows

import (
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/runbudget"
)

// Carried is a run's own state, embedded in run: its counters and the
// small state its decisions depend on, and nothing that grows with the run.
// Continue-as-new carries it whole into the next execution (RunSpec.Carried);
// its JSON shape is a replay contract. The conversation and every output
// stay in the ledger; the trace is cut to its tail.
type Carried struct {
	// Step and Seq are the next step and the next message's place: keys
	// and the conversation go on where they were. Pending are the messages
	// the workflow produced that the next model call writes to the ledger.
	Step    int                     `json:"step"`
	Seq     int                     `json:"seq"`
	Pending []agentsagatype.Message `json:"pending,omitempty"`
	// The run's budget: in JSON its start, its limits (with a human's
	// additions) and what it spent; FinishAt comes from the spec.
	*runbudget.RunBudget
	Stats RetryStats `json:"stats"`
	// Open lists the dependencies whose breaker was seen open (a tool's
	// name, "model", or "model <provider:name>"), sorted, and OpenSince
	// since when the outage has lasted, where a refusal said it.
	Open      []string             `json:"open,omitempty"`
	OpenSince map[string]time.Time `json:"open_since,omitempty"`
	// ToolFailures counts failed calls per tool, for escalation, and
	// Escalations the times the run waited on a human.
	ToolFailures map[string]int `json:"tool_failures,omitempty"`
	Escalations  int            `json:"escalations,omitempty"`
	Watchdog     *watchdog      `json:"watchdog"`
	// LastContent is the model's latest text, for a partial answer.
	LastContent string `json:"last_content,omitempty"`
	// ReadBack is set once the model was told outputs were shortened: it
	// is offered read_result from then on.
	ReadBack bool `json:"read_back,omitempty"`
	// Trace holds the last traceTail entries; Traced counts them all.
	Trace  []TraceEntry `json:"trace,omitempty"`
	Traced int          `json:"traced"`
	// Continued counts the executions of this run before this one.
	Continued int `json:"continued"`
	// Approvals are the calls waiting for a human's approval, oldest
	// first (an escalated timeout leaves one open across continue-as-new),
	// and Denied the calls a human denied (sameCall), with the denial, so
	// the model's asking again is refused at once.
	Approvals []*ApprovalWait   `json:"approvals,omitempty"`
	Denied    map[string]string `json:"denied,omitempty"`
	// Waits is what the run's waits took of its wall clock, by cause.
	Waits waitBook `json:"waits,omitzero"`
	// Deadlines is set when the run's first execution took
	// commandsVersion10: its waits for a person have deadlines, reminders
	// and timeout events in every execution. A run begun on older code
	// keeps its older waits when it continues as new on newer code.
	Deadlines bool `json:"deadlines,omitempty"`
}

// historyIsLong says whether the run should continue as new before its next
// turn: Temporal suggests it, or the history passed history.max_events.
// A run waiting on a sub-agent or a human never gets here.
func (r *run) historyIsLong(ctx workflow.Context) bool {
	info := workflow.GetInfo(ctx)
	return info.GetContinueAsNewSuggested() || info.GetCurrentHistoryLength() >= r.spec.History.MaxEvents
}

// carry is the run's state for its next execution.
func (r *run) carry() Carried {
	next := r.Carried
	next.Continued++
	return next
}

// resume takes up the state an earlier execution carried. The budget and
// the watchdog were built from this execution's spec: they take up the
// carried limits, spending and memory, and keep their configuration.
func (r *run) resume(c Carried) {
	runBudget := r.RunBudget
	if c.RunBudget != nil {
		runBudget.Restore(c.Limits, c.Used)
	}
	if c.Watchdog != nil {
		c.Watchdog.noProgressTurns = r.Watchdog.noProgressTurns
	} else {
		c.Watchdog = r.Watchdog
	}
	r.Carried = c
	r.RunBudget = runBudget
	r.Stats.ToolRetries = orEmpty(r.Stats.ToolRetries)
	r.Stats.Denials = orEmpty(r.Stats.Denials)
	r.ToolFailures = orEmpty(r.ToolFailures)
	r.Denied = orEmpty(r.Denied)
}

// orEmpty is m, or an empty map when m is nil (a carried map that was
// empty is left out of the JSON).
func orEmpty[M ~map[K]V, K comparable, V any](m M) M {
	if m == nil {
		return M{}
	}
	return m
}

package workflows

import (
	"go.temporal.io/sdk/workflow"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/runbudget"
)

// Carried is what a run's collaborators own that outlives an execution:
// their counters and the small state their decisions depend on, and
// nothing that grows with the run. Continue-as-new carries it into the
// next execution (RunSpec.Carried); its JSON shape, key by key and in this
// order, is a replay contract, so the collaborators whose keys sit side by
// side (callBook, trace) are carried as themselves and the others are
// copied in and out by carry and resume. The conversation and every output
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
	// callBook is carried as itself: stats, open, open_since,
	// tool_failures.
	callBook
	// Escalations counts the times the run waited on a human.
	Escalations int       `json:"escalations,omitempty"`
	Watchdog    *watchdog `json:"watchdog"`
	// LastContent is the model's latest text, for a partial answer.
	LastContent string `json:"last_content,omitempty"`
	// ReadBack is set once the model was told outputs were shortened: it
	// is offered read_result from then on.
	ReadBack bool `json:"read_back,omitempty"`
	// trace is carried as itself: trace, traced.
	trace
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
	// ForkedFrom, in a fork's first execution only (RunSpec.Forked), is
	// the run it was forked from: that execution asks for admission before
	// its first live turn (run.admit). Never carried further.
	ForkedFrom string `json:"forked_from,omitempty"`
}

// historyIsLong says whether the run should continue as new before its next
// turn: Temporal suggests it, or the history passed history.max_events.
// A run waiting on a sub-agent or a human never gets here.
func (r *run) historyIsLong(ctx workflow.Context) bool {
	info := workflow.GetInfo(ctx)
	return info.GetContinueAsNewSuggested() || info.GetCurrentHistoryLength() >= r.spec.History.MaxEvents
}

// carry is the run's state for an execution that takes it up: the
// caller counts the execution this one was (Continued) when it continues
// as new.
func (r *run) carry() Carried {
	return Carried{
		Step: r.conv.Step, Seq: r.conv.Seq, Pending: r.conv.Pending, RunBudget: r.budget, callBook: r.calls,
		Escalations: r.humans.Escalations, Watchdog: r.watchdog, LastContent: r.conv.LastContent, ReadBack: r.conv.ReadBack,
		trace: r.trace, Continued: r.continued, Approvals: r.humans.Approvals, Denied: r.humans.Denied,
		Waits: r.waits.book, Deadlines: r.humans.Deadlines,
	}
}

// resume takes up the state an earlier execution carried. The budget and
// the watchdog were built from this execution's spec: they take up the
// carried limits, spending and memory, and keep their configuration.
func (r *run) resume(c Carried) {
	if c.RunBudget != nil {
		r.budget.Restore(c.Limits, c.Used)
	}
	if c.Watchdog != nil {
		c.Watchdog.noProgressTurns = r.watchdog.noProgressTurns
		r.watchdog = c.Watchdog
	}
	r.conv = conversation{Step: c.Step, Seq: c.Seq, Pending: c.Pending, LastContent: c.LastContent, ReadBack: c.ReadBack}
	r.calls = c.callBook
	r.calls.Stats.ToolRetries = orEmpty(r.calls.Stats.ToolRetries)
	r.calls.Stats.Denials = orEmpty(r.calls.Stats.Denials)
	r.calls.ToolFailures = orEmpty(r.calls.ToolFailures)
	r.humans.Escalations, r.humans.Approvals, r.humans.Deadlines = c.Escalations, c.Approvals, c.Deadlines
	r.humans.Denied = orEmpty(c.Denied)
	r.trace, r.continued, r.waits.book = c.trace, c.Continued, c.Waits
}

// orEmpty is m, or an empty map when m is nil (a carried map that was
// empty is left out of the JSON).
func orEmpty[M ~map[K]V, K comparable, V any](m M) M {
	if m == nil {
		return M{}
	}
	return m
}

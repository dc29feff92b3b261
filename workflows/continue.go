package workflows

import (
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/budget"
)

// Carried is what a run carries across continue-as-new: its counters and
// the small state its decisions depend on, and nothing that grows with the
// run. The conversation and every output stay in the ledger; the trace is
// cut to its tail.
type Carried struct {
	// Step and Seq are the next step and the next message's place: keys
	// and the conversation go on where they were.
	Step    int                     `json:"step"`
	Seq     int                     `json:"seq"`
	Pending []agentsagatype.Message `json:"pending,omitempty"`
	// Start is when the run's budget clock began; Limits and Used are its
	// budget (with a human's additions).
	Start  time.Time     `json:"start"`
	Limits budget.Limits `json:"limits"`
	Used   budget.Usage  `json:"used"`
	Stats  RetryStats    `json:"stats"`
	// Open lists the dependencies whose breaker was seen open, and
	// OpenSince since when, where that is known.
	Open         []string             `json:"open,omitempty"`
	OpenSince    map[string]time.Time `json:"open_since,omitempty"`
	ToolFailures map[string]int       `json:"tool_failures,omitempty"`
	Escalations  int                  `json:"escalations,omitempty"`
	Watchdog     watchdogState        `json:"watchdog"`
	LastContent  string               `json:"last_content,omitempty"`
	ReadBack     bool                 `json:"read_back,omitempty"`
	Trace        []TraceEntry         `json:"trace,omitempty"`
	Traced       int                  `json:"traced"`
	// Continued counts the executions before this one.
	Continued int `json:"continued"`
	// Approvals are the approval requests still open (an escalated
	// timeout leaves one open), and Denied the calls a human denied.
	Approvals []ApprovalWait    `json:"approvals,omitempty"`
	Denied    map[string]string `json:"denied,omitempty"`
	// Waits is what the run's waits took of its wall clock, by cause.
	Waits waitBook `json:"waits,omitzero"`
}

// historyIsLong says whether the run should continue as new before its next
// turn: Temporal suggests it, or the history passed history.max_events.
// A run waiting on a sub-agent or a human never gets here.
func (r *run) historyIsLong(ctx workflow.Context) bool {
	info := workflow.GetInfo(ctx)
	limit := r.spec.History.MaxEvents
	if limit == 0 {
		limit = DefaultMaxEvents
	}
	return info.GetContinueAsNewSuggested() || info.GetCurrentHistoryLength() >= limit
}

// carry is the run's state for its next execution.
func (r *run) carry() Carried {
	return Carried{
		Step: r.step, Seq: r.seq, Pending: r.pending,
		Start: r.budget.Start, Limits: r.budget.Limits, Used: r.budget.Used, Stats: r.stats,
		Open: r.openDependencies(), OpenSince: r.openSince(), ToolFailures: r.toolFailures, Escalations: r.humans.escalations,
		Watchdog: r.watch.state(), LastContent: r.lastContent, ReadBack: r.readBack,
		Trace: r.trace, Traced: r.traced, Continued: r.continued + 1,
		Approvals: r.openApprovals(), Denied: r.humans.denied, Waits: r.waits,
	}
}

// openApprovals copies the approval requests still open, for
// continue-as-new.
func (r *run) openApprovals() []ApprovalWait {
	var open []ApprovalWait
	for _, w := range r.humans.approvals {
		open = append(open, *w)
	}
	return open
}

// resume takes up the state an earlier execution carried.
func (r *run) resume(c Carried) {
	r.step, r.seq, r.pending = c.Step, c.Seq, c.Pending
	r.budget.Restore(c.Limits, c.Used)
	r.stats = c.Stats
	if r.stats.ToolRetries == nil {
		r.stats.ToolRetries = map[string]int{}
	}
	if r.stats.Denials == nil {
		r.stats.Denials = map[string]int{}
	}
	for _, dependency := range c.Open {
		r.open[dependency] = c.OpenSince[dependency]
	}
	for tool, n := range c.ToolFailures {
		r.toolFailures[tool] = n
	}
	r.humans.escalations = c.Escalations
	r.watch.restore(c.Watchdog)
	r.lastContent, r.readBack = c.LastContent, c.ReadBack
	r.trace, r.traced, r.continued = c.Trace, c.Traced, c.Continued
	for _, w := range c.Approvals {
		r.humans.approvals = append(r.humans.approvals, &w)
	}
	for call, why := range c.Denied {
		r.humans.denied[call] = why
	}
	r.waits = c.Waits
}

// openSince is what is known of since when each open breaker's outage has
// lasted, for continue-as-new.
func (r *run) openSince() map[string]time.Time {
	var since map[string]time.Time
	for dependency, at := range r.open {
		if !at.IsZero() {
			if since == nil {
				since = map[string]time.Time{}
			}
			since[dependency] = at
		}
	}
	return since
}

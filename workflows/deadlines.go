package workflows

import (
	"fmt"
	"slices"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/budget"
	"github.com/agentsaga/agentsaga/internal/activityid"
	"github.com/agentsaga/agentsaga/internal/wire"
)

// Deadlines on every wait for a person (DESIGN.md decision 22,
// issue 44; agentsaga-commands 10). A call waiting for approval and an
// escalated run each wait until a deadline fixed when the wait began (a
// durable timer: a worker's death replays it, it does not restart it, and
// a run does not continue as new while it waits), publish a reminder to
// the run's event log each remind_every meanwhile, and when nobody
// answered in time publish the timeout and do what on_timeout says, with
// a reason that names the timeout and what the run published. The
// webhooks (approval.waiting, approval.reminder, approval.timed_out,
// run.escalated) are made from those events, outside the workflow.

// What a timeout did (wire.WaitEvent.Action).
const (
	timeoutDenied    = "denied"
	timeoutAborted   = "aborted"
	timeoutEscalated = "escalated"
	timeoutFailed    = "failed"
	timeoutFinished  = "finished"
	timeoutResumed   = "resumed"
	// timeoutOutOfTime: an escalation's wait met the run's deadline
	// before its own.
	timeoutOutOfTime = "ended at the run's deadline"
)

// reminderClock says when a wait's reminders fall: every period after its
// start, strictly before its deadline (a wait of 30m reminding every 10m
// reminds twice).
type reminderClock struct {
	from, until time.Time
	every       time.Duration
}

// next is when reminder n+1 falls, and whether there is one.
func (c reminderClock) next(n int) (time.Time, bool) {
	if c.every <= 0 {
		return time.Time{}, false
	}
	at := c.from.Add(time.Duration(n+1) * c.every)
	return at, at.Before(c.until)
}

// due says whether reminder n+1 is due at now.
func (c reminderClock) due(now time.Time, n int) bool {
	at, ok := c.next(n)
	return ok && !now.Before(at)
}

// event is w's reminder or timeout event, without its key.
func (w *ApprovalWait) event() wire.WaitEvent {
	return wire.WaitEvent{Of: wire.WaitApproval, Call: w.Call, Tool: w.Tool, CallKey: w.Key, Arguments: w.Arguments, Why: w.Why,
		Since: w.Deadline.Add(-w.Timeout), Deadline: w.Deadline, Timeout: w.Timeout.String(), OnTimeout: w.OnTimeout}
}

// told says what the run published while a person was awaited: first
// (the wait's own event, by its webhook's name) and the reminders.
func told(first string, reminders int) string {
	switch reminders {
	case 0:
		return first + " was published as a run event"
	case 1:
		return first + " and 1 reminder were published as run events"
	}
	return fmt.Sprintf("%s and %d reminders were published as run events", first, reminders)
}

// publishWait publishes a wait's reminder or timeout to the run's event
// log: a local activity, retried a few times; a publish that still fails
// is logged, and the wait goes on (its reason says what was published
// only as far as the workflow asked).
func publishWait(ctx workflow.Context, v versions, workflowID string, e wire.WaitEvent) {
	e.WorkflowID = workflowID
	lctx := workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
		StartToCloseTimeout: 10 * time.Second, ScheduleToCloseTimeout: time.Minute,
		RetryPolicy: &temporal.RetryPolicy{InitialInterval: time.Second, MaximumInterval: 10 * time.Second, MaximumAttempts: 6},
	})
	if err := workflow.ExecuteLocalActivity(lctx, v.activity(wire.ActivityPublishWaitEvent), e).Get(lctx, nil); err != nil && ctx.Err() == nil {
		workflow.GetLogger(ctx).Warn("could not publish a wait's event", "event", e.Key, "error", err)
	}
}

// escalateUntil is escalate with a deadline: the run waits for a human's
// resume or abort at most escalate.timeout (none for a spec resolved
// before version 4) and never past its own deadline, reminding each
// escalate.remind_every, and when nobody answered does what
// escalate.on_timeout says: abort (the run compensates), finish (a
// partial answer and a handoff note) or resume (the run goes on, no
// budget added). It returns a result when the run ends here.
func (r *run) escalateUntil(ctx workflow.Context, why string) *RunResult {
	escalated := workflow.Now(ctx)
	own, runEnds := r.spec.Escalate.timeout(), r.budget.Deadline()
	options := "Update `resume` {message, add_usd, add_steps} or `abort` {reason} (`agentsaga resume` / `agentsaga abort`)"
	var deadline time.Time
	if own > 0 {
		deadline = escalated.Add(own)
	}
	ownFirst := !deadline.IsZero() && (runEnds.IsZero() || !runEnds.Before(deadline))
	if !ownFirst {
		deadline = runEnds
	}
	onTimeout := r.spec.Escalate.OnTimeout
	if own == 0 {
		onTimeout = ""
	}
	timeout := own
	if !ownFirst && !deadline.IsZero() {
		timeout = deadline.Sub(escalated)
	}
	event := wire.WaitEvent{Of: wire.WaitEscalation, Why: why, Since: escalated, Deadline: deadline, Timeout: timeout.String(), OnTimeout: onTimeout}
	reminders := reminderClock{from: escalated, until: deadline, every: r.spec.Escalate.reminders()}
	if deadline.IsZero() {
		reminders.until = escalated.Add(time.Duration(agentsagatype.MaxReminders+1) * reminders.every)
	}
	switch {
	case ownFirst:
		options += fmt.Sprintf("\n\n**Deadline:** %s, then %s (escalate.on_timeout)", deadline.UTC().Format(time.RFC3339), onTimeout)
	case !deadline.IsZero():
		options += fmt.Sprintf("\n\n**Deadline:** %s, the run's", deadline.UTC().Format(time.RFC3339))
	}
	reminded := 0
	in := r.humans.waitForHumanUntil(ctx, r, r.note, waitingEscalation, agentsagatype.RunEscalated, why, options, deadline,
		func(now time.Time) time.Time {
			for reminders.due(now, reminded) {
				reminded++
				e := event
				e.Key, e.Reminder = fmt.Sprintf("%s/escalation-%d/reminder-%d", r.workflowID, r.humans.Escalations, reminded), reminded
				publishWait(ctx, r.versions, r.workflowID, e)
				now = workflow.Now(ctx)
			}
			at, _ := reminders.next(reminded)
			return at
		})
	r.waits.book.escalated(why, escalated, workflow.Now(ctx))
	switch {
	case ctx.Err() != nil:
		result := r.rollback(ctx, "the run was cancelled while escalated ("+why+")", "", "")
		return &result
	case in != nil && in.action == UpdateAbort:
		result := r.rollback(ctx, fmt.Sprintf("aborted by a human while escalated: %s (escalated because: %s)", in.reason, why), "", "")
		return &result
	case in != nil:
		r.budget.Raise(budget.Limits{USD: in.resume.AddUSD, Steps: in.resume.AddSteps})
		r.conv.say(agentsagatype.Message{Role: "user", Content: "Instruction from a human: " + in.resume.Message, Pinned: true})
		return nil
	}
	waited := fmt.Sprintf("nobody answered the escalation (%s) within %s; %s", why, timeout, told("run.escalated", reminded))
	timedOut := event
	timedOut.Key, timedOut.TimedOut, timedOut.Reminders = fmt.Sprintf("%s/escalation-%d/timed-out", r.workflowID, r.humans.Escalations), true, reminded
	if !ownFirst {
		// The run's own deadline, not the wait's: the reason is the one
		// the run's wall clock always gave; the event says who was told.
		timedOut.Action = timeoutOutOfTime
		timedOut.Reason = "the deadline passed while escalated (" + why + "); " + told("run.escalated", reminded)
		publishWait(ctx, r.versions, r.workflowID, timedOut)
		result := r.outOfBudget(ctx, "", "", r.waits.withWaits("the deadline passed while escalated ("+why+")", "the wall clock"))
		return &result
	}
	switch onTimeout {
	case agentsagatype.OnTimeoutResume:
		timedOut.Action, timedOut.Reason = timeoutResumed, waited+"; the run goes on without a human's instruction, no budget added (escalate.on_timeout: resume)"
		publishWait(ctx, r.versions, r.workflowID, timedOut)
		r.setStatus(ctx, agentsagatype.RunRunning, "after the escalation timed out (escalate.on_timeout: resume)")
		r.conv.say(agentsagatype.Message{Role: "user", Content: fmt.Sprintf("Nobody answered the escalation within %s (%s). No instruction and no budget were added: carry on with what you have, or finish with what you know and say what needs a human.", timeout, why)})
		return nil
	case agentsagatype.OnTimeoutFinish:
		timedOut.Action, timedOut.Reason = timeoutFinished, waited+"; the run finishes with a partial answer (escalate.on_timeout: finish)"
		publishWait(ctx, r.versions, r.workflowID, timedOut)
		r.setStatus(ctx, agentsagatype.RunRunning, "finishing: the escalation timed out (escalate.on_timeout: finish)")
		result := r.gracefulFinish(ctx, r.conv.Step+1, r.conv.LastContent, timedOut.Reason)
		return &result
	}
	timedOut.Action, timedOut.Reason = timeoutAborted, waited+"; the run is aborted (escalate.on_timeout: abort)"
	publishWait(ctx, r.versions, r.workflowID, timedOut)
	result := r.rollback(ctx, timedOut.Reason, "", "")
	return &result
}

// waitForHumanUntil is waitForHuman to a deadline (none when zero):
// remind publishes the reminders due at now and returns when the next
// falls (zero: none). It returns nil when the deadline passed first.
func (h *humanWaits) waitForHumanUntil(ctx workflow.Context, p progress, note func(workflow.Context) string, waiting, status, why, options string, deadline time.Time, remind func(now time.Time) time.Time) *humanInput {
	h.waiting, h.input = waiting, nil
	p.setStatus(ctx, status, why)
	p.showProgress(ctx, status, why+"\n\n**Waiting for:** "+options, note(ctx))
	answered := func() bool { return h.input != nil }
	for !answered() && ctx.Err() == nil {
		now := workflow.Now(ctx)
		if !deadline.IsZero() && !now.Before(deadline) {
			break
		}
		wake := deadline
		if at := remind(now); !at.IsZero() && (wake.IsZero() || at.Before(wake)) {
			wake = at
		}
		if answered() {
			break
		}
		now = workflow.Now(ctx)
		switch {
		case wake.IsZero():
			_ = workflow.Await(ctx, answered)
		case wake.After(now):
			_, _ = workflow.AwaitWithTimeout(ctx, wake.Sub(now), answered)
		}
	}
	in := h.input
	h.waiting, h.input = waitingNone, nil
	if in != nil {
		p.setStatus(ctx, agentsagatype.RunRunning, "after "+in.action)
	}
	return in
}

// setDeadline fixes a wait's deadline from its start, and what
// follows it, once: a new request waits from when it was asked. A request
// left open by an escalating timeout (an older spec's on_timeout) and
// asked for again waits once more, from the new ask, as it always did.
func (a *approvalWait) setDeadline(ctx workflow.Context, w *ApprovalWait) {
	r, rule := a.tt.r, a.rule
	now := workflow.Now(ctx)
	switch {
	case w.Deadline.IsZero():
		w.Deadline = w.Since.Add(w.Timeout)
	case !w.Deadline.After(now):
		w.Deadline, w.Reminded = now.Add(w.Timeout), 0
		w.Asked++
	}
	if w.OnTimeout == "" {
		w.OnTimeout = r.spec.approvalOnTimeout(rule)
	}
}

// awaitDecision waits for a decision on w until its deadline, reminding
// each remind_every of the rule (none when 0). A decision the ledger
// refused is taken back (Decision nil), and the wait goes on to the same
// deadline.
func (a *approvalWait) awaitDecision(ctx workflow.Context, w *ApprovalWait) {
	r, every := a.tt.r, a.rule.Reminders()
	reminders := reminderClock{from: w.Deadline.Add(-w.Timeout), until: w.Deadline, every: every}
	for w.Recorded == nil && ctx.Err() == nil {
		now := workflow.Now(ctx)
		if !now.Before(w.Deadline) {
			return
		}
		if reminders.due(now, w.Reminded) {
			w.Reminded++
			e := w.event()
			e.Key, e.Reminder = fmt.Sprintf("%s/approval-%d/reminder-%d", w.Key, w.Asked, w.Reminded), w.Reminded
			publishWait(ctx, r.versions, r.workflowID, e)
			continue
		}
		wake := w.Deadline
		if at, ok := reminders.next(w.Reminded); ok {
			wake = at
		}
		if decided, _ := workflow.AwaitWithTimeout(ctx, wake.Sub(now), func() bool { return w.Decision != nil }); !decided {
			continue
		}
		// The Update's handler is recording the decision: the call goes
		// (or not) once the ledger has it.
		_ = workflow.Await(ctx, func() bool { return w.Recorded != nil || w.Decision == nil })
	}
}

// pastDeadline does what w's on_timeout says once its deadline
// passed with no decision: deny the call (the run goes on without it),
// abort the run, or, for an older spec, escalate or fail. The reason
// names the timeout and what the run published.
func (a *approvalWait) pastDeadline(ctx workflow.Context, w *ApprovalWait) bool {
	r, c := a.tt.r, a.c
	waited := fmt.Sprintf("call %s of tool %s waited %s for approval (%s) and nobody decided; %s",
		w.Call, w.Tool, w.Timeout, w.Why, told("approval.waiting", w.Reminded))
	e := w.event()
	e.Key, e.TimedOut, e.Reminders = fmt.Sprintf("%s/approval-%d/timed-out", w.Key, w.Asked), true, w.Reminded
	if w.OnTimeout == agentsagatype.ApprovalTimeoutEscalate {
		e.Action, e.Reason = timeoutEscalated, waited+"; the run escalates and the request stays open (on_timeout: escalate)"
		publishWait(ctx, r.versions, r.workflowID, e)
		c.gateRefuse(denyApproval, "not sent: "+waited+". The request stays open; once the run resumes you may ask for the same call again")
		c.escalation = "A call waits for approval: " + waited
		return false
	}
	var verdict string
	switch w.OnTimeout {
	case agentsagatype.OnTimeoutAbort:
		e.Action, verdict = timeoutAborted, "the run is aborted (on_timeout: abort)"
	case agentsagatype.ApprovalTimeoutFail:
		e.Action, verdict = timeoutFailed, "the run fails (on_timeout: fail)"
	default:
		e.Action, verdict = timeoutDenied, "denied by default (on_timeout: deny)"
	}
	e.Reason = waited + "; " + verdict
	// Blocks a late Update: the ledger records the timeout first.
	w.Decision = &wire.ApprovalDecision{Key: w.Key, Call: w.Call, By: "agentsaga",
		Reason: fmt.Sprintf("nobody decided within %s; %s", w.Timeout, verdict), TimedOut: true}
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{ActivityID: activityid.Sub(w.Call, activityid.ApprovalTimer, w.Asked), StartToCloseTimeout: 30 * time.Second})
	var recorded agentsagatype.Approval
	if err := workflow.ExecuteActivity(actx, r.versions.activity(wire.ActivityDecideApproval), *w.Decision).Get(ctx, &recorded); err != nil {
		workflow.GetLogger(ctx).Warn("could not record an approval's timeout", "call", w.Call, "error", err)
	}
	publishWait(ctx, r.versions, r.workflowID, e)
	r.humans.Approvals = slices.DeleteFunc(r.humans.Approvals, func(x *ApprovalWait) bool { return x == w })
	c.entry.Approval = "timed out: " + e.Action
	switch e.Action {
	case timeoutDenied:
		// As a human's denial: asked again, the call is refused at once.
		r.humans.Denied[sameCall(c.call)] = fmt.Sprintf("nobody decided within %s; %s", w.Timeout, verdict)
		c.gateRefuse(denyApproval, "refused: "+e.Reason+". It was not sent. Do not ask for this call again; carry on without it or say that it needs a human")
	case timeoutAborted:
		c.gateRefuse(denyApproval, "not sent: "+e.Reason)
		c.ending, c.aborted = e.Reason, true
	default:
		c.gateRefuse(denyApproval, "not sent: "+waited)
		c.ending = "the run ends: " + e.Reason
	}
	return false
}

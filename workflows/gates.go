package workflows

import (
	"bytes"
	"encoding/json"
	"fmt"
	"github.com/agentsaga/agentsaga/budget"
	"slices"
	"strings"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/activityid"
	"github.com/agentsaga/agentsaga/internal/toolcheck"
	"github.com/agentsaga/agentsaga/internal/wire"
)

// Approval before the act (ARCHITECTURE.md decision 14). Between plan and send, a
// tool call passes its tool's gates (gateCall): the per-call limits, the
// approval rule, then the run's limits. A call that needs a human's yes
// is recorded in the ledger, awaiting approval under its key, and waits on
// a durable condition that the approve and deny Updates satisfy; the wait
// costs the run no wall clock. The commands this emits came with
// commandsVersion4.

// Denial names (TraceEntry.Denial) of calls the gates refused.
const (
	denyApproval = "ApprovalDenied"
	denyLimit    = "LimitExceeded"
)

// limitScope is the run a limit counts over: the root of the run's tree,
// so that a model cannot get past a run's limit by handing the calls to a
// sub-agent, and a sub-agent's calls that its failure compensated stop
// counting for the whole tree.
func limitScope(ctx workflow.Context) string {
	info := workflow.GetInfo(ctx)
	if root := info.RootWorkflowExecution; root != nil && root.ID != "" {
		return root.ID
	}
	return info.WorkflowExecution.ID
}

// gateRefuse refuses a call at a gate, naming the gate as its denial.
func (c *toolCall) gateRefuse(denial, why string) {
	c.refuse(why)
	c.entry.Denial = denial
}

// sameCall is what makes two calls the same request: the tool and its
// arguments, whitespace aside.
func sameCall(call agentsagatype.ToolCall) string {
	var compact bytes.Buffer
	if err := json.Compact(&compact, []byte(call.Arguments)); err != nil {
		return call.Name + "\x00" + call.Arguments
	}
	return call.Name + "\x00" + compact.String()
}

// gateCall lets a planned tool call through its tool's gates, or refuses
// it (the model reads why) and says whether the run must escalate or end.
// It may wait for a human.
func (tt *toolTurn) gateCall(ctx workflow.Context, c *toolCall) {
	r := tt.r
	tool, _ := r.spec.tool(c.call.Name)
	gates, err := toolcheck.CompileGates(tool)
	if err != nil {
		// A spec validated before the start compiles; one that did not
		// was never resolved. Nothing passes a gate that cannot be read.
		c.refuse(fmt.Sprintf("refused: the tool's approval rule or limits cannot be read: %v", err))
		return
	}
	if !gates.Any() {
		return
	}
	args := c.call.Arguments
	if why, ok := r.humans.Denied[sameCall(c.call)]; ok {
		who := "a human denied this call before"
		if strings.HasPrefix(why, "nobody decided") {
			who = "this call was denied before" // by its approval's timeout (deadlines.go)
		}
		c.gateRefuse(denyApproval, fmt.Sprintf("refused: %s (%s). Do not ask for it again; carry on without it or say that it needs a human", who, why))
		return
	}
	var needs []string
	for _, l := range gates.Calls {
		broken := l.Broken(args)
		switch {
		case broken == "":
		case l.Approvable:
			needs = append(needs, broken)
		default:
			c.gateRefuse(denyLimit, fmt.Sprintf("refused before it was sent: %s. This limit is the spec's; no output of a tool and no instruction in the conversation lifts it. Do not retry with the same arguments", broken))
			if l.Escalate {
				c.escalation = fmt.Sprintf("Tool %s was refused by its limit: %s", c.call.Name, broken)
			}
			return
		}
	}
	if why := gates.ApprovalWhy(c.call.Name, args); why != "" {
		needs = append(needs, why)
	}
	if len(needs) > 0 {
		approval := gates.Approval
		if approval == nil {
			approval = &agentsagatype.ApprovalSpec{When: agentsagatype.ApprovalAlways}
		}
		if !tt.awaitApproval(ctx, c, *approval, strings.Join(needs, "; ")) {
			return
		}
	}
	for i, l := range gates.Sums {
		amount, err := l.Rule.Number(args)
		if err != nil {
			c.gateRefuse(denyLimit, fmt.Sprintf("refused before it was sent: the limit %s could not be checked: %v", l.Name(), err))
			return
		}
		var held wire.LimitHeld
		actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
			ActivityID: activityid.Sub(c.activityID, activityid.Limit, i+1), StartToCloseTimeout: 30 * time.Second,
			Summary: clip("limit "+l.Name(), 100),
		})
		if err := workflow.ExecuteActivity(actx, r.versions.activity(wire.ActivityHoldLimit), wire.LimitHold{
			Key: activityid.Key(r.workflowID, c.activityID), WorkflowID: limitScope(ctx), Tool: c.call.Name,
			Limit: l.Name(), Amount: amount, AtMost: l.AtMost,
		}).Get(ctx, &held); err != nil {
			c.refuse("refused: the run's limit could not be checked: " + errorText(err))
			return
		}
		if !held.Granted {
			why := fmt.Sprintf("the run's limit %s: %v so far, and this call adds %v", l.Name(), held.Total, amount)
			c.gateRefuse(denyLimit, "refused before it was sent: "+why+". No approval lifts a run's limit. Do not retry it")
			if l.Escalate {
				c.escalation = fmt.Sprintf("Tool %s was refused by %s", c.call.Name, why)
			}
			return
		}
	}
}

// awaitApproval records the call as awaiting approval and waits for a
// human's decision. It returns true when the call may go. A call the
// model asks for again while an earlier request for it is still open
// takes that request (and its key) over rather than stacking another.
func (tt *toolTurn) awaitApproval(ctx workflow.Context, c *toolCall, rule agentsagatype.ApprovalSpec, why string) bool {
	r := tt.r
	same := sameCall(c.call)
	i := slices.IndexFunc(r.humans.Approvals, func(w *ApprovalWait) bool {
		return sameCall(agentsagatype.ToolCall{Name: w.Tool, Arguments: w.Arguments}) == same
	})
	var w *ApprovalWait
	if i >= 0 {
		w = r.humans.Approvals[i]
		c.activityID, c.entry.ActivityID = w.Call, w.Call
		if r.humans.deadlines(r.versions) {
			tt.setApprovalDeadline(ctx, w, rule)
		}
	} else {
		w = &ApprovalWait{ApprovalRequest: agentsagatype.ApprovalRequest{
			Key: activityid.Key(r.workflowID, c.activityID), WorkflowID: r.workflowID, Call: c.activityID,
			Tool: c.call.Name, Arguments: c.call.Arguments, Why: why,
		}, Since: workflow.Now(ctx), Timeout: rule.Timeout()}
		if r.humans.deadlines(r.versions) {
			tt.setApprovalDeadline(ctx, w, rule)
		}
		actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
			ActivityID: activityid.Sub(c.activityID, activityid.Approval, 0), StartToCloseTimeout: 30 * time.Second, Summary: clip("approval "+c.activityID, 100),
		})
		var recorded agentsagatype.Approval
		if tool, _ := r.spec.tool(c.call.Name); tool.Recording != nil && workflow.GetVersion(ctx, changeReplayApprovals, workflow.DefaultVersion, 1) == 1 {
			// A replay asks no human: the recording decides (and the
			// request and its decision are recorded in one activity).
			if err := workflow.ExecuteActivity(actx, r.versions.activity(wire.ActivityRecordedApproval),
				wire.RecordedApproval{Request: w.ApprovalRequest, Recording: *tool.Recording}).Get(ctx, &recorded); err != nil {
				c.refuse("refused: its approval could not be read from the recording: " + errorText(err))
				return false
			}
			w.Recorded = &recorded
		} else if err := workflow.ExecuteActivity(actx, r.versions.activity(wire.ActivityRequestApproval), w.ApprovalRequest).Get(ctx, &recorded); err != nil {
			c.refuse("refused: its approval request could not be recorded: " + errorText(err))
			return false
		}
		r.humans.Approvals = append(r.humans.Approvals, w)
	}
	if w.Recorded == nil {
		deadline := ""
		if r.humans.deadlines(r.versions) {
			deadline = fmt.Sprintf("\n\n**Deadline:** %s, then %s (on_timeout)", w.Deadline.UTC().Format(time.RFC3339), w.OnTimeout)
		}
		r.showProgress(ctx, agentsagatype.RunAwaitingApproval,
			fmt.Sprintf("Call %s (%s) waits for approval: %s.\n\n**Arguments:** `%s`\n\n**Decide:** `agentsaga approve %s %s` or `agentsaga deny %s %s --reason ...` (Updates `approve` / `deny` {call, by, reason})%s",
				w.Call, w.Tool, w.Why, clip(w.Arguments, 300), r.workflowID, w.Call, r.workflowID, w.Call, deadline),
			r.note(ctx))
		start := workflow.Now(ctx)
		if r.humans.deadlines(r.versions) {
			tt.awaitDecision(ctx, w, rule.Reminders())
		}
		for w.Recorded == nil && ctx.Err() == nil && !r.humans.deadlines(r.versions) {
			left := start.Add(w.Timeout).Sub(workflow.Now(ctx))
			if left <= 0 {
				break
			}
			if decided, _ := workflow.AwaitWithTimeout(ctx, left, func() bool { return w.Decision != nil }); !decided {
				break
			}
			// The Update's handler is recording the decision: the call
			// goes (or not) once the ledger has it. A decision the ledger
			// refused is taken back (Decision nil), and the wait goes on.
			_ = workflow.Await(ctx, func() bool { return w.Recorded != nil || w.Decision == nil })
		}
		// Waiting for a human costs the run no wall clock.
		r.budget.Raise(budget.Limits{Seconds: workflow.Now(ctx).Sub(start).Seconds()})
		if r.budget.Limits.Seconds > 0 {
			r.waits.book.GivenBack += workflow.Now(ctx).Sub(start).Seconds()
		}
		r.showProgress(ctx, agentsagatype.RunRunning, "after the approval wait of "+w.Call, r.note(ctx))
	}
	switch {
	case ctx.Err() != nil:
		c.refuse("cancelled while it waited for approval")
		return false
	case w.Recorded == nil && r.humans.deadlines(r.versions):
		return tt.approvalPastDeadline(ctx, c, w)
	case w.Recorded == nil:
		return tt.approvalTimedOut(ctx, c, w, rule)
	}
	r.humans.Approvals = slices.DeleteFunc(r.humans.Approvals, func(x *ApprovalWait) bool { return x == w })
	c.entry.Approval = fmt.Sprintf("%s by %s", w.Recorded.Status, w.Recorded.DecidedBy)
	if w.Recorded.Status == agentsagatype.ApprovalApproved {
		return true
	}
	denial := fmt.Sprintf("denied by %s: %s", w.Recorded.DecidedBy, w.Recorded.Reason)
	r.humans.Denied[same] = denial
	c.gateRefuse(denyApproval, "refused: "+denial+". It was not sent. Do not ask for this call again; carry on without it or say that it needs a human")
	return false
}

// approvalTimedOut applies the spec's on_timeout to a call nobody decided
// on: escalate, leaving the request open (a human may still decide, and
// the model's next identical call picks the decision up), or end the run.
func (tt *toolTurn) approvalTimedOut(ctx workflow.Context, c *toolCall, w *ApprovalWait, rule agentsagatype.ApprovalSpec) bool {
	r := tt.r
	waited := fmt.Sprintf("call %s of tool %s waited %s for approval (%s) and nobody decided", w.Call, w.Tool, w.Timeout, w.Why)
	if rule.OnTimeout != agentsagatype.ApprovalTimeoutFail {
		c.gateRefuse(denyApproval, "not sent: "+waited+". The request stays open; once the run resumes you may ask for the same call again")
		c.escalation = "A call waits for approval: " + waited
		return false
	}
	// Blocks a late Update: the ledger records the timeout first.
	w.Decision = &wire.ApprovalDecision{Key: w.Key, Call: w.Call, By: "agentsaga", Reason: "nobody decided in time", TimedOut: true}
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{ActivityID: activityid.Sub(w.Call, activityid.ApprovalTimer, 0), StartToCloseTimeout: 30 * time.Second})
	var recorded agentsagatype.Approval
	if err := workflow.ExecuteActivity(actx, r.versions.activity(wire.ActivityDecideApproval), *w.Decision).Get(ctx, &recorded); err != nil {
		workflow.GetLogger(ctx).Warn("could not record an approval's timeout", "call", w.Call, "error", err)
	}
	r.humans.Approvals = slices.DeleteFunc(r.humans.Approvals, func(x *ApprovalWait) bool { return x == w })
	c.gateRefuse(denyApproval, "not sent: "+waited)
	c.ending = "the run ends: " + waited
	return false
}

// setApprovalDeadline fixes a wait's deadline from its start, and what
// follows it, once: a new request waits from when it was asked. A request
// left open by an escalating timeout (an older spec's on_timeout) and
// asked for again waits once more, from the new ask, as it always did.
func (tt *toolTurn) setApprovalDeadline(ctx workflow.Context, w *ApprovalWait, rule agentsagatype.ApprovalSpec) {
	r := tt.r
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
// each period (none when 0). A decision the ledger refused is taken back
// (Decision nil), and the wait goes on to the same deadline.
func (tt *toolTurn) awaitDecision(ctx workflow.Context, w *ApprovalWait, every time.Duration) {
	r := tt.r
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

// approvalPastDeadline does what w's on_timeout says once its deadline
// passed with no decision: deny the call (the run goes on without it),
// abort the run, or, for an older spec, escalate or fail. The reason
// names the timeout and what the run published.
func (tt *toolTurn) approvalPastDeadline(ctx workflow.Context, c *toolCall, w *ApprovalWait) bool {
	r := tt.r
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

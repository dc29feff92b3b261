package workflows

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/budget"
	"github.com/agentsaga/agentsaga/internal/activityid"
	"github.com/agentsaga/agentsaga/internal/wire"
)

// Where a run waits for a human, in one place: an escalation (resume or
// abort), a failed compensation (retry, skip or abort), and a call that
// needs approval (approve or deny). Each is a durable wait on an Update
// that its validator admits only while the run waits for it. A run never
// continues as new while it waits for a human, but an approval left open
// (an escalated timeout) is carried across (Carried.Approvals).

// Updates a run accepts while it waits for a human.
const (
	// UpdateResume continues an escalated run with an instruction (and
	// optionally more budget).
	UpdateResume = "resume"
	// UpdateAbort stops an escalated run (which then compensates) or a
	// compensation walk that a failed compensation stopped.
	UpdateAbort = "abort"
	// UpdateRetry runs a failed compensation again.
	UpdateRetry = "retry"
	// UpdateSkip records that a human took responsibility for a failed
	// compensation, and walks on.
	UpdateSkip = "skip"
)

// ResumeInput is the resume Update's argument.
type ResumeInput struct {
	Message  string  `json:"message"`
	AddUSD   float64 `json:"add_usd,omitempty"`
	AddSteps int     `json:"add_steps,omitempty"`
}

// maxInstruction bounds a human's instruction: it is pinned, sent whole in
// every model request, and carried across continue-as-new until then.
const maxInstruction = 16 << 10

// ReasonInput is the argument of skip and abort: who decided, and why.
type ReasonInput struct {
	Reason string `json:"reason"`
}

// humanWaits is what the run waits on a human for, and what humans
// decided. While a coroutine waits for a human, the Updates' handlers
// hand it the input they accepted (waiting, input), and a fork's signal
// asks the run to stop and wait (forkStop). What humans decided is
// carried across continue-as-new: the times the run escalated, the calls
// still waiting for approval, oldest first (an escalated timeout leaves
// one open), the calls a human denied (sameCall, with the denial: the
// model's asking again is refused at once), and whether the run's waits
// for a person have deadlines (Deadlines: its first execution took
// commandsVersion10; a run begun on older code keeps its older waits).
type humanWaits struct {
	waiting  string
	input    *humanInput
	forkStop workflow.ReceiveChannel

	Escalations int
	Approvals   []*ApprovalWait
	Denied      map[string]string
	Deadlines   bool
}

// deadlines says whether this run's waits for a person have deadlines:
// its first execution took commandsVersion10 (v says whether this one
// knows them).
func (h *humanWaits) deadlines(v versions) bool { return v.deadlines && h.Deadlines }

// What a waiting run waits for.
const (
	waitingNone         = ""
	waitingEscalation   = "escalation"
	waitingCompensation = "compensation"
)

var waitingText = map[string]string{
	waitingEscalation:   "an escalation (resume or abort)",
	waitingCompensation: "a failed compensation (retry, skip or abort)",
}

// humanInput is an accepted Update, for the waiting coroutine to act on.
type humanInput struct {
	action string
	resume ResumeInput
	reason string
}

// registerUpdates installs the Updates. Their validators reject anything
// that does not fit what the run is waiting for, so a rejected Update
// leaves no trace in history.
func (h *humanWaits) registerUpdates(ctx workflow.Context) error {
	accept := func(in humanInput) (string, error) {
		if h.input != nil {
			// Two Updates in one workflow task both passed their
			// validators before either handler ran: the second is refused,
			// never silently lost.
			return "", fmt.Errorf("%s: refused: %s was accepted first and is being acted on", in.action, h.input.action)
		}
		h.input = &in
		return "accepted: " + in.action, nil
	}
	waitingFor := func(update string, want ...string) error {
		if h.input != nil {
			return fmt.Errorf("%s: refused: another human input (%s) is pending; send it again once the run acted on it", update, h.input.action)
		}
		for _, w := range want {
			if h.waiting == w {
				return nil
			}
		}
		if h.waiting == waitingNone {
			return fmt.Errorf("%s: the run is not waiting for a human", update)
		}
		return fmt.Errorf("%s: the run is waiting on %s, where %s does not apply", update, waitingText[h.waiting], update)
	}
	needReason := func(update, reason string) error {
		if strings.TrimSpace(reason) == "" {
			return fmt.Errorf("%s: a reason is required (who decided, and why)", update)
		}
		return nil
	}
	updates := []struct {
		name        string
		description string
		handler     any
		validator   any
	}{
		{UpdateResume, "Continue an escalated run: {message} for the model, optional add_usd and add_steps.", func(ctx workflow.Context, in ResumeInput) (string, error) {
			return accept(humanInput{action: UpdateResume, resume: in})
		}, func(ctx workflow.Context, in ResumeInput) error {
			if err := waitingFor(UpdateResume, waitingEscalation); err != nil {
				return err
			}
			switch {
			case strings.TrimSpace(in.Message) == "":
				return errors.New("resume: a message for the model is required")
			case len(in.Message) > maxInstruction:
				return fmt.Errorf("resume: the message is %d KiB; at most %d KiB (an instruction is sent whole in every request)", len(in.Message)>>10, maxInstruction>>10)
			case in.AddUSD < 0 || in.AddSteps < 0:
				return fmt.Errorf("resume: add_usd %v and add_steps %d must not be negative", in.AddUSD, in.AddSteps)
			}
			return nil
		}},
		{UpdateAbort, "Stop an escalated run (it compensates) or a stalled compensation walk: {reason}.", func(ctx workflow.Context, in ReasonInput) (string, error) {
			return accept(humanInput{action: UpdateAbort, reason: in.Reason})
		}, func(ctx workflow.Context, in ReasonInput) error {
			if err := waitingFor(UpdateAbort, waitingEscalation, waitingCompensation); err != nil {
				return err
			}
			return needReason(UpdateAbort, in.Reason)
		}},
		{UpdateRetry, "Run the failed compensation again.", func(ctx workflow.Context) (string, error) {
			return accept(humanInput{action: UpdateRetry})
		}, func(ctx workflow.Context) error {
			return waitingFor(UpdateRetry, waitingCompensation)
		}},
		{UpdateSkip, "Take responsibility for a failed compensation and walk on: {reason}.", func(ctx workflow.Context, in ReasonInput) (string, error) {
			return accept(humanInput{action: UpdateSkip, reason: in.Reason})
		}, func(ctx workflow.Context, in ReasonInput) error {
			if err := waitingFor(UpdateSkip, waitingCompensation); err != nil {
				return err
			}
			return needReason(UpdateSkip, in.Reason)
		}},
	}
	for _, u := range updates {
		if err := workflow.SetUpdateHandlerWithOptions(ctx, u.name, u.handler, workflow.UpdateHandlerOptions{Validator: u.validator, Description: u.description}); err != nil {
			return err
		}
	}
	return nil
}

// progress is where a wait shows itself: the run's status in the ledger,
// and its details in the UI.
type progress interface {
	setStatus(ctx workflow.Context, status, detail string)
	showProgress(ctx workflow.Context, status, headline, note string)
}

// waitForHuman records the run (p) as status (escalated or needs-attention),
// shows why in the UI with the budget note note reads, and waits for an accepted Update, at most until
// timeout (zero: no limit). It returns nil on timeout.
func (h *humanWaits) waitForHuman(ctx workflow.Context, p progress, note func(workflow.Context) string, waiting, status, why, options string, timeout time.Duration) *humanInput {
	h.waiting, h.input = waiting, nil
	p.setStatus(ctx, status, why)
	p.showProgress(ctx, status, why+"\n\n**Waiting for:** "+options, note(ctx))
	condition := func() bool { return h.input != nil }
	if timeout > 0 {
		_, _ = workflow.AwaitWithTimeout(ctx, timeout, condition)
	} else {
		_ = workflow.Await(ctx, condition)
	}
	in := h.input
	h.waiting, h.input = waitingNone, nil
	if in != nil {
		p.setStatus(ctx, agentsagatype.RunRunning, "after "+in.action)
	}
	return in
}

// escalate pauses the run, budget intact, until a human resumes it (the
// model reads the instruction next turn) or aborts it, or the deadline
// passes. It returns a result when the run ends here.
func (r *run) escalate(ctx workflow.Context, why string) *RunResult {
	r.humans.Escalations++
	if r.humans.deadlines(r.versions) {
		return r.escalateUntil(ctx, why)
	}
	var timeout time.Duration
	if deadline := r.budget.Deadline(); !deadline.IsZero() {
		timeout = max(deadline.Sub(workflow.Now(ctx)), time.Millisecond)
	}
	escalated := workflow.Now(ctx)
	in := r.humans.waitForHuman(ctx, r, r.note, waitingEscalation, agentsagatype.RunEscalated, why,
		"Update `resume` {message, add_usd, add_steps} or `abort` {reason} (`agentsaga resume` / `agentsaga abort`)", timeout)
	r.waits.book.escalated(why, escalated, workflow.Now(ctx))
	switch {
	case ctx.Err() != nil:
		result := r.rollback(ctx, "the run was cancelled while escalated ("+why+")", "", "")
		return &result
	case in == nil:
		result := r.outOfBudget(ctx, "", "", r.waits.withWaits("the deadline passed while escalated ("+why+")", "the wall clock"))
		return &result
	case in.action == UpdateAbort:
		result := r.rollback(ctx, fmt.Sprintf("aborted by a human while escalated: %s (escalated because: %s)", in.reason, why), "", "")
		return &result
	}
	// More budget is added only where there is a limit (runbudget.RunBudget.Raise).
	r.budget.Raise(budget.Limits{USD: in.resume.AddUSD, Steps: in.resume.AddSteps})
	r.conv.say(agentsagatype.Message{Role: "user", Content: "Instruction from a human: " + in.resume.Message, Pinned: true})
	return nil
}

// Updates that decide on a call waiting for approval.
const (
	UpdateApprove = "approve"
	UpdateDeny    = "deny"
)

// ApprovalInput is the argument of approve and deny: the call (its ID,
// as `agentsaga approvals` lists it), who decides, and why (required to
// deny).
type ApprovalInput struct {
	Call   string `json:"call"`
	By     string `json:"by"`
	Reason string `json:"reason,omitempty"`
}

// errTypeApprovalTimedOut is the failure of a run whose call nobody
// approved in time, when the spec says to fail.
const errTypeApprovalTimedOut = "ApprovalTimedOut"

// ApprovalWait is a call waiting for a human: in the run's state, carried
// across continue-as-new while it waits, and listed by the approvals query.
type ApprovalWait struct {
	agentsagatype.ApprovalRequest
	Since time.Time `json:"since"`
	// Timeout is how long it waits before the spec's on_timeout applies.
	Timeout time.Duration `json:"timeout"`
	// Reminded is the reminders its wait published, and Asked the waits
	// of an escalating timeout's request before this one. With its
	// Deadline (Since plus Timeout; a wait asked again after an escalating
	// timeout: from the new ask) and OnTimeout, set from
	// agentsaga-commands 10 (before, the wait's timeout ran from each ask).
	Reminded int `json:"reminded,omitempty"`
	Asked    int `json:"asked,omitempty"`
	// Decision is the Update accepted for it; Recorded is the ledger's
	// record of that decision, which the call waits for before it goes.
	Decision *wire.ApprovalDecision  `json:"decision,omitempty"`
	Recorded *agentsagatype.Approval `json:"recorded,omitempty"`
	// requesting is set while the request is being recorded in the
	// ledger. The ledger lists the call as soon as its request is written,
	// before the run sees it written: an operator who approves at once
	// must find the call waiting, so approve and deny take it from the
	// start, and the decision waits for the request. The approvals query
	// lists it once recorded, as the ledger does. A run continues as new
	// only between turns, so it is never carried.
	requesting bool
}

// approvalWait is one call's wait for a human's decision: the call, in
// its turn tt, and the approval rule that asks for the decision (its
// timeout, reminders and on_timeout). The wait itself, which outlives
// the turn, is an ApprovalWait among the humans' approvals.
type approvalWait struct {
	tt   *toolTurn
	c    *toolCall
	rule agentsagatype.ApprovalSpec
}

// QueryApprovals returns the calls waiting for approval ([]ApprovalWait).
const QueryApprovals = "approvals"

// registerApprovalUpdates installs approve and deny, and the approvals
// query; v is read when a decision is recorded (the run reads its
// versions after it registers its handlers). The validators refuse anything that does not name a waiting
// call, so a rejected Update leaves no trace in history; the handler
// checks again, for two Updates that passed their validators in one
// workflow task, and records the decision in the ledger before the call
// it frees is sent.
func (h *humanWaits) registerApprovalUpdates(ctx workflow.Context, v *versions) error {
	validate := func(update string, in ApprovalInput) (*ApprovalWait, error) {
		switch {
		case strings.TrimSpace(in.Call) == "":
			return nil, fmt.Errorf("%s: name the call (its ID, as `agentsaga approvals` lists it)", update)
		case strings.TrimSpace(in.By) == "":
			return nil, fmt.Errorf("%s: say who decides (by): the ledger keeps it", update)
		case update == UpdateDeny && strings.TrimSpace(in.Reason) == "":
			return nil, fmt.Errorf("deny: a reason is required: the model reads it")
		case len(in.Reason) > maxInstruction:
			return nil, fmt.Errorf("%s: the reason is %d KiB; at most %d KiB", update, len(in.Reason)>>10, maxInstruction>>10)
		}
		i := slices.IndexFunc(h.Approvals, func(w *ApprovalWait) bool { return w.Call == in.Call })
		if i < 0 {
			var waiting []string
			for _, w := range h.Approvals {
				waiting = append(waiting, w.Call)
			}
			return nil, fmt.Errorf("%s: no call %q waits for approval in this run (waiting: %s)", update, in.Call, listOrNone(waiting))
		}
		w := h.Approvals[i]
		if d := w.Decision; d != nil {
			return nil, fmt.Errorf("%s: refused: call %s was already %s by %s", update, in.Call, d.Status(), d.By)
		}
		return w, nil
	}
	decide := func(update string, approve bool) (func(workflow.Context, ApprovalInput) (agentsagatype.Approval, error), func(workflow.Context, ApprovalInput) error) {
		handler := func(ctx workflow.Context, in ApprovalInput) (agentsagatype.Approval, error) {
			w, err := validate(update, in)
			if err != nil {
				return agentsagatype.Approval{}, err
			}
			if w.requesting {
				if err := workflow.Await(ctx, func() bool { return !w.requesting }); err != nil {
					return agentsagatype.Approval{}, fmt.Errorf("%s: %w", update, err)
				}
				// A request that could not be recorded is no longer
				// listed, and another decision may have come meanwhile.
				if w, err = validate(update, in); err != nil {
					return agentsagatype.Approval{}, err
				}
			}
			w.Decision = &wire.ApprovalDecision{Key: w.Key, Call: w.Call, Approve: approve, By: in.By, Reason: in.Reason}
			actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
				ActivityID: activityid.Sub(w.Call, activityid.Kind(update), 0), StartToCloseTimeout: 30 * time.Second, Summary: clip(update+" "+w.Call+" by "+in.By, 100),
			})
			var recorded agentsagatype.Approval
			if err := workflow.ExecuteActivity(actx, v.activity(wire.ActivityDecideApproval), *w.Decision).Get(ctx, &recorded); err != nil {
				w.Decision = nil
				var app *temporal.ApplicationError
				if errors.As(err, &app) {
					return agentsagatype.Approval{}, fmt.Errorf("%s: %s", update, app.Message())
				}
				return agentsagatype.Approval{}, fmt.Errorf("%s: %w", update, err)
			}
			w.Recorded = &recorded
			return recorded, nil
		}
		validator := func(ctx workflow.Context, in ApprovalInput) error {
			_, err := validate(update, in)
			return err
		}
		return handler, validator
	}
	for _, u := range []struct {
		name, description string
		approve           bool
	}{
		{UpdateApprove, "Approve a call waiting for approval: {call, by, reason}. It is sent once the ledger records who approved.", true},
		{UpdateDeny, "Deny a call waiting for approval: {call, by, reason}. The model reads the reason; the call is never sent.", false},
	} {
		handler, validator := decide(u.name, u.approve)
		if err := workflow.SetUpdateHandlerWithOptions(ctx, u.name, handler, workflow.UpdateHandlerOptions{Validator: validator, Description: u.description}); err != nil {
			return err
		}
	}
	return workflow.SetQueryHandlerWithOptions(ctx, QueryApprovals, func() ([]ApprovalWait, error) {
		list := make([]ApprovalWait, 0, len(h.Approvals))
		for _, w := range h.Approvals {
			if !w.requesting {
				list = append(list, *w)
			}
		}
		return list, nil
	}, workflow.QueryHandlerOptions{Description: "The calls waiting for approval, oldest first."})
}

// await records the call as awaiting approval and waits for a
// human's decision. It returns true when the call may go. A call the
// model asks for again while an earlier request for it is still open
// takes that request (and its key) over rather than stacking another.
func (a *approvalWait) await(ctx workflow.Context, why string) bool {
	r, c, rule := a.tt.r, a.c, a.rule
	same := sameCall(c.call)
	// A request still being recorded (the same call twice in one turn)
	// is not taken over: each call records its own, as before requests
	// were listed while being recorded.
	i := slices.IndexFunc(r.humans.Approvals, func(w *ApprovalWait) bool {
		return !w.requesting && sameCall(agentsagatype.ToolCall{Name: w.Tool, Arguments: w.Arguments}) == same
	})
	var w *ApprovalWait
	if i >= 0 {
		w = r.humans.Approvals[i]
		c.activityID, c.entry.ActivityID = w.Call, w.Call
		if r.humans.deadlines(r.versions) {
			a.setDeadline(ctx, w)
		}
	} else {
		w = &ApprovalWait{ApprovalRequest: agentsagatype.ApprovalRequest{
			Key: activityid.Key(r.workflowID, c.activityID), WorkflowID: r.workflowID, Call: c.activityID,
			Tool: c.call.Name, Arguments: c.call.Arguments, Why: why,
		}, Since: workflow.Now(ctx), Timeout: rule.Timeout()}
		if r.humans.deadlines(r.versions) {
			a.setDeadline(ctx, w)
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
			r.humans.Approvals = append(r.humans.Approvals, w)
		} else {
			w.requesting = true
			r.humans.Approvals = append(r.humans.Approvals, w)
			err := workflow.ExecuteActivity(actx, r.versions.activity(wire.ActivityRequestApproval), w.ApprovalRequest).Get(ctx, &recorded)
			w.requesting = false
			if err != nil {
				r.humans.Approvals = slices.DeleteFunc(r.humans.Approvals, func(x *ApprovalWait) bool { return x == w })
				c.refuse("refused: its approval request could not be recorded: " + errorText(err))
				return false
			}
		}
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
			a.awaitDecision(ctx, w)
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
		return a.pastDeadline(ctx, w)
	case w.Recorded == nil:
		return a.timedOut(ctx, w)
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

// timedOut applies the spec's on_timeout to a call nobody decided
// on: escalate, leaving the request open (a human may still decide, and
// the model's next identical call picks the decision up), or end the run.
func (a *approvalWait) timedOut(ctx workflow.Context, w *ApprovalWait) bool {
	r, c, rule := a.tt.r, a.c, a.rule
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

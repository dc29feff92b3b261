package workflows

import (
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/agentsaga/agentsaga/activities"
	"github.com/agentsaga/agentsaga/budget"
	"github.com/agentsaga/agentsaga/ledger"
)

// DefaultBreakerOpenEscalation is how long a call waits behind an open
// circuit breaker before the run asks a human (escalate.after_breaker_open_seconds).
const DefaultBreakerOpenEscalation = 300

// minimumPark is the shortest wait behind an open breaker: the worker's
// clock and Postgres's may disagree, and a probe time already past would
// otherwise send the call back at once, in a loop of refusals.
const minimumPark = 200 * time.Millisecond

// parkWithoutProbeTime is the wait when a refusal does not say when the
// breaker probes again: a worker of an older build, during a deploy.
const parkWithoutProbeTime = 5 * time.Second

// parkedCall is how a call refused by an open breaker was waited out.
type parkedCall struct {
	// leafCalls are the attempts made before the breaker refused one: an
	// attempt refused at the gate was not made.
	leafCalls int
	// escalation, when the call stopped waiting, is why a human is asked.
	escalation string
}

// waitOutBreaker parks a call that an open breaker refused: it waits on a
// durable timer until the breaker lets its next probe out (with the jitter
// the retry hook drew, so that parked calls do not come back together),
// then sends the call again under its first key, as often as the breaker
// refuses it, for at most escalate.after_breaker_open_seconds in all and
// never past what the run's budget can afford. A parked call costs no leaf
// call and no retry: the breaker's refusal was not a call. It returns the
// last outcome, and err stays a CircuitOpen denial when the run should ask
// a human instead of waiting longer.
func (r *run) waitOutBreaker(ctx workflow.Context, activityID string, tool activities.ToolSpec, call activities.ToolCall,
	request activities.ToolCallRequest, err error, result *activities.ToolResult) (error, parkedCall) {
	var parked parkedCall
	limit := r.spec.breakerOpenEscalation()
	since := workflow.Now(ctx)
	request.Key = r.workflowID + "/" + activityID
	for n := 1; ; n++ {
		failure, ok := openBreakerRefusal(err)
		if !ok {
			if n > 1 {
				r.setStatus(ctx, ledger.RunRunning, "") // no longer waiting
			}
			return err, parked
		}
		parked.leafCalls += failure.Attempt
		if failure.AtGate {
			parked.leafCalls--
		}
		r.open[call.Name] = true
		now := workflow.Now(ctx)
		wait := parkWithoutProbeTime
		if !failure.RetryAt.IsZero() {
			wait = max(failure.RetryAt.Sub(now), minimumPark)
		}
		back := now.Add(wait)
		switch {
		case limit <= 0:
			parked.escalation = fmt.Sprintf("The circuit breaker for tool %s is open: the dependency is down", call.Name)
		case back.Sub(since) > limit:
			parked.escalation = fmt.Sprintf("The circuit breaker for tool %s has been open for %s, and the call waits at most %s (escalate.after_breaker_open_seconds)",
				call.Name, now.Sub(since).Round(time.Second), limit)
		case r.budget.ShouldFinish(back):
			parked.escalation = fmt.Sprintf("The circuit breaker for tool %s is open until %s, and the run's budget cannot afford the wait",
				call.Name, back.UTC().Format(time.RFC3339))
		}
		if parked.escalation != "" {
			return err, parked
		}
		waiting := fmt.Sprintf("waiting for tool %s: its circuit breaker is open; the call goes out again at %s (parked %d times, since %s)",
			call.Name, back.UTC().Format(time.RFC3339), n, since.UTC().Format(time.RFC3339))
		r.showProgress(ctx, ledger.RunRunning, "Call "+activityID+" is "+waiting, r.budget.Note(now, r.openBreakers()))
		if n == 1 {
			r.setStatus(ctx, ledger.RunRunning, waiting)
		}
		timer := workflow.NewTimerWithOptions(ctx, wait, workflow.TimerOptions{Summary: clip("parked: "+call.Name+"'s breaker is open", 100)})
		if err := timer.Get(ctx, nil); err != nil {
			return err, parked // cancelled while parked: nothing was sent
		}
		again := fmt.Sprintf("%s/after-breaker-%d", activityID, n)
		request.Retry = r.plan(tool.Name, request.Retry.Dependency)
		actx := workflow.WithActivityOptions(ctx, r.activityOptions(ctx, again, tool.Timeout(), clip(call.Name+" "+call.Arguments, 100)))
		actx = workflow.WithHeartbeatTimeout(actx, heartbeatTimeout(tool.Timeout()))
		*result = activities.ToolResult{}
		err = workflow.ExecuteActivity(actx, r.versions.activity(activitiesRef.CallTool), request).Get(ctx, result)
	}
}

// openBreakerRefusal is the retry hook's CircuitOpen denial in err, when
// that is what err is.
func openBreakerRefusal(err error) (activities.CallFailure, bool) {
	var appErr *temporal.ApplicationError
	var failure activities.CallFailure
	if err == nil || !errors.As(err, &appErr) || !appErr.HasDetails() || appErr.Details(&failure) != nil {
		return failure, false
	}
	return failure, failure.Denial == budget.DenyCircuitOpen
}

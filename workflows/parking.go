package workflows

import (
	"cmp"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/budget"
	"github.com/agentsaga/agentsaga/internal/activityid"
	"github.com/agentsaga/agentsaga/internal/wire"
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
	// parks counts the waits.
	parks int
	// escalation, when the call stopped waiting, is why a human is asked.
	escalation string
}

// BreakerWait is how long a tool call may wait behind its dependency's open
// circuit breaker, and who hears of each wait.
type BreakerWait struct {
	// Limit bounds the whole wait (escalate.after_breaker_open_seconds in
	// an agent run); zero means the call does not wait.
	Limit time.Duration
	// Affordable, when set, says whether the caller can afford to wait
	// until back (a run's budget); nil means it can.
	Affordable func(back time.Time) bool
	// Parked, when set, is told of each wait (n counts from 1) before it
	// starts: since is when the outage opened the breaker, when a refusal
	// said so, else when the call was first refused.
	Parked func(n int, since, back time.Time)
	// Summary names the wait's timer in the Temporal UI.
	Summary string
	// WakeAtLimit, when a refusal says since when the breaker has been
	// open, never parks the call past the moment the outage reaches Limit:
	// it goes out then (usually to be refused at the gate) and stops
	// waiting, so a human is asked about when the limit says, not up to a
	// cooldown and its jitter later. Agent runs before agentsaga-commands
	// 2 slept to their release slot (their histories replay it).
	WakeAtLimit bool
	// ForgetOpenSince decides a refusal that does not say since when the
	// breaker has been open by the call's own wait, even after an earlier
	// refusal of the same wait said it: how agent runs before
	// agentsaga-commands 1 decided (their histories replay it). It made a
	// failed probe, whose refusal does not say, escalate the run before
	// the outage had lasted the limit.
	ForgetOpenSince bool
}

// Why a call stopped waiting behind an open breaker (BreakerOutcome.Stopped).
const (
	StoppedNoWait = "no-wait" // BreakerWait.Limit is zero
	StoppedLimit  = "limit"   // the wait would pass BreakerWait.Limit
	StoppedBudget = "budget"  // the caller cannot afford it
)

// BreakerOutcome is how a call's wait behind an open breaker went.
type BreakerOutcome struct {
	// LeafCalls are the calls the refused sends made: an attempt refused
	// at the gate was not one.
	LeafCalls int
	// Parks counts the waits.
	Parks int
	// Stopped, when the call is still refused, is why it stopped waiting
	// (Stopped*): the caller should ask a human. Empty otherwise.
	Stopped string
	// Since is when the first refusal was seen; Back is when the refused
	// call would have gone out again, had it waited once more.
	Since, Back time.Time
	// OpenSince, when the last refusal said so, is when the outage opened
	// the breaker; zero from a hook that does not say.
	OpenSince time.Time
}

// WaitOutBreaker is how every tool call of an agent run meets an open
// circuit breaker, for workflows that schedule CallTool themselves. err is
// the outcome of the call's first send. While it is the retry hook's
// CircuitOpen denial, the call waits on a durable timer until the release
// slot the breaker handed it (CallFailure.RetryAt: slots are a release
// interval apart, so the calls parked behind one breaker come back one by
// one, not together) and send(ctx, n)
// sends it again, the n-th time, under its first idempotency key, writing
// its outcome into what the returned future's Get fills. It stops waiting
// once the breaker has been open for more than w.Limit (when the refusal
// says since when: the breaker hands out release slots, and a call at the
// end of a long queue waits past w.Limit for its slot after a short
// outage), or once its own wait would pass w.Limit (when it does not say),
// and never waits past what the caller can afford. A wait costs no leaf
// call and no retry: the breaker's refusal was not a call. It returns the
// last send's error.
func WaitOutBreaker(ctx workflow.Context, err error, w BreakerWait, send func(ctx workflow.Context, n int) workflow.Future, result any) (error, BreakerOutcome) {
	out := BreakerOutcome{Since: workflow.Now(ctx)}
	for n := 1; ; n++ {
		failure, refused := openBreakerRefusal(err)
		if !refused {
			return err, out
		}
		if failure.OpenSince.IsZero() && !w.ForgetOpenSince {
			// A failed probe's refusal comes from the failure that reopened
			// the breaker, not from the gate, and does not say since when:
			// the outage is the one an earlier refusal of this wait named.
			failure.OpenSince = out.OpenSince
		}
		out.LeafCalls += failure.Attempt
		if failure.AtGate {
			out.LeafCalls--
		}
		now := workflow.Now(ctx)
		wait := parkWithoutProbeTime
		if !failure.RetryAt.IsZero() {
			wait = max(failure.RetryAt.Sub(now), minimumPark)
		}
		out.Back = now.Add(wait)
		out.OpenSince = failure.OpenSince
		switch {
		case w.Limit <= 0:
			out.Stopped = StoppedNoWait
		case !failure.OpenSince.IsZero() && now.Sub(failure.OpenSince) > w.Limit:
			out.Stopped = StoppedLimit
		case failure.OpenSince.IsZero() && out.Back.Sub(out.Since) > w.Limit:
			// A refusal recorded before the hook said since when (a
			// history in flight): decided as it was then.
			out.Stopped = StoppedLimit
		case w.Affordable != nil && !w.Affordable(out.Back):
			out.Stopped = StoppedBudget
		}
		if out.Stopped != "" {
			return err, out
		}
		if limitAt := failure.OpenSince.Add(w.Limit); w.WakeAtLimit && !failure.OpenSince.IsZero() && out.Back.After(limitAt) {
			wait = max(limitAt.Sub(now)+minimumPark, minimumPark)
			out.Back = now.Add(wait)
		}
		if w.Parked != nil {
			w.Parked(n, cmp.Or(out.OpenSince, out.Since), out.Back)
		}
		out.Parks++
		timer := workflow.NewTimerWithOptions(ctx, wait, workflow.TimerOptions{Summary: w.Summary})
		if err := timer.Get(ctx, nil); err != nil {
			return err, out // cancelled while parked: nothing was sent
		}
		err = send(ctx, n).Get(ctx, result)
	}
}

// openBreakerRefusal is the retry hook's CircuitOpen denial in err, when
// that is what err is.
func openBreakerRefusal(err error) (wire.CallFailure, bool) {
	failure, ok := callFailureIn(err)
	return failure, ok && failure.Denial == budget.DenyCircuitOpen
}

// waitOutBreaker is WaitOutBreaker for one of the run's tool calls: the
// wait is bounded by escalate.after_breaker_open_seconds and the run's
// budget, shows in the UI and the ledger while it lasts, and a call that
// stops waiting carries why a human is asked.
func (tt *toolTurn) waitOutBreaker(ctx workflow.Context, activityID string, tool agentsagatype.ToolSpec, call agentsagatype.ToolCall,
	request wire.ToolCallRequest, err error, result *wire.ToolResult) (error, parkedCall) {
	r := tt.r
	request.Key = activityid.Key(r.workflowID, activityID)
	r.calls.markOpen(call.Name, time.Time{})
	return r.waits.parkBehindBreaker(ctx, "tool "+call.Name, call.Name+"'s", call.Name, activityID, err, func(ctx workflow.Context, again string) workflow.Future {
		request.Retry = r.plan(tool.Name, request.Retry.Dependency)
		request.Retry.Released = true
		*result = wire.ToolResult{}
		return tt.sendToolCall(ctx, again, call, request)
	}, result)
}

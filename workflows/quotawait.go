package workflows

import (
	"cmp"
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/budget"
)

// quotaWaits is how one model turn met its provider's quota: a wait is
// not a failure, so it costs no retry and no attempt, and a turn refused
// at admission sent nothing.
type quotaWaits struct {
	waits  int
	waited time.Duration
	// leafCalls are the requests the provider answered 429.
	leafCalls int
}

// sendModelTurnInQuota sends a model turn under activityID, as
// sendModelTurn does, and from agentsaga-commands 3 on admits it on its
// provider's quota, which the fleet shares (ModelCall.Quota). While the
// quota refuses it (a budget.DenyQuota refusal: no room at admission, or a
// request answered 429, which closes the quota for every worker), the
// turn waits on a durable timer until the release slot the refusal names
// and goes out again under its first key, as <activityID>/after-quota-N.
// The slots are a refill of each call's cost apart and jittered, so the
// turns waiting on one quota come back at the rate it allows, not in a
// wave. The waits count against the run's wall clock: a wait the run's
// budget cannot afford ends the send with a modelParkedError that says
// why (askModels then asks the next model, if the spec has fallbacks).
func (r *run) sendModelTurnInQuota(ctx workflow.Context, activityID, summary string, call agentsagatype.ModelCall) workflow.Future {
	if !r.versions.quotaWaits {
		return r.sendModelTurn(ctx, activityID, summary, call)
	}
	call.Quota = true
	sent, settle := workflow.NewFuture(ctx)
	workflow.Go(ctx, func(ctx workflow.Context) {
		var turn agentsagatype.ModelTurn
		err := r.sendModelTurn(ctx, activityID, summary, call).Get(ctx, &turn)
		what, note := "the model "+call.Model.Target(), call.Note
		waited := 0
		for n := 1; ; n++ {
			if capped, ok := spendRefusalIn(err); ok {
				back, stop := r.meetSpendCap(capped, err, workflow.Now(ctx), n)
				if stop != nil {
					err = stop
					break
				}
				waited++
				if timerErr := r.waitForSpendCap(ctx, capped, activityID, back, n); timerErr != nil {
					err = timerErr // cancelled while waiting: nothing was sent
					break
				}
				call.Key = cmp.Or(call.Key, agentsagatype.CallKey(r.workflowID, activityID))
				call.Retry = r.plan("model", call.Retry.Dependency)
				// The model reads that its account held the turn back.
				call.Note = fmt.Sprintf("%s\nThe spend cap of account %s ($%.2f %s) held this turn back until %s.",
					note, capped.Account, capped.USD, agentsagatype.SpendPer(capped.Period), back.UTC().Format("15:04:05 UTC"))
				turn = agentsagatype.ModelTurn{}
				err = r.sendModelTurn(ctx, agentsagatype.SubActivityID(activityID, agentsagatype.SubAfterSpend, n), summary, call).Get(ctx, &turn)
				continue
			}
			refusal, refused := quotaRefusal(err)
			if !refused {
				break
			}
			r.quota.leafCalls += refusal.Attempt
			if refusal.AtGate {
				r.quota.leafCalls-- // refused before it was sent
			}
			now := workflow.Now(ctx)
			wait := parkWithoutProbeTime
			if !refusal.RetryAt.IsZero() {
				wait = max(refusal.RetryAt.Sub(now), minimumPark)
			}
			back := now.Add(wait)
			if r.RunBudget.ShouldFinish(back) {
				why := fmt.Sprintf("The quota of %s has no room until %s, and the run's budget cannot afford the wait",
					what, back.UTC().Format(time.RFC3339))
				r.Waits.stoppedWaiting(why, "the quota of "+what)
				err = &modelParkedError{err: err, why: why}
				break
			}
			waiting := fmt.Sprintf("waiting for the quota of %s: its provider's rate limit has no room; the turn goes out at %s (waited %d times)",
				what, back.UTC().Format(time.RFC3339), n)
			waited++
			r.quota.waits++
			r.quota.waited += wait
			if timerErr := r.waitOnce(ctx, refusalWait{back: back, waiting: waiting, progress: "Call " + activityID + " is " + waiting,
				details: note + "\n" + waiting, summary: "waiting for the quota of " + what, cause: "the quota of " + what}, n); timerErr != nil {
				err = timerErr // cancelled while waiting: nothing was sent
				break
			}
			call.Key = cmp.Or(call.Key, agentsagatype.CallKey(r.workflowID, activityID))
			call.Retry = r.plan("model", call.Retry.Dependency)
			// The model reads that its turn was held back, and for how long.
			call.Note = fmt.Sprintf("%s\nThe provider's rate limit held this turn back %s (until %s).",
				note, r.quota.waited.Round(time.Second), back.UTC().Format("15:04:05 UTC"))
			turn = agentsagatype.ModelTurn{}
			err = r.sendModelTurn(ctx, agentsagatype.SubActivityID(activityID, agentsagatype.SubAfterQuota, n), summary, call).Get(ctx, &turn)
		}
		if waited > 0 && !temporal.IsCanceledError(err) {
			r.setStatus(ctx, agentsagatype.RunRunning, "") // no longer waiting
		}
		settle.Set(turn, err)
	})
	return sent
}

// quotaRefusal is the quota's refusal in err (budget.DenyQuota), when that
// is what err is.
func quotaRefusal(err error) (agentsagatype.CallFailure, bool) {
	failure, ok := callFailureIn(err)
	return failure, ok && failure.Denial == budget.DenyQuota
}

// refusalWait is one wait of a call behind a refusal that a timer waits
// out (a quota, a spend cap): when the call goes out again, what the run's
// status (waiting), the UI's progress and details and the timer's summary
// say meanwhile, and the cause the run's book of waits charges it to.
type refusalWait struct {
	back                                       time.Time
	waiting, progress, details, summary, cause string
}

// waitOnce waits w out, the n-th wait of its call: the UI shows it, the
// ledger's status says it the first time, a timer waits until w.back, and
// the book of waits keeps it. It returns the timer's error (cancelled:
// nothing is sent again).
func (r *run) waitOnce(ctx workflow.Context, w refusalWait, n int) error {
	now := workflow.Now(ctx)
	r.showProgress(ctx, agentsagatype.RunRunning, w.progress, w.details)
	if n == 1 {
		r.setStatus(ctx, agentsagatype.RunRunning, w.waiting)
	}
	timer := workflow.NewTimerWithOptions(ctx, w.back.Sub(now), workflow.TimerOptions{Summary: clip(w.summary, 100)})
	err := timer.Get(ctx, nil)
	r.Waits.add(w.cause, now, workflow.Now(ctx), 1, time.Time{})
	return err
}

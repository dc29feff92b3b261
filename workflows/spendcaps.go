package workflows

import (
	"cmp"
	"fmt"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/budget"
	"github.com/agentsaga/agentsaga/internal/activityid"
	"github.com/agentsaga/agentsaga/internal/wire"
)

// A run charged to an account (budget.account, agentsaga-commands 7):
// every model turn reserves its most expensive outcome on the account's
// spend caps before it is sent, in the claim, and settles to what it cost.
// A turn the caps cannot pay for sends nothing, and the run does what the
// cap that binds says (meetSpendCap).

// spendPlan is what a turn on model m needs to reserve on the run's
// account, or nil when the run has none.
func (r *run) spendPlan(m agentsagatype.ModelSpec) *wire.SpendPlan {
	if !r.versions.spendCaps || r.spec.Budget.Account == "" {
		return nil
	}
	price := r.spec.Prices.Models[m.Name]
	return &wire.SpendPlan{Account: r.spec.Budget.Account, InputPerMillion: price.InputPerMillion,
		OutputPerMillion: price.OutputPerMillion, CachedInputPerMillion: price.CachedInputPerMillion,
		CacheWritePerMillion: price.CacheWritePerMillion}
}

// spendRefusalIn is the spend cap's refusal in err, when that is what err
// is.
func spendRefusalIn(err error) (wire.SpendRefusal, bool) {
	failure, ok := callFailureIn(err)
	if !ok || failure.Denial != budget.DenySpendCap || failure.Spend == nil {
		return wire.SpendRefusal{}, false
	}
	return *failure.Spend, true
}

// spendCapStop is a turn the account's cap could not pay for, in a run
// that ends on it: the cap says finish, or waiting for it would pass the
// run's wall clock.
type spendCapStop struct {
	refusal wire.SpendRefusal
	// unaffordable is set when the cap said wait and the run's budget
	// could not afford the wait.
	unaffordable bool
	err          error
}

func (e *spendCapStop) Error() string { return e.err.Error() }
func (e *spendCapStop) Unwrap() error { return e.err }

// finishingReason is the reason of a run whose cap keeps a finishing
// reserve: it ends with a turn paid from it.
func (e *spendCapStop) finishingReason() string {
	return e.refusal.Reason() + "; the run finishes with a turn paid from the cap's finishing reserve"
}

// reason is the run's reason: the cap, and why no model call ended it.
func (e *spendCapStop) reason() string {
	if e.unaffordable {
		return e.refusal.Reason() + "; waiting for it to reset would pass the run's budget, and the cap cannot pay for a finishing turn"
	}
	return e.refusal.Reason() + "; the run finishes without a last model turn, which the cap cannot pay for"
}

// spendCause names a cap in the run's book of waits.
func spendCause(refusal wire.SpendRefusal) string {
	return "the spend cap of account " + refusal.Account
}

// inFlightWait is the first wait of a turn refused only because other
// turns' reservations are still held: they settle within their leases,
// usually to less than they held, and give the rest back. Each wait
// doubles, up to inFlightWaitCap.
const (
	inFlightWait    = time.Second
	inFlightWaitCap = 8 * time.Second
)

// meetSpendCap does what the cap that refused a turn says: wait (the turn
// goes out again once the period resets: back), finish (stop, a
// *spendCapStop) or escalate (stop, a *modelParkedError whose why the
// human reads). A wait the run's budget cannot afford finishes instead.
// A turn the cap would have room for once the reservations in flight
// settle is not exhausted: it waits for them (the n-th wait of the turn
// is back), whatever the cap says.
func (r *run) meetSpendCap(refusal wire.SpendRefusal, err error, now time.Time, n int) (back time.Time, stop error) {
	if refusal.Reserved > 0 && refusal.Spent+refusal.Needed <= refusal.RoomForTurns() {
		back = now.Add(min(inFlightWait<<min(n-1, 8), inFlightWaitCap))
		if !r.RunBudget.ShouldFinish(back) {
			return back, nil
		}
	}
	switch refusal.OnExhausted {
	case agentsagatype.OnExhaustedWait:
		back = refusal.Resets.Add(minimumPark) // the clocks of the worker and Postgres may disagree
		if back.Before(now) {
			back = now.Add(minimumPark)
		}
		if r.RunBudget.ShouldFinish(back) {
			return time.Time{}, &spendCapStop{refusal: refusal, unaffordable: true, err: err}
		}
		return back, nil
	case agentsagatype.OnExhaustedEscalate:
		why := fmt.Sprintf("The run's account cannot pay for its next turn: %s. Raise the cap (`agentsaga spend set %s --usd ... --per %s`) and resume, or abort",
			refusal.Reason(), refusal.Account, refusal.Period)
		r.Waits.stoppedWaiting(why, spendCause(refusal))
		return time.Time{}, &modelParkedError{why: why, err: err}
	}
	return time.Time{}, &spendCapStop{refusal: refusal, err: err}
}

// waitForSpendCap waits on a timer until back, when the cap's period
// resets, showing why in the UI and the ledger, and books the wait.
func (r *run) waitForSpendCap(ctx workflow.Context, refusal wire.SpendRefusal, activityID string, back time.Time, n int) error {
	now := workflow.Now(ctx)
	waiting := fmt.Sprintf("waiting for the spend cap of account %s to reset at %s ($%.2f %s; the turn goes out again then)",
		refusal.Account, refusal.Resets.UTC().Format(time.RFC3339), refusal.USD, wire.SpendPer(refusal.Period))
	if back.Before(refusal.Resets) {
		waiting = fmt.Sprintf("waiting for the spend cap of account %s: $%.2f of its $%.2f %s is held by turns in flight, which give back what they do not spend; the turn asks again at %s",
			refusal.Account, refusal.Reserved, refusal.USD, wire.SpendPer(refusal.Period), back.UTC().Format(time.RFC3339))
	}
	return r.waitOnce(ctx, refusalWait{back: back, waiting: waiting, progress: "Call " + activityID + " is " + waiting,
		details: r.RunBudget.Note(now, r.openBreakers()), summary: "waiting for the spend cap of " + refusal.Account,
		cause: spendCause(refusal)}, n)
}

// accountNote is the line of the budget note about the run's account: the
// room its tightest cap had at the last turn, when that binds sooner than
// the run's own USD budget (or the run has none).
func (r *run) accountNote() string {
	a := r.accountLeft
	if a == nil {
		return ""
	}
	if own := r.RunBudget.Limits.USD - r.RunBudget.Used.USD; r.RunBudget.Limits.USD > 0 && own <= a.Left {
		return ""
	}
	resets := "resets"
	if _, rolling := wire.RollingWindow(a.Period); rolling {
		resets = "room frees"
	}
	return fmt.Sprintf("ACCOUNT %s: $%.2f left for turns of its $%.2f %s spend cap (%s %s); it binds before the run's own budget.",
		a.Account, a.Left, a.USD, wire.SpendPer(a.Period), resets, a.Resets.UTC().Format("2006-01-02 15:04 UTC"))
}

// toolSpend is what each attempt of a call of tool costs the run's
// account, or nil when the run has none or the tool is free.
func (r *run) toolSpend(tool string) *wire.ToolSpend {
	if !r.versions.toolSpend || r.spec.Budget.Account == "" {
		return nil
	}
	usd := r.spec.Prices.ToolUSD(tool, 1)
	if usd <= 0 {
		return nil
	}
	return &wire.ToolSpend{Account: r.spec.Budget.Account, USD: usd}
}

// waitForToolSpend does what the cap that refused c says, as a model
// turn does (meetSpendCap): while it says wait, the call goes out again
// under its first key, as <activityID>/after-spend-cap-N, once the cap
// has room; otherwise c.spendStop says why the run stops. It returns the
// call's last error.
func (r *run) waitForToolSpend(ctx workflow.Context, c *toolCall) error {
	err := c.err
	waited := false
	defer func() {
		if waited && ctx.Err() == nil {
			r.setStatus(ctx, agentsagatype.RunRunning, "") // no longer waiting
		}
	}()
	for n := 1; ; n++ {
		refusal, refused := spendRefusalIn(err)
		if !refused {
			return err
		}
		back, stop := r.meetSpendCap(refusal, err, workflow.Now(ctx), n)
		if stop != nil {
			c.spendStop = stop
			return err
		}
		waited = true
		if timerErr := r.waitForSpendCap(ctx, refusal, c.activityID, back, n); timerErr != nil {
			return timerErr // cancelled while waiting: nothing was sent
		}
		c.request.Key = cmp.Or(c.request.Key, activityid.Key(r.workflowID, c.activityID))
		c.result = wire.ToolResult{}
		err = r.sendToolCall(ctx, activityid.Sub(c.activityID, activityid.AfterSpendCap, n), c.call, c.request).Get(ctx, &c.result)
	}
}

// endOnSpendCap ends a run whose account's cap could not pay for its next
// call: with a turn paid from the cap's finishing reserve, where it keeps
// one, or with the handoff note the engine writes without a model call.
func (r *run) endOnSpendCap(ctx workflow.Context, step int, capped *spendCapStop) RunResult {
	if capped.refusal.FinishingReserve() {
		return r.gracefulFinish(ctx, step, r.LastContent, capped.finishingReason())
	}
	return r.outOfBudget(ctx, r.LastContent, "", capped.reason())
}

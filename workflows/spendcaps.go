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

// A run charged to an account (budget.account, agentsaga-commands 7):
// every model turn reserves its most expensive outcome on the account's
// spend caps before it is sent, in the claim, and settles to what it cost.
// A turn the caps cannot pay for sends nothing, and the run does what the
// cap that binds says (meetSpendCap).

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

// waitForToolSpend does what the cap that refused c says, as a model
// turn does (meetSpendCap): while it says wait, the call goes out again
// under its first key, as <activityID>/after-spend-cap-N, once the cap
// has room; otherwise c.spendStop says why the run stops. It returns the
// call's last error.
func (tt *toolTurn) waitForToolSpend(ctx workflow.Context, c *toolCall) error {
	r := tt.r
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
		back, stop := r.waits.meetSpendCap(refusal, err, workflow.Now(ctx), n)
		if stop != nil {
			c.spendStop = stop
			return err
		}
		waited = true
		if timerErr := r.waits.waitForSpendCap(ctx, refusal, c.activityID, back, n); timerErr != nil {
			return timerErr // cancelled while waiting: nothing was sent
		}
		c.request.Key = cmp.Or(c.request.Key, activityid.Key(r.workflowID, c.activityID))
		c.result = wire.ToolResult{}
		err = tt.sendToolCall(ctx, activityid.Sub(c.activityID, activityid.AfterSpendCap, n), c.call, c.request).Get(ctx, &c.result)
	}
}

// toolSpend is what each attempt of a call of tool costs the run's
// account, or nil when the run has none or the tool is free.
func (tt *toolTurn) toolSpend(tool string) *wire.ToolSpend {
	r := tt.r
	if !r.versions.toolSpend || r.spec.Budget.Account == "" {
		return nil
	}
	usd := r.spec.Prices.ToolUSD(tool, 1)
	if usd <= 0 {
		return nil
	}
	return &wire.ToolSpend{Account: r.spec.Budget.Account, USD: usd}
}

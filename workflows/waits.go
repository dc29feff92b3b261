package workflows

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/activityid"
	"github.com/agentsaga/agentsaga/internal/wire"
)

// The waits of a run's calls that a timer waits out, for a model turn
// (modelturn.go) and a tool call alike: behind an open breaker
// (parkBehindBreaker, over WaitOutBreaker in parking.go), for a provider's
// quota and an account's spend cap (waitOnce, meetSpendCap,
// waitForSpendCap), and the book of what they took of the wall clock,
// which an ending on it names.

// waits is how the run's calls wait out what refuses them for a while (an
// open breaker, a provider's quota, an account's spend cap) and what the
// waits took. It owns the book of waits (carried) and the room the run's
// account had at the last turn, as its caps said (nil before a turn said
// it), for the budget note; run is the run whose budget a wait must fit
// and whose status and UI show it.
type waits struct {
	book        waitBook
	accountLeft *agentsagatype.AccountLeft
	run         *run
}

// waitBook is what a run's waits took of its wall clock, by cause: behind
// an open breaker, for a provider's quota, for a human after an
// escalation. An ending on the wall clock names them (agentsaga-commands
// 6), so that a reason never blames the budget alone when a wait spent it.
// A wait for approval costs no wall clock (humans.go gives it back):
// the book counts what was given back, so the ending can say so.
type waitBook struct {
	// Causes are in the order the run first met them.
	Causes []waitCause `json:"causes,omitempty"`
	// Seconds is the wall clock the waits took together: waits that
	// overlap (parallel calls parked behind one breaker) count once.
	Seconds float64   `json:"seconds,omitempty"`
	Until   time.Time `json:"until,omitzero"`
	// GivenBack is the wall clock spent waiting for approval, which the
	// run's budget gave back.
	GivenBack float64 `json:"given_back,omitempty"`
	// escalating maps why a call stopped waiting, as escalate hears it, to
	// the cause it waited on: the time the run then spends escalated is
	// that cause's. A turn's calls set it and escalate reads it in the
	// same step, so it is never carried.
	escalating map[string]string
}

// waitCause is the wall clock one cause took.
type waitCause struct {
	// Cause names it: "tool crm", "the model openai:gpt-4o", "the quota
	// of the model openai:gpt-4o", or humanCause.
	Cause   string  `json:"cause"`
	Seconds float64 `json:"seconds"`
	// Since, for an outage, is when the breaker opened (or when the run
	// was first refused, when no refusal said).
	Since time.Time `json:"since,omitzero"`
	// Until is the end of the last wait counted.
	Until       time.Time `json:"until,omitzero"`
	Waits       int       `json:"waits,omitempty"`
	Escalations int       `json:"escalations,omitempty"`
}

// humanCause is the cause of an escalation no wait led to (a refusal, the
// watchdog, failed calls): the run waited for a human to answer it.
const humanCause = "a human to answer an escalation"

// add books a wait on cause from from to to, in timers (waits). since,
// when not zero, is when the outage began.
func (b *waitBook) add(cause string, from, to time.Time, waits int, since time.Time) {
	if !to.After(from) {
		return
	}
	c := b.cause(cause)
	if !since.IsZero() && (c.Since.IsZero() || since.After(c.Until)) {
		c.Since = since // a new outage of the same dependency
	}
	c.Seconds += overlapFree(&c.Until, from, to)
	c.Waits += waits
	b.Seconds += overlapFree(&b.Until, from, to)
}

// overlapFree is the part of [from, to] after *until, in seconds, and
// moves *until to to.
func overlapFree(until *time.Time, from, to time.Time) float64 {
	if until.After(from) {
		from = *until
	}
	if !to.After(from) {
		return 0
	}
	*until = to
	return to.Sub(from).Seconds()
}

func (b *waitBook) cause(name string) *waitCause {
	for i := range b.Causes {
		if b.Causes[i].Cause == name {
			return &b.Causes[i]
		}
	}
	b.Causes = append(b.Causes, waitCause{Cause: name})
	return &b.Causes[len(b.Causes)-1]
}

// stoppedWaiting notes that a call which waited on cause asks a human,
// with why.
func (b *waitBook) stoppedWaiting(why, cause string) {
	if b.escalating == nil {
		b.escalating = map[string]string{}
	}
	b.escalating[why] = cause
}

// escalated books the time the run spent escalated with why, from from
// to to, on the cause that led to it.
func (b *waitBook) escalated(why string, from, to time.Time) {
	cause := cmp.Or(b.escalating[why], humanCause)
	b.escalating = nil
	b.add(cause, from, to, 0, time.Time{})
	b.cause(cause).Escalations++
}

// newStep forgets the escalations the last step's waits would have led
// to (a fallback model answered the turn instead).
func (b *waitBook) newStep() { b.escalating = nil }

// spent describes what the waits took of the wall clock, for a reason
// that ends the run on it, after "; " and a subject ("230 s of it"):
// "went waiting for tool crm (breaker open since 16:38:14Z, 38 waits,
// escalated 3 times)", the largest cause first. It is "" when the waits
// took less than a second.
func (b *waitBook) spent(subject string) string {
	var parts []string
	if whole := math.Round(b.Seconds); whole >= 1 {
		causes := slices.Clone(b.Causes)
		slices.SortStableFunc(causes, func(x, y waitCause) int { return cmp.Compare(y.Seconds, x.Seconds) })
		causes = slices.DeleteFunc(causes, func(c waitCause) bool { return math.Round(c.Seconds) < 1 })
		switch len(causes) {
		case 0: // many waits of under a second each
			parts = append(parts, fmt.Sprintf("%.0f s of %s went waiting", whole, subject))
		case 1:
			parts = append(parts, fmt.Sprintf("%.0f s of %s went waiting for %s", whole, subject, causes[0].describe()))
		default:
			each := make([]string, len(causes))
			for i, c := range causes {
				each[i] = fmt.Sprintf("%.0f s for %s", math.Round(c.Seconds), c.describe())
			}
			parts = append(parts, fmt.Sprintf("%.0f s of %s went waiting: %s", whole, subject, strings.Join(each, ", ")))
		}
	}
	if given := math.Round(b.GivenBack); given >= 1 {
		parts = append(parts, fmt.Sprintf("the %.0f s spent waiting for approval were given back", given))
	}
	return strings.Join(parts, "; ")
}

// describe is "tool crm (breaker open since 16:38:14Z, 38 waits,
// escalated 3 times)".
func (c waitCause) describe() string {
	var details []string
	if !c.Since.IsZero() {
		details = append(details, "breaker open since "+c.Since.UTC().Format("15:04:05Z"))
	}
	if c.Waits > 0 {
		details = append(details, plural(c.Waits, "wait"))
	}
	switch {
	case c.Escalations == 1:
		details = append(details, "escalated once")
	case c.Escalations > 1:
		details = append(details, fmt.Sprintf("escalated %d times", c.Escalations))
	}
	if len(details) == 0 {
		return c.Cause
	}
	return c.Cause + " (" + strings.Join(details, ", ") + ")"
}

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// dimensionNames are the budget's dimensions as a reason names them.
var dimensionNames = map[string]string{
	"steps": "steps", "leaf_calls": "leaf calls", "tokens": "tokens", "usd": "USD", "seconds": "wall clock",
}

// refusalWait is one wait of a call behind a refusal that a timer waits
// out (a quota, a spend cap): when the call goes out again, what the run's
// status (waiting), the UI's progress and details and the timer's summary
// say meanwhile, and the cause the run's book of waits charges it to.
type refusalWait struct {
	back                                       time.Time
	waiting, progress, details, summary, cause string
}

// budgetSpent is the reason of a run whose budget dimension (as
// runbudget.RunBudget.Exhausted names it) is spent: for the wall clock, with
// what the waits took of it.
func (ws *waits) budgetSpent(dimension string) string {
	r := ws.run
	if r.versions.namesWaits && dimension == "seconds" {
		return ws.withWaits("the wall clock is spent", "it")
	}
	return fmt.Sprintf("the %s budget is spent", dimension)
}

// finishingEarly is the reason of a graceful finish on the budget at now:
// the dimension nearest its end, and, for the wall clock, what the waits
// took of it.
func (ws *waits) finishingEarly(now time.Time) string {
	r := ws.run
	left := 100 * r.budget.FractionLeft(now)
	if !r.versions.namesWaits {
		return fmt.Sprintf("graceful finish: %.0f%% of the budget was left (finish_at %.2f)", left, r.budget.FinishAt)
	}
	dimension := r.budget.Scarcest(now)
	reason := fmt.Sprintf("graceful finish: %.0f%% of the %s left (finish_at %.2f)", left, dimensionNames[dimension], r.budget.FinishAt)
	if dimension == "seconds" {
		reason = ws.withWaits(reason, "it")
	}
	return reason
}

// withWaits ends a reason about the wall clock with what the waits took
// of it (subject names the wall clock in the sentence: "it", "the wall
// clock"), from agentsaga-commands 6.
func (ws *waits) withWaits(reason, subject string) string {
	r := ws.run
	if !r.versions.namesWaits {
		return reason
	}
	if spent := ws.book.spent(subject); spent != "" {
		return reason + "; " + spent
	}
	return reason
}

// waitOnce waits w out, the n-th wait of its call: the UI shows it, the
// ledger's status says it the first time, a timer waits until w.back, and
// the book of waits keeps it. It returns the timer's error (cancelled:
// nothing is sent again).
func (ws *waits) waitOnce(ctx workflow.Context, w refusalWait, n int) error {
	r := ws.run
	now := workflow.Now(ctx)
	r.showProgress(ctx, agentsagatype.RunRunning, w.progress, w.details)
	if n == 1 {
		r.setStatus(ctx, agentsagatype.RunRunning, w.waiting)
	}
	timer := workflow.NewTimerWithOptions(ctx, w.back.Sub(now), workflow.TimerOptions{Summary: clip(w.summary, 100)})
	err := timer.Get(ctx, nil)
	ws.book.add(w.cause, now, workflow.Now(ctx), 1, time.Time{})
	return err
}

// meetSpendCap does what the cap that refused a turn says: wait (the turn
// goes out again once the period resets: back), finish (stop, a
// *spendCapStop) or escalate (stop, a *modelParkedError whose why the
// human reads). A wait the run's budget cannot afford finishes instead.
// A turn the cap would have room for once the reservations in flight
// settle is not exhausted: it waits for them (the n-th wait of the turn
// is back), whatever the cap says.
func (ws *waits) meetSpendCap(refusal wire.SpendRefusal, err error, now time.Time, n int) (back time.Time, stop error) {
	r := ws.run
	if refusal.Reserved > 0 && refusal.Spent+refusal.Needed <= refusal.RoomForTurns() {
		back = now.Add(min(inFlightWait<<min(n-1, 8), inFlightWaitCap))
		if !r.budget.ShouldFinish(back) {
			return back, nil
		}
	}
	switch refusal.OnExhausted {
	case agentsagatype.OnExhaustedWait:
		back = refusal.Resets.Add(minimumPark) // the clocks of the worker and Postgres may disagree
		if back.Before(now) {
			back = now.Add(minimumPark)
		}
		if r.budget.ShouldFinish(back) {
			return time.Time{}, &spendCapStop{refusal: refusal, unaffordable: true, err: err}
		}
		return back, nil
	case agentsagatype.OnExhaustedEscalate:
		why := fmt.Sprintf("The run's account cannot pay for its next turn: %s. Raise the cap (`agentsaga spend set %s --usd ... --per %s`) and resume, or abort",
			refusal.Reason(), refusal.Account, refusal.Period)
		ws.book.stoppedWaiting(why, spendCause(refusal))
		return time.Time{}, &modelParkedError{why: why, err: err}
	}
	return time.Time{}, &spendCapStop{refusal: refusal, err: err}
}

// waitForSpendCap waits on a timer until back, when the cap's period
// resets, showing why in the UI and the ledger, and books the wait.
func (ws *waits) waitForSpendCap(ctx workflow.Context, refusal wire.SpendRefusal, activityID string, back time.Time, n int) error {
	r := ws.run
	now := workflow.Now(ctx)
	waiting := fmt.Sprintf("waiting for the spend cap of account %s to reset at %s ($%.2f %s; the turn goes out again then)",
		refusal.Account, refusal.Resets.UTC().Format(time.RFC3339), refusal.USD, wire.SpendPer(refusal.Period))
	if back.Before(refusal.Resets) {
		waiting = fmt.Sprintf("waiting for the spend cap of account %s: $%.2f of its $%.2f %s is held by turns in flight, which give back what they do not spend; the turn asks again at %s",
			refusal.Account, refusal.Reserved, refusal.USD, wire.SpendPer(refusal.Period), back.UTC().Format(time.RFC3339))
	}
	return ws.waitOnce(ctx, refusalWait{back: back, waiting: waiting, progress: "Call " + activityID + " is " + waiting,
		details: r.budget.Note(now, r.calls.openBreakers()), summary: "waiting for the spend cap of " + refusal.Account,
		cause: spendCause(refusal)}, n)
}

// accountNote is the line of the budget note about the run's account: the
// room its tightest cap had at the last turn, when that binds sooner than
// the run's own USD budget (or the run has none).
func (ws *waits) accountNote() string {
	r := ws.run
	a := ws.accountLeft
	if a == nil {
		return ""
	}
	if own := r.budget.Limits.USD - r.budget.Used.USD; r.budget.Limits.USD > 0 && own <= a.Left {
		return ""
	}
	resets := "resets"
	if _, rolling := wire.RollingWindow(a.Period); rolling {
		resets = "room frees"
	}
	return fmt.Sprintf("ACCOUNT %s: $%.2f left for turns of its $%.2f %s spend cap (%s %s); it binds before the run's own budget.",
		a.Account, a.Left, a.USD, wire.SpendPer(a.Period), resets, a.Resets.UTC().Format("2006-01-02 15:04 UTC"))
}

// parkBehindBreaker waits out the open breaker that refused one of the
// run's calls, sending it again under activity ID
// <activityID>/after-breaker-N. what names the call in the UI and to a
// human ("tool crm"), whose the breaker in its timer's summary ("crm's"),
// and dependency its entry in the model's note of open breakers.
func (ws *waits) parkBehindBreaker(ctx workflow.Context, what, whose, dependency, activityID string, err error,
	send func(ctx workflow.Context, again string) workflow.Future, result any) (error, parkedCall) {
	r := ws.run
	limit := time.Duration(r.spec.Escalate.AfterBreakerOpenSeconds) * time.Second
	start := workflow.Now(ctx)
	err, out := WaitOutBreaker(ctx, err, BreakerWait{
		Limit:           limit,
		Affordable:      func(back time.Time) bool { return !r.budget.ShouldFinish(back) },
		ForgetOpenSince: !r.versions.keepOpenSince,
		WakeAtLimit:     r.versions.wakeAtLimit,
		Summary:         clip("parked: "+whose+" breaker is open", 100),
		Parked: func(n int, since, back time.Time) {
			r.calls.markOpen(dependency, since)
			waiting := fmt.Sprintf("waiting for %s: its circuit breaker is open; the call goes out again at %s (parked %d times, since %s)",
				what, back.UTC().Format(time.RFC3339), n, since.UTC().Format(time.RFC3339))
			r.showProgress(ctx, agentsagatype.RunRunning, "Call "+activityID+" is "+waiting, r.note(ctx))
			if n == 1 {
				r.setStatus(ctx, agentsagatype.RunRunning, waiting)
			}
		},
	}, func(ctx workflow.Context, n int) workflow.Future {
		return send(ctx, activityid.Sub(activityID, activityid.AfterBreaker, n))
	}, result)
	parked := parkedCall{leafCalls: out.LeafCalls, parks: out.Parks}
	if out.Parks > 0 {
		ws.book.add(what, start, workflow.Now(ctx), out.Parks, cmp.Or(out.OpenSince, out.Since))
	}
	switch out.Stopped {
	case StoppedNoWait:
		parked.escalation = fmt.Sprintf("The circuit breaker for %s is open: the dependency is down", what)
	case StoppedLimit:
		since := out.Since
		if !out.OpenSince.IsZero() {
			since = out.OpenSince
		}
		parked.escalation = fmt.Sprintf("The circuit breaker for %s has been open for %s, and the call waits at most %s (escalate.after_breaker_open_seconds)",
			what, workflow.Now(ctx).Sub(since).Round(time.Second), limit)
	case StoppedBudget:
		parked.escalation = fmt.Sprintf("The circuit breaker for %s is open until %s, and the run's budget cannot afford the wait",
			what, out.Back.UTC().Format(time.RFC3339))
	default:
		if out.Parks > 0 && !temporal.IsCanceledError(err) {
			r.setStatus(ctx, agentsagatype.RunRunning, "") // no longer waiting
		}
	}
	if parked.escalation != "" {
		ws.book.stoppedWaiting(parked.escalation, what)
	}
	return err, parked
}

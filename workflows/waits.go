package workflows

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/agentsaga/agentsaga/agentsagatype"
)

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

// budgetSpent is the reason of a run whose budget dimension (as
// runbudget.RunBudget.Exhausted names it) is spent: for the wall clock, with
// what the waits took of it.
func (r *run) budgetSpent(dimension string) string {
	if r.versions.namesWaits && dimension == "seconds" {
		return r.withWaits("the wall clock is spent", "it")
	}
	return fmt.Sprintf("the %s budget is spent", dimension)
}

// finishingEarly is the reason of a graceful finish on the budget at now:
// the dimension nearest its end, and, for the wall clock, what the waits
// took of it.
func (r *run) finishingEarly(now time.Time) string {
	left := 100 * r.RunBudget.FractionLeft(now)
	if !r.versions.namesWaits {
		return fmt.Sprintf("graceful finish: %.0f%% of the budget was left (finish_at %.2f)", left, r.RunBudget.FinishAt)
	}
	dimension := r.RunBudget.Scarcest(now)
	reason := fmt.Sprintf("graceful finish: %.0f%% of the %s left (finish_at %.2f)", left, dimensionNames[dimension], r.RunBudget.FinishAt)
	if dimension == "seconds" {
		reason = r.withWaits(reason, "it")
	}
	return reason
}

// dimensionNames are the budget's dimensions as a reason names them.
var dimensionNames = map[string]string{
	"steps": "steps", "leaf_calls": "leaf calls", "tokens": "tokens", "usd": "USD", "seconds": "wall clock",
}

// withWaits ends a reason about the wall clock with what the waits took
// of it (subject names the wall clock in the sentence: "it", "the wall
// clock"), from agentsaga-commands 6.
func (r *run) withWaits(reason, subject string) string {
	if !r.versions.namesWaits {
		return reason
	}
	if spent := r.Waits.spent(subject); spent != "" {
		return reason + "; " + spent
	}
	return reason
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

package runbudget

import (
	"fmt"
	"github.com/agentsaga/agentsaga/budget"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// RunBudget is one run's limits and spending, with the graceful-finish
// threshold and the note that shows the model what is left. It never reads
// the clock itself: every method that needs "now" is given it, so a
// workflow can pass its replay-safe time and get the same answer on replay.
// It is not safe for concurrent use; a run's budget belongs to its
// workflow.
//
// Its JSON (what continue-as-new carries of it) is its limits, start and
// spending; FinishAt comes from the run's spec.
type RunBudget struct {
	Limits budget.Limits `json:"limits"`
	// FinishAt is the fraction of budget left at or below which the run
	// must switch to writing its partial answer and handoff note.
	FinishAt float64 `json:"-"`
	// Start is when the run's wall clock began, for the seconds limit.
	Start time.Time `json:"start"`
	// Used is what the run has spent so far.
	Used budget.Usage `json:"used"`
	// reserved is what sub-runs still running were granted and not yet
	// released (Reserve, Release): Grant shares out only what is left
	// after it.
	reserved budget.Usage
}

// NewRunBudget returns an unspent budget. finishAt must lie strictly
// between 0 and 1: at 0 the switch to a graceful finish would come only
// once nothing is left to finish with, and at 1 it would come before the
// first step.
func NewRunBudget(l budget.Limits, finishAt float64, start time.Time) (*RunBudget, error) {
	if err := l.Validate(); err != nil {
		return nil, err
	}
	if !(finishAt > 0 && finishAt < 1) { // written this way so NaN fails too
		return nil, fmt.Errorf("budget.finish_at: %v must be a fraction strictly between 0 and 1 (0.2 finishes with a fifth of the budget left)", finishAt)
	}
	return &RunBudget{Limits: l, FinishAt: finishAt, Start: start}, nil
}

// Spend adds u to what the run has used.
func (r *RunBudget) Spend(u budget.Usage) { r.Used = plus(r.Used, u) }

func plus(u, v budget.Usage) budget.Usage {
	return budget.Usage{Steps: u.Steps + v.Steps, LeafCalls: u.LeafCalls + v.LeafCalls, Tokens: u.Tokens + v.Tokens, USD: u.USD + v.USD}
}

func minus(u, v budget.Usage) budget.Usage {
	return budget.Usage{Steps: u.Steps - v.Steps, LeafCalls: u.LeafCalls - v.LeafCalls, Tokens: u.Tokens - v.Tokens, USD: u.USD - v.USD}
}

// Raise adds more to each dimension that has a limit (a human granting
// more budget to a run that waits for them). A dimension without a limit
// stays without one: adding to its zero would turn it into a tiny limit.
func (r *RunBudget) Raise(more budget.Limits) {
	if r.Limits.Steps > 0 {
		r.Limits.Steps += more.Steps
	}
	if r.Limits.LeafCalls > 0 {
		r.Limits.LeafCalls += more.LeafCalls
	}
	if r.Limits.Tokens > 0 {
		r.Limits.Tokens += more.Tokens
	}
	if r.Limits.USD > 0 {
		r.Limits.USD += more.USD
	}
	if r.Limits.Seconds > 0 {
		r.Limits.Seconds += more.Seconds
	}
}

// Restore takes up the limits and spending an earlier part of the same run
// carried over (a workflow that continued as new): the limits as they
// were then, a human's additions included, and everything spent so far.
func (r *RunBudget) Restore(limits budget.Limits, used budget.Usage) {
	r.Limits, r.Used = limits, used
}

// Grant carves a sub-run's limits out of r at now: share of what is left
// after the reservations of sub-runs still running, on every dimension r
// limits, so sub-runs side by side never add up to more than r has. The
// seconds limit is all of r's seconds left: a sub-run shares its parent's
// deadline rather than a part of it. A dimension r does not limit stays
// unlimited. Grant reserves nothing: Reserve the limits once the sub-run
// is sure to start. It fails when the carve leaves a dimension nothing to
// spend.
func (r *RunBudget) Grant(now time.Time, share float64) (budget.Limits, error) {
	left := r.Remaining(now)
	carve := func(remaining, reserved float64) float64 { return (remaining - reserved) * share }
	// A sub-run is paid for by its parent's account.
	limits := budget.Limits{Steps: int(math.Floor(carve(float64(left.Steps), float64(r.reserved.Steps)))), Account: r.Limits.Account}
	if left.LeafCalls != budget.Unlimited {
		limits.LeafCalls = int(math.Floor(carve(float64(left.LeafCalls), float64(r.reserved.LeafCalls))))
	}
	if left.Tokens != budget.Unlimited {
		limits.Tokens = int64(math.Floor(carve(float64(left.Tokens), float64(r.reserved.Tokens))))
	}
	if left.USD != budget.Unlimited {
		limits.USD = carve(left.USD, r.reserved.USD)
	}
	if left.Seconds != budget.Unlimited {
		limits.Seconds = left.Seconds
	}
	if limits.Steps < 1 || (left.LeafCalls != budget.Unlimited && limits.LeafCalls < 1) ||
		(left.Tokens != budget.Unlimited && limits.Tokens < 1) || (left.USD != budget.Unlimited && limits.USD <= 0) ||
		(left.Seconds != budget.Unlimited && limits.Seconds <= 0) {
		return budget.Limits{}, fmt.Errorf("the budget left (%+v, %+v already handed to sub-agents) is too small to share", left, r.reserved)
	}
	return limits, nil
}

// Reservation is what Reserve set aside of a run's budget for one sub-run.
type Reservation struct{ held budget.Usage }

// Reserve sets granted (a Grant) aside for a sub-run that has started:
// later Grants share out only what is left after it. Seconds are not
// reserved: sub-runs share the deadline.
func (r *RunBudget) Reserve(granted budget.Limits) Reservation {
	held := budget.Usage{Steps: granted.Steps, LeafCalls: granted.LeafCalls, Tokens: granted.Tokens, USD: granted.USD}
	r.reserved = plus(r.reserved, held)
	return Reservation{held: held}
}

// Release ends a sub-run's reservation and spends what the sub-run spent:
// the part of its grant it did not use is r's to share again, and r's
// spending stays the true total of the run and its sub-runs.
func (r *RunBudget) Release(reservation Reservation, spent budget.Usage) {
	r.reserved = minus(r.reserved, reservation.held)
	r.Spend(spent)
}

// Reserved is what sub-runs still running hold of r (Reserve, Release).
func (r *RunBudget) Reserved() budget.Usage { return r.reserved }

// Remaining returns what is left at now.
func (r *RunBudget) Remaining(now time.Time) budget.Remaining {
	l, u := r.Limits, r.Used
	left := budget.Remaining{
		Steps:     max(l.Steps-u.Steps, 0),
		LeafCalls: budget.Unlimited,
		Tokens:    budget.Unlimited,
		USD:       budget.Unlimited,
		Seconds:   budget.Unlimited,
	}
	if l.LeafCalls > 0 {
		left.LeafCalls = max(l.LeafCalls-u.LeafCalls, 0)
	}
	if l.Tokens > 0 {
		left.Tokens = max(l.Tokens-u.Tokens, 0)
	}
	if l.USD > 0 {
		left.USD = max(l.USD-u.USD, 0)
	}
	if l.Seconds > 0 {
		left.Seconds = max(l.Seconds-r.elapsed(now), 0)
	}
	return left
}

// elapsed is the run's wall clock in seconds. A now before Start (a clock
// that disagrees with the one that stamped Start) counts as no time
// spent rather than as extra time granted.
func (r *RunBudget) elapsed(now time.Time) float64 {
	return max(now.Sub(r.Start).Seconds(), 0)
}

// FractionLeft is the smallest fraction left of any limited dimension:
// the run is as close to the end as its scarcest resource says. Steps are
// always limited; the other dimensions count only when they have a limit.
func (r *RunBudget) FractionLeft(now time.Time) float64 {
	_, frac := r.scarcest(now)
	return frac
}

// Scarcest names the limited dimension with the smallest fraction left at
// now (steps, leaf_calls, tokens, usd or seconds, as Exhausted names
// them): the one a graceful finish is for. On a tie the earlier in that
// order is named.
func (r *RunBudget) Scarcest(now time.Time) string {
	dimension, _ := r.scarcest(now)
	return dimension
}

func (r *RunBudget) scarcest(now time.Time) (string, float64) {
	l, left := r.Limits, r.Remaining(now)
	dimension, frac := "steps", float64(left.Steps)/float64(l.Steps)
	consider := func(name string, limited bool, f float64) {
		if limited && f < frac {
			dimension, frac = name, f
		}
	}
	consider("leaf_calls", l.LeafCalls > 0, float64(left.LeafCalls)/float64(l.LeafCalls))
	consider("tokens", l.Tokens > 0, float64(left.Tokens)/float64(l.Tokens))
	consider("usd", l.USD > 0, left.USD/l.USD)
	consider("seconds", l.Seconds > 0, left.Seconds/l.Seconds)
	return dimension, frac
}

// Exhausted names the first dimension with nothing left at now, in the
// order steps, leaf_calls, tokens, usd, seconds, or returns "". The
// spending dimensions are exhausted's.
func (r *RunBudget) Exhausted(now time.Time) string {
	if dim := exhausted(r.Limits, r.Used); dim != "" {
		return dim
	}
	if r.Limits.Seconds > 0 && r.elapsed(now) >= r.Limits.Seconds {
		return "seconds"
	}
	return ""
}

// ShouldFinish reports whether the run must stop exploring and spend what
// is left on a partial answer and a handoff note.
func (r *RunBudget) ShouldFinish(now time.Time) bool {
	return r.Exhausted(now) != "" || r.FractionLeft(now) <= r.FinishAt
}

// Deadline is when the seconds limit runs out, or the zero time when the
// run has none.
func (r *RunBudget) Deadline() time.Time { return r.Limits.Deadline(r.Start) }

// FinishInstruction is the hard switch the note adds once the run should
// finish: not "you are running low", which a model reads as advice, but an
// order to stop and hand over.
const FinishInstruction = "You are nearly out of budget. Stop exploring. Spend what is left writing the best " +
	"partial answer you have plus a handoff note saying what is done, what is not, and what you would try next."

// Note is the budget in plain language for the model's context, every
// turn, so the model can triage instead of being cut off mid-thought:
//
//	BUDGET LEFT: 9 steps | 5 leaf calls | 17,300 tokens | 0.34 USD | 89s
//
// Only limited dimensions appear. openBreakers, the dependencies whose
// circuit breakers are open, become a line telling the model not to plan
// around them; once ShouldFinish, FinishInstruction follows.
func (r *RunBudget) Note(now time.Time, openBreakers []string) string {
	l, left := r.Limits, r.Remaining(now)
	parts := []string{strconv.Itoa(left.Steps) + " steps"}
	if l.LeafCalls > 0 {
		parts = append(parts, strconv.Itoa(left.LeafCalls)+" leaf calls")
	}
	if l.Tokens > 0 {
		parts = append(parts, thousands(left.Tokens)+" tokens")
	}
	if l.USD > 0 {
		parts = append(parts, strconv.FormatFloat(left.USD, 'f', 2, 64)+" USD")
	}
	if l.Seconds > 0 {
		parts = append(parts, strconv.FormatFloat(left.Seconds, 'f', 0, 64)+"s")
	}
	var b strings.Builder
	b.WriteString("BUDGET LEFT: ")
	b.WriteString(strings.Join(parts, " | "))

	// Sorted and deduplicated because callers collect breakers from maps
	// and from several calls: the note must be the same bytes on replay,
	// and the same set should read the same way turn after turn.
	names := slices.DeleteFunc(slices.Clone(openBreakers), func(s string) bool { return s == "" })
	slices.Sort(names)
	names = slices.Compact(names)
	if len(names) > 0 {
		b.WriteString("\nCircuit breakers open: ")
		b.WriteString(strings.Join(names, ", "))
		b.WriteString(" (do not plan around them).")
	}
	if r.ShouldFinish(now) {
		b.WriteString("\n")
		b.WriteString(FinishInstruction)
	}
	return b.String()
}

// thousands renders n with comma separators, as the model reads "17,300"
// at a glance where "17300" invites miscounting digits.
func thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	sign := ""
	if s[0] == '-' {
		sign, s = "-", s[1:]
	}
	var b strings.Builder
	b.WriteString(sign)
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// exhausted names the first dimension of l that usage u has reached, or
// returns "" while there is budget left. Wall clock is the workflow's to
// check, since only it owns "now".
func exhausted(l budget.Limits, u budget.Usage) string {
	switch {
	case u.Steps >= l.Steps:
		return "steps"
	case l.LeafCalls > 0 && u.LeafCalls >= l.LeafCalls:
		return "leaf_calls"
	case l.Tokens > 0 && u.Tokens >= l.Tokens:
		return "tokens"
	case l.USD > 0 && u.USD >= l.USD:
		return "usd"
	}
	return ""
}

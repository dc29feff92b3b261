package budget

import (
	"fmt"
	"time"
)

// Denial reasons: the named error types a refused retry fails with, in the
// order the retry hook consults them. Each says which budget said no.
const (
	DenyCallAttempts = "CallAttemptsExhausted" // the per-call attempt cap
	DenyToolCap      = "ToolRetryCapReached"   // the per-tool retry cap of the run
	DenyRunRatio     = "RunRetryBudgetSpent"   // the run's retry ratio (with its floor)
	DenyCircuitOpen  = "CircuitOpen"           // the dependency's breaker is open
	DenyFleetBucket  = "RetryBudgetExhausted"  // the fleet-wide token bucket is empty
	DenyDeadline     = "DeadlineExceeded"      // the backoff would outlive the run's deadline
	// DenyQuota is not a retry's denial: a model turn its provider's quota
	// had no room for (at admission, or answered 429) waits until the
	// refusal's time, costing no retry and no attempt.
	DenyQuota = "QuotaWait"
	// DenySpendCap is not a retry's denial either: a model turn its
	// account's spend cap cannot pay for sends nothing, and the run does
	// what the cap says (finish, wait for the period to reset, escalate).
	DenySpendCap = "SpendCap"
)

// Granted is the decision of a retry that every budget paid for.
const Granted = "granted"

// BucketConfig shapes a token bucket: Capacity tokens at most, refilled at
// RefillPerSecond, plus SuccessBonus for every success. A retry costs one
// token.
type BucketConfig struct {
	Capacity        float64 `json:"capacity"`
	RefillPerSecond float64 `json:"refill_per_second"`
	SuccessBonus    float64 `json:"success_bonus"`
}

// DefaultBucket admits bursts of 40 retries and then one retry per second,
// plus one for every five successes, fleet-wide. The bonus is the fleet's
// share of retries under partial failure, and it matches a run's own ratio
// (0.2, RetryPolicy): at one for every ten, a fleet at 20% independent
// failure, which needs 0.24 retries a call, ran the bucket dry in `agentsaga
// bench success` and lost calls its runs' budgets would have retried. An
// outage is bounded as before: it has no successes, so the bonus adds
// nothing to the burst and the refill, and the breaker parks the calls.
var DefaultBucket = BucketConfig{Capacity: 40, RefillPerSecond: 1, SuccessBonus: 0.2}

// Validate rejects a bucket that could never grant a retry, or negative
// numbers.
func (c BucketConfig) Validate() error {
	switch {
	case c.Capacity < 0 || c.RefillPerSecond < 0 || c.SuccessBonus < 0:
		return fmt.Errorf("retry bucket: capacity %v, refill_per_second %v and success_bonus %v must not be negative",
			c.Capacity, c.RefillPerSecond, c.SuccessBonus)
	case c.Capacity < 1:
		return fmt.Errorf("retry bucket: capacity %v holds less than the one token a retry costs; with capacity 0 no retry is ever granted", c.Capacity)
	}
	return nil
}

// BreakerConfig shapes a circuit breaker. It opens when its dependency is
// down: Threshold retryable failures in a row, with no success between them,
// within Window of the first (ARCHITECTURE.md decision 12). A dependency that flaps,
// some requests failing and some not, never opens it: its failures are the
// retry budget's business. Open, it refuses calls for Cooldown, then lets
// exactly one probe through; while the outage lasts, each failed probe
// opens it again for ProbeInterval, which grows from Cooldown to
// MaxCooldown.
type BreakerConfig struct {
	Threshold int           `json:"threshold"`
	Window    time.Duration `json:"window"`
	Cooldown  time.Duration `json:"cooldown"`
	// MaxCooldown caps the probe interval of an outage that lasts
	// (ProbeInterval); zero is 12 cooldowns (DefaultBreaker's minute).
	// Equal to Cooldown, the interval never grows: one probe per Cooldown
	// however long the outage.
	MaxCooldown time.Duration `json:"max_cooldown,omitempty"`
	// SteadyProbes is how many failed probes in a row of one outage are
	// each followed by the next one a Cooldown later; after that many the
	// interval doubles with each failed probe, up to MaxCooldown. Zero is
	// 6, DefaultBreaker's.
	SteadyProbes int `json:"steady_probes,omitempty"`
	// Release, when set, is ReleaseInterval: the dependency declared the
	// rate it takes (agentsagatype.RetryPlan.ReleaseInterval). Unset, the
	// release rate is adaptive (Adaptive).
	Release time.Duration `json:"release,omitempty"`
	// Adaptive shapes the release rate of a dependency that declares
	// none; a zero field takes the default's (Start 10 a second, Ceiling
	// 20, Step 0.05, Hold a second; Floor: one release per Cooldown), as
	// AdaptiveRate shows them.
	Adaptive AdaptiveRelease `json:"adaptive,omitzero"`
}

// DefaultBreaker judges a dependency down after 3 failures in a row within
// 30 s, probes it every 5 s for the first 35 s of an outage, and then less
// and less often, down to once a minute (see the probe interval below).
//
// Three, because one run must be able to tell on its own: a call makes 3
// attempts by default, so a single run's call that fails all of them
// against a dependency that answers nothing opens the breaker and waits for
// it, instead of failing. And three, not two, because a flapping dependency
// fails two requests in a row often (seed 002's search fails 2 of every 3)
// and is not down. Since a success ends the streak, independent failures at
// rate p open it only after p^3 bad luck (0.8% of streaks at p = 20%), and
// then the call waits a cooldown rather than failing.
//
// The short cooldown bounds how long a dependency back from an outage waits
// for traffic (the storm benchmark showed a 15 s cooldown leaving it dark
// for 10 s after a 6 s outage); a probe every 5 s is no load on a
// dependency that is down, but over a long outage it adds up to a lot of
// requests that all fail, which the probe interval curbs.
//
// The probe interval (ProbeInterval) stays at the cooldown for the first
// defaultSteadyProbes (6) failed probes: an outage of up to 35 s from the
// breaker's opening (the storm benchmark's is 30 s) is met by a probe
// within a cooldown of its end, as before. After that it doubles with
// each failed probe (10 s, 20 s, 40 s) up to MaxCooldown, a minute: a
// dependency back after a long outage waits at most a minute for the
// probe that finds it well, little against an outage that has already
// lasted more than a minute (and escalate.after_breaker_open_seconds, 300
// by default, is measured from the outage's start, not from a probe), and
// a run whose only tool is down no longer sends it a request every 5 s for
// nothing (issue 30: 41 requests before its escalation at 300 s). The
// bound, from OutageProbes: an outage of 10 minutes from the breaker's
// opening is probed at most 18 times, where one probe per cooldown made
// 119; after the first 105 s, once a minute.
var DefaultBreaker = BreakerConfig{Threshold: 3, Window: 30 * time.Second, Cooldown: 5 * time.Second,
	MaxCooldown: time.Minute, SteadyProbes: defaultSteadyProbes}

// defaultSteadyProbes is how many failed probes in a row of an outage are
// followed by the next a cooldown later, before the probe interval grows:
// with DefaultBreaker's 5 s cooldown, the first 35 s of an outage.
const defaultSteadyProbes = 6

// defaultMaxCooldowns is MaxCooldown in cooldowns, when it is not set:
// DefaultBreaker's minute for its 5 s cooldown.
const defaultMaxCooldowns = 12

// ProbeBackoff is c's SteadyProbes and MaxCooldown, with the defaults for
// zero fields: defaultSteadyProbes, and 12 cooldowns (no less than the
// cooldown).
func (c BreakerConfig) ProbeBackoff() (steadyProbes int, maxCooldown time.Duration) {
	steadyProbes, maxCooldown = c.SteadyProbes, c.MaxCooldown
	if steadyProbes == 0 {
		steadyProbes = defaultSteadyProbes
	}
	if maxCooldown == 0 {
		maxCooldown = defaultMaxCooldowns * c.Cooldown
	}
	return steadyProbes, max(maxCooldown, c.Cooldown)
}

// ProbeInterval is how long an open breaker waits, from its last opening,
// before it lets the next probe out, when failedProbes probes of this
// outage have failed in a row (0: the breaker has just opened): Cooldown
// for the first SteadyProbes, then doubling with each failed probe, up to
// MaxCooldown. A probe that succeeds closes the breaker, and the next
// outage starts again at Cooldown. The fleet's breakers compute the same
// in SQL (agentsaga_probe_interval, migrations/00020_probe_backoff.sql).
func (c BreakerConfig) ProbeInterval(failedProbes int) time.Duration {
	steady, maxCooldown := c.ProbeBackoff()
	interval := c.Cooldown
	for n := steady; n < failedProbes && interval < maxCooldown; n++ {
		interval *= 2
	}
	return min(interval, maxCooldown)
}

// OutageProbes is when an open breaker probes an outage that lasts d from
// the moment the breaker opened, each probe failing at once: the probes'
// times from the opening, all before d. The probe after the n-th failed
// probe leaves ProbeInterval(n) after that failure, at the soonest, so no
// breaker probes such an outage more often: len(OutageProbes(d)) is the
// bound on the probes it sends. A probe still unanswered after the probe
// interval (a service that hangs rather than fails, a caller that crashed)
// is replaced by another then, and of two probes out at once only one
// failure counts, so an outage that hangs its probes may be probed more
// often than this.
func (c BreakerConfig) OutageProbes(d time.Duration) []time.Duration {
	var probes []time.Duration
	for at, failed := c.ProbeInterval(0), 0; at < d && c.Cooldown > 0; failed++ {
		probes = append(probes, at)
		at += c.ProbeInterval(failed + 1)
	}
	return probes
}

// AdaptiveRelease shapes the release rate of a dependency that declares
// none (ARCHITECTURE.md decision 13): the rate at which the calls its open breaker
// parked come back (the gate's release slots), and at which the calls
// released once it has closed leave its paced line. The rate lives in the
// dependency's breaker row and only single statements change it
// (migrations/00018_adaptive_release.sql):
//   - it starts at Start;
//   - it rises while released calls succeed: each success of a released
//     call, reported while the line is in use (a call waits for its place,
//     so the rate is what holds the calls back), adds Step; below nine
//     tenths of the rate at which it was last cut, each adds a tenth of
//     the way back there instead, when that is more (that rate failed, and
//     the calls just below it had worked), so the rate returns quickly
//     near where it failed and probes past it by steps;
//   - it halves when a call to the dependency fails retryably while the
//     line is in use (the failure that opens the breaker again is one), at
//     most once per congestion: not again until the calls booked at the old
//     rate have left and Hold has passed;
//   - it stays within Floor and Ceiling.
//
// The release slots an open breaker hands out leave the fresh demand its
// share (migration 00033): from two cooldowns into an outage, the slots are
// spaced at nine tenths of this rate (or of the declared one) less the
// first sends the breaker has been refusing per second, never below Floor,
// so that once it closes the backlog and the new calls together stay
// within the rate. And when new calls kept coming through the outage, the
// probe that closes the breaker starts the paced line slow (migration
// 00037): one release a second (never above this rate, never below Floor),
// a quarter release a second more per released success while calls wait
// in the line, up to the room the new calls leave (as the gate measures
// it), by Step past it, halved at the first failure, until it catches up
// with this rate, which the slow start leaves alone.
type AdaptiveRelease struct {
	// Start is the rate, in releases a second, of a dependency that has
	// learned none yet.
	Start float64 `json:"start,omitempty"`
	// Floor and Ceiling bound the rate (releases a second).
	Floor   float64 `json:"floor,omitempty"`
	Ceiling float64 `json:"ceiling,omitempty"`
	// Step is the additive increase, in releases a second, per success.
	Step float64 `json:"step,omitempty"`
	// Hold is how long after a cut, once the calls booked at the old rate
	// have left, a failure does not cut again.
	Hold time.Duration `json:"hold,omitempty"`
}

// defaultAdaptiveRelease is the release rate of a dependency that declares
// none.
//
// Start, 10 a second: the rate of a dependency's first drain. That drain
// cannot go faster: a parked call's timer is set when it is parked, while
// the breaker is open and before any released call has said what the
// dependency takes, and the gate spaces the release slots at the rate of
// that moment. A slower dependency halves it in a few cuts (10, 5, 2.5,
// 1.25); a faster one is drained at 10 a second the first time and a
// little faster each time after. It is a guess, five times the fixed rate
// it replaces (a tenth of the default cooldown, 2 a second), which left a
// service that takes 10 a second idle for four fifths of a 150-call drain.
//
// Ceiling, 20 a second: while the breaker stays open, each release slot is
// a refused call looking again (a gate statement, an activity and a
// timer), so the ceiling bounds what an outage costs the fleet to 20
// refusals a second per open breaker, whatever the backlog. A dependency
// that takes more declares its rate, which is not capped.
//
// Floor, one release per cooldown (0.2 a second for DefaultBreaker): the
// breaker probes the dependency that often anyway, and one that answered
// its probe takes at least that much; slower, a backlog would come back
// slower than the probes that found the dependency well.
//
// Step, 0.05 a second per success: at 10 a second, a second of successes
// that waited in the line raises the rate by 5%, so the rate probes past
// where it last failed slowly, and a cut that was one failure's doing is
// not undone at once.
//
// Hold, 1 s: the failures of the calls sent at the old rate, and of the
// ones sent within the same second (rate limits are counted per second
// more often than not), are one congestion, cut once, as TCP cuts once per
// round trip.
var defaultAdaptiveRelease = AdaptiveRelease{Start: 10, Ceiling: 20, Step: 0.05, Hold: time.Second}

// AdaptiveRate is c.Adaptive with defaultAdaptiveRelease's values for its
// zero fields, and a Floor of one release per Cooldown (no more than
// Start).
func (c BreakerConfig) AdaptiveRate() AdaptiveRelease {
	a, d := c.Adaptive, defaultAdaptiveRelease
	if a.Start == 0 {
		a.Start = d.Start
	}
	if a.Ceiling == 0 {
		a.Ceiling = max(d.Ceiling, a.Start)
	}
	if a.Step == 0 {
		a.Step = d.Step
	}
	if a.Hold == 0 {
		a.Hold = d.Hold
	}
	if a.Floor == 0 && c.Cooldown > 0 {
		a.Floor = min(1/c.Cooldown.Seconds(), a.Start)
	}
	return a
}

// ReleaseInterval is the time between two of the calls an open breaker
// parked coming back, at its gate, and between two released calls leaving
// the paced line: the declared Release, or, where the rate is adaptive,
// the interval at its start (100 ms for defaultAdaptiveRelease), which
// the rate learned since then replaces. A dependency just back from an
// outage meets its backlog spread out, beside the calls that keep coming,
// rather than in one wave that knocks it over again.
func (c BreakerConfig) ReleaseInterval() time.Duration {
	if c.Release > 0 {
		return c.Release
	}
	return time.Duration(float64(time.Second) / c.AdaptiveRate().Start)
}

// Validate rejects a breaker that could not work.
func (c BreakerConfig) Validate() error {
	if c.Threshold < 1 || c.Window <= 0 || c.Cooldown <= 0 {
		return fmt.Errorf("circuit breaker: threshold %d, window %v and cooldown %v must all be positive", c.Threshold, c.Window, c.Cooldown)
	}
	if c.Release < 0 {
		return fmt.Errorf("circuit breaker: release interval %v must not be negative", c.Release)
	}
	if c.SteadyProbes < 0 || c.MaxCooldown < 0 || (c.MaxCooldown > 0 && c.MaxCooldown < c.Cooldown) {
		return fmt.Errorf("circuit breaker: steady probes %d must not be negative, and max cooldown %v not under the cooldown %v",
			c.SteadyProbes, c.MaxCooldown, c.Cooldown)
	}
	a := c.AdaptiveRate()
	if !(a.Floor > 0 && a.Floor <= a.Start && a.Start <= a.Ceiling) || a.Step < 0 || a.Hold < 0 {
		return fmt.Errorf("circuit breaker: adaptive release: floor %v, start %v and ceiling %v must be positive and in that order, step %v and hold %v not negative",
			a.Floor, a.Start, a.Ceiling, a.Step, a.Hold)
	}
	return nil
}

// Breaker states.
const (
	BreakerClosed   = "closed"
	BreakerOpen     = "open"
	BreakerHalfOpen = "half-open"
)

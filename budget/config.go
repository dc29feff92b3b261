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
// within Window of the first (DESIGN decision 12). A dependency that flaps,
// some requests failing and some not, never opens it: its failures are the
// retry budget's business. Open, it refuses calls for Cooldown, then lets
// exactly one probe through.
type BreakerConfig struct {
	Threshold int           `json:"threshold"`
	Window    time.Duration `json:"window"`
	Cooldown  time.Duration `json:"cooldown"`
	// Release, when set, is ReleaseInterval: the dependency declared the
	// rate it takes (agentsagatype.RetryPlan.ReleaseInterval).
	Release time.Duration `json:"release,omitempty"`
}

// DefaultBreaker judges a dependency down after 3 failures in a row within
// 30 s, and probes it every 5 s.
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
// dependency that is down.
var DefaultBreaker = BreakerConfig{Threshold: 3, Window: 30 * time.Second, Cooldown: 5 * time.Second}

// releasesPerCooldown is how many of the calls an open breaker parked come
// back in one cooldown.
const releasesPerCooldown = 10

// ReleaseInterval is the time between two of the calls an open breaker
// parked coming back, at its gate: a tenth of a cooldown (500 ms for
// DefaultBreaker). A dependency just back from an outage meets its backlog
// spread out, beside the calls that keep coming, rather than in one wave
// that knocks it over again; were it still failing when its probe passed,
// the first Threshold released calls would open the breaker again.
func (c BreakerConfig) ReleaseInterval() time.Duration {
	if c.Release > 0 {
		return c.Release
	}
	return c.Cooldown / releasesPerCooldown
}

// Validate rejects a breaker that could not work.
func (c BreakerConfig) Validate() error {
	if c.Threshold < 1 || c.Window <= 0 || c.Cooldown <= 0 {
		return fmt.Errorf("circuit breaker: threshold %d, window %v and cooldown %v must all be positive", c.Threshold, c.Window, c.Cooldown)
	}
	return nil
}

// Breaker states.
const (
	BreakerClosed   = "closed"
	BreakerOpen     = "open"
	BreakerHalfOpen = "half-open"
)

package budget

import (
	"sync"
	"time"
)

// breaker is an in-process circuit breaker for one dependency: after
// Threshold failures within Window it opens and fails calls instantly for
// Cooldown, then lets exactly one probe through to decide whether to close;
// each failed probe of the outage opens it again for its ProbeInterval.
// Unexported: no production code uses it; its tests reach it through
// export_test.go. It is the single-process counterpart of the fleet-wide breakers kept in
// Postgres (circuit_breakers), for callers without a database. Safe for
// concurrent use.
type breaker struct {
	cfg BreakerConfig
	now func() time.Time

	mu           sync.Mutex
	state        string    // BreakerClosed, BreakerOpen or BreakerHalfOpen
	failures     int       // failures in a row in the current window (closed)
	windowStart  time.Time // when the current streak of failures began (closed)
	since        time.Time // when the cooldown began (open) or the probe left (half-open)
	failedProbes int       // the outage's failed probes in a row (not closed)
}

// newBreaker returns a closed breaker shaped by cfg. now is the clock; nil
// means time.Now.
func newBreaker(cfg BreakerConfig, now func() time.Time) (*breaker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if now == nil {
		now = time.Now
	}
	return &breaker{cfg: cfg, now: now, state: BreakerClosed}, nil
}

// Allow reports whether a call may go ahead, and whether it is the probe.
// A probe's caller must report its outcome with Record(success, true):
// until it does, every other caller is denied. A probe that never reports
// (its caller crashed) is given up on after the same probe interval, and
// the next caller becomes the probe, so a lost probe cannot hold the
// breaker open for ever.
func (b *breaker) Allow() (allowed, probe bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state == BreakerClosed {
		// The common case reads no clock.
		return true, false
	}
	now := b.now()
	if now.Sub(b.since) < b.cfg.ProbeInterval(b.failedProbes) {
		// Still cooling down, or a probe is out and may yet report.
		return false, false
	}
	b.state, b.since = BreakerHalfOpen, now
	return true, true
}

// Record reports a call's outcome; probe says whether Allow made it the
// probe. While closed, failures in a row within Window are counted and the
// Threshold-th opens the breaker; a success ends the streak, so a dependency
// that flaps (some calls succeed) never trips it: it is not down (see
// BreakerConfig). While half-open only the probe is heard: its success
// closes the breaker and its failure opens it for the next probe interval,
// which grows with the outage's failed probes (BreakerConfig.ProbeInterval).
// Reports from calls allowed before the breaker opened are stale evidence
// and are ignored once it is not closed.
func (b *breaker) Record(success, probe bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.state {
	case BreakerHalfOpen:
		if !probe {
			return
		}
		if success {
			b.state, b.failures = BreakerClosed, 0
			return
		}
		b.state, b.since = BreakerOpen, b.now()
		b.failedProbes++
	case BreakerClosed:
		if success {
			b.failures = 0
			return
		}
		now := b.now()
		if b.failures == 0 || now.Sub(b.windowStart) >= b.cfg.Window {
			b.failures, b.windowStart = 0, now
		}
		b.failures++
		if b.failures >= b.cfg.Threshold {
			b.state, b.since, b.failures, b.failedProbes = BreakerOpen, now, 0, 0
		}
	}
}

// State returns BreakerClosed, BreakerOpen or BreakerHalfOpen as Allow
// would see it now: an open breaker whose cooldown is over reports
// half-open, since the next caller will be let through as the probe. That
// is what a prompt note should say, even before anyone has called Allow.
func (b *breaker) State() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state == BreakerOpen && b.now().Sub(b.since) >= b.cfg.ProbeInterval(b.failedProbes) {
		return BreakerHalfOpen
	}
	return b.state
}

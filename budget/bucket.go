package budget

import (
	"fmt"
	"math"
	"sync"
	"time"
)

// tokenBucket is an in-process retry budget: one token per retry, refilled
// with time and topped up by successes, so retries stop by themselves when
// everything is failing. It is the single-process counterpart of the
// fleet-wide bucket kept in Postgres (retry_buckets), for callers without
// a database. It is safe for concurrent use; the zero value is not usable,
// call NewTokenBucket.
type tokenBucket struct {
	// now is the injected clock, or nil for the real one. The real clock
	// is read with time.Since, which reads only the monotonic clock: that
	// is half the cost of time.Now (a wall and a monotonic reading), and
	// the clock read is most of a withdrawal's cost.
	now    func() time.Time
	origin time.Time // readings are kept as nanoseconds since origin

	capacity float64
	perSec   float64
	bonus    float64

	mu     sync.Mutex
	tokens float64
	last   int64 // nanoseconds since origin of the latest refill
}

// newTokenBucket returns a full bucket shaped by cfg. now is the clock;
// nil means time.Now, whose monotonic reading keeps refill immune to wall
// clock jumps.
func newTokenBucket(cfg BucketConfig, now func() time.Time) (*tokenBucket, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	// Validate's comparisons are all false for NaN, and an infinite
	// capacity would grant every retry: neither is a budget.
	for _, v := range []float64{cfg.Capacity, cfg.RefillPerSecond, cfg.SuccessBonus} {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return nil, fmt.Errorf("retry bucket: capacity %v, refill_per_second %v and success_bonus %v must be finite",
				cfg.Capacity, cfg.RefillPerSecond, cfg.SuccessBonus)
		}
	}
	origin := time.Now()
	if now != nil {
		origin = now()
	}
	return &tokenBucket{
		now:      now,
		origin:   origin,
		capacity: cfg.Capacity,
		perSec:   cfg.RefillPerSecond,
		bonus:    cfg.SuccessBonus,
		tokens:   cfg.Capacity, // a fresh process should not start by denying retries
	}, nil
}

// TryWithdraw takes the token a retry costs and reports whether there was
// one. A false means the retry must not happen.
func (b *tokenBucket) TryWithdraw() bool {
	t := b.elapsed()
	b.mu.Lock()
	b.refill(t)
	ok := b.tokens >= 1
	if ok {
		b.tokens--
	}
	b.mu.Unlock()
	return ok
}

// Deposit credits the bucket with the success bonus, up to its capacity.
func (b *tokenBucket) Deposit() {
	if b.bonus == 0 {
		return
	}
	// No refill here, and no clock read: capped additions of non-negative
	// amounts commute (min(c, min(c, x+a)+b) == min(c, x+a+b)), so the
	// refill owed since b.last is credited just as well by the next
	// withdrawal.
	b.mu.Lock()
	b.tokens = min(b.capacity, b.tokens+b.bonus)
	b.mu.Unlock()
}

// Level returns the tokens in the bucket now, fractions included.
func (b *tokenBucket) Level() float64 {
	t := b.elapsed()
	b.mu.Lock()
	b.refill(t)
	level := b.tokens
	b.mu.Unlock()
	return level
}

// elapsed reads the clock as nanoseconds since origin. It is called
// before taking the lock, so callers do not queue behind each other's
// clock reads; a reading that then arrives late simply refills nothing.
func (b *tokenBucket) elapsed() int64 {
	if b.now == nil {
		return int64(time.Since(b.origin))
	}
	return int64(b.now().Sub(b.origin))
}

// refill credits the time elapsed up to t; b.mu must be held. A reading
// older than the last one (a caller that was slow to get the lock, or an
// injected clock stepping back) credits nothing and does not move b.last
// back, so no interval is ever paid twice.
func (b *tokenBucket) refill(t int64) {
	elapsed := t - b.last
	if elapsed <= 0 {
		return
	}
	b.last = t
	if b.perSec == 0 || b.tokens >= b.capacity {
		return
	}
	// Multiply before dividing: whole seconds at whole rates then refill
	// exact whole tokens, where a precomputed per-nanosecond rate would
	// leave 0.9999999 and deny a retry that was paid for.
	b.tokens = min(b.capacity, b.tokens+float64(elapsed)*b.perSec/1e9)
}

package budget_test

import (
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/budget"
)

// fakeClock is a hand-driven clock, safe for the concurrent tests.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{t: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func drain(b *budget.TokenBucket) int {
	n := 0
	for b.TryWithdraw() {
		n++
	}
	return n
}

func TestTokenBucketStartsFullAndDeniesWhenEmpty(t *testing.T) {
	clock := newFakeClock()
	b, err := budget.NewTokenBucket(budget.BucketConfig{Capacity: 3, RefillPerSecond: 1}, clock.Now)
	require.NoError(t, err)
	assert.Equal(t, 3.0, b.Level())
	assert.Equal(t, 3, drain(b))
	assert.False(t, b.TryWithdraw(), "an empty bucket denies")
	assert.Equal(t, 0.0, b.Level())
}

func TestTokenBucketRefillsOverTime(t *testing.T) {
	clock := newFakeClock()
	b, err := budget.NewTokenBucket(budget.BucketConfig{Capacity: 10, RefillPerSecond: 2}, clock.Now)
	require.NoError(t, err)
	require.Equal(t, 10, drain(b))

	for _, step := range []struct {
		advance time.Duration
		level   float64
		grants  int
	}{
		{250 * time.Millisecond, 0.5, 0}, // half a token is not a retry
		{250 * time.Millisecond, 1, 1},
		{1500 * time.Millisecond, 3, 3},
		{time.Hour, 10, 10}, // capped at capacity, however long the pause
	} {
		clock.Advance(step.advance)
		assert.InDelta(t, step.level, b.Level(), 1e-9, "after %v", step.advance)
		assert.Equal(t, step.grants, drain(b), "after %v", step.advance)
	}
}

func TestTokenBucketIgnoresClockSteppingBack(t *testing.T) {
	clock := newFakeClock()
	b, err := budget.NewTokenBucket(budget.BucketConfig{Capacity: 5, RefillPerSecond: 1}, clock.Now)
	require.NoError(t, err)
	drain(b)
	clock.Advance(2 * time.Second)
	assert.Equal(t, 2, drain(b))
	clock.Advance(-time.Second)
	assert.Equal(t, 0, drain(b), "going back credits nothing")
	clock.Advance(time.Second)
	assert.Equal(t, 0, drain(b), "and returning to the old time does not pay that second twice")
	clock.Advance(time.Second)
	assert.Equal(t, 1, drain(b))
}

func TestTokenBucketDepositBonusIsCapped(t *testing.T) {
	clock := newFakeClock()
	b, err := budget.NewTokenBucket(budget.BucketConfig{Capacity: 2, SuccessBonus: 0.5}, clock.Now)
	require.NoError(t, err)
	require.Equal(t, 2, drain(b))
	b.Deposit()
	assert.InDelta(t, 0.5, b.Level(), 1e-12)
	assert.False(t, b.TryWithdraw())
	b.Deposit()
	assert.True(t, b.TryWithdraw(), "two successes of 0.5 buy one retry")
	for range 10 {
		b.Deposit()
	}
	assert.Equal(t, 2.0, b.Level(), "bonuses stop at capacity")
}

func TestTokenBucketDepositAndRefillTogetherStayCapped(t *testing.T) {
	clock := newFakeClock()
	b, err := budget.NewTokenBucket(budget.BucketConfig{Capacity: 4, RefillPerSecond: 1, SuccessBonus: 1}, clock.Now)
	require.NoError(t, err)
	require.Equal(t, 4, drain(b))
	clock.Advance(3 * time.Second) // owed 3, not yet credited
	b.Deposit()
	b.Deposit()
	assert.Equal(t, 4.0, b.Level())
	assert.Equal(t, 4, drain(b))
}

func TestNewTokenBucketRejectsBadConfig(t *testing.T) {
	for name, tc := range map[string]struct {
		cfg     budget.BucketConfig
		wantErr string
	}{
		"zero capacity and refill": {budget.BucketConfig{}, "capacity 0"},
		"zero capacity":            {budget.BucketConfig{RefillPerSecond: 5}, "capacity 0"},
		"capacity below a token":   {budget.BucketConfig{Capacity: 0.5, RefillPerSecond: 1}, "capacity 0.5"},
		"negative refill":          {budget.BucketConfig{Capacity: 5, RefillPerSecond: -1}, "must not be negative"},
		"negative bonus":           {budget.BucketConfig{Capacity: 5, SuccessBonus: -0.1}, "must not be negative"},
		"NaN capacity":             {budget.BucketConfig{Capacity: math.NaN()}, "must be finite"},
		"infinite capacity":        {budget.BucketConfig{Capacity: math.Inf(1)}, "must be finite"},
		"infinite refill":          {budget.BucketConfig{Capacity: 5, RefillPerSecond: math.Inf(1)}, "must be finite"},
	} {
		t.Run(name, func(t *testing.T) {
			b, err := budget.NewTokenBucket(tc.cfg, nil)
			assert.Nil(t, b)
			assert.ErrorContains(t, err, tc.wantErr)
		})
	}
	b, err := budget.NewTokenBucket(budget.DefaultBucket, nil)
	require.NoError(t, err, "the default bucket is valid, with the real clock")
	assert.True(t, b.TryWithdraw())
}

// TestTokenBucketNoOverAdmission races many withdrawals against a frozen
// clock: a guarded read-modify-write grants exactly floor(capacity), and a
// lost update would show up as more (and as a -race report).
func TestTokenBucketNoOverAdmission(t *testing.T) {
	const capacity = 37.5
	frozen := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	b, err := budget.NewTokenBucket(budget.BucketConfig{Capacity: capacity, RefillPerSecond: 1000, SuccessBonus: 0},
		func() time.Time { return frozen })
	require.NoError(t, err)

	var grants atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range 200 {
		wg.Go(func() {
			<-start
			for range 20 {
				if b.TryWithdraw() {
					grants.Add(1)
				}
				b.Deposit() // a zero bonus: exercises the path without adding
			}
		})
	}
	close(start)
	wg.Wait()
	assert.Equal(t, int64(math.Floor(capacity)), grants.Load())
	assert.InDelta(t, 0.5, b.Level(), 1e-12)
}

package runevents

import (
	"context"
	"github.com/jackc/pgx/v5/pgxpool"
	"sync"
	"time"
)

// FakeClock is a clock that moves only when a test moves it, and fires
// the timers set on it then.
type FakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
}

type fakeTimer struct {
	at      time.Time
	f       func()
	stopped bool
}

func NewFakeClock() *FakeClock { return &FakeClock{now: time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)} }

func (c *FakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *FakeClock) AfterFunc(d time.Duration, f func()) func() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTimer{at: c.now.Add(d), f: f}
	c.timers = append(c.timers, t)
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		was := !t.stopped
		t.stopped = true
		return was
	}
}

// Pending is how many timers are set and have neither fired nor stopped.
func (c *FakeClock) Pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, t := range c.timers {
		if !t.stopped {
			n++
		}
	}
	return n
}

// Advance moves the clock by d and fires, in this call, the timers due.
func (c *FakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	var due []*fakeTimer
	for _, t := range c.timers {
		if !t.stopped && !t.at.After(c.now) {
			t.stopped = true
			due = append(due, t)
		}
	}
	c.mu.Unlock()
	for _, t := range due {
		t.f()
	}
}

// NewBatcherOnClock is NewBatcher on clock c.
func (l *Log) NewBatcherOnClock(ctx context.Context, workflowID, callKey string, attempt int, c *FakeClock) *Batcher {
	return l.newBatcher(ctx, workflowID, callKey, attempt, c)
}

// NewHubWithLease is NewHub whose leases last lease.
func NewHubWithLease(pool *pgxpool.Pool, lease time.Duration) *Hub {
	h := NewHub(pool)
	h.lease = lease
	return h
}

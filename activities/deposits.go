package activities

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// depositLag bounds how long a success's bonus waits before it reaches the
// fleet bucket: successes accrue in the worker and are flushed together,
// at most once a depositLag per bucket, so the fleet's successful calls do
// not all commit on the bucket's one row. A deposit that is late, or lost
// with its worker, leaves the bucket lower than it would have been: it can
// only make the bucket deny a retry it could have granted.
//
// Deposits are not idempotent per attempt, as withdrawals are (a retry is
// paid once per ledgerdb.RetryRequest.ChargeKey: workflow ID, activity ID and
// attempt). Every success the retry hook sees accrues a bonus: a second
// delivery of an attempt that succeeded, or a later attempt that finds its
// key completed and returns the stored result, accrues one again. The
// overshoot is one success bonus per such delivery, and the bucket never
// holds more than its capacity.
const depositLag = time.Second

// depositor accrues success bonuses per bucket and flushes each sum in one
// statement, which writes nothing when the bucket is already full.
type depositor struct {
	deposit func(ctx context.Context, bucket string, amount float64) (bool, error)
	lag     time.Duration
	// sending is held while a flush sends, so that Flush returns only once
	// a flush the timer began has sent too.
	sending sync.Mutex
	mu      sync.Mutex
	pending map[string]float64
	timer   *time.Timer // set while a flush is due
	flushes int         // statements sent, for tests
}

func newDepositor(deposit func(context.Context, string, float64) (bool, error), lag time.Duration) *depositor {
	return &depositor{deposit: deposit, lag: lag, pending: map[string]float64{}}
}

// add accrues amount for bucket; the flush follows within the lag.
func (d *depositor) add(bucket string, amount float64) {
	if amount <= 0 || bucket == "" {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.pending[bucket] += amount
	if d.timer == nil {
		d.timer = time.AfterFunc(d.lag, d.flush)
	}
}

func (d *depositor) flush() {
	d.sending.Lock()
	defer d.sending.Unlock()
	d.mu.Lock()
	pending := d.pending
	d.pending, d.timer = map[string]float64{}, nil
	d.flushes += len(pending)
	d.mu.Unlock()
	for bucket, amount := range pending {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if _, err := d.deposit(ctx, bucket, amount); err != nil {
			// Lost: the bucket stays lower, which only makes it stricter.
			slog.Default().Warn("retry hook: could not deposit the success bonuses; the bucket stays lower",
				"bucket", bucket, "amount", amount, "error", err)
		}
		cancel()
	}
}

// Flush sends the success bonuses accrued so far now, rather than within
// depositLag, and returns once they are sent (or their loss is logged). A
// worker that stops calls it before its ledger store closes
// (agentsaga.Engine.Close), or the last bonuses are lost.
func (h *RetryHook) Flush() { h.deposits.flushNow() }

func (d *depositor) flushNow() {
	d.mu.Lock()
	if d.timer != nil {
		d.timer.Stop()
		d.timer = nil
	}
	d.mu.Unlock()
	d.flush()
}

// statements is how many deposit statements the depositor has sent.
func (d *depositor) statements() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.flushes
}

// Package lease owns an attempt's hold on its idempotency key while the
// attempt runs: the lease's length (the activity's heartbeat timeout), its
// renewal every third of it, with a heartbeat to Temporal, and the check
// just before the attempt acts that it still holds the key. Only package
// internal/keyed imports it, for package activities.
package lease

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.temporal.io/sdk/activity"

	"github.com/agentsaga/agentsaga/internal/ledgerdb"
)

// defaultLease is an attempt's lease on its key when the activity has no
// heartbeat timeout.
const defaultLease = 10 * time.Second

// Length is how long a claim holds its key without a renewal: the
// attempt's heartbeat timeout, the time Temporal itself waits before it
// declares the attempt lost. A later attempt can then take over as soon as
// Temporal retries, whatever the tool's own timeout.
func Length(info activity.Info) time.Duration {
	if info.HeartbeatTimeout > 0 {
		return info.HeartbeatTimeout
	}
	return defaultLease
}

// errLeaseLapsed: the attempt could not renew its lease in time (Postgres
// was unreachable, or the process was paused), so it no longer knows that
// it holds the key.
var errLeaseLapsed = errors.New("the attempt's lease on its key lapsed before it could be renewed")

// Held keeps an attempt's claim on its key alive while the attempt
// lives: every third of the lease it heartbeats to Temporal and renews the
// lease in the ledger. The lease follows the attempt's liveness, not the
// tool's timeout: a killed or paused worker stops renewing, and another
// attempt takes over once the lease lapses. The attempt's context is
// cancelled as soon as it learns it no longer holds the key.
type Held struct {
	store  *ledgerdb.Store
	key    string
	claim  int
	length time.Duration
	// ctx is the attempt's context, cancelled with the cause when the
	// lease is lost (Context).
	ctx    context.Context
	cancel context.CancelCauseFunc
	done   chan struct{}
	wg     sync.WaitGroup

	mu sync.Mutex
	// validUntil is when the lease lapses, on this process's clock. It is
	// measured from before each renewal was sent, so it never runs past the
	// ledger's locked_until.
	validUntil time.Time
}

// Hold starts keeping the lease that the claim sent at claimedAt took.
func Hold(ctx context.Context, store *ledgerdb.Store, key string, claim int, length time.Duration, claimedAt time.Time) *Held {
	l := &Held{store: store, key: key, claim: claim, length: length, done: make(chan struct{}),
		validUntil: claimedAt.Add(length)}
	l.ctx, l.cancel = context.WithCancelCause(ctx)
	l.wg.Add(1)
	go l.keep()
	return l
}

func (l *Held) keep() {
	defer l.wg.Done()
	ticker := time.NewTicker(max(l.length/3, 100*time.Millisecond))
	defer ticker.Stop()
	for {
		select {
		case <-l.done:
			return
		case <-l.ctx.Done():
			return
		case <-ticker.C:
			activity.RecordHeartbeat(l.ctx)
			if err := l.renew(); err != nil && (errors.Is(err, ledgerdb.ErrLeaseLost) || l.lapsed()) {
				l.cancel(err)
				return
			}
		}
	}
}

// renew extends the lease from now.
func (l *Held) renew() error {
	sentAt := time.Now()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(l.ctx), max(l.length/3, time.Second))
	defer cancel()
	if err := l.store.RenewLease(ctx, l.key, l.claim, l.length); err != nil {
		return err
	}
	l.mu.Lock()
	l.validUntil = sentAt.Add(l.length)
	l.mu.Unlock()
	return nil
}

func (l *Held) lapsed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return time.Now().After(l.validUntil)
}

// Confirm makes sure the attempt still holds its key just before it acts:
// a process paused after its claim (SIGSTOP, a long GC pause) wakes with a
// lapsed lease, and must renew it, which the ledger refuses once another
// attempt took the key or a rollback settled it, before sending anything.
func (l *Held) Confirm() error {
	if cause := context.Cause(l.ctx); cause != nil && l.ctx.Err() != nil {
		return cause
	}
	if !l.lapsed() {
		return nil
	}
	if err := l.renew(); err != nil {
		if !errors.Is(err, ledgerdb.ErrLeaseLost) {
			err = fmt.Errorf("%w: %w", errLeaseLapsed, err)
		}
		l.cancel(err)
		return err
	}
	return nil
}

// Context is the attempt's context under the lease: cancelled, with the
// cause, as soon as the attempt learns it no longer holds the key.
func (l *Held) Context() context.Context { return l.ctx }

// Stop ends the keeping; the lease itself ends with the attempt's write.
func (l *Held) Stop() {
	close(l.done)
	l.wg.Wait()
	l.cancel(nil)
}

package runevents

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Hub wakes a process's readers of a run when its log grows: one LISTEN
// connection for the whole process, however many runs and readers it
// serves, so a thousand clients following runs hold one connection, not a
// thousand.
type Hub struct {
	pool *pgxpool.Pool
	mu   sync.Mutex
	subs map[string]map[chan struct{}]struct{}
}

// NewHub returns a hub that listens on pool's database once Run runs.
func NewHub(pool *pgxpool.Pool) *Hub {
	return &Hub{pool: pool, subs: map[string]map[chan struct{}]struct{}{}}
}

// Subscribe returns a channel that receives whenever workflowID's log may
// have grown (it holds one wake-up at most: a reader that was busy reads
// once for all it missed), and what ends the subscription.
func (h *Hub) Subscribe(workflowID string) (<-chan struct{}, func()) {
	wake := make(chan struct{}, 1)
	h.mu.Lock()
	if h.subs[workflowID] == nil {
		h.subs[workflowID] = map[chan struct{}]struct{}{}
	}
	h.subs[workflowID][wake] = struct{}{}
	h.mu.Unlock()
	return wake, func() {
		h.mu.Lock()
		delete(h.subs[workflowID], wake)
		if len(h.subs[workflowID]) == 0 {
			delete(h.subs, workflowID)
		}
		h.mu.Unlock()
	}
}

// wake tells workflowID's readers, or every reader when workflowID is "".
func (h *Hub) wake(workflowID string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for id, subs := range h.subs {
		if workflowID != "" && id != workflowID {
			continue
		}
		for c := range subs {
			select {
			case c <- struct{}{}:
			default:
			}
		}
	}
}

// Run listens until ctx ends. A connection that fails is made again a
// second later, and every reader is woken then: what was published while
// nobody listened is read, not waited for (Follow polls meanwhile, too).
// onError, if set, hears each failure.
func (h *Hub) Run(ctx context.Context, onError func(error)) {
	for {
		err := h.listen(ctx)
		if ctx.Err() != nil {
			return
		}
		if onError != nil {
			onError(err)
		}
		h.wake("")
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

func (h *Hub) listen(ctx context.Context) error {
	conn, err := h.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("runevents: listen: %w", err)
	}
	// The connection carries a LISTEN: it goes back to nobody.
	raw := conn.Hijack()
	defer raw.Close(context.WithoutCancel(ctx))
	if _, err := raw.Exec(ctx, "LISTEN "+Channel); err != nil {
		return fmt.Errorf("runevents: listen: %w", err)
	}
	h.wake("") // anything published before the LISTEN took is read now
	for {
		n, err := raw.WaitForNotification(ctx)
		if err != nil {
			return fmt.Errorf("runevents: listen: %w", err)
		}
		h.wake(n.Payload)
	}
}

// Follow reads workflowID's log from after on, handing each event to fn in
// order, and waits for more when it has read all there is: woken by hub,
// or every poll in case a wake-up was lost. It returns when ctx ends (nil)
// or when fn or a read fails.
func Follow(ctx context.Context, log *Log, hub *Hub, workflowID string, after int64, poll time.Duration, fn func(Event) error) error {
	wake, stop := hub.Subscribe(workflowID)
	defer stop()
	const page = 500
	for {
		events, err := log.Read(ctx, workflowID, after, page)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		for _, e := range events {
			if err := fn(e); err != nil {
				return err
			}
			after = e.Seq
		}
		if len(events) == page {
			continue
		}
		timer := time.NewTimer(poll)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil
		case <-wake:
		case <-timer.C:
		}
		timer.Stop()
	}
}

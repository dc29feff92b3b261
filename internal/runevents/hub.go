package runevents

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Hub wakes a process's readers of a run when its log grows: one LISTEN
// connection for the whole process, however many runs and readers it
// serves, so a thousand clients following runs hold one connection, not a
// thousand.
//
// A run's events notify only while some process leases the run in
// run_event_readers (migration 00039): a NOTIFY wakes every listener in
// the database, the workers' admission and webhooks loops too, and most
// runs have no reader. The hub leases each run its readers follow as they
// subscribe, and renews the leases while it runs.
type Hub struct {
	pool  *pgxpool.Pool
	lease time.Duration
	mu    sync.Mutex
	subs  map[string]map[chan struct{}]struct{}
}

// readerLease is how long a run's lease lasts unrenewed; Run renews the
// leases of the runs followed every third of it. A process that dies
// leaves its runs notifying for at most this long.
const readerLease = 30 * time.Second

// NewHub returns a hub that listens on pool's database once Run runs.
func NewHub(pool *pgxpool.Pool) *Hub {
	return &Hub{pool: pool, lease: readerLease, subs: map[string]map[chan struct{}]struct{}{}}
}

// Subscribe leases workflowID for the hub's readers, so that its events
// notify, and returns a channel that receives whenever its log may have
// grown (it holds one wake-up at most: a reader that was busy reads once
// for all it missed), and what ends the subscription. A reader that
// subscribes before its first read misses no wake-up but those of
// statements that ran while the lease was being taken, which its poll
// reads.
func (h *Hub) Subscribe(ctx context.Context, workflowID string) (<-chan struct{}, func(), error) {
	if err := h.renew(ctx, []string{workflowID}); err != nil {
		return nil, nil, err
	}
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
	}, nil
}

// renew leases workflowIDs for another h.lease, and lets the leases that
// ran out, anyone's, go.
func (h *Hub) renew(ctx context.Context, workflowIDs []string) error {
	_, err := h.pool.Exec(ctx, `WITH gone AS (
			DELETE FROM run_event_readers WHERE until < clock_timestamp() AND workflow_id <> ALL ($1::text[]))
		INSERT INTO run_event_readers (workflow_id, until)
		SELECT id, clock_timestamp() + make_interval(secs => $2) FROM unnest($1::text[]) AS id
		ON CONFLICT (workflow_id) DO UPDATE SET until = greatest(run_event_readers.until, excluded.until)`,
		workflowIDs, h.lease.Seconds())
	if err != nil {
		return fmt.Errorf("runevents: lease %d runs for their readers: %w", len(workflowIDs), err)
	}
	return nil
}

// renewLoop renews the leases of the runs followed until ctx ends.
func (h *Hub) renewLoop(ctx context.Context, onError func(error)) {
	ticker := time.NewTicker(h.lease / 3)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		h.mu.Lock()
		ids := slices.Collect(maps.Keys(h.subs))
		h.mu.Unlock()
		if len(ids) == 0 {
			continue
		}
		if err := h.renew(ctx, ids); err != nil && ctx.Err() == nil && onError != nil {
			onError(err)
		}
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

// Run listens, and renews the leases of the runs followed, until ctx
// ends. A connection that fails is made again a second later, and every
// reader is woken then: what was published while nobody listened is read,
// not waited for (Follow polls meanwhile, too). onError, if set, hears
// each failure.
func (h *Hub) Run(ctx context.Context, onError func(error)) {
	renewing := make(chan struct{})
	go func() {
		defer close(renewing)
		h.renewLoop(ctx, onError)
	}()
	defer func() { <-renewing }()
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
	wake, stop, err := hub.Subscribe(ctx, workflowID)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
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

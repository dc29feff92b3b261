package runevents

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// feedWindow is how many of a followed run's latest events a Feed keeps in
// memory for its followers, at least (at most twice as many); one further
// behind reads its gap from the log.
const feedWindow = 1024

// Feed shares one reader of each followed run's log among all the
// process's followers of that run: a thousand clients watching one run
// cost one read of the log when it grows, not a thousand. It keeps the
// run's latest events (feedWindow) for them while any follows it. A
// follower that starts further back, or falls behind the window, reads
// what it lacks from the log itself and then joins the shared events.
type Feed struct {
	log  *Log
	hub  *Hub
	poll time.Duration

	mu   sync.Mutex
	runs map[string]*tail
}

// tail is one run's shared reader and its latest events.
type tail struct {
	// start is where the reader began: the log's head when the first
	// follower came. Every event after it reaches events, in order.
	start     int64
	events    []Event
	changed   chan struct{} // closed (and replaced) when events grows or err is set
	err       error
	followers int
	stop      context.CancelFunc
}

// NewFeed returns a feed that reads log, woken by hub (which the caller
// runs) or every poll in case a wake-up was lost.
func NewFeed(log *Log, hub *Hub, poll time.Duration) *Feed {
	return &Feed{log: log, hub: hub, poll: poll, runs: map[string]*tail{}}
}

// Follow hands fn each event of workflowID's log after seq after, in
// order, and waits for more, as the package's Follow does. It returns when
// ctx ends (nil) or when fn or a read fails.
func (f *Feed) Follow(ctx context.Context, workflowID string, after int64, fn func(Event) error) error {
	t, err := f.join(ctx, workflowID)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	defer f.leave(workflowID, t)
	for {
		f.mu.Lock()
		shared, behind, changed, tailErr := t.since(after)
		f.mu.Unlock()
		if behind {
			page, err := f.log.Read(ctx, workflowID, after, 500)
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return err
			}
			shared = page
		}
		for _, e := range shared {
			if err := fn(e); err != nil {
				return err
			}
			after = e.Seq
		}
		if len(shared) > 0 {
			continue
		}
		if tailErr != nil {
			return tailErr
		}
		// Nothing new: wait for the shared reader (or, behind a log
		// that had nothing to give, for the poll: a pruned gap).
		timer := time.NewTimer(f.poll)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil
		case <-changed:
		case <-timer.C:
		}
		timer.Stop()
	}
}

// since is what a follower that has read through after takes from the
// shared events, or behind when the events it needs next are not there
// (before the reader's start, or trimmed from the window). Called with
// f.mu held.
func (t *tail) since(after int64) (events []Event, behind bool, changed <-chan struct{}, err error) {
	if after < t.start {
		return nil, true, t.changed, nil
	}
	if len(t.events) > 0 && after < t.events[0].Seq-1 {
		return nil, true, t.changed, nil
	}
	for i, e := range t.events {
		if e.Seq > after {
			return append([]Event(nil), t.events[i:]...), false, t.changed, t.err
		}
	}
	return nil, false, t.changed, t.err
}

// join counts a follower of workflowID in, starting the run's shared
// reader for the first.
func (f *Feed) join(ctx context.Context, workflowID string) (*tail, error) {
	f.mu.Lock()
	if t := f.runs[workflowID]; t != nil {
		t.followers++
		f.mu.Unlock()
		return t, nil
	}
	f.mu.Unlock()
	start, err := f.log.Head(ctx, workflowID)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if t := f.runs[workflowID]; t != nil { // another follower started it meanwhile
		t.followers++
		return t, nil
	}
	readCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	t := &tail{start: start, changed: make(chan struct{}), followers: 1, stop: stop}
	f.runs[workflowID] = t
	go f.read(readCtx, workflowID, t)
	return t, nil
}

// leave counts a follower out, and stops the run's reader with the last.
func (f *Feed) leave(workflowID string, t *tail) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t.followers--
	if t.followers == 0 {
		t.stop()
		if f.runs[workflowID] == t {
			delete(f.runs, workflowID)
		}
	}
}

// read is a run's shared reader: it follows the log from the tail's start
// and hands each event to the followers.
func (f *Feed) read(ctx context.Context, workflowID string, t *tail) {
	err := Follow(ctx, f.log, f.hub, workflowID, t.start, f.poll, func(e Event) error {
		f.mu.Lock()
		defer f.mu.Unlock()
		t.events = append(t.events, e)
		if len(t.events) >= 2*feedWindow { // trimmed now and then, not at every event
			t.events = append([]Event(nil), t.events[len(t.events)-feedWindow:]...)
		}
		close(t.changed)
		t.changed = make(chan struct{})
		return nil
	})
	f.mu.Lock()
	defer f.mu.Unlock()
	if err != nil {
		t.err = fmt.Errorf("runevents: the shared reader of %s: %w", workflowID, err)
		if f.runs[workflowID] == t {
			delete(f.runs, workflowID) // the next follower starts a new one
		}
	}
	close(t.changed)
	t.changed = make(chan struct{})
}

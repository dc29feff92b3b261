package runevents

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/agentsaga/agentsaga/internal/textclip"
)

// The defaults of a Batcher: a streamed reply's text goes out every 50 ms
// or every 64 chunks (a provider's chunk is about a token), whichever comes
// first, so a long reply costs a handful of statements, not one a token.
// The first chunk of a stream, and the first after a quiet interval, goes
// out at once (issue 46): a watcher sees the reply begin when it begins,
// not an interval later, for one statement more a turn.
const (
	DefaultBatchEvery  = 50 * time.Millisecond
	DefaultBatchChunks = 64
)

// Delta is a text_delta event's data; Discarded an attempt_discarded's,
// which the settle of a failed attempt, or the claim of the attempt that
// takes a lost one's key over, writes (migration 00027).
type (
	Delta struct {
		Attempt int    `json:"attempt"`
		Text    string `json:"text"`
	}
	Discarded struct {
		Attempt int    `json:"attempt"`
		Why     string `json:"why"`
	}
)

// Batcher gathers one attempt's streamed text into text_delta events. Each
// batch's key is the call's key, the attempt and the batch's number, so a
// batch published twice is stored once, and the next attempt's text is
// new text. Publishes are made under its lock, one at a time, so its
// batches are numbered into the run's log in their order. It is safe for
// concurrent use.
type Batcher struct {
	ctx                 context.Context
	log                 *Log
	workflowID, callKey string
	attempt             int
	every               time.Duration
	chunks              int
	clock               clock

	mu          sync.Mutex
	text        strings.Builder
	held        int // chunks in text
	batches     int
	lastPublish time.Time // when the last batch went out; zero before the first
	stopTimer   func() bool
	err         error
	closed      bool // Rest was called
}

// clock is the time a Batcher reads and the timer it sets: the wall
// clock's, or a test's.
type clock interface {
	Now() time.Time
	// AfterFunc calls f once d has passed, unless the returned stop is
	// called first.
	AfterFunc(d time.Duration, f func()) (stop func() bool)
}

type wallClock struct{}

func (wallClock) Now() time.Time { return time.Now() }

func (wallClock) AfterFunc(d time.Duration, f func()) func() bool { return time.AfterFunc(d, f).Stop }

// NewBatcher returns the batcher of attempt of the call callKey of
// workflowID. Its publishes use ctx.
func (l *Log) NewBatcher(ctx context.Context, workflowID, callKey string, attempt int) *Batcher {
	return l.newBatcher(ctx, workflowID, callKey, attempt, wallClock{})
}

// WithInterval sets the batch interval (DefaultBatchEvery unless set).
// Tests that count events set an hour, so that no pause of a loaded
// machine between two chunks makes the second go out at once.
func (b *Batcher) WithInterval(every time.Duration) *Batcher {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.every = every
	return b
}

func (l *Log) newBatcher(ctx context.Context, workflowID, callKey string, attempt int, c clock) *Batcher {
	return &Batcher{ctx: ctx, log: l, workflowID: workflowID, callKey: callKey, attempt: attempt,
		every: DefaultBatchEvery, chunks: DefaultBatchChunks, clock: c}
}

// Add takes one streamed chunk of text. The first chunk of the attempt,
// and a chunk that comes a batch interval or more after the last batch
// went out, is published at once, in this call; any other is held, and
// the batch goes out once it holds enough chunks, or has held one for the
// batch interval.
func (b *Batcher) Add(chunk string) {
	if chunk == "" {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	b.text.WriteString(chunk)
	b.held++
	if b.held >= b.chunks {
		b.publishLocked()
		return
	}
	if b.stopTimer != nil {
		return // a batch is waiting for its interval: this chunk joins it
	}
	if b.batches == 0 || b.clock.Now().Sub(b.lastPublish) >= b.every {
		// Nothing went out for an interval: waiting would only delay the
		// text a watcher is waiting for, and batch nothing with it.
		b.publishLocked()
		return
	}
	b.stopTimer = b.clock.AfterFunc(b.every, func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		b.publishLocked()
	})
}

// Flush publishes what the batcher holds, and returns the first error any
// of its publishes met: the text goes on to the model's caller whatever
// the log says, so a failed publish costs the watchers, never the run.
func (b *Batcher) Flush() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.publishLocked()
	return b.err
}

// Rest takes the text the batcher holds as its last text_delta event,
// unpublished, for the caller to publish with the call's settle (one
// statement for both); nil when it holds none. The batcher publishes
// nothing after: an attempt that failed calls it to drop what it held,
// since the settle voids the attempt's text.
func (b *Batcher) Rest() *Event {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	b.stopLocked()
	if b.held == 0 {
		return nil
	}
	e := b.batchLocked()
	return &e
}

// Err is the first error any of the batcher's publishes met.
func (b *Batcher) Err() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.err
}

func (b *Batcher) publishLocked() {
	b.stopLocked()
	if b.held == 0 || b.closed {
		return
	}
	b.publish(b.batchLocked())
	b.lastPublish = b.clock.Now()
}

// stopLocked stops the timer of a batch waiting for its interval.
func (b *Batcher) stopLocked() {
	if b.stopTimer != nil {
		b.stopTimer()
		b.stopTimer = nil
	}
}

// batchLocked takes the text held as the next text_delta event.
func (b *Batcher) batchLocked() Event {
	b.batches++
	// Cleaned as the stored reply is: a NUL would make Postgres refuse the
	// event, and with it the settle that carries the last batch.
	data, _ := json.Marshal(Delta{Attempt: b.attempt, Text: textclip.Clean(b.text.String())})
	b.text.Reset()
	b.held = 0
	return Event{Key: fmt.Sprintf("%s/attempt-%d/delta-%d", b.callKey, b.attempt, b.batches), Kind: TextDelta, CallKey: b.callKey, Data: data}
}

func (b *Batcher) publish(e Event) {
	if _, err := b.log.Publish(b.ctx, b.workflowID, e); err != nil && b.err == nil {
		b.err = err
	}
}

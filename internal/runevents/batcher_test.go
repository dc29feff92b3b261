package runevents_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/internal/runevents"
)

// A reply streamed fast goes out in batches of 64 chunks after its first,
// not one event a chunk, and its text arrives whole and in order; a chunk
// that trickles in goes out within the batch interval.
func TestTheBatcherSendsAFewBatchesAReply(t *testing.T) {
	ctx := context.Background()
	log := runevents.New(newPool(t))
	// An hour's interval while the 200 go in: a pause of a loaded machine
	// between two chunks would otherwise send a batch early.
	b := log.NewBatcher(ctx, "wf", "wf/model-1", 1).WithInterval(time.Hour)
	var want strings.Builder
	for i := range 200 {
		chunk := fmt.Sprintf("tok%d ", i)
		want.WriteString(chunk)
		b.Add(chunk)
	}
	require.NoError(t, b.Flush())
	events, err := log.Read(ctx, "wf", 0, 100)
	require.NoError(t, err)
	require.Len(t, events, 5, "200 chunks: the first at once, three batches of 64 and the rest")
	require.Equal(t, want.String(), textOf(t, events, 1))

	b.WithInterval(runevents.DefaultBatchEvery)
	b.Add("late")
	require.Eventually(t, func() bool {
		events, err := log.Read(ctx, "wf", 5, 10)
		return err == nil && len(events) == 1
	}, 10*time.Second, 10*time.Millisecond, "a held chunk goes out by itself")
}

// Each attempt's text is its own: keyed by its attempt, so a retry's text
// is new text and a client that drops a discarded attempt (the ledger
// marks it, migration 00027) shows the reply once.
func TestEachAttemptsTextIsKeptApart(t *testing.T) {
	ctx := context.Background()
	log := runevents.New(newPool(t))
	first := log.NewBatcher(ctx, "wf", "wf/model-1", 1)
	first.Add("Hel")
	require.NoError(t, first.Flush())
	second := log.NewBatcher(ctx, "wf", "wf/model-1", 2)
	second.Add("Hello")
	second.Add(", world")
	require.NoError(t, second.Flush())
	require.NoError(t, second.Flush(), "nothing held: nothing published")

	events, err := log.Read(ctx, "wf", 0, 10)
	require.NoError(t, err)
	var keys []string
	for _, e := range events {
		require.Equal(t, runevents.TextDelta, e.Kind)
		keys = append(keys, e.Key)
	}
	require.Equal(t, []string{"wf/model-1/attempt-1/delta-1", "wf/model-1/attempt-2/delta-1", "wf/model-1/attempt-2/delta-2"}, keys,
		"each attempt's first chunk went out at once, and the second's rest with its flush")
	require.Equal(t, "Hel", textOf(t, events, 1))
	require.Equal(t, "Hello, world", textOf(t, events, 2))
}

// textOf is the text of attempt's deltas among events, in order.
func textOf(t *testing.T, events []runevents.Event, attempt int) string {
	t.Helper()
	var text strings.Builder
	for _, e := range events {
		if e.Kind != runevents.TextDelta {
			continue
		}
		var d runevents.Delta
		require.NoError(t, json.Unmarshal(e.Data, &d))
		if d.Attempt == attempt {
			text.WriteString(d.Text)
		}
	}
	return text.String()
}

// The first text of an attempt goes out in the call that hands it over,
// not a batch interval later; what follows it is batched; and text that
// comes after a quiet interval goes out at once again. The clock is a
// fake one: nothing here waits, so a first chunk held for the interval
// fails the test however fast or slow the machine is.
func TestTheFirstTextGoesOutAtOnce(t *testing.T) {
	ctx := context.Background()
	log := runevents.New(newPool(t))
	clock := runevents.NewFakeClock()
	b := log.NewBatcherOnClock(ctx, "wf", "wf/model-1", 1, clock)
	events := func() []runevents.Event {
		t.Helper()
		events, err := log.Read(ctx, "wf", 0, 100)
		require.NoError(t, err)
		return events
	}

	b.Add("Hel")
	require.Len(t, events(), 1, "the first chunk is published before Add returns, the clock unmoved")
	require.Zero(t, clock.Pending(), "and no timer was set for it")

	b.Add("lo")
	b.Add(", ")
	require.Len(t, events(), 1, "what follows is held for the batch interval")
	require.Equal(t, 1, clock.Pending())
	clock.Advance(runevents.DefaultBatchEvery - time.Millisecond)
	require.Len(t, events(), 1, "not before it has passed")
	clock.Advance(time.Millisecond)
	require.Len(t, events(), 2, "and published together once it has")

	clock.Advance(runevents.DefaultBatchEvery)
	b.Add("world")
	require.Len(t, events(), 3, "after a quiet interval, the next chunk goes out at once")
	b.Add("!")
	rest := b.Rest()
	require.NotNil(t, rest, "a chunk held when the attempt ends rides on its settle")
	require.Len(t, events(), 3)

	var keys []string
	for _, e := range events() {
		keys = append(keys, e.Key)
	}
	require.Equal(t, []string{"wf/model-1/attempt-1/delta-1", "wf/model-1/attempt-1/delta-2", "wf/model-1/attempt-1/delta-3"}, keys,
		"numbered in the order they went out")
	require.Equal(t, "Hello, world", textOf(t, events(), 1))
	require.Equal(t, "wf/model-1/attempt-1/delta-4", rest.Key)
}

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

// A reply streamed fast goes out in batches of 64 chunks, not one event a
// chunk, and its text arrives whole and in order; a chunk that trickles in
// goes out within the batch interval.
func TestTheBatcherSendsAFewBatchesAReply(t *testing.T) {
	ctx := context.Background()
	log := runevents.New(newPool(t))
	b := log.NewBatcher(ctx, "wf", "wf/model-1", 1)
	var want strings.Builder
	for i := range 200 {
		chunk := fmt.Sprintf("tok%d ", i)
		want.WriteString(chunk)
		b.Add(chunk)
	}
	require.NoError(t, b.Flush())
	events, err := log.Read(ctx, "wf", 0, 100)
	require.NoError(t, err)
	require.Len(t, events, 4, "200 chunks: three batches of 64 and the rest")
	require.Equal(t, want.String(), textOf(t, events, 1))

	b.Add("late")
	require.Eventually(t, func() bool {
		events, err := log.Read(ctx, "wf", 4, 10)
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
	require.Equal(t, []string{"wf/model-1/attempt-1/delta-1", "wf/model-1/attempt-2/delta-1"}, keys)
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

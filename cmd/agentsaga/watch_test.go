package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/agentsagatest"
	"github.com/agentsaga/agentsaga/internal/runevents"
)

// `agentsaga watch` prints what a run did so far, then follows it as it
// goes on, and returns once the run ended; --after starts past what an
// earlier watch printed, and a bad --after is refused.
func TestWatchFollowsARunToItsEnd(t *testing.T) {
	databaseURL := agentsagatest.NewDatabase(t)
	t.Setenv("DATABASE_URL", databaseURL)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, databaseURL)
	require.NoError(t, err)
	defer pool.Close()
	log := runevents.New(pool)
	event := func(key, kind string, data any) runevents.Event {
		raw, _ := json.Marshal(data)
		return runevents.Event{Key: key, Kind: kind, Data: raw, CallKey: "wf/step-001-model"}
	}
	_, err = log.Publish(ctx, "wf", event("t1", runevents.TurnStarted, map[string]any{"attempt": 1, "model": "scripted"}),
		event("c1", runevents.ToolStarted, map[string]any{"tool": "fetch", "arguments": `{"item":1}`}))
	require.NoError(t, err)

	done := make(chan string, 1)
	go func() {
		out, err := runCLI(t, "watch", "wf")
		assert.NoError(t, err)
		done <- out
	}()
	time.Sleep(300 * time.Millisecond) // the watch is following now, or reads it all at once: either way it prints it
	_, err = log.Publish(ctx, "wf", event("c1/finished", runevents.ToolFinished, map[string]any{"tool": "fetch", "output": `{"ok":true}`}),
		event("t2/delta-1", runevents.TextDelta, runevents.Delta{Attempt: 1, Text: "all fetched"}),
		event("end", runevents.RunFinished, map[string]any{"status": "completed", "reason": "the model answered", "answer": "all fetched"}))
	require.NoError(t, err)
	select {
	case out := <-done:
		lines := strings.Split(strings.TrimSpace(out), "\n")
		require.Len(t, lines, 6, out)
		assert.Contains(t, lines[0], "turn_started")
		assert.Contains(t, lines[0], "step-001-model scripted attempt 1")
		assert.Contains(t, lines[1], `fetch {"item":1}`)
		assert.Contains(t, lines[2], `fetch -> {"ok":true}`)
		assert.Contains(t, lines[3], `"all fetched"`)
		assert.Contains(t, lines[4], "completed: the model answered")
		assert.Contains(t, lines[5], "answer: all fetched")
	case <-time.After(30 * time.Second):
		t.Fatal("watch did not end with the run")
	}

	out, err := runCLI(t, "watch", "wf", "--after", "4")
	require.NoError(t, err, out)
	assert.True(t, strings.HasPrefix(strings.TrimSpace(out), "5  "), out)
	_, err = runCLI(t, "watch", "wf", "--after", "-1")
	require.ErrorContains(t, err, "--after -1")
}

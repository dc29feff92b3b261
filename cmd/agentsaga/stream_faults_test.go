package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/agentsagatest"
	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/runevents"
	"github.com/agentsaga/agentsaga/workflows"
)

const nsKillMidStream = "fault-kill-mid-stream"

// midStreamAnswer is the reply the provider streams: its first attempt
// stops part-way and never ends, its second streams it whole.
var midStreamAnswer = strings.Repeat("Order A-1001 qualifies for a refund of 42.50 EUR. ", 12)

// startStallingProvider is an OpenAI-compatible server whose first request
// streams a third of the reply and then holds the connection open until the
// client goes away (a worker killed mid-stream); later requests stream the
// whole reply.
func startStallingProvider(t *testing.T) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	events := chatCompletionStream(t, midStreamAnswer)
	var requests atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		first := requests.Add(1) == 1
		w.Header().Set("Content-Type", "text/event-stream")
		for i, e := range events {
			if first && i == len(events)/3 {
				<-r.Context().Done() // the worker that asked is gone
				return
			}
			_, _ = w.Write(e)
			w.(http.Flusher).Flush()
			time.Sleep(5 * time.Millisecond)
		}
	}))
	t.Cleanup(srv.Close)
	return srv, &requests
}

// chatCompletionStream is an OpenAI chat completion of text as its stream
// sends it, each chunk a server-sent event: the role, the text a few
// characters at a time as a provider sends a token or two, the finish,
// the usage, and [DONE].
func chatCompletionStream(t *testing.T, text string) [][]byte {
	t.Helper()
	event := func(choices string, usage string) []byte {
		return []byte(`data: {"id":"c1","object":"chat.completion.chunk","model":"gpt-test","choices":` + choices + usage + "}\n\n")
	}
	delta := func(d any) []byte {
		data, err := json.Marshal(d)
		require.NoError(t, err)
		return event(`[{"index":0,"delta":`+string(data)+`}]`, "")
	}
	events := [][]byte{delta(map[string]string{"role": "assistant"})}
	for piece := range slices.Chunk([]rune(text), 8) {
		events = append(events, delta(map[string]string{"content": string(piece)}))
	}
	return append(events, event(`[{"index":0,"delta":{},"finish_reason":"stop"}]`, ""),
		event(`[]`, `,"usage":{"prompt_tokens":30,"completion_tokens":150,"total_tokens":180}`), []byte("data: [DONE]\n\n"))
}

// g. A worker process is SIGKILLed while a model's reply streams (issue
// 33). The attempt that takes the turn over streams it again: in the run's
// event log the lost attempt's text is followed by its attempt_discarded,
// before anything of the next attempt, and no event is there twice.
func testWorkerKilledMidStream(t *testing.T, bin string, temporal *temporalServer) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	const id = "fault-kill-mid-stream-run"
	c := temporal.client(t, nsKillMidStream)
	databaseURL := agentsagatest.NewDatabase(t)
	provider, requests := startStallingProvider(t)
	pool, err := pgxpool.New(ctx, databaseURL)
	require.NoError(t, err)
	defer pool.Close()
	log := runevents.New(pool)

	first := startWorkerProcess(t, bin, "worker-1", temporal.address(), nsKillMidStream, databaseURL)
	waitPolling(ctx, t, c, first)
	spec, err := workflows.ParseSpec([]byte(fmt.Sprintf(`
goal: say what the refund is
budget: {steps: 3}
model: {provider: openai, name: gpt-test, base_url: %s, max_tokens: 512}
`, provider.URL)))
	require.NoError(t, err)
	run := startFaultRun(ctx, t, c, id, spec)

	require.Eventually(t, func() bool {
		events, err := log.Read(ctx, id, 0, 100)
		if err != nil {
			return false
		}
		for _, e := range events {
			if e.Kind == runevents.TextDelta {
				return true
			}
		}
		return false
	}, 30*time.Second, 20*time.Millisecond, "the first attempt's text never reached the log:\n%s", first.log())
	first.kill()
	require.True(t, killedBySIGKILL(first), "worker-1 died of SIGKILL: %v", first.err)

	second := startWorkerProcess(t, bin, "worker-2", temporal.address(), nsKillMidStream, databaseURL)
	var result workflows.RunResult
	require.NoError(t, run.Get(ctx, &result), "the run finishes on worker-2:\n%s", second.log())
	require.Equal(t, agentsagatype.RunCompleted, result.Status, result.Reason)
	assert.Equal(t, midStreamAnswer, result.Answer)
	assert.EqualValues(t, 2, requests.Load(), "one request an attempt")

	events, err := log.Read(ctx, id, 0, 1000)
	require.NoError(t, err)
	violations := 0
	violate := func(format string, args ...any) {
		violations++
		t.Errorf(format, args...)
	}
	keys := map[string]bool{}
	var discardedAt int64
	var retried strings.Builder
	for i, e := range events {
		if e.Seq != int64(i+1) {
			violate("event %d has seq %d: the log skips or repeats", i+1, e.Seq)
		}
		if keys[e.Key] {
			violate("event %s is in the log twice", e.Key)
		}
		keys[e.Key] = true
		var d struct{ Attempt int }
		_ = json.Unmarshal(e.Data, &d)
		switch {
		case e.Kind == runevents.AttemptDiscarded && d.Attempt == 1:
			discardedAt = e.Seq
		case e.CallKey != "" && d.Attempt == 1 && e.Kind == runevents.TextDelta && discardedAt != 0:
			violate("attempt 1's text %s follows its discard", e.Key)
		case e.CallKey != "" && d.Attempt >= 2 && discardedAt == 0:
			violate("attempt %d's %s comes before attempt 1's text is discarded", d.Attempt, e.Kind)
		}
		if e.Kind == runevents.TextDelta && d.Attempt >= 2 {
			var delta runevents.Delta
			require.NoError(t, json.Unmarshal(e.Data, &delta))
			retried.WriteString(delta.Text)
		}
	}
	if discardedAt == 0 {
		violate("the lost attempt's text was never discarded")
	}
	if retried.String() != midStreamAnswer {
		violate("the retried attempt's text is not the reply: %q", retried.String())
	}
	t.Logf("runs=1 completed=1 kills=1 (SIGKILL mid-stream) events=%d discard at seq %d; violations=%d", len(events), discardedAt, violations)
}

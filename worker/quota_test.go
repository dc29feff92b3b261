package worker_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"

	"github.com/agentsaga/agentsaga"
	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/internal/ledgertest"
	"github.com/agentsaga/agentsaga/internal/providerwire"
	"github.com/agentsaga/agentsaga/internal/quota"
	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/worker"
	"github.com/agentsaga/agentsaga/workflows"
)

// quotaModel is an OpenAI-compatible model server with a rate limit: it
// answers 429, with OpenAI's headers, to the requests tooMany picks, and
// counts the requests it holds at once.
type quotaModel struct {
	tooMany func(n int32) bool // n counts the requests from 1
	// hold, when set, is called with each request's number before it is
	// answered, and may keep it in flight.
	hold                  func(n int32)
	latency               time.Duration
	requests, refused     atomic.Int32
	mu                    sync.Mutex
	inFlight, maxInFlight int
}

func (m *quotaModel) serve() *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := m.requests.Add(1)
		m.mu.Lock()
		m.inFlight++
		m.maxInFlight = max(m.maxInFlight, m.inFlight)
		m.mu.Unlock()
		defer func() {
			m.mu.Lock()
			m.inFlight--
			m.mu.Unlock()
		}()
		w.Header().Set("x-ratelimit-limit-requests", "600")
		w.Header().Set("x-ratelimit-limit-tokens", "600000")
		if m.tooMany != nil && m.tooMany(n) {
			m.refused.Add(1)
			w.Header().Set("x-ratelimit-remaining-requests", "0")
			w.Header().Set("x-ratelimit-reset-requests", "800ms")
			w.Header().Set("retry-after-ms", "800")
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusTooManyRequests)
			fmt.Fprint(w, `{"error":{"message":"Rate limit reached for gpt-4o-mini on requests per min (RPM): Limit 600, Used 600, Requested 1.","type":"requests","code":"rate_limit_exceeded"}}`)
			return
		}
		if m.hold != nil {
			m.hold(n)
		}
		time.Sleep(m.latency)
		w.Header().Set("x-ratelimit-remaining-requests", "599")
		request, _ := io.ReadAll(r.Body)
		_ = providerwire.WriteChatCompletion(w, providerwire.Streams(request), []byte(`{"id":"c1","object":"chat.completion","created":0,"model":"gpt-4o-mini",`+
			`"choices":[{"index":0,"message":{"role":"assistant","content":"all done"},"finish_reason":"stop"}],`+
			`"usage":{"prompt_tokens":10,"completion_tokens":2,"total_tokens":12}}`))
	}))
}

// quotaWorker starts a worker of its own (the default retry policy and
// breakers) and returns its queue.
func quotaWorker(ctx context.Context, t *testing.T) (*ledger.Store, string) {
	t.Helper()
	store := ledgertest.NewHandle(t)
	queue := "quota-" + t.Name()
	w, err := worker.New(ctx, temporalClient, store, worker.Options{Config: agentsaga.Config{TaskQueue: queue}})
	require.NoError(t, err)
	require.NoError(t, w.Start())
	t.Cleanup(w.Stop)
	return store, queue
}

// A 429 pauses the turn, not the run: the turn waits out the provider's
// retry-after on a timer and goes out again under its first key. It
// spends no retry token and none of the call's attempts, and the quota is
// closed for the fleet meanwhile.
func TestA429PausesTheTurnNotTheRun(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	store, queue := quotaWorker(ctx, t)
	// Every request is answered 429 three times in a row first: with
	// max_attempts 2, a retry would have failed the turn.
	model := &quotaModel{tooMany: func(n int32) bool { return n <= 3 }}
	server := model.serve()
	defer server.Close()
	spec, err := workflows.ParseSpec([]byte(fmt.Sprintf(`
goal: answer
budget: {steps: 4}
retry: {max_attempts: 2}
model: {provider: openai, name: gpt-4o-mini, base_url: %q}
`, server.URL+"/v1")))
	require.NoError(t, err)
	run, err := temporalClient.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "quota-429", TaskQueue: queue}, workflows.AgentRun, spec)
	require.NoError(t, err)
	var result workflows.RunResult
	require.NoError(t, run.Get(ctx, &result))
	require.Equal(t, agentsagatype.RunCompleted, result.Status, result.Reason)
	assert.Equal(t, "all done", result.Answer)

	assert.EqualValues(t, 4, model.requests.Load(), "three 429s and the answer")
	require.NotEmpty(t, result.Trace)
	turn := result.Trace[0]
	assert.Equal(t, 3, turn.QuotaWaits, "one wait per 429")
	assert.Greater(t, turn.QuotaWaitSeconds, 1.0, "each waited out the rest of the retry-after")
	assert.Equal(t, 4, turn.Attempts, "the 429s were requests: leaf calls, not retries")
	counters, err := ledgerdb.Of(store).RunRetryCounters(ctx, "quota-429")
	require.NoError(t, err)
	assert.Zero(t, counters.Retries, "no retry token was spent")
	turns, err := ledgerdb.Of(store).ListModelTurns(ctx, "quota-429")
	require.NoError(t, err)
	require.Len(t, turns, 1, "one turn, one key")
	assert.Equal(t, agentsagatype.ActionCompleted, turns[0].Status)

	st, err := ledgerdb.Of(store).QuotaState(ctx, quota.Key("openai", "gpt-4o-mini", ""))
	require.NoError(t, err)
	assert.EqualValues(t, 3, st.RateLimited)
	assert.InDelta(t, 600, st.RequestsPerMinute, 0.001, "learned from the headers")
}

// Runs that share a quota whose concurrency is 1 never hold two requests
// at the provider at once: the turns the quota has no room for wait on
// timers, admitted one after another, and every run completes.
func TestTurnsWaitForTheirQuota(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	store, queue := quotaWorker(ctx, t)
	// The first request stays in flight until another run's turn has
	// found the quota full: with the model's latency alone, the suite's
	// load once started the four runs so far apart that no turn met
	// another, and the test saw no wait at all.
	key := quota.Key("openai", "gpt-4o-mini", "")
	model := &quotaModel{latency: 300 * time.Millisecond, hold: func(n int32) {
		if n != 1 {
			return
		}
		deadline := time.Now().Add(time.Minute)
		for time.Now().Before(deadline) {
			if st, err := ledgerdb.Of(store).QuotaState(ctx, key); err == nil && st.Refused > 0 {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}}
	server := model.serve()
	defer server.Close()
	spec, err := workflows.ParseSpec([]byte(fmt.Sprintf(`
goal: answer
budget: {steps: 4}
model:
  provider: openai
  name: gpt-4o-mini
  base_url: %q
  rate_limit: {concurrency: 1}
`, server.URL+"/v1")))
	require.NoError(t, err)
	const runs = 4
	var wg sync.WaitGroup
	results := make([]workflows.RunResult, runs)
	for i := range runs {
		id := fmt.Sprintf("quota-concurrency-%d", i)
		run, err := temporalClient.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: queue}, workflows.AgentRun, spec)
		require.NoError(t, err)
		wg.Go(func() { assert.NoError(t, run.Get(ctx, &results[i])) })
	}
	wg.Wait()
	waits := 0
	for i, result := range results {
		assert.Equal(t, agentsagatype.RunCompleted, result.Status, "run %d: %s", i, result.Reason)
		for _, e := range result.Trace {
			waits += e.QuotaWaits
		}
	}
	assert.Equal(t, 1, model.maxInFlight, "the quota admits one request at a time, fleet-wide")
	assert.EqualValues(t, runs, model.requests.Load(), "a wait sends nothing")
	assert.Positive(t, waits, "the turns that found the quota full waited")
	st, err := ledgerdb.Of(store).QuotaState(ctx, key)
	require.NoError(t, err)
	assert.EqualValues(t, waits, st.Refused)
	assert.Zero(t, st.InFlight, "every admission was settled")
	t.Logf("waits %d, waited %.1f s in all", waits, st.WaitedSeconds)
}

package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/budget"
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/internal/providerwire"
	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/workflows"
)

// Issue 20's acceptance tests for model fallback: a turn whose model is
// down (its breaker open) goes to the next model of model.fallbacks, and
// back to the first once its breaker's probe succeeds.

const (
	primaryModel  = "openai:gpt-4o-mini"
	fallbackModel = "anthropic:claude-sonnet-4-5"
)

// napModel is a fake model provider, speaking the OpenAI chat-completions
// or the Anthropic Messages wire format (streamed when asked, through
// providerwire). It answers 503 for outage from its
// first request; after that it asks for the tool nap until the
// conversation it is sent holds turns tool results, and then answers
// "finished". It decides from the request alone, so two providers serving
// the same run agree on where it is.
type napModel struct {
	anthropic bool
	turns     int
	outage    time.Duration
	// minRefusals keeps it down for that many refusals however long they
	// take: an outage of wall-clock time alone ended, on a machine loaded
	// by the suite, before the retries had failed often enough to open
	// the breaker the test is about.
	minRefusals int32

	downUntil                    atomic.Int64
	requests, refusals, answered atomic.Int32
}

func (m *napModel) serve(t *testing.T) *httptest.Server {
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m.requests.Add(1)
		m.downUntil.CompareAndSwap(0, time.Now().Add(m.outage).UnixNano())
		if time.Now().UnixNano() < m.downUntil.Load() || m.refusals.Load() < m.minRefusals {
			m.refusals.Add(1)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			if m.anthropic {
				fmt.Fprint(w, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`)
			} else {
				fmt.Fprint(w, `{"error":{"message":"the model is overloaded","type":"server_error"}}`)
			}
			return
		}
		body, _ := io.ReadAll(r.Body)
		var req struct {
			Messages []struct {
				Role    string          `json:"role"`
				Content json.RawMessage `json:"content"`
			} `json:"messages"`
		}
		if err := json.Unmarshal(body, &req); err != nil {
			t.Errorf("fake model: request does not decode: %v", err)
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		results := 0
		for _, msg := range req.Messages {
			if msg.Role == "tool" {
				results++ // OpenAI: one message per tool result
			}
			var blocks []struct {
				Type string `json:"type"`
			}
			if msg.Role == "user" && json.Unmarshal(msg.Content, &blocks) == nil {
				for _, b := range blocks {
					if b.Type == "tool_result" {
						results++ // Anthropic: tool_result blocks in a user message
					}
				}
			}
		}
		m.answered.Add(1)
		n := results + 1
		var reply string
		switch {
		case m.anthropic && results < m.turns:
			reply = fmt.Sprintf(`{"id":"msg_%[1]d","type":"message","role":"assistant","model":"claude-sonnet-4-5",`+
				`"content":[{"type":"tool_use","id":"toolu_%[1]d","name":"nap","input":{"seq":%[1]d}}],`+
				`"stop_reason":"tool_use","stop_sequence":null,"usage":{"input_tokens":20,"output_tokens":4}}`, n)
		case m.anthropic:
			reply = `{"id":"msg_last","type":"message","role":"assistant","model":"claude-sonnet-4-5",` +
				`"content":[{"type":"text","text":"finished"}],` +
				`"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":20,"output_tokens":4}}`
		case results < m.turns:
			reply = fmt.Sprintf(`{"id":"c%[1]d","object":"chat.completion","created":0,"model":"gpt-4o-mini",`+
				`"choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[`+
				`{"id":"call_%[1]d","type":"function","function":{"name":"nap","arguments":"{\"seq\":%[1]d}"}}]},"finish_reason":"tool_calls"}],`+
				`"usage":{"prompt_tokens":10,"completion_tokens":2,"total_tokens":12}}`, n)
		default:
			reply = `{"id":"c_last","object":"chat.completion","created":0,"model":"gpt-4o-mini",` +
				`"choices":[{"index":0,"message":{"role":"assistant","content":"finished"},"finish_reason":"stop"}],` +
				`"usage":{"prompt_tokens":10,"completion_tokens":2,"total_tokens":12}}`
		}
		write := providerwire.WriteChatCompletion
		if m.anthropic {
			write = providerwire.WriteMessage
		}
		if err := write(w, providerwire.Streams(body), []byte(reply)); err != nil {
			t.Errorf("fake model: %v", err)
		}
	}))
	t.Cleanup(server.Close)
	return server
}

// napTool is an HTTP tool that sleeps for delay and says which nap that
// was (each answer new, so the no-progress watchdog sees progress).
func napTool(t *testing.T, delay time.Duration) (*httptest.Server, *atomic.Int32) {
	var calls atomic.Int32
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := calls.Add(1)
		select {
		case <-time.After(delay):
		case <-r.Context().Done():
			return
		}
		fmt.Fprintf(w, `{"nap": %d}`, n)
	}))
	t.Cleanup(server.Close)
	return server, &calls
}

// fallbackSpec is a run on the primary (OpenAI-compatible) model with the
// Anthropic one as its fallback, priced apart, and the tool nap.
func fallbackSpec(t *testing.T, primaryURL, fallbackURL, napURL string, steps int) workflows.RunSpec {
	t.Helper()
	return resolvedSpec(t, fmt.Sprintf(`
goal: nap, then say so
budget: {steps: %d}
escalate: {after_breaker_open_seconds: 120}
model:
  provider: openai
  name: gpt-4o-mini
  base_url: %q
  fallbacks:
    - {provider: anthropic, name: claude-sonnet-4-5, base_url: %q}
prices:
  models:
    gpt-4o-mini: {input_per_million: 5000000, output_per_million: 5000000}
    claude-sonnet-4-5: {input_per_million: 1000000, output_per_million: 1000000}
tools:
  - name: nap
    kind: http
    url: %s
    timeout_seconds: 10
    parameters: {type: object, properties: {seq: {type: integer}}, required: [seq]}
`, steps, primaryURL+"/v1", fallbackURL, napURL))
}

// answeredBy lists, in order, the model of each turn that answered: from
// the trace's model entries and from the ledger's successful model leaf
// calls.
func answeredBy(ctx context.Context, t *testing.T, store *ledger.Store, id string, trace []workflows.TraceEntry) (traced, leaves []string) {
	t.Helper()
	for _, e := range trace {
		if e.Kind == "model" && e.Error == "" {
			traced = append(traced, e.Model)
		}
	}
	calls, err := ledgerdb.Of(store).ListLeafCalls(ctx, id)
	require.NoError(t, err)
	for _, c := range calls {
		if c.Kind == ledgerdb.LeafModel && c.Outcome == "ok" {
			leaves = append(leaves, c.Target)
		}
	}
	return traced, leaves
}

// The primary model is down for longer than the run: its turns go to the
// Anthropic fallback once the primary's breaker opens, the run completes
// well within the outage, and each turn is billed at the price of the
// model that answered it.
func TestTurnsGoToTheFallbackWhileThePrimaryIsDown(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	store, queue := defaultBreakerWorker(ctx, t, "fallback")
	primary := &napModel{turns: 2, outage: 60 * time.Second}
	fallback := &napModel{anthropic: true, turns: 2}
	primaryServer, fallbackServer := primary.serve(t), fallback.serve(t)
	nap, naps := napTool(t, 0)

	const id = "fallback-run"
	started := time.Now()
	run, err := temporalClient.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: queue}, workflows.AgentRun,
		fallbackSpec(t, primaryServer.URL, fallbackServer.URL, nap.URL, 8))
	require.NoError(t, err)
	var result workflows.RunResult
	require.NoError(t, run.Get(ctx, &result))
	took := time.Since(started)
	assert.Equal(t, agentsagatype.RunCompleted, result.Status, result.Reason)
	assert.Equal(t, "finished", result.Answer)
	assert.Less(t, took, 40*time.Second, "the run finished on the fallback, well within the primary's 60 s outage")
	assert.EqualValues(t, 2, naps.Load())

	traced, leaves := answeredBy(ctx, t, store, id, result.Trace)
	t.Logf("completed in %s; primary: %d requests, %d refused; fallback: %d answered; turns answered by (trace) %v, (leaf calls) %v",
		took.Round(100*time.Millisecond), primary.requests.Load(), primary.refusals.Load(), fallback.answered.Load(), traced, leaves)
	assert.Zero(t, primary.answered.Load())
	assert.EqualValues(t, 3, fallback.answered.Load(), "three turns, each answered once")
	assert.Equal(t, []string{fallbackModel, fallbackModel, fallbackModel}, traced, "trace: the model that answered each turn")
	assert.Equal(t, []string{fallbackModel, fallbackModel, fallbackModel}, leaves, "leaf calls: the model each turn was answered by")
	calls, err := ledgerdb.Of(store).ListLeafCalls(ctx, id)
	require.NoError(t, err)
	for _, c := range calls {
		if c.Kind == ledgerdb.LeafModel && c.Outcome != "ok" {
			assert.Equal(t, primaryModel, c.Target, "only the primary failed: %+v", c)
		}
	}
	// Every turn at the fallback's price: 24 tokens at 1 USD a token, not
	// the primary's 5.
	assert.Equal(t, int64(3*24), result.Usage.Tokens)
	assert.InDelta(t, 3*24.0, result.Usage.USD, 1e-6, "each turn billed at the price of the model that answered it")
	assert.LessOrEqual(t, int(primary.refusals.Load()), 3+int(took/(5*time.Second))+2, "the primary saw its breaker's probes, not a storm")
}

// The primary model is down for its first 3 s only: the first turns go to
// the fallback, and once the primary's breaker probes it (after its 5 s
// cooldown) and finds it back, the later turns return to it.
func TestTurnsReturnToThePrimaryOnceItIsBack(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	store, queue := defaultBreakerWorker(ctx, t, "fallback-back")
	const naps = 12 // a turn a second or so: the run outlives the cooldown
	primary := &napModel{turns: naps, outage: 3 * time.Second, minRefusals: int32(budget.DefaultBreaker.Threshold)}
	fallback := &napModel{anthropic: true, turns: naps}
	primaryServer, fallbackServer := primary.serve(t), fallback.serve(t)
	nap, napped := napTool(t, time.Second)

	const id = "fallback-back-run"
	started := time.Now()
	run, err := temporalClient.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: queue}, workflows.AgentRun,
		fallbackSpec(t, primaryServer.URL, fallbackServer.URL, nap.URL, naps+6))
	require.NoError(t, err)
	var result workflows.RunResult
	require.NoError(t, run.Get(ctx, &result))
	took := time.Since(started)
	assert.Equal(t, agentsagatype.RunCompleted, result.Status, result.Reason)
	assert.Equal(t, "finished", result.Answer)
	assert.EqualValues(t, naps, napped.Load())

	traced, leaves := answeredBy(ctx, t, store, id, result.Trace)
	t.Logf("completed in %s; primary: %d requests, %d refused, %d answered; fallback: %d answered; turns answered by (trace) %v, (leaf calls) %v",
		took.Round(100*time.Millisecond), primary.requests.Load(), primary.refusals.Load(), primary.answered.Load(),
		fallback.answered.Load(), traced, leaves)
	require.Len(t, traced, naps+1, "every turn in the trace")
	require.Len(t, leaves, naps+1, "every turn answered once")
	assert.Equal(t, fallbackModel, traced[0], "the first turn, while the primary was down, went to the fallback")
	assert.Equal(t, fallbackModel, leaves[0])
	assert.Equal(t, primaryModel, traced[len(traced)-1], "the last turn was back on the primary")
	assert.Equal(t, primaryModel, leaves[len(leaves)-1])
	// Once back on the primary the run stays there.
	order := strings.Join(traced, ",")
	if back := strings.Index(order, primaryModel); back >= 0 {
		assert.NotContains(t, order[back:], fallbackModel, "no turn left the primary once it was back")
	}
	assert.EqualValues(t, len(traced), primary.answered.Load()+fallback.answered.Load(), "each turn answered once")
}

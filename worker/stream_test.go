package worker_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"
	"google.golang.org/protobuf/proto"

	"github.com/agentsaga/agentsaga"
	"github.com/agentsaga/agentsaga/activities"
	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/internal/ledgertest"
	"github.com/agentsaga/agentsaga/internal/providerwire"
	"github.com/agentsaga/agentsaga/internal/runevents"
	"github.com/agentsaga/agentsaga/internal/workertest"
	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/worker"
	"github.com/agentsaga/agentsaga/workflows"
)

// streamedAnswer is the one reply the fake providers stream: long enough
// for many chunks and several batches.
var streamedAnswer = strings.Repeat("The refund for order A-1001 is 42.50 EUR; ", 30) + "done."

// slowStream writes events one at a time, a moment apart, as a provider
// streams tokens, so that the reply's text goes out in batches.
func slowStream(w http.ResponseWriter, events []providerwire.Event) {
	w.Header().Set("Content-Type", "text/event-stream")
	for _, e := range events {
		_, _ = w.Write(providerwire.Encode([]providerwire.Event{e}))
		w.(http.Flusher).Flush()
		time.Sleep(2 * time.Millisecond)
	}
}

// streamingProvider is a loopback server of the provider's wire format
// that streams streamedAnswer, chunk by chunk.
func streamingProvider(t *testing.T, provider string) *httptest.Server {
	t.Helper()
	answer, _ := json.Marshal(streamedAnswer)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if !providerwire.Streams(body) {
			http.Error(w, "this test's provider only streams", http.StatusBadRequest)
			return
		}
		var events []providerwire.Event
		var err error
		if provider == agentsagatype.ProviderAnthropic {
			events, err = providerwire.MessageEvents([]byte(`{"id":"msg_1","type":"message","role":"assistant","model":"claude-test",
				"content":[{"type":"text","text":`+string(answer)+`}],"stop_reason":"end_turn","usage":{"input_tokens":40,"output_tokens":300}}`), providerwire.FakePiece)
		} else {
			events, err = providerwire.ChatCompletionEvents([]byte(`{"id":"c1","object":"chat.completion","model":"gpt-test","choices":[{"index":0,
				"message":{"role":"assistant","content":`+string(answer)+`},"finish_reason":"stop"}],
				"usage":{"prompt_tokens":40,"completion_tokens":300,"total_tokens":340}}`), providerwire.FakePiece)
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		slowStream(w, events)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func streamingSpec(t *testing.T, provider, baseURL string) workflows.RunSpec {
	t.Helper()
	return resolvedSpec(t, `
goal: say what the refund is
budget: {steps: 3}
model: {provider: `+provider+`, name: test-model, base_url: `+baseURL+`, max_tokens: 1024}
`)
}

// runToItsEnd starts spec as id on queue and waits for its result.
func runToItsEnd(ctx context.Context, t *testing.T, id, queue string, spec workflows.RunSpec) workflows.RunResult {
	t.Helper()
	run, err := temporalClient.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: queue}, workflows.AgentRun, spec)
	require.NoError(t, err)
	var result workflows.RunResult
	require.NoError(t, run.Get(ctx, &result))
	return result
}

// A model turn streamed by an OpenAI-compatible server, and one by an
// Anthropic-compatible server: every chunk's text reaches the run's event
// log, in order, in a few batches, and the text the log holds is the reply
// the ledger stored and the run answered.
func TestATurnsStreamedTextReachesTheEventLogInOrder(t *testing.T) {
	t.Parallel()
	for _, provider := range []string{agentsagatype.ProviderOpenAI, agentsagatype.ProviderAnthropic} {
		t.Run(provider, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			store := ledgertest.NewHandle(t)
			queue := "stream-" + provider
			w := startWorker(ctx, t, store, queue)
			defer w.Stop()
			id := "stream-" + provider + "-" + t.Name()
			result := runToItsEnd(ctx, t, id, queue, streamingSpec(t, provider, streamingProvider(t, provider).URL))
			require.Equal(t, agentsagatype.RunCompleted, result.Status, result.Reason)

			db := ledgerdb.Of(store)
			turns, err := db.ListModelTurns(ctx, id)
			require.NoError(t, err)
			require.Len(t, turns, 1)
			var stored agentsagatype.ModelTurn
			require.NoError(t, json.Unmarshal([]byte(turns[0].Result), &stored))
			require.Equal(t, streamedAnswer, stored.Content)

			events, err := runevents.New(db.Pool()).Read(ctx, id, 0, 1000)
			require.NoError(t, err)
			var streamed strings.Builder
			var deltas int
			var finished string
			for _, e := range events {
				switch e.Kind {
				case runevents.TextDelta:
					require.Equal(t, turns[0].Key, e.CallKey)
					var d runevents.Delta
					require.NoError(t, json.Unmarshal(e.Data, &d))
					require.Equal(t, 1, d.Attempt)
					streamed.WriteString(d.Text)
					deltas++
				case runevents.TurnFinished:
					var f struct{ Text string }
					require.NoError(t, json.Unmarshal(e.Data, &f))
					finished = f.Text
				case runevents.AttemptDiscarded:
					t.Fatalf("no attempt failed, yet %s", e.Data)
				}
			}
			chunks := len(streamedAnswer)/providerwire.FakePiece + 1
			assert.Equal(t, stored.Content, streamed.String(), "the deltas, in order, are the stored reply")
			assert.Equal(t, stored.Content, finished)
			assert.Equal(t, streamedAnswer, result.Answer)
			// At most 64 chunks a batch: at least three for this reply. (How
			// few the 50 ms timer makes is the batcher's own test's.)
			assert.GreaterOrEqual(t, deltas, 3, "a reply streamed over %d chunks goes out in batches", chunks)
			t.Logf("%s: %d chunks, %d text_delta events", provider, chunks, deltas)
		})
	}
}

// silentModels replace the OpenAI provider with the same one whose text
// nobody watches: the provider still streams over the wire, and the turn
// publishes no text.
func silentModels() map[string]activities.ModelFactory {
	return map[string]activities.ModelFactory{
		agentsagatype.ProviderOpenAI: func(spec agentsagatype.ModelSpec, apiKey string, httpClient *http.Client) (activities.Model, error) {
			m, err := activities.NewOpenAIModel(spec, apiKey, httpClient)
			return unwatched{m}, err
		},
	}
}

type unwatched struct{ activities.Model }

func (m unwatched) Turn(ctx context.Context, req activities.ModelRequest) (agentsagatype.ModelTurn, error) {
	req.OnText = nil
	return m.Model.Turn(ctx, req)
}

// historyShape is a run's history as streaming could change it: its
// events' types, in order, and the bytes of every payload they carry.
func historyShape(ctx context.Context, t *testing.T, id string) (types []enums.EventType, payloadBytes int) {
	t.Helper()
	h, err := workertest.History(ctx, temporalClient, id, "")
	require.NoError(t, err)
	for _, e := range h.Events {
		types = append(types, e.EventType)
		for _, p := range []proto.Message{
			e.GetWorkflowExecutionStartedEventAttributes().GetInput(),
			e.GetActivityTaskScheduledEventAttributes().GetInput(),
			e.GetActivityTaskCompletedEventAttributes().GetResult(),
			e.GetWorkflowExecutionCompletedEventAttributes().GetResult(),
		} {
			payloadBytes += proto.Size(p)
		}
	}
	return types, payloadBytes
}

// Streaming adds nothing to a run's history: the same run, its text
// published to the event log and not, has the same events and the same
// payload bytes (issue 33's target: history unchanged).
func TestStreamingLeavesHistoryUnchanged(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	provider := streamingProvider(t, agentsagatype.ProviderOpenAI)
	spec := streamingSpec(t, agentsagatype.ProviderOpenAI, provider.URL)

	store := ledgertest.NewHandle(t)
	watched := startWorker(ctx, t, store, "history-watched")
	defer watched.Stop()
	silent := startWorkerWith(ctx, t, store, "history-silent", agentsaga.Config{TaskQueue: "history-silent", Models: silentModels()})
	defer silent.Stop()

	runToItsEnd(ctx, t, "history-watched", "history-watched", spec)
	runToItsEnd(ctx, t, "history-silent0", "history-silent", spec)
	watchedTypes, watchedBytes := historyShape(ctx, t, "history-watched")
	silentTypes, silentBytes := historyShape(ctx, t, "history-silent0")
	assert.Equal(t, silentTypes, watchedTypes)
	assert.Equal(t, silentBytes, watchedBytes)

	events, err := runevents.New(ledgerdb.Of(store).Pool()).Read(ctx, "history-watched", 0, 1000)
	require.NoError(t, err)
	silentEvents, err := runevents.New(ledgerdb.Of(store).Pool()).Read(ctx, "history-silent0", 0, 1000)
	require.NoError(t, err)
	require.Greater(t, len(events), len(silentEvents), "the watched run's text was published")
	t.Logf("history: %d events, %d payload bytes, with and without the stream published", len(watchedTypes), watchedBytes)
}

func startWorkerWith(ctx context.Context, t *testing.T, store *ledger.Store, queue string, cfg agentsaga.Config) sdkworker.Worker {
	t.Helper()
	w, err := worker.New(ctx, temporalClient, store, worker.Options{Config: cfg})
	require.NoError(t, err)
	require.NoError(t, w.Start())
	return w
}

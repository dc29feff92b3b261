package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/ledgertest"
	"github.com/agentsaga/agentsaga/internal/providerwire"
	"github.com/agentsaga/agentsaga/workflows"
)

// fakeOpenAI speaks the chat-completions wire format, streamed when asked
// (through providerwire): the first turn asks
// for word_count, the second answers with what the tool said.
func fakeOpenAI(t *testing.T) (*httptest.Server, *[]map[string]any, *[]string) {
	var mu sync.Mutex
	var requests []map[string]any
	var auth []string
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var req map[string]any
		require.NoError(t, json.Unmarshal(body, &req))
		mu.Lock()
		requests = append(requests, req)
		auth = append(auth, r.Header.Get("Authorization"))
		n := len(requests)
		mu.Unlock()
		message := `{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"word_count","arguments":"{\"text\":\"one two three\"}"}}]}`
		finish := "tool_calls"
		if n > 1 {
			var toolSaid string
			for _, m := range req["messages"].([]any) {
				if msg := m.(map[string]any); msg["role"] == "tool" {
					toolSaid = msg["content"].(string)
				}
			}
			answer, _ := json.Marshal("the tool said " + toolSaid)
			message = fmt.Sprintf(`{"role":"assistant","content":%s}`, answer)
			finish = "stop"
		}
		reply := fmt.Sprintf(`{"id":"chatcmpl-%d","object":"chat.completion","created":1,"model":"test-model",
			"choices":[{"index":0,"message":%s,"finish_reason":%q}],
			"usage":{"prompt_tokens":50,"completion_tokens":10,"total_tokens":60}}`, n, message, finish)
		require.NoError(t, providerwire.WriteChatCompletion(w, providerwire.Streams(body), []byte(reply)))
	}))
	return server, &requests, &auth
}

// A run on an OpenAI-compatible server, end to end on the dev server.
func TestRunWithOpenAICompatibleModel(t *testing.T) {
	t.Setenv("AGENTSAGA_TEST_KEY", "sk-test-secret-123")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	store := ledgertest.NewHandle(t)
	model, requests, auth := fakeOpenAI(t)
	defer model.Close()
	queue := "openai-" + t.Name()
	w := startWorker(ctx, t, store, queue)
	defer w.Stop()

	spec, err := workflows.ParseSpec([]byte(fmt.Sprintf(`
goal: count the words in "one two three"
budget: {steps: 4}
model: {provider: openai, name: test-model, base_url: %q, api_key_env: AGENTSAGA_TEST_KEY}
tools:
  - {name: word_count, kind: go, parameters: {type: object, properties: {text: {type: string}}, required: [text]}}
`, model.URL)))
	require.NoError(t, err)
	run, err := temporalClient.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "openai-run", TaskQueue: queue}, workflows.AgentRun, spec)
	require.NoError(t, err)
	var result workflows.RunResult
	require.NoError(t, run.Get(ctx, &result))

	assert.Equal(t, agentsagatype.RunCompleted, result.Status)
	assert.Equal(t, `the tool said {"words": 3}`, result.Answer)
	assert.Equal(t, int64(120), result.Usage.Tokens)
	require.Len(t, *requests, 2)
	assert.Equal(t, []string{"Bearer sk-test-secret-123", "Bearer sk-test-secret-123"}, *auth)
	assert.Equal(t, "test-model", (*requests)[0]["model"])

	// The run's counters answer the budget query.
	value, err := temporalClient.QueryWorkflow(ctx, "openai-run", "", workflows.QueryBudget)
	require.NoError(t, err)
	var view workflows.BudgetView
	require.NoError(t, value.Get(&view))
	assert.Equal(t, 2, view.Used.Steps)
	assert.Equal(t, 3, view.Used.LeafCalls, "two model calls and one tool call")
	assert.Equal(t, 3, view.Retries.Calls)

	// The key was read on the worker; it is nowhere in the run's history.
	// The proto text form prints payload bytes as text, so the goal (a
	// positive control) must be found where a key would be.
	var history strings.Builder
	iter := temporalClient.GetWorkflowHistory(ctx, "openai-run", "", false, 0)
	for iter.HasNext() {
		event, err := iter.Next()
		require.NoError(t, err)
		history.WriteString(event.String())
	}
	assert.Contains(t, history.String(), "count the words")
	assert.NotContains(t, history.String(), "sk-test-secret", "the API key leaked into workflow history")
}

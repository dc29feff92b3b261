package worker_test

import (
	"context"
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
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/internal/ledgertest"
	"github.com/agentsaga/agentsaga/workflows"
)

// A compatible server that answers "stream": true with one whole JSON
// completion (as some servers and gateways do) is not down: the run reads
// each answer whole and completes. The answers are written here as the
// server sends them, not by the repository's fake providers.
func TestAServerThatAnswersWholeIsNotDown(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	store := ledgertest.NewHandle(t)
	var requests, streamed atomic.Int32
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if strings.Contains(string(body), `"stream":true`) {
			streamed.Add(1)
		}
		w.Header().Set("Content-Type", "application/json")
		if requests.Add(1) == 1 {
			fmt.Fprint(w, `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"whole-model","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"word_count","arguments":"{\"text\":\"one two three\"}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":40,"completion_tokens":9,"total_tokens":49}}`)
			return
		}
		fmt.Fprint(w, `{"id":"chatcmpl-2","object":"chat.completion","created":2,"model":"whole-model","choices":[{"index":0,"message":{"role":"assistant","content":"Three words."},"finish_reason":"stop"}],"usage":{"prompt_tokens":60,"completion_tokens":3,"total_tokens":63}}`)
	}))
	defer server.Close()
	queue := "whole-" + t.Name()
	w := startWorker(ctx, t, store, queue)
	defer w.Stop()

	spec, err := workflows.ParseSpec([]byte(fmt.Sprintf(`
goal: count the words in "one two three"
budget: {steps: 4}
model: {provider: openai, name: whole-model, base_url: %q}
tools:
  - {name: word_count, kind: go, parameters: {type: object, properties: {text: {type: string}}, required: [text]}}
`, server.URL)))
	require.NoError(t, err)
	run, err := temporalClient.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "whole-run", TaskQueue: queue}, workflows.AgentRun, spec)
	require.NoError(t, err)
	var result workflows.RunResult
	require.NoError(t, run.Get(ctx, &result))
	assert.Equal(t, agentsagatype.RunCompleted, result.Status)
	assert.Equal(t, "Three words.", result.Answer)
	assert.Equal(t, int64(49+63), result.Usage.Tokens)
	assert.EqualValues(t, 2, requests.Load(), "each turn was answered at its first attempt")
	assert.EqualValues(t, 2, streamed.Load(), "the engine asked for a stream both times")
}

// A server that answers 200 with something that is neither a stream nor a
// completion speaks another protocol: the turn is not retried, no breaker
// counts it, nothing parks, and the run escalates naming what came back.
func TestAServerOfAnotherProtocolEscalates(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	store := ledgertest.NewHandle(t)
	var requests atomic.Int32
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, "<html><body>Please sign in to the corporate proxy</body></html>")
	}))
	defer server.Close()
	queue := "protocol-" + t.Name()
	w := startWorker(ctx, t, store, queue)
	defer w.Stop()

	spec, err := workflows.ParseSpec([]byte(fmt.Sprintf(`
goal: say hello
budget: {steps: 4}
model: {provider: openai, name: proxied-model, base_url: %q}
`, server.URL)))
	require.NoError(t, err)
	const id = "protocol-run"
	_, err = temporalClient.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: queue}, workflows.AgentRun, spec)
	require.NoError(t, err)
	waitForStatus(ctx, t, store, id, agentsagatype.RunEscalated)

	row, err := ledgerdb.Of(store).GetRun(ctx, id)
	require.NoError(t, err)
	assert.Contains(t, row.StatusDetail, "does not speak its API")
	assert.Contains(t, row.StatusDetail, "text/html")
	assert.Contains(t, row.StatusDetail, "Please sign in to the corporate proxy")
	assert.EqualValues(t, 1, requests.Load(), "a protocol mismatch is not retried")
	var failures int
	err = ledgerdb.Of(store).Pool().QueryRow(ctx, `SELECT coalesce(sum(failures), 0) FROM circuit_breakers WHERE dependency LIKE '%proxied-model%'`).Scan(&failures)
	require.NoError(t, err)
	assert.Zero(t, failures, "no breaker counts a server that answers")
	require.NoError(t, temporalClient.TerminateWorkflow(ctx, id, "", "test over"))
}

package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/activities"
	"github.com/agentsaga/agentsaga/agentsagatype"
)

// models check says what a server does: here one that streams, reports
// usage and caches, and calls the tool it is offered; and one that
// answers whole and never calls a tool, which it names as problems.
func TestModelsCheckSaysWhatAServerDoes(t *testing.T) {
	models, err := activities.NewModels(nil)
	require.NoError(t, err)
	streaming := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		if strings.Contains(string(body), `"tools"`) {
			fmt.Fprint(w, "data: {\"id\":\"c2\",\"object\":\"chat.completion.chunk\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"tool_calls\":[{\"index\":0,\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":\"utc_time\",\"arguments\":\"{}\"}}]},\"finish_reason\":\"tool_calls\"}]}\n\n"+
				"data: {\"id\":\"c2\",\"object\":\"chat.completion.chunk\",\"model\":\"m\",\"choices\":[],\"usage\":{\"prompt_tokens\":30,\"completion_tokens\":5,\"total_tokens\":35}}\n\ndata: [DONE]\n\n")
			return
		}
		fmt.Fprint(w, "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"Hel\"}}]}\n\n"+
			"data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"lo\"},\"finish_reason\":\"stop\"}]}\n\n"+
			"data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"model\":\"m\",\"choices\":[],\"usage\":{\"prompt_tokens\":1300,\"completion_tokens\":2,\"total_tokens\":1302,\"prompt_tokens_details\":{\"cached_tokens\":1280}}}\n\ndata: [DONE]\n\n")
	}))
	defer streaming.Close()
	report := checkModel(context.Background(), models, agentsagatype.ModelSpec{Provider: "openai", Name: "m", BaseURL: streaming.URL}, func(string) string { return "" })
	assert.Empty(t, report.problems)
	facts := strings.Join(report.facts, "\n")
	assert.Contains(t, facts, `answers`)
	assert.Contains(t, facts, "streams (2 text chunks)")
	assert.Contains(t, facts, "reports usage (1300 input, 2 output tokens)")
	assert.Contains(t, facts, "caches (1280 of 1300 input tokens")
	assert.Contains(t, facts, "calls tools (utc_time {})")

	whole := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"id":"c","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"I cannot use tools."},"finish_reason":"stop"}]}`)
	}))
	defer whole.Close()
	report = checkModel(context.Background(), models, agentsagatype.ModelSpec{Provider: "openai", Name: "m", BaseURL: whole.URL}, func(string) string { return "" })
	problems := strings.Join(report.problems, "\n")
	assert.Contains(t, problems, "does not stream: it answered a streamed request whole (application/json)")
	assert.Contains(t, problems, "reports no usage")
	assert.Contains(t, problems, "did not call the tool it was offered")

	report = checkModel(context.Background(), models, agentsagatype.ModelSpec{Provider: "openai", Name: "m", BaseURL: whole.URL, APIKeyEnv: "NO_SUCH_KEY"}, func(string) string { return "" })
	assert.Equal(t, []string{"NO_SUCH_KEY is not set here: the worker must have it"}, report.problems)
}

package workflows_test

import (
	"context"
	"encoding/json"
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
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/internal/ledgertest"
	"github.com/agentsaga/agentsaga/internal/payload"
	"github.com/agentsaga/agentsaga/internal/providerwire"
	"github.com/agentsaga/agentsaga/internal/textclip"
	"github.com/agentsaga/agentsaga/workflows"
)

// pages is a Go tool whose every output is a different page of size bytes.
func pages(size int) *activities.Toolbox {
	box := activities.NewToolbox()
	box.Register("page", func(_ context.Context, call activities.ToolInvocation) (string, error) {
		line := fmt.Sprintf("page %s: %s. ", call.Arguments, call.Key)
		return strings.Repeat(line, size/len(line)+1)[:size], nil
	})
	return box
}

// pageTurns scripts n turns that each read one page, then extra turns.
func pageTurns(n int, extra ...string) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, "    - tool_calls: [{name: page, arguments: {page: %d}}]\n", i)
	}
	for _, e := range extra {
		fmt.Fprintf(&b, "    - %s\n", e)
	}
	return b.String()
}

const pageTool = `
tools:
  - {name: page, kind: go, parameters: {type: object, properties: {page: {type: number}}, required: [page]}}
`

// History carries previews and references, never whole outputs; the model
// is sent old outputs shortened to fit its context budget and reads one
// back whole with read_result.
func TestContextBudgetAndReadResult(t *testing.T) {
	t.Parallel()
	const size = 20 << 10
	spec := mustSpec(t, `
goal: read the report
budget: {steps: 12}
model:
  provider: scripted
  context_tokens: 12000
  script:
`+pageTurns(4, `tool_calls: [{name: read_result, arguments: {key: "default-test-workflow-id/step-001-call-1-page"}}]`, `content: done`)+pageTool)
	store := ledgertest.NewStore(t)
	env := newEnv()
	registerWithRetryHook(t, env, store)
	activities.Register(env, &activities.Activities{Ledger: store, Toolbox: pages(size)}, false)
	env.ExecuteWorkflow(workflows.AgentRun, spec)
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
	var result workflows.RunResult
	require.NoError(t, env.GetWorkflowResult(&result))
	assert.Equal(t, agentsagatype.RunCompleted, result.Status, result.Reason)

	for _, e := range result.Trace {
		assert.LessOrEqual(t, len(e.Output), textclip.PreviewBytes+300, "trace entry %s carries a preview", e.ActivityID)
	}
	read := traceEntry(t, result, "step-005-call-1-read_result")
	assert.Empty(t, read.Error)
	turns, err := store.ListModelTurns(context.Background(), "default-test-workflow-id")
	require.NoError(t, err)
	require.Len(t, turns, 6)
	shortened := 0
	for _, turn := range turns {
		var stored agentsagatype.ModelTurn
		require.NoError(t, json.Unmarshal([]byte(turn.Result), &stored))
		assert.LessOrEqual(t, stored.RequestTokens, spec.Model.ContextTokens(), "%s fits the context budget", turn.Key)
		shortened = max(shortened, stored.Shortened)
	}
	assert.Positive(t, shortened, "old outputs were shortened to fit")

	msgs, err := store.Messages(context.Background(), "default-test-workflow-id", 1<<30, ledgerdb.MessageWindow{})
	require.NoError(t, err)
	var readBack, first string
	for _, m := range msgs {
		if m.SourceKey == "default-test-workflow-id/step-001-call-1-page" {
			if first == "" {
				first = m.Content
			} else {
				readBack = m.Content
			}
		}
	}
	assert.Len(t, first, size, "the whole output is in the conversation")
	assert.Equal(t, first, readBack, "read_result put the whole output back into the conversation")
}

// Nothing the engine schedules, returns or answers passes 256 KiB: what
// would is refused before Temporal sees it, with an error that names it,
// and never ends in a termination.
func TestPayloadGuard(t *testing.T) {
	t.Parallel()
	huge := strings.Repeat("x", payload.Max+1)

	_, err := workflows.ParseSpec([]byte("goal: " + huge + "\nbudget: {steps: 2}\nmodel: {provider: scripted, script: [{content: hi}]}\n"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "payload: the spec is 257 KiB, over the 256 KiB")

	// A model that answers with more than that fails the run on purpose,
	// with a reason that names it; the run is not terminated by Temporal.
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		content, _ := json.Marshal(huge)
		request, _ := io.ReadAll(r.Body)
		_ = providerwire.WriteChatCompletion(w, providerwire.Streams(request), fmt.Appendf(nil, `{"id":"c1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,`+
			`"message":{"role":"assistant","content":%s},"finish_reason":"stop"}],"usage":{"prompt_tokens":10,"completion_tokens":10,"total_tokens":20}}`, content))
	}))
	defer server.Close()
	spec := mustSpec(t, `
goal: say something long
budget: {steps: 3}
model: {provider: openai, name: m, base_url: "`+server.URL+`"}
`)
	_, err, store := runAgent(t, spec)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "model call at step 1 failed: payload: the model's reply to default-test-workflow-id/step-001-model is 257 KiB")
	run, err := store.GetRun(context.Background(), "default-test-workflow-id")
	require.NoError(t, err)
	assert.Equal(t, agentsagatype.RunFailed, run.Status, "the ledger says how it ended")
}

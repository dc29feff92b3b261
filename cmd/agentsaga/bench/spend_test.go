package bench

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/activities"
	"github.com/agentsaga/agentsaga/agentsagatype"
)

// The spend scenario's pricing, figures and verdicts, with no dev server.
func TestSpendFiguresAndVerdicts(t *testing.T) {
	assert.InDelta(t, 0.2856, spendUSD(1000, 20, 280, 280), 1e-12, "1,020 tokens at $280 a million")
	assert.InDelta(t, 0.0012, spendUSD(1000, 100, 1, 2), 1e-12, "input and output priced apart")

	newRow := func(spent float64) SpendRow {
		r := SpendRow{Runs: 4, CapUSD: 5, SpentUSD: spent, Outcomes: map[string]int{}, Reasons: map[string]string{}}
		r.spendFigures()
		return r
	}
	under := newRow(4.9)
	assert.Zero(t, under.OverspendUSD)
	assert.InDelta(t, 0.98, under.Utilisation, 1e-12)
	under.count(spendOutcome("completed", ""), "")
	under.count(spendOutcome("partial", ""), "the spend cap of account acme/support ($5.00 a month) has $4.89 spent")
	under.count(spendOutcome("running", "waiting for the spend cap of account acme/support to reset at ..."), "waiting for the spend cap")
	under.count(spendOutcome("escalated", ""), "The run's account cannot pay for its next turn")
	assert.Equal(t, map[string]int{"completed": 1, "partial": 1, "waiting": 1, "escalated": 1}, under.Outcomes)
	noOver, utilised, stated := SpendVerdicts(under)
	assert.True(t, noOver && utilised && stated)

	exact := newRow(5 + 1e-12) // float sums of a spend that is the cap
	assert.Zero(t, exact.OverspendUSD)

	over := newRow(5.89)
	assert.InDelta(t, 0.89, over.OverspendUSD, 1e-9)
	assert.InDelta(t, 0.178, over.OverspendShare, 1e-9)
	over.count(spendOutcome("failed", ""), "HTTP 400 budget_exceeded")
	over.count(spendOutcome("partial", ""), "") // no reason
	over.count(spendOutcome("running", "calling the model"), "")
	over.count(spendOutcome("", ""), "") // never recorded
	assert.Equal(t, 2, over.Outcomes["unended"])
	noOver, utilised, stated = SpendVerdicts(over)
	assert.False(t, noOver)
	assert.True(t, utilised, "over the cap is over 95% of it")
	assert.False(t, stated, "runs not ended, and one with no reason")

	low := newRow(4.5)
	_, utilised, _ = SpendVerdicts(low)
	assert.False(t, utilised)
}

// quickSpendProvider is the spend scenario's provider, answering at once
// and asking for one word count a run; it closes when the test ends.
func quickSpendProvider(t *testing.T) *spendProvider {
	cfg := DefaultSpend
	cfg.ToolCalls, cfg.LatencyMin, cfg.LatencyMax = 1, 0, 0
	p, err := startSpendProvider(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// The fake provider asks for word_count ToolCalls times, then answers; a
// request without tools gets a partial answer; it counts the prompts as
// requestTokens does and reports what it counted.
func TestSpendProviderRepliesAndCounts(t *testing.T) {
	p := quickSpendProvider(t)
	tools := `[{"type":"function","function":{"name":"word_count","parameters":{"type":"object"}}}]`
	post := func(messages, tools string) (reply map[string]any, prompt int64) {
		body := `{"model":"gpt-4o-mini","max_tokens":40,"messages":` + messages + `,"tools":` + tools + `}`
		var req chatRequest
		require.NoError(t, json.Unmarshal([]byte(body), &req))
		resp, err := http.Post(p.URL()+"/chat/completions", "application/json", strings.NewReader(body))
		require.NoError(t, err)
		defer resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&reply))
		usage := reply["usage"].(map[string]any)
		assert.Equal(t, float64(requestTokens(req, []byte(body))), usage["prompt_tokens"])
		assert.Equal(t, float64(20), usage["completion_tokens"])
		return reply, int64(usage["prompt_tokens"].(float64))
	}
	message := func(reply map[string]any) map[string]any {
		return reply["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)
	}
	first, a := post(`[{"role":"user","content":"count the words"}]`, tools)
	require.Len(t, message(first)["tool_calls"], 1)
	answer, b := post(`[{"role":"user","content":"count the words"},{"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"word_count","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c1","content":"{\"words\":3}"}]`, tools)
	assert.Contains(t, message(answer)["content"], "Done")
	finish, c := post(`[{"role":"user","content":"finish now"}]`, `null`)
	assert.Contains(t, message(finish)["content"], "PARTIAL ANSWER")
	assert.Equal(t, SpendProviderCounts{Answered: 3, PromptTokens: a + b + c, CompletionTokens: 60}, p.Counts())
}

// The engine's model streams its requests; the usage it reads from the
// stream is what the provider counted and bills.
func TestSpendProviderStreamsToTheEngine(t *testing.T) {
	p := quickSpendProvider(t)
	model, err := activities.NewOpenAIModel(agentsagatype.ModelSpec{Provider: agentsagatype.ProviderOpenAI, Name: spendModel, BaseURL: p.URL()}, "", nil)
	require.NoError(t, err)
	var chunks []string
	// No tools: the graceful finish, which gets a partial answer.
	turn, err := model.Turn(context.Background(), activities.ModelRequest{
		Messages: []agentsagatype.Message{{Role: "user", Content: "finish now"}},
		OnText:   func(chunk string) { chunks = append(chunks, chunk) },
	})
	require.NoError(t, err)
	assert.Contains(t, turn.Content, "PARTIAL ANSWER")
	assert.Greater(t, len(chunks), 1, "the answer came in pieces")
	assert.Equal(t, turn.Content, strings.Join(chunks, ""))
	assert.Equal(t, SpendProviderCounts{Answered: 1, PromptTokens: turn.Usage.InputTokens, CompletionTokens: turn.Usage.OutputTokens}, p.Counts())
	assert.Equal(t, p.cfg.CompletionTokens, turn.Usage.OutputTokens)
}

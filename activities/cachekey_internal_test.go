package activities

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/agentsagatype"
)

// OpenAI is sent the run's prompt_cache_key, unless caching is off; a
// compatible server, which may refuse a field it does not know, never is.
func TestPromptCacheKeyGoesToOpenAIOnly(t *testing.T) {
	req := ModelRequest{Messages: []agentsagatype.Message{{Role: "user", Content: "hi"}}, CacheKey: "run-1"}
	off := false
	for _, tc := range []struct {
		spec agentsagatype.ModelSpec
		want string
	}{
		{agentsagatype.ModelSpec{Provider: agentsagatype.ProviderOpenAI, Name: "gpt-4o-mini"}, "run-1"},
		{agentsagatype.ModelSpec{Provider: agentsagatype.ProviderOpenAI, Name: "gpt-4o-mini", BaseURL: "https://api.openai.com/v1/"}, "run-1"},
		{agentsagatype.ModelSpec{Provider: agentsagatype.ProviderOpenAI, Name: "gpt-4o-mini", Cache: &off}, ""},
		{agentsagatype.ModelSpec{Provider: agentsagatype.ProviderOpenAI, Name: "llama3.1", BaseURL: "http://127.0.0.1:11434/v1"}, ""},
	} {
		m, err := NewOpenAIModel(tc.spec, "", nil)
		require.NoError(t, err)
		p, err := m.(*openAIModel).params(req)
		require.NoError(t, err)
		assert.Equal(t, tc.want, p.PromptCacheKey.Value, "%+v", tc.spec)
	}
}

// Azure's reasoning models take the spec's effort, which the spec allows
// there; a spec without one sends none.
func TestReasoningEffortGoesToChatCompletions(t *testing.T) {
	req := ModelRequest{Messages: []agentsagatype.Message{{Role: "user", Content: "hi"}}}
	spec := agentsagatype.ModelSpec{Provider: agentsagatype.ProviderOpenAI, Name: "o4-mini", BaseURL: "http://127.0.0.1:1/v1"}
	p, err := newOpenAIModel(spec, "", openAIClientOptions(spec, "", nil)).params(req)
	require.NoError(t, err)
	assert.Empty(t, p.ReasoningEffort)
	spec.Reasoning = &agentsagatype.Thinking{Effort: "high"}
	p, err = newOpenAIModel(spec, "", openAIClientOptions(spec, "", nil)).params(req)
	require.NoError(t, err)
	assert.EqualValues(t, "high", p.ReasoningEffort)
}

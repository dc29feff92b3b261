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

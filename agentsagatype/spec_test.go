package agentsagatype

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestContextTokensDefaults(t *testing.T) {
	t.Parallel()
	assert.Equal(t, 128000-defaultReplyTokens, ModelSpec{Provider: ProviderOpenAI, Name: "gpt-4o-mini"}.ContextTokens())
	assert.Equal(t, 200000-1024, ModelSpec{Provider: ProviderAnthropic, Name: "claude-sonnet-4-5", MaxTokens: 1024}.ContextTokens())
	assert.Equal(t, DefaultContextTokens-defaultReplyTokens, ModelSpec{Provider: ProviderOpenAI, Name: "my-local-model"}.ContextTokens())
	assert.Equal(t, 16000-defaultReplyTokens, ModelSpec{Provider: ProviderOpenAI, Name: "gpt-4o", ContextWindow: 16000}.ContextTokens())
}

func TestRateLimitValidateNamesTheField(t *testing.T) {
	m := ModelSpec{Provider: ProviderOpenAI, Name: "gpt-4o", RateLimit: &RateLimit{TokensPerMinute: -5}}
	err := m.Validate()
	if err == nil || err.Error() != "model.rate_limit.tokens_per_minute: -5 is negative (omit it, or 0, for not declared)" {
		t.Fatalf("Validate() = %v", err)
	}
	m.RateLimit = &RateLimit{RequestsPerMinute: 60, Concurrency: 4}
	if err := m.Validate(); err != nil {
		t.Fatalf("Validate() = %v", err)
	}
}

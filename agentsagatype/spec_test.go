package agentsagatype

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestContextTokensDefaults(t *testing.T) {
	t.Parallel()
	assert.Equal(t, 128000-defaultReplyTokens, ModelSpec{Provider: ProviderOpenAI, Name: "gpt-4o-mini"}.ContextTokens())
	assert.Equal(t, 200000-1024, ModelSpec{Provider: ProviderAnthropic, Name: "claude-sonnet-4-5", MaxTokens: 1024}.ContextTokens())
	assert.Equal(t, defaultContextTokens-defaultReplyTokens, ModelSpec{Provider: ProviderOpenAI, Name: "my-local-model"}.ContextTokens())
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

// approval is a rule or an object, and a typo in the object is an error.
func TestApprovalSpecDecodes(t *testing.T) {
	var tool ToolSpec
	if err := json.Unmarshal([]byte(`{"name":"wire","approval":"always"}`), &tool); err != nil || tool.Approval.When != ApprovalAlways {
		t.Fatalf("the string form: %+v, %v", tool.Approval, err)
	}
	if err := json.Unmarshal([]byte(`{"name":"wire","approval":{"when":"amount > 1","timeout_seconds":60,"on_timeout":"fail"}}`), &tool); err != nil ||
		tool.Approval.Timeout() != time.Minute || tool.Approval.OnTimeout != ApprovalTimeoutFail {
		t.Fatalf("the object form: %+v, %v", tool.Approval, err)
	}
	err := json.Unmarshal([]byte(`{"name":"wire","approval":{"when":"always","timout_seconds":60}}`), &tool)
	if err == nil || !strings.Contains(err.Error(), "timout_seconds") {
		t.Fatalf("a typo: %v; want an error naming timout_seconds", err)
	}
}

package activities

import (
	"context"
	"fmt"

	"github.com/agentsaga/agentsaga/agentsagatype"
)

// reportedUsage is the token counts a provider reported, as the run is
// charged for them: a negative count, which no real call has but a broken
// or hostile server can send, counts as zero, since it would hand tokens
// back to the run's budget.
func reportedUsage(input, output, cached int64) agentsagatype.Usage {
	input = max(input, 0)
	return agentsagatype.Usage{InputTokens: input, OutputTokens: max(output, 0), CachedInputTokens: min(max(cached, 0), input)}
}

// streamBroke is the error of a reply stream that failed after it began,
// having brought n of its units (chunks, events): a plain error, which
// classify makes retryable, since another attempt may well bring the whole
// reply; what the server sent has the API key redacted.
func streamBroke(op, apiKey string, n int, unit string, cause error) error {
	return newRedactor([]string{apiKey}).wrap(fmt.Errorf("%s: the stream broke after %d %s: %w", op, n, unit, cause))
}

// errorEvent is the cause of a stream that an error event broke: the
// event's data, with the API key redacted before it is cut to size, so
// that no part of the key is left at the cut.
func errorEvent(apiKey string, data []byte) error {
	return fmt.Errorf("error event: %s", truncateBody([]byte(newRedactor([]string{apiKey}).redact(string(data)))))
}

// ModelRequest is one call to a model.
type ModelRequest struct {
	Messages []agentsagatype.Message `json:"messages"`
	Tools    []agentsagatype.ToolDef `json:"tools,omitempty"`
	// Finish marks the graceful-finish call: the budget is nearly spent,
	// the instructions have switched, and no tools are offered.
	Finish bool `json:"finish,omitempty"`
	// OmittedTurns counts the oldest turns left out of Messages to fit the
	// context budget (a scripted model counts them as played).
	OmittedTurns int `json:"omitted_turns,omitempty"`
	// OnText, when set, is handed the reply's text as it streams, chunk by
	// chunk, in order, on the goroutine that called Turn and never after
	// Turn returns; the chunks of a reply that succeeds add up to its
	// Content (a reply the model ends as a refusal may have streamed text
	// that the turn returns as its Refusal instead: the stop reason comes
	// last). A model that does not stream never calls it. It is for the
	// run's watchers (the event log, issue 33): the turn Turn returns is
	// what the run receives, streamed or not.
	OnText func(chunk string) `json:"-"`
	// CacheKey is a key that keeps one run's requests together in the
	// provider's prompt cache (OpenAI's prompt_cache_key): the workflow ID.
	CacheKey string `json:"-"`
}

// Model is a chat model that can ask for tool calls. Implementations make
// exactly one attempt per call: Temporal's activity retry is the only retry
// loop, so client-side retries stay off.
type Model interface {
	Turn(ctx context.Context, req ModelRequest) (agentsagatype.ModelTurn, error)
}

// speaksAnthropic says whether spec's provider speaks Anthropic's
// Messages API (directly, on Bedrock or on Vertex AI).
func speaksAnthropic(spec agentsagatype.ModelSpec) bool {
	switch spec.Provider {
	case agentsagatype.ProviderAnthropic, agentsagatype.ProviderBedrock, agentsagatype.ProviderVertex:
		return true
	}
	return false
}

// writesPromptCache says whether a model's requests may write its
// provider's prompt cache, which costs more than plain input: Anthropic's
// do, when caching is on (it is by default); OpenAI's and Gemini's caches
// are written for free.
func writesPromptCache(spec agentsagatype.ModelSpec) bool {
	return speaksAnthropic(spec) && spec.CachesPrompt()
}

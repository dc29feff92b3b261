package agentsagatype

import (
	"encoding/json"
	"math"
	"time"
)

// Message is one entry of the conversation the model reads. It is the
// provider-neutral form: each Model translates it to its own wire format.
type Message struct {
	// Role is one of "system", "user", "assistant" or "tool".
	Role    string `json:"role"`
	Content string `json:"content,omitempty"`
	// ToolCalls are the calls an assistant message asked for.
	ToolCalls []ToolCall `json:"tool_calls,omitempty"`
	// ToolCallID links a tool message to the call it answers.
	ToolCallID string `json:"tool_call_id,omitempty"`
	// Name is the tool's name on a tool message.
	Name string `json:"name,omitempty"`
	// Seq is the message's place in the run's conversation in the ledger.
	Seq int `json:"seq,omitempty"`
	// Pinned messages (the system prompt, the goal, a human's
	// instruction) are never shortened to fit the context budget.
	Pinned bool `json:"pinned,omitempty"`
	// Key is the idempotency key of the call whose output this is.
	Key string `json:"key,omitempty"`
	// Reasoning, on an assistant message, is what its provider asked to
	// have sent back with the turn (thinking blocks and their signatures,
	// encrypted reasoning items, thought signatures), kept as the provider
	// sent it. Only the provider that wrote it reads it; another provider
	// leaves it out.
	Reasoning *Reasoning `json:"reasoning,omitempty"`
}

// Reasoning is a turn's reasoning as one provider wrote it and wants it
// back, unchanged: Provider names the wire format that reads Data (the
// activities package's providers set and read it).
type Reasoning struct {
	Provider string          `json:"provider"`
	Data     json.RawMessage `json:"data"`
}

// ToolCall is one tool invocation a model asked for. Arguments is kept as
// the raw text the model produced, because it may not be valid JSON and the
// workflow must be able to say so rather than fail to decode it.
type ToolCall struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// Usage is what one model call cost in tokens.
type Usage struct {
	InputTokens  int64 `json:"input_tokens"`
	OutputTokens int64 `json:"output_tokens"`
	// CachedInputTokens are the part of InputTokens the provider read from
	// its prompt cache, billed at its cached price.
	CachedInputTokens int64 `json:"cached_input_tokens,omitempty"`
	// CacheWriteTokens are the part of InputTokens the provider wrote to
	// its prompt cache (Anthropic), billed at its cache-write price.
	CacheWriteTokens int64 `json:"cache_write_tokens,omitempty"`
}

// Total is input plus output tokens, capped at the largest int64 rather
// than wrapping to a negative count.
func (u Usage) Total() int64 {
	if u.InputTokens > 0 && u.OutputTokens > math.MaxInt64-u.InputTokens {
		return math.MaxInt64
	}
	return u.InputTokens + u.OutputTokens
}

// ModelTurn is what a model answered in one call.
type ModelTurn struct {
	Content   string     `json:"content,omitempty"`
	ToolCalls []ToolCall `json:"tool_calls,omitempty"`
	// Refusal is set when the model declined to answer: a 200 whose meaning
	// is "no". It is never retried.
	Refusal string `json:"refusal,omitempty"`
	Usage   Usage  `json:"usage"`
	// Model is the model name the provider reports having used.
	Model string `json:"model,omitempty"`
	// Reasoning is what the provider asked to have sent back with this
	// turn. It goes to the ledger's conversation with the reply, never to
	// workflow history: signatures and encrypted reasoning are large, and
	// only the next request needs them.
	Reasoning *Reasoning `json:"-"`
	// AnsweredBy is the model the turn was sent to, as ModelSpec.Target:
	// the spec's model or one of its fallbacks. It is stored with the
	// reply, so a turn read back from the ledger says who answered it.
	AnsweredBy string `json:"answered_by,omitempty"`
	// Attempt is the attempt that produced this turn (set by CallModel).
	Attempt int `json:"attempt,omitempty"`
	// RequestTokens is the estimated size of the request, after fitting it
	// to the context budget; Shortened counts the outputs shortened and
	// OmittedTurns the turns left out to fit.
	RequestTokens int `json:"request_tokens,omitempty"`
	Shortened     int `json:"shortened,omitempty"`
	OmittedTurns  int `json:"omitted_turns,omitempty"`
	// Account, for a turn charged to an account with spend caps
	// (its spec names an account), is the cap with the least room left once the
	// turn held its part: the run's budget note shows it when it binds
	// sooner than the run's own budget.
	Account *AccountLeft `json:"account,omitempty"`
}

// AccountLeft is the room one spend cap has left.
type AccountLeft struct {
	Account string    `json:"account"`
	Period  string    `json:"period"`
	USD     float64   `json:"usd"`
	Left    float64   `json:"left"`
	Resets  time.Time `json:"resets"`
}

// ToolDef is how a tool is described to a model.
type ToolDef struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
}

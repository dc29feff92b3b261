package activities

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
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
}

// Total is input plus output tokens, capped at the largest int64 rather
// than wrapping to a negative count.
func (u Usage) Total() int64 {
	if u.InputTokens > 0 && u.OutputTokens > math.MaxInt64-u.InputTokens {
		return math.MaxInt64
	}
	return u.InputTokens + u.OutputTokens
}

// reportedUsage is the token counts a provider reported, as the run is
// charged for them: a negative count, which no real call has but a broken
// or hostile server can send, counts as zero, since it would hand tokens
// back to the run's budget.
func reportedUsage(input, output int64) Usage {
	return Usage{InputTokens: max(input, 0), OutputTokens: max(output, 0)}
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
}

// ToolDef is how a tool is described to a model.
type ToolDef struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
}

// ModelRequest is one call to a model.
type ModelRequest struct {
	Messages []Message `json:"messages"`
	Tools    []ToolDef `json:"tools,omitempty"`
	// Finish marks the graceful-finish call: the budget is nearly spent,
	// the instructions have switched, and no tools are offered.
	Finish bool `json:"finish,omitempty"`
	// OmittedTurns counts the oldest turns left out of Messages to fit the
	// context budget (a scripted model counts them as played).
	OmittedTurns int `json:"omitted_turns,omitempty"`
}

// Model is a chat model that can ask for tool calls. Implementations make
// exactly one attempt per call: Temporal's activity retry is the only retry
// loop, so client-side retries stay off.
type Model interface {
	Turn(ctx context.Context, req ModelRequest) (ModelTurn, error)
}

// Providers a ModelSpec may name.
const (
	ProviderScripted = "scripted"
	ProviderOpenAI   = "openai"
)

// ModelSpec says which model a run talks to. API keys are never part of it:
// APIKeyEnv names the environment variable the worker reads the key from,
// so the key stays out of workflow history and the ledger.
type ModelSpec struct {
	Provider  string `json:"provider"`
	Name      string `json:"name,omitempty"`
	BaseURL   string `json:"base_url,omitempty"`
	APIKeyEnv string `json:"api_key_env,omitempty"`
	MaxTokens int64  `json:"max_tokens,omitempty"`
	// ContextWindow is the model's context window in tokens; zero means
	// the known window of the named model (ContextTokens).
	ContextWindow int            `json:"context_tokens,omitempty"`
	Script        []ScriptedTurn `json:"script,omitempty"`
	// ScriptFinish is what a scripted model answers to the graceful-finish
	// call; without it, it writes a generic partial answer.
	ScriptFinish *ScriptedTurn `json:"script_finish,omitempty"`
	// Fallbacks are the models that answer a turn, in order, when the ones
	// before them are down (their circuit breakers are open): an Anthropic
	// model behind an OpenAI one, say. A fallback has none of its own.
	Fallbacks []ModelSpec `json:"fallbacks,omitempty"`
}

// Target names the model as "provider:name" (the provider alone when the
// spec names no model): its circuit breaker's key after "model:", a leaf
// call's target, and who answered a turn (ModelTurn.AnsweredBy).
func (m ModelSpec) Target() string {
	if m.Name == "" {
		return m.Provider
	}
	return m.Provider + ":" + m.Name
}

// Validate reports the first thing wrong with the spec, naming the field.
// The provider must be a built-in one.
func (m ModelSpec) Validate() error { return m.ValidateFor() }

// ValidateFor is Validate for a fleet whose workers also register the
// custom providers (Models.Register); their fields are theirs to check.
func (m ModelSpec) ValidateFor(custom ...string) error {
	switch m.Provider {
	case ProviderScripted:
		if len(m.Script) == 0 {
			return fmt.Errorf("model.script: a scripted model needs at least one turn")
		}
		for i, turn := range m.Script {
			for j, call := range turn.ToolCalls {
				if call.Name == "" {
					return fmt.Errorf("model.script[%d].tool_calls[%d].name: empty", i, j)
				}
			}
		}
	case ProviderOpenAI:
		if m.Name == "" {
			return fmt.Errorf("model.name: the openai provider needs a model name (for example gpt-4o-mini or llama3.1)")
		}
	case ProviderAnthropic:
		if m.Name == "" {
			return fmt.Errorf("model.name: the anthropic provider needs a model name (for example claude-sonnet-4-5)")
		}
	case "":
		return fmt.Errorf("model.provider: missing (want %q, %q or %q)", ProviderScripted, ProviderOpenAI, ProviderAnthropic)
	default:
		if !slices.Contains(custom, m.Provider) {
			return fmt.Errorf("model.provider: unknown provider %q (want %q, %q or %q%s)", m.Provider, ProviderScripted, ProviderOpenAI, ProviderAnthropic, customList(custom))
		}
	}
	if m.MaxTokens < 0 {
		return fmt.Errorf("model.max_tokens: %d is negative", m.MaxTokens)
	}
	if m.ContextWindow < 0 || (m.ContextWindow > 0 && m.ContextWindow < 1024) {
		return fmt.Errorf("model.context_tokens: %d is too small a context window (at least 1024, or omit it for the model's known window)", m.ContextWindow)
	}
	seen := map[string]bool{m.Target(): true}
	for i, fallback := range m.Fallbacks {
		switch {
		case len(fallback.Fallbacks) > 0:
			return fmt.Errorf("model.fallbacks[%d].fallbacks: a fallback has no fallbacks of its own; list them all under model.fallbacks", i)
		case seen[fallback.Target()]:
			return fmt.Errorf("model.fallbacks[%d]: %s is already the model or an earlier fallback", i, fallback.Target())
		}
		seen[fallback.Target()] = true
		if err := fallback.ValidateFor(custom...); err != nil {
			return fmt.Errorf("model.fallbacks[%d]: %w", i, err)
		}
	}
	return nil
}

func customList(custom []string) string {
	if len(custom) == 0 {
		return ""
	}
	return ", or a custom one: " + strings.Join(custom, ", ")
}

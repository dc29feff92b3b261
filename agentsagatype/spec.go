package agentsagatype

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// Providers a ModelSpec may name.
const (
	ProviderScripted = "scripted"
	ProviderOpenAI   = "openai"
	// ProviderOpenAIResponses is OpenAI's Responses API, whose reasoning
	// models keep their reasoning between calls as encrypted items.
	ProviderOpenAIResponses = "openai-responses"
	// ProviderAzure is Azure OpenAI: Name is the deployment.
	ProviderAzure = "azure"
	// ProviderBedrock and ProviderVertex are Anthropic's models on Amazon
	// Bedrock and Google Vertex AI.
	ProviderBedrock = "anthropic-bedrock"
	ProviderVertex  = "anthropic-vertex"
	// ProviderGemini is Google's Gemini API (or Vertex AI's, with Project).
	ProviderGemini = "gemini"
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
	// RateLimit declares the provider's limits for this model and API key,
	// shared by every worker of the fleet (the ledger's quota). Without
	// it, an openai or anthropic model's limits are learned from the
	// provider's x-ratelimit / anthropic-ratelimit headers.
	RateLimit *RateLimit `json:"rate_limit,omitempty"`
	// Thinking turns extended thinking on (Anthropic, Gemini): the model
	// may think for up to BudgetTokens before it answers.
	Thinking *Thinking `json:"thinking,omitempty"`
	// Reasoning sets a reasoning model's effort (openai-responses, azure).
	Reasoning *Thinking `json:"reasoning,omitempty"`
	// Cache, when false, turns prompt caching off; it is on by default.
	Cache *bool `json:"cache,omitempty"`
	// APIVersion is Azure OpenAI's api-version; Region is Bedrock's or
	// Vertex AI's region, Project the Google Cloud project (Vertex AI).
	APIVersion string `json:"api_version,omitempty"`
	Region     string `json:"region,omitempty"`
	Project    string `json:"project,omitempty"`
}

// Thinking is how much a model may reason before it answers: a budget of
// tokens (Anthropic's budget_tokens, Gemini's thinkingBudget) or an
// effort (OpenAI's reasoning.effort: low, medium or high).
type Thinking struct {
	BudgetTokens int64  `json:"budget_tokens,omitempty"`
	Effort       string `json:"effort,omitempty"`
}

// isAnthropic says whether provider speaks Anthropic's Messages API.
func isAnthropic(provider string) bool {
	return provider == ProviderAnthropic || provider == ProviderBedrock || provider == ProviderVertex
}

// minThinkingBudget is the least budget_tokens the Messages API accepts.
const minThinkingBudget = 1024

// validateReasoning checks thinking and reasoning as the provider's API
// would, before the run starts rather than at its first turn.
func (m ModelSpec) validateReasoning() error {
	if t := m.Thinking; t != nil {
		switch {
		case isAnthropic(m.Provider):
			maxTokens := m.MaxTokens
			if maxTokens == 0 {
				return fmt.Errorf("model.thinking: extended thinking needs model.max_tokens, above budget_tokens (%d)", t.BudgetTokens)
			}
			if t.BudgetTokens < minThinkingBudget || t.BudgetTokens >= maxTokens {
				return fmt.Errorf("model.thinking.budget_tokens: %d must be at least %d and below max_tokens (%d), as the Messages API requires",
					t.BudgetTokens, minThinkingBudget, maxTokens)
			}
		case m.Provider == ProviderGemini:
			if t.BudgetTokens < -1 {
				return fmt.Errorf("model.thinking.budget_tokens: %d is negative (0 turns thinking off, -1 lets the model decide)", t.BudgetTokens)
			}
		default:
			return fmt.Errorf("model.thinking: provider %q has no thinking budget (anthropic, %s, %s and %s have; openai-responses and azure take model.reasoning.effort)",
				m.Provider, ProviderBedrock, ProviderVertex, ProviderGemini)
		}
		if t.Effort != "" {
			return fmt.Errorf("model.thinking.effort: thinking takes budget_tokens; effort belongs to model.reasoning (OpenAI's reasoning models)")
		}
	}
	if r := m.Reasoning; r != nil {
		if m.Provider != ProviderOpenAIResponses && m.Provider != ProviderAzure {
			return fmt.Errorf("model.reasoning: provider %q has no reasoning effort (%s and %s have; Anthropic and Gemini take model.thinking.budget_tokens)",
				m.Provider, ProviderOpenAIResponses, ProviderAzure)
		}
		switch r.Effort {
		case "low", "medium", "high":
		default:
			return fmt.Errorf("model.reasoning.effort: %q is not low, medium or high", r.Effort)
		}
		if r.BudgetTokens != 0 {
			return fmt.Errorf("model.reasoning.budget_tokens: reasoning takes an effort; a budget of tokens belongs to model.thinking")
		}
	}
	return nil
}

// RateLimit is a model's quota as its provider states it for one API key;
// zero means not declared. The limit in force is the lower of the declared
// one and the one the provider's headers state.
type RateLimit struct {
	RequestsPerMinute     int64 `json:"requests_per_minute,omitempty"`
	TokensPerMinute       int64 `json:"tokens_per_minute,omitempty"`
	InputTokensPerMinute  int64 `json:"input_tokens_per_minute,omitempty"`
	OutputTokensPerMinute int64 `json:"output_tokens_per_minute,omitempty"`
	// Concurrency bounds the calls in flight at once, fleet-wide.
	Concurrency int `json:"concurrency,omitempty"`
	// MaxConcurrentRuns bounds the runs on this model admitted at once,
	// fleet-wide: a backlog waits in the admission queue and drains at the
	// quota's capacity, and the runs admitted finish first.
	MaxConcurrentRuns int `json:"max_concurrent_runs,omitempty"`
}

// Validate names the first negative limit.
func (l RateLimit) Validate() error {
	for _, f := range []struct {
		name string
		v    int64
	}{
		{"requests_per_minute", l.RequestsPerMinute},
		{"tokens_per_minute", l.TokensPerMinute},
		{"input_tokens_per_minute", l.InputTokensPerMinute},
		{"output_tokens_per_minute", l.OutputTokensPerMinute},
		{"concurrency", int64(l.Concurrency)},
		{"max_concurrent_runs", int64(l.MaxConcurrentRuns)},
	} {
		if f.v < 0 {
			return fmt.Errorf("rate_limit.%s: %d is negative (omit it, or 0, for not declared)", f.name, f.v)
		}
	}
	return nil
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
// custom providers (activities.Models.Register); their fields are theirs
// to check.
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
	case ProviderAnthropic, ProviderOpenAIResponses, ProviderGemini:
		if m.Name == "" {
			return fmt.Errorf("model.name: the %s provider needs a model name (for example %s)", m.Provider, exampleModel[m.Provider])
		}
	case ProviderAzure:
		switch {
		case m.Name == "":
			return fmt.Errorf("model.name: the azure provider needs the deployment's name")
		case m.BaseURL == "":
			return fmt.Errorf("model.base_url: the azure provider needs the resource's endpoint (https://RESOURCE.openai.azure.com)")
		case m.APIVersion == "":
			return fmt.Errorf("model.api_version: the azure provider needs an api-version (for example 2024-10-21)")
		}
	case ProviderBedrock, ProviderVertex:
		switch {
		case m.Name == "":
			return fmt.Errorf("model.name: the %s provider needs a model name (for example %s)", m.Provider, exampleModel[m.Provider])
		case m.Region == "":
			return fmt.Errorf("model.region: the %s provider needs a region (for example %s)", m.Provider, exampleRegion[m.Provider])
		case m.Provider == ProviderVertex && m.Project == "":
			return fmt.Errorf("model.project: the %s provider needs a Google Cloud project", m.Provider)
		}
	case "":
		return fmt.Errorf("model.provider: missing (want one of %s)", strings.Join(builtinProviders, ", "))
	default:
		if !slices.Contains(custom, m.Provider) {
			return fmt.Errorf("model.provider: unknown provider %q (want one of %s%s)", m.Provider, strings.Join(builtinProviders, ", "), customList(custom))
		}
	}
	if err := m.validateReasoning(); err != nil {
		return err
	}
	if m.MaxTokens < 0 {
		return fmt.Errorf("model.max_tokens: %d is negative", m.MaxTokens)
	}
	if m.ContextWindow < 0 || (m.ContextWindow > 0 && m.ContextWindow < 1024) {
		return fmt.Errorf("model.context_tokens: %d is too small a context window (at least 1024, or omit it for the model's known window)", m.ContextWindow)
	}
	if m.RateLimit != nil {
		if err := m.RateLimit.Validate(); err != nil {
			return fmt.Errorf("model.%w", err)
		}
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

// builtinProviders are the providers every worker has, in the order an
// error lists them.
var builtinProviders = []string{ProviderScripted, ProviderOpenAI, ProviderAnthropic, ProviderOpenAIResponses, ProviderAzure,
	ProviderBedrock, ProviderVertex, ProviderGemini}

// exampleModel and exampleRegion are what an error about a missing name
// or region suggests.
var (
	exampleModel = map[string]string{ProviderAnthropic: "claude-sonnet-4-5", ProviderOpenAIResponses: "o4-mini",
		ProviderGemini: "gemini-2.5-flash", ProviderBedrock: "anthropic.claude-sonnet-4-5-20250929-v1:0", ProviderVertex: "claude-sonnet-4-5@20250929"}
	exampleRegion = map[string]string{ProviderBedrock: "us-east-1", ProviderVertex: "us-east5"}
)

func customList(custom []string) string {
	if len(custom) == 0 {
		return ""
	}
	return ", or a custom one: " + strings.Join(custom, ", ")
}

// ProviderAnthropic names the Anthropic Messages API in a ModelSpec.
const ProviderAnthropic = "anthropic"

// ScriptedTurn is one answer of a scripted model.
type ScriptedTurn struct {
	Content   string         `json:"content,omitempty"`
	ToolCalls []ScriptedCall `json:"tool_calls,omitempty"`
	Refusal   string         `json:"refusal,omitempty"`
}

// ScriptedCall is a tool call in a script. Arguments is normally a JSON
// object; a JSON string is sent verbatim instead, as a model's raw text, so
// a script can reproduce a model that writes broken arguments.
type ScriptedCall struct {
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments,omitempty"`
}

// knownContextTokens are the context windows of well-known models (those
// docs/providers.md names among them), by name prefix; the longest
// matching prefix wins.
var knownContextTokens = map[string]int{
	"gpt-4o":     128000,
	"gpt-4.1":    1047576,
	"gpt-5":      400000,
	"o3":         200000,
	"o4-mini":    200000,
	"claude-":    200000,
	"gemini-":    1048576,
	"llama3.1":   128000,
	"llama3.2":   128000,
	"qwen2.5":    32768,
	"mistral":    32768,
	"gemma":      8192,
	"phi3":       4096,
	"deepseek-r": 65536,
}

// defaultContextTokens is the budget of a model nobody told us about:
// small enough to fit most.
const defaultContextTokens = 32000

// ContextTokens is the spec's context budget, or the known window of its
// model, or defaultContextTokens; less the room its reply needs.
func (m ModelSpec) ContextTokens() int {
	window := m.ContextWindow
	if window == 0 {
		window = m.KnownContextWindow()
	}
	reply := int(m.MaxTokens)
	if reply == 0 {
		reply = defaultReplyTokens
	}
	return max(window-reply, window/2)
}

// KnownContextWindow is the context window of the named model as this
// build knows it, or defaultContextTokens.
func (m ModelSpec) KnownContextWindow() int {
	best, window := "", defaultContextTokens
	for prefix, n := range knownContextTokens {
		if strings.HasPrefix(m.Name, prefix) && len(prefix) > len(best) {
			best, window = prefix, n
		}
	}
	return window
}

// defaultReplyTokens is the room kept for the reply when the spec sets no
// max_tokens.
const defaultReplyTokens = 4096

// Tool kinds a ToolSpec may declare.
const (
	ToolKindGo   = "go"
	ToolKindHTTP = "http"
	// ToolKindAgent is a sub-agent: the workflow runs it as a child
	// workflow, never as an activity.
	ToolKindAgent = "agent"
	// ToolKindMCP is an MCP server (url: streamable HTTP; command: stdio,
	// started by the worker), or one tool of it once the run has listed
	// the server (mcp_tool set): see mcp.go.
	ToolKindMCP = "mcp"
	// ToolKindRecorded is a tool of a replay (agentsaga replay): every call
	// is answered from a recorded run's ledger (Recording), and the spec
	// holds no URL, command or server, so there is nothing to send a call
	// to. The replay rewrites every tool it does not call live into one.
	ToolKindRecorded = "recorded"
)

// Matching modes of a recorded tool (Recording.Match).
const (
	// MatchInOrder answers the n-th call of a tool with the n-th recorded
	// call of that tool, when the arguments are the same.
	MatchInOrder = "in-order"
	// MatchAnyOrder answers a call with any recorded call of the tool with
	// the same arguments that no earlier call of the replay used.
	MatchAnyOrder = "any-order"
)

// Recording says where a recorded tool's answers come from: the run it
// replays (Source) and the replay's own workflow ID (Replay), so that a
// sub-agent of the replay, whose ID extends the replay's, is answered from
// the sub-agent of the source whose ID extends the source's.
type Recording struct {
	Source string `json:"source"`
	Replay string `json:"replay"`
	Match  string `json:"match"`
}

// ToolSpec declares a tool a run may call. A "go" tool names a function
// registered in the worker's Toolbox; an "http" tool is a URL the worker
// calls with the arguments as a JSON body and the idempotency key in the
// Idempotency-Key header; an "mcp" entry is an MCP server whose tools the
// run lists at its start, each called with the key in _meta (mcp.go).
type ToolSpec struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	Kind        string `json:"kind"`
	URL         string `json:"url,omitempty"`
	Method      string `json:"method,omitempty"`
	// Parameters is the JSON schema the arguments must match.
	Parameters json.RawMessage `json:"parameters,omitempty"`
	// TimeoutSeconds bounds one attempt; the default is 30.
	TimeoutSeconds float64 `json:"timeout_seconds,omitempty"`
	// Refusal lists the answers that mean "no" although the call
	// succeeded, such as {field: status, equals: declined}. A refusal is
	// never retried.
	Refusal []RefusalRule `json:"refusal,omitempty"`
	// Compensate names the tool that undoes this one, with its arguments
	// as a template: {{args.x}} and {{result.x}} are the forward call's
	// argument and result fields, {{key}} its idempotency key.
	Compensate *CompensationSpec `json:"compensate,omitempty"`
	// Irreversible marks a tool whose effect cannot be undone (an email).
	// Its calls wait for a human's approval unless Approval says "never".
	Irreversible bool `json:"irreversible,omitempty"`
	// ReadOnly marks a tool that only reads: it changes nothing in the
	// world. The no-progress watchdog counts its call as progress only when
	// its result is new; a successful call with new arguments of any other
	// tool is progress whatever it answers ({"ok": true} to every write).
	// An MCP tool's readOnlyHint sets it.
	ReadOnly bool `json:"read_only,omitempty"`
	// Approval says when a call waits for a human's yes before it is sent.
	Approval *ApprovalSpec `json:"approval,omitempty"`
	// Limits bound the arguments: each call's, and a total over the run.
	Limits []LimitSpec `json:"limits,omitempty"`
	// RateLimit declares the rate the tool's dependency takes
	// (requests_per_minute only): the calls its open breaker parked come
	// back at that rate once it is back (RetryPlan.ReleaseInterval).
	RateLimit *RateLimit `json:"rate_limit,omitempty"`
	// Headers are sent with every request of an http tool. A value may
	// read the worker's environment, "Bearer ${env:CRM_TOKEN}", when the
	// request is built: only the template is ever stored, and each value
	// read is redacted from the answer and from errors (see headers.go).
	Headers map[string]string `json:"headers,omitempty"`

	// Command starts a stdio MCP server (kind mcp): the program and its
	// arguments, run by the worker, which keeps one process per command
	// and starts it again when it died. URL is the streamable HTTP one.
	Command []string `json:"command,omitempty"`
	// Allow names the server's tools a run may call (kind mcp); empty
	// means all of them. A name the server does not offer fails the run.
	Allow []string `json:"allow,omitempty"`
	// MCPTool is the server's name for the tool. The run's listing sets it
	// (with MCPServer, the entry listed) on each tool it returns; an entry
	// that sets it in the spec names one tool and is not listed.
	MCPTool   string `json:"mcp_tool,omitempty"`
	MCPServer string `json:"mcp_server,omitempty"`

	// Recording is where a recorded tool's answers come from (kind
	// recorded, and only then).
	Recording *Recording `json:"recording,omitempty"`
}

// CompensationSpec is a tool's compensating action.
type CompensationSpec struct {
	Tool      string          `json:"tool"`
	Arguments json.RawMessage `json:"arguments,omitempty"`
}

// Def is how the tool is described to a model.
func (t ToolSpec) Def() ToolDef {
	return ToolDef{Name: t.Name, Description: t.Description, Parameters: t.Parameters}
}

// Timeout is the longest one attempt may take. A positive timeout_seconds
// stays positive: one past int64 nanoseconds saturates instead of wrapping
// negative, and one under a nanosecond is a nanosecond, not the zero
// timeout Temporal refuses.
func (t ToolSpec) Timeout() time.Duration {
	if t.TimeoutSeconds <= 0 {
		return 30 * time.Second
	}
	if ns := t.TimeoutSeconds * float64(time.Second); ns < math.MaxInt64 {
		return max(time.Duration(ns), 1)
	}
	return math.MaxInt64
}

// IsMCPServer says whether t is a server entry the run lists at its start
// (kind mcp, no mcp_tool), rather than a tool the model can call.
func (t ToolSpec) IsMCPServer() bool { return t.Kind == ToolKindMCP && t.MCPTool == "" }

// RefusalRule recognises a semantic refusal: a call that succeeded and
// whose answer means "no" ("card declined", "insufficient funds"). Such an
// answer is final, so it must never be retried; these rules let a tool's
// configuration say what its refusals look like.
type RefusalRule struct {
	// Field is a dot path into a JSON body, such as "error.code"; a
	// segment that is a number indexes an array ("errors.0.code").
	Field string `json:"field,omitempty"`
	// Equals compares the field's value rendered as a string: strings as
	// they are, numbers without a trailing ".0" (2.0 is "2"), booleans as
	// true or false, null as null, objects and arrays as compact JSON.
	Equals string `json:"equals,omitempty"`
	// Pattern is a Go regular expression matched against the field's
	// value (rendered as for Equals) when Field is set, else against the
	// whole body. With Equals, both must hold.
	Pattern string `json:"pattern,omitempty"`
}

// What a run does when its account's spend cap cannot pay for its next
// turn (a cap's on_exhausted).
const (
	OnExhaustedFinish   = "finish"   // end gracefully, with a partial answer
	OnExhaustedWait     = "wait"     // wait durably for the period to reset
	OnExhaustedEscalate = "escalate" // ask a human to raise the cap or abort
)

// RetryPlan is what the workflow tells each model and tool call about its
// retries. The workflow computes it when it schedules the call, so the
// allowance reflects the run's logical calls so far, and the run's shared
// counters (retries, per-tool retries) live in Postgres where parallel
// calls of one turn pay against them atomically.
type RetryPlan struct {
	// Tool is the per-tool cap's key; model calls use "model".
	Tool string `json:"tool"`
	// Dependency is the circuit breaker's key, shared by the fleet.
	Dependency   string  `json:"dependency"`
	MaxAttempts  int     `json:"max_attempts"`
	ToolRetryCap int     `json:"tool_retry_cap"`
	RunAllowance float64 `json:"run_allowance"`
	// BackoffBase and BackoffCap shape full-jitter backoff.
	BackoffBase time.Duration `json:"backoff_base"`
	BackoffCap  time.Duration `json:"backoff_cap"`
	// Deadline is the run's absolute deadline; zero means none.
	Deadline time.Time `json:"deadline,omitempty"`
	// ReleaseInterval, when the dependency declares its rate (rate_limit:
	// requests_per_minute), is the time between two of the calls its open
	// breaker parked coming back: the backlog drains at the rate the
	// dependency can take. Zero: the breaker's own interval. The call's
	// Plan (internal/wire) sets it from the spec.
	ReleaseInterval time.Duration `json:"release_interval,omitempty"`
	// Released marks a call sent again after waiting behind its
	// dependency's open breaker: once the breaker has closed, it takes its
	// place in the dependency's paced line before it goes.
	Released bool `json:"released,omitempty"`
}

package activities

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/option"
)

// opMessages names the call in every error Turn returns.
const opMessages = "anthropic messages"

// defaultAnthropicBaseURL is used when the spec names no server. The SDK
// appends v1/messages to it, so a spec's BaseURL is the server root too.
const defaultAnthropicBaseURL = "https://api.anthropic.com"

// defaultAnthropicMaxTokens is sent when the spec sets none: the Messages
// API requires max_tokens on every request.
const defaultAnthropicMaxTokens = 1024

// anthropicModel is a Model served by the Anthropic Messages API.
type anthropicModel struct {
	client    anthropic.Client
	spec      agentsagatype.ModelSpec
	maxTokens int64
	apiKey    string // kept only to redact it from error bodies
}

var _ Model = (*anthropicModel)(nil)

// NewAnthropicModel builds a model for spec. httpClient may be nil to use the
// SDK's default. Nothing is read from the environment: the SDK would otherwise
// pick up ANTHROPIC_API_KEY, ANTHROPIC_AUTH_TOKEN, ANTHROPIC_BASE_URL, a
// profile file or extra headers, and could send a key the spec never named,
// or send it somewhere the spec does not say. The SDK's own retries are off:
// Temporal's activity retry is the only retry loop.
func NewAnthropicModel(spec agentsagatype.ModelSpec, apiKey string, httpClient *http.Client) (Model, error) {
	if spec.Provider != agentsagatype.ProviderAnthropic {
		return nil, fmt.Errorf("anthropic model: provider is %q, want %q", spec.Provider, agentsagatype.ProviderAnthropic)
	}
	if spec.Name == "" {
		return nil, fmt.Errorf("anthropic model: model name is empty")
	}
	baseURL := spec.BaseURL
	if baseURL == "" {
		baseURL = defaultAnthropicBaseURL
	}
	opts := []option.RequestOption{
		option.WithoutEnvironmentDefaults(),
		option.WithMaxRetries(0),
		option.WithBaseURL(baseURL),
		// Always set, even when empty, so no other credential source is
		// consulted. An empty key sends no x-api-key header.
		option.WithAPIKey(apiKey),
	}
	if httpClient != nil {
		opts = append(opts, option.WithHTTPClient(httpClient))
	}
	return newAnthropicModel(spec, apiKey, opts), nil
}

// newAnthropicModel is the model of spec on a client built with opts: the
// routes that serve the Messages API on another cloud (bedrock.go,
// vertex.go) build theirs here, and share Turn. apiKey is only redacted
// from what servers send.
func newAnthropicModel(spec agentsagatype.ModelSpec, apiKey string, opts []option.RequestOption) *anthropicModel {
	maxTokens := spec.MaxTokens
	if maxTokens <= 0 {
		maxTokens = defaultAnthropicMaxTokens
	}
	return &anthropicModel{
		client:    anthropic.NewClient(opts...),
		spec:      spec,
		maxTokens: maxTokens,
		apiKey:    apiKey,
	}
}

// Turn makes exactly one streamed messages request, handing each piece of
// its text to req.OnText as it arrives. A non-2xx answer is returned as
// *HTTPError so the retry classifier can read the status and retry hints
// (529 overloaded_error is a 5xx and so retryable); an error event is
// classified as its type's status would be; a stream that breaks after it
// began (a cut connection, no message_stop) is a plain (retryable) error
// that says how far it got, never a partial turn. A 200 that is one whole
// message (a gateway that does not stream) is read whole; one that is
// neither is a protocol error, never retried.
func (m *anthropicModel) Turn(ctx context.Context, req ModelRequest) (agentsagatype.ModelTurn, error) {
	params, err := m.params(req)
	if err != nil {
		return agentsagatype.ModelTurn{}, fmt.Errorf("%s: %w", opMessages, err)
	}
	var raw *http.Response
	var whole wholeReply
	stream := m.client.Messages.NewStreaming(ctx, params, option.WithResponseInto(&raw),
		option.WithMiddleware(func(r *http.Request, next option.MiddlewareNext) (*http.Response, error) {
			resp, err := next(r)
			if err == nil {
				whole.watch(resp)
			}
			return resp, err
		}))
	defer stream.Close()
	noteResponse(ctx, raw)
	if err := stream.Err(); err != nil {
		var apiErr *anthropic.Error
		switch {
		case errors.As(err, &apiErr) && apiErr.Response != nil && apiErr.StatusCode >= 300:
			return agentsagatype.ModelTurn{}, readHTTPError(opMessages, m.apiKey, apiErr.Response)
		case raw != nil && raw.StatusCode >= 400:
			// An error body the SDK cannot decode still has a status, and
			// the status must decide retries.
			return agentsagatype.ModelTurn{}, readHTTPError(opMessages, m.apiKey, raw)
		default:
			return agentsagatype.ModelTurn{}, fmt.Errorf("%s: %w", opMessages, err)
		}
	}
	var resp anthropic.Message
	events, stopped := 0, false
	for stream.Next() {
		event := stream.Current()
		events++
		if err := checkToolInputs(event, resp.Content); err != nil {
			return agentsagatype.ModelTurn{}, streamBroke(opMessages, m.apiKey, events, "events", err)
		}
		if err := resp.Accumulate(event); err != nil {
			return agentsagatype.ModelTurn{}, streamBroke(opMessages, m.apiKey, events, "events", err)
		}
		switch {
		case event.Type == "message_stop":
			stopped = true
		case event.Type == "content_block_delta" && event.Delta.Type == "text_delta" && event.Delta.Text != "" &&
			resp.Content[event.Index].Type == "text" && req.OnText != nil:
			req.OnText(event.Delta.Text)
		}
	}
	if err := stream.Err(); err != nil {
		// The SDK reads an error event as an *anthropic.Error of the 200
		// that began the stream: its status says nothing, its body all.
		var event *anthropic.Error
		if errors.As(err, &event) {
			return agentsagatype.ModelTurn{}, streamErrorEvent(opMessages, m.apiKey, events, "events", []byte(event.RawJSON()))
		}
		return agentsagatype.ModelTurn{}, streamBroke(opMessages, m.apiKey, events, "events", err)
	}
	if err := whole.protocolErr(opMessages); err != nil {
		return agentsagatype.ModelTurn{}, err
	}
	if whole.body != nil && events == 0 {
		if hasField(whole.body, "error") {
			return agentsagatype.ModelTurn{}, streamErrorEvent(opMessages, m.apiKey, 0, "events", whole.body)
		}
		if err := json.Unmarshal(whole.body, &resp); err != nil || resp.Type != "message" {
			return agentsagatype.ModelTurn{}, &protocolError{op: opMessages, contentType: whole.contentType, head: whole.body[:min(len(whole.body), 200)]}
		}
		stopped = true
		if req.OnText != nil {
			for _, block := range resp.Content {
				if block.Type == "text" && block.Text != "" {
					req.OnText(block.Text)
				}
			}
		}
	}
	if !stopped {
		return agentsagatype.ModelTurn{}, streamBroke(opMessages, m.apiKey, events, "events", errors.New("it ended without message_stop"))
	}
	return m.turnOf(resp)
}

// turnOf maps a whole message, streamed or not. Thinking blocks, with
// their signatures, are kept as the turn's Reasoning, to go back with its
// tool calls as the Messages API requires.
func (m *anthropicModel) turnOf(resp anthropic.Message) (agentsagatype.ModelTurn, error) {
	u := resp.Usage
	turn := agentsagatype.ModelTurn{
		Model: string(resp.Model),
		// input_tokens leaves out what the cache read and wrote: the
		// prompt was all three.
		Usage: reportedUsage(u.InputTokens+u.CacheReadInputTokens+u.CacheCreationInputTokens,
			u.OutputTokens, u.CacheReadInputTokens, u.CacheCreationInputTokens),
	}
	var text strings.Builder
	var thinking []thinkingBlock
	for _, block := range resp.Content {
		switch block.Type {
		case "text":
			text.WriteString(block.Text)
		case "thinking":
			thinking = append(thinking, thinkingBlock{Type: block.Type, Thinking: block.Thinking, Signature: block.Signature})
		case "redacted_thinking":
			thinking = append(thinking, thinkingBlock{Type: block.Type, Data: block.Data})
		case "tool_use":
			args := string(bytes.TrimSpace(block.Input))
			if args == "" || args == "null" {
				args = "{}"
			}
			turn.ToolCalls = append(turn.ToolCalls, agentsagatype.ToolCall{ID: block.ID, Name: block.Name, Arguments: args})
		}
	}
	turn.Content = text.String()
	if len(thinking) > 0 {
		data, _ := json.Marshal(thinking)
		turn.Reasoning = &agentsagatype.Reasoning{Provider: reasoningAnthropic, Data: data}
	}
	switch resp.StopReason {
	case anthropic.StopReasonRefusal:
		turn.Refusal = turn.Content
		if turn.Refusal == "" {
			turn.Refusal = resp.StopDetails.Explanation
		}
		if turn.Refusal == "" {
			turn.Refusal = "refused"
		}
		turn.Content = ""
	case anthropic.StopReasonPauseTurn:
		if len(turn.ToolCalls) == 0 {
			// The API paused a long turn (pause_turn, a server tool at
			// work): its text is not an answer, and a turn with text and no
			// tool calls would end the run. The request sent again goes on.
			return agentsagatype.ModelTurn{}, fmt.Errorf("%s: the model paused its turn (stop_reason pause_turn) before it finished", opMessages)
		}
	case anthropic.StopReasonMaxTokens:
		if len(turn.ToolCalls) > 0 {
			// A tool call cut at max_tokens has arguments the model did
			// not finish: no tool may act on them, and the same request
			// would be cut the same way.
			return agentsagatype.ModelTurn{}, Permanent(fmt.Errorf("%s: the reply reached max_tokens (%d) inside a tool call; raise model.max_tokens",
				opMessages, m.maxTokens))
		}
	}
	return turn, nil
}

// thinkingBlock is a thinking or redacted_thinking block as the Messages
// API sent it and wants it back: thinking and signature, or data.
type thinkingBlock struct {
	Type      string `json:"type"`
	Thinking  string `json:"thinking,omitempty"`
	Signature string `json:"signature,omitempty"`
	Data      string `json:"data,omitempty"`
}

// checkToolInputs refuses the end of a tool_use block whose streamed input
// is not JSON, before Accumulate would quietly make it {}: a call the model
// wrote must not reach its tool as a call without arguments. The Messages
// API streams only inputs that are JSON, so this is a broken stream.
func checkToolInputs(event anthropic.MessageStreamEventUnion, blocks []anthropic.ContentBlockUnion) error {
	if event.Type != "content_block_stop" && event.Type != "message_stop" {
		return nil
	}
	for _, block := range blocks {
		if block.Type == "tool_use" && len(block.Input) > 0 && !json.Valid(block.Input) {
			return fmt.Errorf("tool_use %s: the streamed input is not JSON: %s", block.ID, truncateBody(block.Input))
		}
	}
	return nil
}

// params translates the provider-neutral request to the SDK's. System
// messages before the conversation become the top-level system prompt;
// the rest become alternating user and assistant messages, with
// consecutive blocks of the same role (tool results above all) merged into
// one message. System messages after the conversation (the budget note,
// the finish instructions: what changes every turn) go last, as text of
// the final user message, after the cache's last breakpoint, so they never
// invalidate the cached prefix. An assistant turn's thinking blocks go back
// before its tool calls, unchanged, as the API requires; reasoning another
// provider wrote is left out.
func (m *anthropicModel) params(req ModelRequest) (anthropic.MessageNewParams, error) {
	p := anthropic.MessageNewParams{Model: anthropic.Model(m.spec.Name), MaxTokens: m.maxTokens}
	if t := m.spec.Thinking; t != nil && t.BudgetTokens > 0 {
		p.Thinking = anthropic.ThinkingConfigParamOfEnabled(t.BudgetTokens)
	}
	conversationEnd := len(req.Messages)
	for conversationEnd > 0 && req.Messages[conversationEnd-1].Role == "system" {
		conversationEnd--
	}
	var system, trailing []string
	// The message and content block that end the conversation, before
	// any trailing note.
	endMessage, endBlock := -1, -1
	for i, msg := range req.Messages {
		var role anthropic.MessageParamRole
		var blocks []anthropic.ContentBlockParamUnion
		switch msg.Role {
		case "system":
			if strings.TrimSpace(msg.Content) == "" {
				continue
			}
			if i >= conversationEnd && conversationEnd > 0 {
				trailing = append(trailing, msg.Content)
			} else {
				system = append(system, msg.Content)
			}
			continue
		case "user":
			role = anthropic.MessageParamRoleUser
			blocks = append(blocks, textBlocks(msg.Content)...)
		case "assistant":
			role = anthropic.MessageParamRoleAssistant
			if len(msg.ToolCalls) > 0 {
				blocks = append(blocks, thinkingBlocks(msg.Reasoning)...)
			}
			blocks = append(blocks, textBlocks(msg.Content)...)
			for _, call := range msg.ToolCalls {
				blocks = append(blocks, anthropic.NewToolUseBlock(anthropicToolID(call.ID), toolInput(call.Arguments), call.Name))
			}
		case "tool":
			role = anthropic.MessageParamRoleUser
			result := anthropic.ToolResultBlockParam{ToolUseID: anthropicToolID(msg.ToolCallID)}
			// The API rejects an empty text block; a result with no
			// content is sent without one.
			if msg.Content != "" {
				result.Content = []anthropic.ToolResultBlockParamContentUnion{
					{OfText: &anthropic.TextBlockParam{Text: msg.Content}},
				}
			}
			blocks = append(blocks, anthropic.ContentBlockParamUnion{OfToolResult: &result})
		default:
			return p, fmt.Errorf("messages[%d]: unknown role %q", i, msg.Role)
		}
		if len(blocks) == 0 {
			continue
		}
		if n := len(p.Messages); n > 0 && p.Messages[n-1].Role == role {
			p.Messages[n-1].Content = append(p.Messages[n-1].Content, blocks...)
		} else {
			p.Messages = append(p.Messages, anthropic.MessageParam{Role: role, Content: blocks})
		}
		endMessage = len(p.Messages) - 1
		endBlock = len(p.Messages[endMessage].Content) - 1
	}
	if len(system) > 0 {
		p.System = []anthropic.TextBlockParam{{Text: strings.Join(system, "\n\n")}}
	}
	if len(trailing) > 0 {
		note := anthropic.NewTextBlock(strings.Join(trailing, "\n\n"))
		if n := len(p.Messages); n > 0 && p.Messages[n-1].Role == anthropic.MessageParamRoleUser {
			p.Messages[n-1].Content = append(p.Messages[n-1].Content, note)
		} else {
			p.Messages = append(p.Messages, anthropic.MessageParam{Role: anthropic.MessageParamRoleUser, Content: []anthropic.ContentBlockParamUnion{note}})
		}
	}
	for i, tool := range req.Tools {
		tp, err := anthropicTool(tool)
		if err != nil {
			return p, fmt.Errorf("tools[%d] (%s): %w", i, tool.Name, err)
		}
		p.Tools = append(p.Tools, tp)
	}
	if cachesPrompt(m.spec) {
		markCacheBreakpoints(&p, endMessage, endBlock)
	}
	return p, nil
}

// markCacheBreakpoints sets cache_control on the stable prefix, at most
// three of the API's four breakpoints: the last tool (tools come first in
// the cache's order), the system prompt, and the block that ends the
// conversation so far (the newest turn: a breakpoint that moves along
// with the run, while the API finds the previous turn's prefix by looking
// back from it). Nothing after that block changes the prefix.
func markCacheBreakpoints(p *anthropic.MessageNewParams, endMessage, endBlock int) {
	if n := len(p.Tools); n > 0 {
		if cc := p.Tools[n-1].GetCacheControl(); cc != nil {
			*cc = anthropic.NewCacheControlEphemeralParam()
		}
	}
	if n := len(p.System); n > 0 {
		p.System[n-1].CacheControl = anthropic.NewCacheControlEphemeralParam()
	}
	if endMessage < 0 {
		return
	}
	if cc := p.Messages[endMessage].Content[endBlock].GetCacheControl(); cc != nil {
		*cc = anthropic.NewCacheControlEphemeralParam()
	}
}

// thinkingBlocks are the thinking blocks of an assistant turn, as the API
// sent them; none for reasoning of another provider.
func thinkingBlocks(r *agentsagatype.Reasoning) []anthropic.ContentBlockParamUnion {
	if r == nil || r.Provider != reasoningAnthropic {
		return nil
	}
	var kept []thinkingBlock
	if json.Unmarshal(r.Data, &kept) != nil {
		return nil
	}
	blocks := make([]anthropic.ContentBlockParamUnion, 0, len(kept))
	for _, b := range kept {
		switch b.Type {
		case "thinking":
			blocks = append(blocks, anthropic.NewThinkingBlock(b.Signature, b.Thinking))
		case "redacted_thinking":
			blocks = append(blocks, anthropic.NewRedactedThinkingBlock(b.Data))
		}
	}
	return blocks
}

// textBlocks is one text block, or none for empty text, which the API
// rejects.
func textBlocks(text string) []anthropic.ContentBlockParamUnion {
	if text == "" {
		return nil
	}
	return []anthropic.ContentBlockParamUnion{anthropic.NewTextBlock(text)}
}

// toolInput is a tool call's arguments as the JSON object tool_use needs.
// Arguments the model wrote that are not a JSON object are kept, as text,
// under "_raw", so the conversation still shows what was asked.
func toolInput(arguments string) json.RawMessage {
	trimmed := strings.TrimSpace(arguments)
	if trimmed == "" {
		return json.RawMessage(`{}`)
	}
	if json.Valid([]byte(trimmed)) && strings.HasPrefix(trimmed, "{") {
		return json.RawMessage(trimmed)
	}
	wrapped, _ := json.Marshal(map[string]string{"_raw": arguments})
	return wrapped
}

// anthropicTool describes tool with its parameters as input_schema, which
// must be an object schema; no parameters means an object with none.
func anthropicTool(tool agentsagatype.ToolDef) (anthropic.ToolUnionParam, error) {
	// Type is set although it defaults to "object": the SDK omits a zero
	// input_schema altogether, and the API requires one.
	schema := anthropic.ToolInputSchemaParam{Type: "object"}
	if len(bytes.TrimSpace(tool.Parameters)) > 0 {
		// Decoded without UseNumber, as for OpenAI: float64 is exact for
		// any number a schema plausibly holds.
		var fields map[string]any
		if err := json.Unmarshal(tool.Parameters, &fields); err != nil {
			return anthropic.ToolUnionParam{}, fmt.Errorf("parameters: not a JSON object: %w", err)
		}
		if t, ok := fields["type"]; ok && t != "object" {
			return anthropic.ToolUnionParam{}, fmt.Errorf("parameters: type is %v, want \"object\"", t)
		}
		delete(fields, "type")
		if props, ok := fields["properties"]; ok {
			schema.Properties = props
			delete(fields, "properties")
		}
		if req, ok := fields["required"]; ok {
			list, ok := req.([]any)
			if !ok {
				return anthropic.ToolUnionParam{}, fmt.Errorf("parameters: required is not a list of names")
			}
			for _, name := range list {
				s, ok := name.(string)
				if !ok {
					return anthropic.ToolUnionParam{}, fmt.Errorf("parameters: required is not a list of names")
				}
				schema.Required = append(schema.Required, s)
			}
			delete(fields, "required")
		}
		if len(fields) > 0 {
			schema.ExtraFields = fields
		}
	}
	tp := anthropic.ToolParam{Name: tool.Name, InputSchema: schema}
	if tool.Description != "" {
		tp.Description = anthropic.String(tool.Description)
	}
	return anthropic.ToolUnionParam{OfTool: &tp}, nil
}

// anthropicToolID is a tool call's ID as the Messages API accepts it
// (letters, digits, "_" and "-"). A conversation that began on another
// provider may carry IDs with other characters (some OpenAI-compatible
// servers send "functions.lookup:0"); each is replaced by "_", the same way
// in a call and in its result, so the pair still matches.
func anthropicToolID(id string) string {
	return strings.Map(func(r rune) rune {
		if r == '_' || r == '-' || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9') {
			return r
		}
		return '_'
	}, id)
}

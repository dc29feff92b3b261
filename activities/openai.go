package activities

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/param"
	"github.com/openai/openai-go/v3/packages/respjson"
	"github.com/openai/openai-go/v3/packages/ssestream"
	"github.com/openai/openai-go/v3/shared"
)

// opChatCompletions names the call in every error Turn returns.
const opChatCompletions = "openai chat.completions"

// defaultOpenAIBaseURL is used when the spec names no server. It is set
// explicitly so that an OPENAI_BASE_URL in the worker's environment cannot
// send a run somewhere its spec does not say.
const defaultOpenAIBaseURL = "https://api.openai.com/v1"

// openAIModel is a Model served by the OpenAI chat completions API or by any
// server that speaks it (Ollama, vLLM, llama.cpp).
type openAIModel struct {
	client openai.Client
	spec   agentsagatype.ModelSpec
	apiKey string // kept only to redact it from error bodies
}

var _ Model = (*openAIModel)(nil)

// NewOpenAIModel builds a model for spec. apiKey may be empty for local
// servers that need none; httpClient may be nil to use the SDK's default.
// The SDK's own retries are off: Temporal's activity retry is the only retry
// loop, and a second one would multiply attempts and hide failures.
func NewOpenAIModel(spec agentsagatype.ModelSpec, apiKey string, httpClient *http.Client) (Model, error) {
	if spec.Provider != agentsagatype.ProviderOpenAI {
		return nil, fmt.Errorf("openai model: provider is %q, want %q", spec.Provider, agentsagatype.ProviderOpenAI)
	}
	if spec.Name == "" {
		return nil, fmt.Errorf("openai model: model name is empty")
	}
	return newOpenAIModel(spec, apiKey, openAIClientOptions(spec, apiKey, httpClient)), nil
}

// openAIClientOptions are the options of a client of OpenAI's API (Chat
// Completions or Responses) at spec's server: the SDK's retries off, and
// nothing taken from the worker's environment.
func openAIClientOptions(spec agentsagatype.ModelSpec, apiKey string, httpClient *http.Client) []option.RequestOption {
	opts := []option.RequestOption{
		option.WithMaxRetries(0),
		// Set explicitly, so that an OPENAI_BASE_URL in the worker's
		// environment cannot send a run somewhere its spec does not say.
		option.WithBaseURL(cmp.Or(spec.BaseURL, defaultOpenAIBaseURL)),
		// Always set, even when empty: otherwise the SDK falls back to
		// OPENAI_API_KEY and could send that key to a local server. An empty
		// key sends no Authorization header at all.
		option.WithAPIKey(apiKey),
	}
	if httpClient != nil {
		opts = append(opts, option.WithHTTPClient(httpClient))
	}
	return opts
}

// newOpenAIModel is the model of spec on a client built with opts: the
// routes that speak Chat Completions on another endpoint or with another
// authentication (azure.go) build theirs here, and share Turn. apiKey is
// only redacted from what servers send.
func newOpenAIModel(spec agentsagatype.ModelSpec, apiKey string, opts []option.RequestOption) *openAIModel {
	return &openAIModel{client: openai.NewClient(opts...), spec: spec, apiKey: apiKey}
}

// Turn makes exactly one streamed chat.completions request and maps its
// first choice, handing each piece of its content to req.OnText as it
// arrives. A non-2xx answer is returned as *HTTPError so the retry
// classifier can read the status and retry hints; an error event inside
// the stream is classified as its type's status would be; a stream that
// breaks after it began is a plain (retryable) error that says how far it
// got, never a partial turn. A 200 that is one whole JSON completion (as
// some compatible servers answer a streamed request) is read whole; one
// that is neither is a protocol error, never retried.
func (m *openAIModel) Turn(ctx context.Context, req ModelRequest) (agentsagatype.ModelTurn, error) {
	params, err := m.params(req)
	if err != nil {
		return agentsagatype.ModelTurn{}, fmt.Errorf("%s: %w", opChatCompletions, err)
	}
	// Without include_usage a stream reports no tokens, and the run would
	// be charged nothing for the turn.
	params.StreamOptions.IncludeUsage = openai.Bool(true)
	var raw *http.Response
	var end doneWatch
	stream := m.client.Chat.Completions.NewStreaming(ctx, params, option.WithResponseInto(&raw), option.WithMiddleware(end.middleware))
	defer stream.Close()
	noteResponse(ctx, raw)
	if err := stream.Err(); err != nil {
		return agentsagatype.ModelTurn{}, openAIStartError(opChatCompletions, m.apiKey, err, raw)
	}
	var acc openai.ChatCompletionAccumulator
	var extra chunkExtras
	chunks := 0
	for stream.Next() {
		chunk := stream.Current()
		chunks++
		extra.mend(&chunk, acc.ID)
		if !acc.AddChunk(chunk) {
			return agentsagatype.ModelTurn{}, streamBroke(opChatCompletions, m.apiKey, chunks, "chunks", errors.New("the chunk does not continue the completion (another id, or a choice or tool call index out of range)"))
		}
		for _, choice := range chunk.Choices {
			if choice.Index == 0 && choice.Delta.Content != "" && req.OnText != nil {
				req.OnText(choice.Delta.Content)
			}
		}
	}
	if err := stream.Err(); err != nil {
		var event *ssestream.StreamError
		if errors.As(err, &event) {
			return agentsagatype.ModelTurn{}, streamErrorEvent(opChatCompletions, m.apiKey, chunks, "chunks", event.Event.Data)
		}
		return agentsagatype.ModelTurn{}, streamBroke(opChatCompletions, m.apiKey, chunks, "chunks", err)
	}
	if err := end.whole.protocolErr(opChatCompletions); err != nil {
		return agentsagatype.ModelTurn{}, err
	}
	if end.whole.body != nil && chunks == 0 {
		return m.wholeCompletion(end.whole.body, req)
	}
	if !end.done {
		return agentsagatype.ModelTurn{}, streamBroke(opChatCompletions, m.apiKey, chunks, "chunks", errors.New("it ended without data: [DONE]"))
	}
	if len(acc.Choices) == 0 {
		return agentsagatype.ModelTurn{}, fmt.Errorf("%s: the reply has no choices (%d chunks)", opChatCompletions, chunks)
	}
	return chatTurn(acc.ChatCompletion, &extra), nil
}

// wholeCompletion reads a whole JSON answer to a streamed request: a
// chat.completion, or an error object sent with a 200.
func (m *openAIModel) wholeCompletion(body []byte, req ModelRequest) (agentsagatype.ModelTurn, error) {
	if status := errorEventStatus(body); status != 0 || hasField(body, "error") {
		return agentsagatype.ModelTurn{}, streamErrorEvent(opChatCompletions, m.apiKey, 0, "chunks", body)
	}
	var completion openai.ChatCompletion
	if err := json.Unmarshal(body, &completion); err != nil || len(completion.Choices) == 0 {
		return agentsagatype.ModelTurn{}, &protocolError{op: opChatCompletions, contentType: "application/json", head: body[:min(len(body), 200)]}
	}
	var extra chunkExtras
	extra.fromMessage(completion.Choices[0].Message)
	turn := chatTurn(completion, &extra)
	if turn.Content != "" && req.OnText != nil {
		req.OnText(turn.Content)
	}
	return turn, nil
}

// hasField says whether body is a JSON object with the top-level field.
func hasField(body []byte, field string) bool {
	var fields map[string]json.RawMessage
	if json.Unmarshal(body, &fields) != nil {
		return false
	}
	_, ok := fields[field]
	return ok
}

// openAIStartError is the error of a request to OpenAI's API that failed
// before its stream began: a non-2xx answer as *HTTPError, so the retry
// classifier reads its status and retry hints; anything else wrapped with
// op.
func openAIStartError(op, apiKey string, err error, raw *http.Response) error {
	var apiErr *openai.Error
	switch {
	case errors.As(err, &apiErr) && apiErr.Response != nil:
		return readHTTPError(op, apiKey, apiErr.Response)
	case raw != nil && raw.StatusCode >= 400:
		// The SDK fails to decode an error body like {"error":"not
		// found"}, which some compatible servers send, and returns the
		// decode error instead; the status must still decide retries.
		return readHTTPError(op, apiKey, raw)
	default:
		return fmt.Errorf("%s: %w", op, err)
	}
}

// chatTurn maps a completion's first choice, streamed or whole.
func chatTurn(c openai.ChatCompletion, extra *chunkExtras) agentsagatype.ModelTurn {
	choice := c.Choices[0]
	msg := choice.Message
	turn := agentsagatype.ModelTurn{
		Content: msg.Content,
		Refusal: msg.Refusal,
		Model:   c.Model,
		// prompt_tokens counts the cached part too.
		Usage: reportedUsage(c.Usage.PromptTokens, c.Usage.CompletionTokens, c.Usage.PromptTokensDetails.CachedTokens, 0),
	}
	if choice.FinishReason == "content_filter" && turn.Refusal == "" {
		// Azure's (and OpenAI's) content filter stopped the reply: a
		// refusal, which no retry changes.
		turn.Refusal = cmp.Or(turn.Content, "the provider's content filter stopped the reply")
		turn.Content = ""
	}
	for i, call := range msg.ToolCalls {
		tc := agentsagatype.ToolCall{ID: call.ID, Name: call.Function.Name, Arguments: call.Function.Arguments}
		// Type is checked loosely because some compatible servers omit it
		// on function calls.
		if call.Type == "custom" {
			tc.Name, tc.Arguments = cmp.Or(call.Custom.Name, extra.customName(i)), cmp.Or(call.Custom.Input, extra.customInput(i))
		}
		turn.ToolCalls = append(turn.ToolCalls, tc)
	}
	turn.Reasoning = extra.reasoning(turn.ToolCalls)
	return turn
}

// doneWatch notes whether a stream's body held the data: [DONE] line that
// ends an OpenAI stream. The SDK's stream ends the same way, with no error,
// whether that line came or the body just stopped early, and only the
// first is a whole reply.
type doneWatch struct {
	line  [len("data: [DONE]")]byte // the start of the line being read
	n     int                       // how much of line is filled
	done  bool
	whole wholeReply // a 2xx answer that is not an event stream
}

// middleware watches the body of a 2xx answer; an error answer is the
// SDK's to read.
func (d *doneWatch) middleware(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
	resp, err := next(req)
	if err == nil && resp != nil && resp.StatusCode < 300 && resp.Body != nil {
		d.whole.watch(resp)
		resp.Body = &watchedBody{ReadCloser: resp.Body, watch: d}
	}
	return resp, err
}

type watchedBody struct {
	io.ReadCloser
	watch *doneWatch
}

func (b *watchedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.watch.see(p[:n])
	return n, err
}

// see reads the bytes that came next. A line is read as the SDK reads an
// event's data: "data:", one optional space, then anything that begins
// with [DONE].
func (d *doneWatch) see(p []byte) {
	for _, c := range p {
		if c != '\n' && c != '\r' {
			if d.n < len(d.line) {
				d.line[d.n] = c
				d.n++
			}
			continue
		}
		if value, ok := bytes.CutPrefix(d.line[:d.n], []byte("data:")); ok {
			d.done = d.done || bytes.HasPrefix(bytes.TrimPrefix(value, []byte(" ")), []byte("[DONE]"))
		}
		d.n = 0
	}
}

// chunkExtras is what the SDK's chunk type leaves out of a streamed
// choice, assembled from the chunks' extra fields, and the mending that
// lets the SDK's accumulator read what compatible servers send.
type chunkExtras struct {
	// names and inputs of the custom tool calls of the first choice: each
	// delta of a call of type "custom" carries a fragment of its name and
	// input under "custom".
	names, inputs map[int64]string
	// extraContent is each tool call's extra_content, kept whole (Gemini's
	// OpenAI-compatible endpoint puts the call's thought signature there,
	// and wants it back unchanged).
	extraContent map[int64]json.RawMessage
	// calls counts the tool calls seen, and lastID is the newest one's ID,
	// to place a call sent without an index.
	calls  int64
	lastID string
}

// mend makes chunk readable by the SDK's accumulator and notes its
// extras: a chunk with no id (Azure's prompt_filter_results, a usage
// chunk from some servers) takes the completion's; a tool call sent whole
// without an index (Ollama) takes the next one.
func (c *chunkExtras) mend(chunk *openai.ChatCompletionChunk, id string) {
	if chunk.ID == "" && id != "" {
		chunk.ID = id
	}
	for ci := range chunk.Choices {
		choice := &chunk.Choices[ci]
		if choice.Index != 0 {
			continue
		}
		for ti := range choice.Delta.ToolCalls {
			call := &choice.Delta.ToolCalls[ti]
			if !call.JSON.Index.Valid() {
				switch {
				case c.calls == 0 || (call.ID != "" && call.ID != c.lastID):
					call.Index = c.calls
				default:
					call.Index = c.calls - 1
				}
			}
			if call.Index >= c.calls {
				c.calls = call.Index + 1
			}
			if call.ID != "" {
				c.lastID = call.ID
			}
			c.note(call.Index, call.JSON.ExtraFields)
		}
	}
}

// fromMessage notes the extras of a whole completion's message.
func (c *chunkExtras) fromMessage(msg openai.ChatCompletionMessage) {
	for i, call := range msg.ToolCalls {
		var fields map[string]json.RawMessage
		if json.Unmarshal([]byte(call.RawJSON()), &fields) != nil {
			continue
		}
		if raw, ok := fields["extra_content"]; ok {
			c.note(int64(i), map[string]respjson.Field{"extra_content": respjson.NewField(string(raw))})
		}
	}
}

func (c *chunkExtras) note(index int64, fields map[string]respjson.Field) {
	// -1 is index 0, as the SDK's accumulator reads it.
	index = max(index, 0)
	if field, ok := fields["custom"]; ok {
		var part struct {
			Name  string `json:"name"`
			Input string `json:"input"`
		}
		if json.Unmarshal([]byte(field.Raw()), &part) == nil {
			if c.names == nil {
				c.names, c.inputs = map[int64]string{}, map[int64]string{}
			}
			c.names[index] += part.Name
			c.inputs[index] += part.Input
		}
	}
	if field, ok := fields["extra_content"]; ok && json.Valid([]byte(field.Raw())) {
		if c.extraContent == nil {
			c.extraContent = map[int64]json.RawMessage{}
		}
		c.extraContent[index] = json.RawMessage(field.Raw())
	}
}

func (c *chunkExtras) customName(i int) string  { return c.names[int64(i)] }
func (c *chunkExtras) customInput(i int) string { return c.inputs[int64(i)] }

// reasoning is the turn's tool calls' extra_content, by call ID, to send
// back with them: nil when none carried any.
func (c *chunkExtras) reasoning(calls []agentsagatype.ToolCall) *agentsagatype.Reasoning {
	if len(c.extraContent) == 0 {
		return nil
	}
	byID := map[string]json.RawMessage{}
	for i, call := range calls {
		if raw, ok := c.extraContent[int64(i)]; ok {
			byID[call.ID] = raw
		}
	}
	data, _ := json.Marshal(byID)
	return &agentsagatype.Reasoning{Provider: reasoningExtraContent, Data: data}
}

// reasoningExtraContent tags the extra_content of an OpenAI-compatible
// server's tool calls in a turn's Reasoning.
const reasoningExtraContent = "openai-extra-content"

// baseURL is the server the spec names, or OpenAI's.
func (m *openAIModel) baseURL() string { return cmp.Or(m.spec.BaseURL, defaultOpenAIBaseURL) }

// params translates the provider-neutral request to the SDK's.
func (m *openAIModel) params(req ModelRequest) (openai.ChatCompletionNewParams, error) {
	p := openai.ChatCompletionNewParams{Model: shared.ChatModel(m.spec.Name)}
	if m.spec.MaxTokens > 0 {
		p.MaxCompletionTokens = openai.Int(m.spec.MaxTokens)
	}
	if r := m.spec.Reasoning; r != nil {
		// A reasoning model's effort (the spec allows it on azure, where
		// Chat Completions serves OpenAI's reasoning models).
		p.ReasoningEffort = shared.ReasoningEffort(r.Effort)
	}
	if req.CacheKey != "" && cachesPrompt(m.spec) && strings.TrimSuffix(m.baseURL(), "/") == defaultOpenAIBaseURL {
		// OpenAI caches on its own; the key keeps a run's requests on the
		// same cache. Only OpenAI is sent it: a compatible server may
		// refuse a field it does not know.
		p.PromptCacheKey = openai.String(req.CacheKey)
	}
	for i, msg := range req.Messages {
		mp, err := messageParam(msg)
		if err != nil {
			return p, fmt.Errorf("messages[%d]: %w", i, err)
		}
		p.Messages = append(p.Messages, mp)
	}
	for i, tool := range req.Tools {
		tp, err := toolParam(tool)
		if err != nil {
			return p, fmt.Errorf("tools[%d] (%s): %w", i, tool.Name, err)
		}
		p.Tools = append(p.Tools, tp)
	}
	return p, nil
}

func messageParam(msg agentsagatype.Message) (openai.ChatCompletionMessageParamUnion, error) {
	var extraContent map[string]json.RawMessage
	if msg.Reasoning != nil && msg.Reasoning.Provider == reasoningExtraContent {
		_ = json.Unmarshal(msg.Reasoning.Data, &extraContent)
	}
	switch msg.Role {
	case "system":
		return openai.SystemMessage(msg.Content), nil
	case "user":
		return openai.UserMessage(msg.Content), nil
	case "tool":
		return openai.ToolMessage(msg.Content, msg.ToolCallID), nil
	case "assistant":
		var a openai.ChatCompletionAssistantMessageParam
		// Content may be left out only when the message carries tool calls.
		if msg.Content != "" || len(msg.ToolCalls) == 0 {
			a.Content.OfString = param.NewOpt(msg.Content)
		}
		for _, call := range msg.ToolCalls {
			fn := &openai.ChatCompletionMessageFunctionToolCallParam{
				ID: call.ID,
				Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{
					Name:      call.Name,
					Arguments: call.Arguments,
				},
			}
			if raw, ok := extraContent[call.ID]; ok {
				// Sent back as it came (Gemini's thought signature).
				fn.SetExtraFields(map[string]any{"extra_content": raw})
			}
			a.ToolCalls = append(a.ToolCalls, openai.ChatCompletionMessageToolCallUnionParam{OfFunction: fn})
		}
		return openai.ChatCompletionMessageParamUnion{OfAssistant: &a}, nil
	default:
		return openai.ChatCompletionMessageParamUnion{}, fmt.Errorf("unknown role %q", msg.Role)
	}
}

func toolParam(tool agentsagatype.ToolDef) (openai.ChatCompletionToolUnionParam, error) {
	// OpenAI rejects a function tool without an object schema, and a tool
	// that takes no arguments is still an object with no properties.
	schema := shared.FunctionParameters{"type": "object"}
	if len(bytes.TrimSpace(tool.Parameters)) > 0 {
		// Not decoded with UseNumber: the SDK would send json.Number as a
		// string ("maxLength":"100"), and float64 is exact for any number a
		// schema plausibly holds.
		schema = nil
		if err := json.Unmarshal(tool.Parameters, &schema); err != nil {
			return openai.ChatCompletionToolUnionParam{}, fmt.Errorf("parameters: not a JSON object: %w", err)
		}
		if schema == nil {
			schema = shared.FunctionParameters{"type": "object"}
		}
	}
	fn := shared.FunctionDefinitionParam{Name: tool.Name, Parameters: schema}
	if tool.Description != "" {
		fn.Description = openai.String(tool.Description)
	}
	return openai.ChatCompletionFunctionTool(fn), nil
}

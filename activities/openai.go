package activities

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/param"
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
	baseURL := spec.BaseURL
	if baseURL == "" {
		baseURL = defaultOpenAIBaseURL
	}
	opts := []option.RequestOption{
		option.WithMaxRetries(0),
		option.WithBaseURL(baseURL),
		// Always set, even when empty: otherwise the SDK falls back to
		// OPENAI_API_KEY and could send that key to a local server. An empty
		// key sends no Authorization header at all.
		option.WithAPIKey(apiKey),
	}
	if httpClient != nil {
		opts = append(opts, option.WithHTTPClient(httpClient))
	}
	return newOpenAIModel(spec, apiKey, opts), nil
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
// classifier can read the status and retry hints; a stream that breaks
// after it began is a plain (retryable) error that says how far it got,
// never a partial turn; anything else is wrapped with the op.
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
		var apiErr *openai.Error
		switch {
		case errors.As(err, &apiErr) && apiErr.Response != nil:
			return agentsagatype.ModelTurn{}, m.httpError(apiErr.Response)
		case raw != nil && raw.StatusCode >= 400:
			// The SDK fails to decode an error body like {"error":"not
			// found"}, which some compatible servers send, and returns the
			// decode error instead; the status must still decide retries.
			return agentsagatype.ModelTurn{}, m.httpError(raw)
		default:
			return agentsagatype.ModelTurn{}, fmt.Errorf("%s: %w", opChatCompletions, err)
		}
	}
	var acc openai.ChatCompletionAccumulator
	var custom customToolCalls
	chunks := 0
	for stream.Next() {
		chunk := stream.Current()
		chunks++
		if !acc.AddChunk(chunk) {
			return agentsagatype.ModelTurn{}, streamBroke(opChatCompletions, m.apiKey, chunks, "chunks", errors.New("the chunk does not continue the completion (another id, or a choice or tool call index out of range)"))
		}
		custom.add(chunk)
		for _, choice := range chunk.Choices {
			if choice.Index == 0 && choice.Delta.Content != "" && req.OnText != nil {
				req.OnText(choice.Delta.Content)
			}
		}
	}
	if err := stream.Err(); err != nil {
		var event *ssestream.StreamError
		if errors.As(err, &event) {
			err = errorEvent(m.apiKey, event.Event.Data)
		}
		return agentsagatype.ModelTurn{}, streamBroke(opChatCompletions, m.apiKey, chunks, "chunks", err)
	}
	if !end.done {
		return agentsagatype.ModelTurn{}, streamBroke(opChatCompletions, m.apiKey, chunks, "chunks", errors.New("it ended without data: [DONE]"))
	}
	if len(acc.Choices) == 0 {
		return agentsagatype.ModelTurn{}, fmt.Errorf("%s: the reply has no choices (%d chunks)", opChatCompletions, chunks)
	}
	msg := acc.Choices[0].Message
	turn := agentsagatype.ModelTurn{
		Content: msg.Content,
		Refusal: msg.Refusal,
		Model:   acc.Model,
		// prompt_tokens counts the cached part too.
		Usage: reportedUsage(acc.Usage.PromptTokens, acc.Usage.CompletionTokens, acc.Usage.PromptTokensDetails.CachedTokens),
	}
	for i, call := range msg.ToolCalls {
		tc := agentsagatype.ToolCall{ID: call.ID, Name: call.Function.Name, Arguments: call.Function.Arguments}
		// Type is checked loosely because some compatible servers omit it
		// on function calls.
		if call.Type == "custom" {
			tc.Name, tc.Arguments = custom.name(i), custom.input(i)
		}
		turn.ToolCalls = append(turn.ToolCalls, tc)
	}
	return turn, nil
}

// doneWatch notes whether a stream's body held the data: [DONE] line that
// ends an OpenAI stream. The SDK's stream ends the same way, with no error,
// whether that line came or the body just stopped early, and only the
// first is a whole reply.
type doneWatch struct {
	line [len("data: [DONE]")]byte // the start of the line being read
	n    int                       // how much of line is filled
	done bool
}

// middleware watches the body of a 2xx answer; an error answer is the
// SDK's to read.
func (d *doneWatch) middleware(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
	resp, err := next(req)
	if err == nil && resp != nil && resp.StatusCode < 300 && resp.Body != nil {
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

// customToolCalls assembles the custom tool calls of the first choice,
// which the SDK's chunk type leaves out (it knows only function calls):
// each delta of a call of type "custom" carries a fragment of its name and
// input under "custom".
type customToolCalls struct {
	names, inputs map[int64]string
}

func (c *customToolCalls) add(chunk openai.ChatCompletionChunk) {
	for _, choice := range chunk.Choices {
		if choice.Index != 0 {
			continue
		}
		for _, call := range choice.Delta.ToolCalls {
			field, ok := call.JSON.ExtraFields["custom"]
			if !ok {
				continue
			}
			var part struct {
				Name  string `json:"name"`
				Input string `json:"input"`
			}
			if json.Unmarshal([]byte(field.Raw()), &part) != nil {
				continue
			}
			if c.names == nil {
				c.names, c.inputs = map[int64]string{}, map[int64]string{}
			}
			// -1 is index 0, as the SDK's accumulator reads it.
			index := max(call.Index, 0)
			c.names[index] += part.Name
			c.inputs[index] += part.Input
		}
	}
}

func (c *customToolCalls) name(i int) string  { return c.names[int64(i)] }
func (c *customToolCalls) input(i int) string { return c.inputs[int64(i)] }

// httpError reads the error body the SDK buffered and strips the API key
// from it, in case a server or proxy echoes the request headers back.
func (m *openAIModel) httpError(resp *http.Response) *HTTPError {
	var body []byte
	if resp.Body != nil {
		body, _ = io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	}
	if m.apiKey != "" {
		body = bytes.ReplaceAll(body, []byte(m.apiKey), []byte("[redacted]"))
	}
	return newHTTPError(opChatCompletions, resp, body)
}

// params translates the provider-neutral request to the SDK's.
func (m *openAIModel) params(req ModelRequest) (openai.ChatCompletionNewParams, error) {
	p := openai.ChatCompletionNewParams{Model: shared.ChatModel(m.spec.Name)}
	if m.spec.MaxTokens > 0 {
		p.MaxCompletionTokens = openai.Int(m.spec.MaxTokens)
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
			a.ToolCalls = append(a.ToolCalls, openai.ChatCompletionMessageToolCallUnionParam{
				OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{
					ID: call.ID,
					Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{
						Name:      call.Name,
						Arguments: call.Arguments,
					},
				},
			})
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

package activities

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/param"
	"github.com/openai/openai-go/v3/packages/ssestream"
	"github.com/openai/openai-go/v3/responses"
	"github.com/openai/openai-go/v3/shared"
)

// opResponses names the call in every error Turn returns.
const opResponses = "openai responses"

// responsesModel is a Model served by OpenAI's Responses API. Nothing is
// stored at OpenAI (store: false): each request carries the whole
// conversation, with the reasoning items of earlier turns sent back
// encrypted, as OpenAI returned them.
type responsesModel struct {
	client openai.Client
	spec   agentsagatype.ModelSpec
	apiKey string // kept only to redact it from errors
}

var _ Model = (*responsesModel)(nil)

// newOpenAIResponsesModel builds a model for spec, whose provider is
// openai-responses. apiKey may be empty for a server that needs none;
// httpClient may be nil to use the SDK's default. The SDK's own retries are
// off: Temporal's activity retry is the only retry loop.
func newOpenAIResponsesModel(spec agentsagatype.ModelSpec, apiKey string, httpClient *http.Client) (Model, error) {
	if spec.Provider != agentsagatype.ProviderOpenAIResponses {
		return nil, fmt.Errorf("openai responses model: provider is %q, want %q", spec.Provider, agentsagatype.ProviderOpenAIResponses)
	}
	if spec.Name == "" {
		return nil, fmt.Errorf("openai responses model: model name is empty")
	}
	return &responsesModel{client: openai.NewClient(openAIClientOptions(spec, apiKey, httpClient)...), spec: spec, apiKey: apiKey}, nil
}

// Turn makes exactly one streamed responses request and maps the response
// its terminal event carries, handing each piece of its output text to
// req.OnText as it arrives.
//
// A non-2xx answer is returned as *HTTPError, so the retry classifier reads
// its status and retry hints. A stream that breaks after it began (cut
// short, or ended by an error event or response.failed) is a plain,
// retryable error that says how far it got, never a partial turn; except
// that an error event or a failed response whose error is the request's
// fault (invalid_request_error, invalid_prompt, ...) is returned as the
// *HTTPError of the status OpenAI answers that error with before a stream
// begins (400, 401, 403, 404), which no retry can fix.
func (m *responsesModel) Turn(ctx context.Context, req ModelRequest) (agentsagatype.ModelTurn, error) {
	params, err := m.params(req)
	if err != nil {
		return agentsagatype.ModelTurn{}, fmt.Errorf("%s: %w", opResponses, err)
	}
	var raw *http.Response
	stream := m.client.Responses.NewStreaming(ctx, params, option.WithResponseInto(&raw))
	defer stream.Close()
	noteResponse(ctx, raw)
	if err := stream.Err(); err != nil {
		return agentsagatype.ModelTurn{}, openAIStartError(opResponses, m.apiKey, err, raw)
	}
	var (
		final  *responses.Response
		done   = map[int64]responses.ResponseOutputItemUnion{} // output_item.done, by output_index
		events int
	)
read:
	for stream.Next() {
		event := stream.Current()
		events++
		switch event.Type {
		case "response.output_text.delta":
			if event.Delta != "" && req.OnText != nil {
				req.OnText(event.Delta)
			}
		case "response.output_item.done":
			done[event.OutputIndex] = event.Item
		case "response.completed", "response.incomplete":
			final = &event.Response
			break read
		case "response.failed":
			e := event.Response.Error
			return agentsagatype.ModelTurn{}, m.eventFailure(events, event.Type, e.Type, string(e.Code), []byte(event.Response.JSON.Error.Raw()))
		case "error":
			// The event as OpenAI's reference documents it, with code
			// and message on the event itself.
			return agentsagatype.ModelTurn{}, m.eventFailure(events, event.Type, "", event.Code, []byte(event.RawJSON()))
		}
	}
	if final == nil {
		err := stream.Err()
		var streamErr *ssestream.StreamError
		if errors.As(err, &streamErr) {
			// An event with an "error" object, which the SDK reads as
			// the stream's error: the form OpenAI sends error events in.
			var event struct {
				Error struct {
					Type string `json:"type"`
					Code string `json:"code"`
				} `json:"error"`
			}
			_ = json.Unmarshal(streamErr.Event.Data, &event)
			return agentsagatype.ModelTurn{}, m.eventFailure(events+1, "error", event.Error.Type, event.Error.Code, streamErr.Event.Data)
		}
		if err == nil {
			err = errors.New("it ended without response.completed")
		}
		return agentsagatype.ModelTurn{}, streamBroke(opResponses, m.apiKey, events, "events", err)
	}
	output := final.Output
	if len(output) == 0 && len(done) > 0 {
		// A terminal event without its output (a proxy may trim it): the
		// items as each was done, in order.
		indexes := make([]int64, 0, len(done))
		for i := range done {
			indexes = append(indexes, i)
		}
		sort.Slice(indexes, func(a, b int) bool { return indexes[a] < indexes[b] })
		for _, i := range indexes {
			output = append(output, done[i])
		}
	}
	return m.turn(final, output), nil
}

// turn maps a response's output items to the neutral turn.
func (m *responsesModel) turn(resp *responses.Response, output []responses.ResponseOutputItemUnion) agentsagatype.ModelTurn {
	turn := agentsagatype.ModelTurn{
		Model: string(resp.Model),
		// input_tokens counts the cached part too, and output_tokens the
		// reasoning, which is priced as output.
		Usage: reportedUsage(resp.Usage.InputTokens, resp.Usage.OutputTokens, resp.Usage.InputTokensDetails.CachedTokens, 0),
	}
	var text, refusal strings.Builder
	var reasoning [][]byte
	for _, item := range output {
		switch item.Type {
		case "message":
			for _, part := range item.Content {
				switch part.Type {
				case "output_text":
					text.WriteString(part.Text)
				case "refusal":
					refusal.WriteString(part.Refusal)
				}
			}
		case "function_call":
			turn.ToolCalls = append(turn.ToolCalls, agentsagatype.ToolCall{ID: item.CallID, Name: item.Name, Arguments: item.Arguments.OfString})
		case "reasoning":
			// Kept only with its encrypted content: with store false,
			// OpenAI has nothing under the item's id, and an item sent
			// back without its content would fail the next request.
			raw := bytes.TrimSpace([]byte(item.RawJSON()))
			if item.EncryptedContent != "" && json.Valid(raw) {
				reasoning = append(reasoning, raw)
			}
		}
	}
	turn.Content, turn.Refusal = text.String(), refusal.String()
	if resp.Status == responses.ResponseStatusIncomplete && resp.IncompleteDetails.Reason == "content_filter" {
		// The content filter stopped the reply: a refusal, with whatever
		// text came before it as its words.
		if turn.Refusal == "" {
			turn.Refusal = turn.Content
		}
		if turn.Refusal == "" {
			turn.Refusal = "the response was stopped by OpenAI's content filter"
		}
		turn.Content = ""
	}
	if len(reasoning) > 0 {
		// Joined by hand: json.Marshal would compact the items, and they
		// are kept byte for byte.
		data := append(append([]byte("["), bytes.Join(reasoning, []byte(","))...), ']')
		turn.Reasoning = &agentsagatype.Reasoning{Provider: reasoningOpenAIResponses, Data: data}
	}
	return turn
}

// eventFailure is the error of a stream that an error event or a failed
// response ended, whose error has type errType (when the event says) and
// code. data, the event's or the response's error, is quoted with the API
// key redacted.
func (m *responsesModel) eventFailure(events int, event, errType, code string, data []byte) error {
	if status := clientErrorStatus(errType, code); status != 0 {
		body := newRedactor([]string{m.apiKey}).redact(string(data))
		return &HTTPError{Op: opResponses + ": " + event + " event", StatusCode: status, Body: truncateBody([]byte(body))}
	}
	cause := errorEvent(m.apiKey, data)
	if event != "error" {
		cause = fmt.Errorf("%s: %s", event, truncateBody([]byte(newRedactor([]string{m.apiKey}).redact(string(data)))))
	}
	return streamBroke(opResponses, m.apiKey, events, "events", cause)
}

// clientErrorStatus is the status OpenAI answers a request with, before
// any stream, when it fails with an error of type errType or code that is
// the request's fault, so that no retry can fix it; 0 for any other error
// (a server error, a rate limit, a timeout, a code it does not know),
// which another attempt may well not meet.
func clientErrorStatus(errType, code string) int {
	if status := errorTypeStatus[errType]; status >= 400 && status < 500 && status != http.StatusTooManyRequests {
		return status
	}
	switch code {
	case "invalid_prompt", "invalid_request_error", "context_length_exceeded", "data_residency_mismatch",
		"bio_policy", "misalignment_policy_violation", "empty_image_file", "unsupported_image_media_type",
		"failed_to_download_image", "image_content_policy_violation":
		return http.StatusBadRequest
	case "invalid_api_key":
		return http.StatusUnauthorized
	}
	if strings.HasPrefix(code, "invalid_") || strings.HasPrefix(code, "image_") {
		// invalid_image, invalid_image_url, image_too_large, ...
		return http.StatusBadRequest
	}
	return 0
}

// params translates the provider-neutral request to the SDK's.
func (m *responsesModel) params(req ModelRequest) (responses.ResponseNewParams, error) {
	p := responses.ResponseNewParams{
		Model: shared.ResponsesModel(m.spec.Name),
		// OpenAI keeps nothing: the conversation, reasoning included, is
		// the ledger's, and every request carries it whole.
		Store:   openai.Bool(false),
		Include: []responses.ResponseIncludable{responses.ResponseIncludableReasoningEncryptedContent},
	}
	if m.spec.MaxTokens > 0 {
		p.MaxOutputTokens = openai.Int(m.spec.MaxTokens)
	}
	if r := m.spec.Reasoning; r != nil && r.Effort != "" {
		p.Reasoning = shared.ReasoningParam{Effort: shared.ReasoningEffort(r.Effort)}
	}
	if req.CacheKey != "" {
		p.PromptCacheKey = openai.String(req.CacheKey)
	}
	var input responses.ResponseInputParam
	for i, msg := range req.Messages {
		items, err := responsesInput(msg)
		if err != nil {
			return p, fmt.Errorf("messages[%d]: %w", i, err)
		}
		input = append(input, items...)
	}
	p.Input = responses.ResponseNewParamsInputUnion{OfInputItemList: input}
	for i, tool := range req.Tools {
		tp, err := responsesTool(tool)
		if err != nil {
			return p, fmt.Errorf("tools[%d] (%s): %w", i, tool.Name, err)
		}
		p.Tools = append(p.Tools, tp)
	}
	return p, nil
}

// responsesInput is one message as input items. System messages stay in
// place as system messages, not instructions: a note the engine appends
// last stays last, and the prefix before it stays the same for the prompt
// cache. An assistant message is its reasoning items (as OpenAI sent them),
// its text, then its function calls, in the order OpenAI wrote them.
func responsesInput(msg agentsagatype.Message) ([]responses.ResponseInputItemUnionParam, error) {
	switch msg.Role {
	case "system", "user":
		return []responses.ResponseInputItemUnionParam{easyMessage(responses.EasyInputMessageRole(msg.Role), msg.Content)}, nil
	case "tool":
		return []responses.ResponseInputItemUnionParam{{OfFunctionCallOutput: &responses.ResponseInputItemFunctionCallOutputParam{
			CallID: openai.String(msg.ToolCallID),
			Output: responses.ResponseInputItemFunctionCallOutputOutputUnionParam{OfString: openai.String(msg.Content)},
		}}}, nil
	case "assistant":
		items, err := reasoningItems(msg.Reasoning)
		if err != nil {
			return nil, err
		}
		// Text may be left out only when the message carries tool calls.
		if msg.Content != "" || len(msg.ToolCalls) == 0 {
			items = append(items, easyMessage(responses.EasyInputMessageRoleAssistant, msg.Content))
		}
		for _, call := range msg.ToolCalls {
			items = append(items, responses.ResponseInputItemUnionParam{OfFunctionCall: &responses.ResponseFunctionToolCallParam{
				CallID: call.ID, Name: call.Name, Arguments: call.Arguments,
			}})
		}
		return items, nil
	default:
		return nil, fmt.Errorf("unknown role %q", msg.Role)
	}
}

func easyMessage(role responses.EasyInputMessageRole, content string) responses.ResponseInputItemUnionParam {
	return responses.ResponseInputItemUnionParam{OfMessage: &responses.EasyInputMessageParam{
		Type:    responses.EasyInputMessageTypeMessage,
		Role:    role,
		Content: responses.EasyInputMessageContentUnionParam{OfString: openai.String(content)},
	}}
}

// reasoningItems are the reasoning items r holds, sent back byte for byte
// as OpenAI returned them; reasoning another provider wrote is left out.
func reasoningItems(r *agentsagatype.Reasoning) ([]responses.ResponseInputItemUnionParam, error) {
	if r == nil || r.Provider != reasoningOpenAIResponses || len(r.Data) == 0 {
		return nil, nil
	}
	var raw []json.RawMessage
	if err := json.Unmarshal(r.Data, &raw); err != nil {
		return nil, fmt.Errorf("reasoning: not a JSON array of items: %w", err)
	}
	items := make([]responses.ResponseInputItemUnionParam, 0, len(raw))
	for _, item := range raw {
		reasoning := param.Override[responses.ResponseReasoningItemParam](item)
		items = append(items, responses.ResponseInputItemUnionParam{OfReasoning: &reasoning})
	}
	return items, nil
}

// responsesTool describes a tool as a function tool, as toolParam does for
// chat completions: a tool without a schema takes an empty object. strict
// is false, since the Responses API defaults it to true, and a strict
// schema must meet rules the tools' schemas are not written for.
func responsesTool(tool agentsagatype.ToolDef) (responses.ToolUnionParam, error) {
	schema := map[string]any{"type": "object"}
	if len(bytes.TrimSpace(tool.Parameters)) > 0 {
		schema = nil
		if err := json.Unmarshal(tool.Parameters, &schema); err != nil {
			return responses.ToolUnionParam{}, fmt.Errorf("parameters: not a JSON object: %w", err)
		}
		if schema == nil {
			schema = map[string]any{"type": "object"}
		}
	}
	fn := responses.FunctionToolParam{Name: tool.Name, Parameters: schema, Strict: openai.Bool(false)}
	if tool.Description != "" {
		fn.Description = openai.String(tool.Description)
	}
	return responses.ToolUnionParam{OfFunction: &fn}, nil
}

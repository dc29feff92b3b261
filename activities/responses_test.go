package activities_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/activities"
	"github.com/agentsaga/agentsaga/agentsagatype"
)

// The fake below speaks the Responses API's streaming wire format as
// OpenAI's API reference documents it ("Streaming events": each event an
// SSE frame whose event: line is the JSON's type), written out by hand,
// not produced by the SDK's types.

// encReasoning is what the fake sends as a reasoning item's
// encrypted_content: opaque bytes the client must send back unchanged.
const encReasoning = "gAAAAABo-3f1Zr9+/kx2Q==.enc-reasoning-1"

// rsItem is the reasoning item the fake sends, spaced as a server might:
// a client keeps it byte for byte.
const rsItem = `{"id": "rs_1", "type": "reasoning", "summary": [{"type": "summary_text", "text": "The user wants the weather."}], "encrypted_content": "` + encReasoning + `"}`

// rsItemNoContent is the same item when the request did not include
// reasoning.encrypted_content.
const rsItemNoContent = `{"id": "rs_1", "type": "reasoning", "summary": [{"type": "summary_text", "text": "The user wants the weather."}]}`

// respObject is a response object as the reference shows it, with status,
// output, usage and the rest of what an event's response carries.
func respObject(status, output, usage, rest string) string {
	if usage == "" {
		usage = "null"
	}
	if rest == "" {
		rest = `"error":null,"incomplete_details":null`
	}
	return `{"id":"resp_67ccd3a9da748190baa7f1570fe91ac6","object":"response","created_at":1741476777,"status":"` + status + `",` + rest +
		`,"instructions":null,"max_output_tokens":2048,"model":"o4-mini-2025-04-16","output":[` + output + `],"parallel_tool_calls":true,` +
		`"previous_response_id":null,"reasoning":{"effort":"high","summary":null},"store":false,"temperature":1.0,` +
		`"text":{"format":{"type":"text"}},"tool_choice":"auto","tools":[],"top_p":1.0,"truncation":"disabled","usage":` + usage + `,"user":null,"metadata":{}}`
}

// usageJSON is a usage object: input including cached, output including
// reasoning.
func usageJSON(input, cached, output, reasoning int) string {
	return fmt.Sprintf(`{"input_tokens":%d,"input_tokens_details":{"cached_tokens":%d},"output_tokens":%d,"output_tokens_details":{"reasoning_tokens":%d},"total_tokens":%d}`,
		input, cached, output, reasoning, input+output)
}

// sseEvent is one event: its type and its data, in which SEQ stands for
// the sequence number.
type sseEvent struct{ typ, data string }

func ev(typ, data string) sseEvent { return sseEvent{typ, data} }

// lifecycleStart is response.created and response.in_progress.
func lifecycleStart() []sseEvent {
	return []sseEvent{
		ev("response.created", `{"type":"response.created","sequence_number":SEQ,"response":`+respObject("in_progress", "", "", "")+`}`),
		ev("response.in_progress", `{"type":"response.in_progress","sequence_number":SEQ,"response":`+respObject("in_progress", "", "", "")+`}`),
	}
}

// reasoningEvents is the reasoning item at output_index 0, with a summary
// delta (which is not the reply's text), as item (with or without its
// encrypted content).
func reasoningEvents(item string) []sseEvent {
	return []sseEvent{
		ev("response.output_item.added", `{"type":"response.output_item.added","sequence_number":SEQ,"output_index":0,"item":{"id":"rs_1","type":"reasoning","summary":[]}}`),
		ev("response.reasoning_summary_part.added", `{"type":"response.reasoning_summary_part.added","sequence_number":SEQ,"item_id":"rs_1","output_index":0,"summary_index":0,"part":{"type":"summary_text","text":""}}`),
		ev("response.reasoning_summary_text.delta", `{"type":"response.reasoning_summary_text.delta","sequence_number":SEQ,"item_id":"rs_1","output_index":0,"summary_index":0,"delta":"The user wants the weather."}`),
		ev("response.reasoning_summary_text.done", `{"type":"response.reasoning_summary_text.done","sequence_number":SEQ,"item_id":"rs_1","output_index":0,"summary_index":0,"text":"The user wants the weather."}`),
		ev("response.reasoning_summary_part.done", `{"type":"response.reasoning_summary_part.done","sequence_number":SEQ,"item_id":"rs_1","output_index":0,"summary_index":0,"part":{"type":"summary_text","text":"The user wants the weather."}}`),
		ev("response.output_item.done", `{"type":"response.output_item.done","sequence_number":SEQ,"output_index":0,"item":`+item+`}`),
	}
}

// textEvents is an assistant message at index streaming deltas; it returns
// the events and the finished item.
func textEvents(index int, deltas ...string) ([]sseEvent, string) {
	text := strings.Join(deltas, "")
	quoted, _ := json.Marshal(text)
	oi := strconv.Itoa(index)
	events := []sseEvent{
		ev("response.output_item.added", `{"type":"response.output_item.added","sequence_number":SEQ,"output_index":`+oi+`,"item":{"id":"msg_1","type":"message","status":"in_progress","role":"assistant","content":[]}}`),
		ev("response.content_part.added", `{"type":"response.content_part.added","sequence_number":SEQ,"item_id":"msg_1","output_index":`+oi+`,"content_index":0,"part":{"type":"output_text","text":"","annotations":[]}}`),
	}
	for _, d := range deltas {
		q, _ := json.Marshal(d)
		events = append(events, ev("response.output_text.delta", `{"type":"response.output_text.delta","sequence_number":SEQ,"item_id":"msg_1","output_index":`+oi+`,"content_index":0,"delta":`+string(q)+`,"logprobs":[]}`))
	}
	item := `{"id":"msg_1","type":"message","status":"completed","role":"assistant","content":[{"type":"output_text","text":` + string(quoted) + `,"annotations":[]}]}`
	events = append(events,
		ev("response.output_text.done", `{"type":"response.output_text.done","sequence_number":SEQ,"item_id":"msg_1","output_index":`+oi+`,"content_index":0,"text":`+string(quoted)+`,"logprobs":[]}`),
		ev("response.content_part.done", `{"type":"response.content_part.done","sequence_number":SEQ,"item_id":"msg_1","output_index":`+oi+`,"content_index":0,"part":{"type":"output_text","text":`+string(quoted)+`,"annotations":[]}}`),
		ev("response.output_item.done", `{"type":"response.output_item.done","sequence_number":SEQ,"output_index":`+oi+`,"item":`+item+`}`),
	)
	return events, item
}

// callEvents is a function call at index whose arguments stream in parts;
// it returns the events and the finished item.
func callEvents(index int, callID, name string, parts ...string) ([]sseEvent, string) {
	args, _ := json.Marshal(strings.Join(parts, ""))
	oi := strconv.Itoa(index)
	events := []sseEvent{
		ev("response.output_item.added", `{"type":"response.output_item.added","sequence_number":SEQ,"output_index":`+oi+`,"item":{"id":"fc_1","type":"function_call","status":"in_progress","arguments":"","call_id":"`+callID+`","name":"`+name+`"}}`),
	}
	for _, p := range parts {
		q, _ := json.Marshal(p)
		events = append(events, ev("response.function_call_arguments.delta", `{"type":"response.function_call_arguments.delta","sequence_number":SEQ,"item_id":"fc_1","output_index":`+oi+`,"delta":`+string(q)+`}`))
	}
	item := `{"id":"fc_1","type":"function_call","status":"completed","arguments":` + string(args) + `,"call_id":"` + callID + `","name":"` + name + `"}`
	events = append(events,
		ev("response.function_call_arguments.done", `{"type":"response.function_call_arguments.done","sequence_number":SEQ,"item_id":"fc_1","output_index":`+oi+`,"arguments":`+string(args)+`}`),
		ev("response.output_item.done", `{"type":"response.output_item.done","sequence_number":SEQ,"output_index":`+oi+`,"item":`+item+`}`),
	)
	return events, item
}

func completed(output []string, usage string) sseEvent {
	return ev("response.completed", `{"type":"response.completed","sequence_number":SEQ,"response":`+respObject("completed", strings.Join(output, ","), usage, "")+`}`)
}

// answer is what the fake answers one request with: a status, headers and
// a body, or (for a 200) a stream of events; cut ends the stream by
// dropping the connection.
type answer struct {
	status  int
	headers map[string]string
	body    string
	events  []sseEvent
	cut     bool
	// echoKey writes the request's Authorization header into the body or
	// the events' data, where "KEY" stands.
	echoKey bool
}

// reasoningRef is the reasoning item a function call was emitted with.
type reasoningRef struct{ id, enc string }

// respServer is a fake POST /v1/responses. It answers the requests in
// turn with its answers, and it enforces what OpenAI documents for
// store:false: a function call's output may be sent only with the
// reasoning item the call was emitted with, its encrypted_content
// unchanged, before the call, and a reasoning item without its encrypted
// content cannot be found (nothing was stored).
type respServer struct {
	URL string

	mu      sync.Mutex
	answers []answer
	bodies  []map[string]any
	auths   []string
	// emitted maps a call_id the fake sent to the reasoning item sent
	// with it.
	emitted map[string]reasoningRef
}

func newRespServer(t *testing.T, answers ...answer) *respServer {
	t.Helper()
	s := &respServer{answers: answers, emitted: map[string]reasoningRef{}}
	srv := httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(srv.Close)
	s.URL = srv.URL + "/v1"
	return s
}

// openAIError is OpenAI's error body.
func openAIError(message, typ, param, code string) string {
	b, _ := json.Marshal(map[string]any{"error": map[string]any{"message": message, "type": typ, "param": nullable(param), "code": nullable(code)}})
	return string(b)
}

func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func (s *respServer) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/responses" {
		http.Error(w, "unexpected "+r.Method+" "+r.URL.Path, http.StatusNotFound)
		return
	}
	raw, _ := io.ReadAll(r.Body)
	var body map[string]any
	if err := json.Unmarshal(raw, &body); err != nil {
		writeJSON(w, http.StatusBadRequest, openAIError("We could not parse the JSON body of your request.", "invalid_request_error", "", ""))
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.bodies = append(s.bodies, body)
	s.auths = append(s.auths, r.Header.Get("Authorization"))
	if msg, param := s.check(body); msg != "" {
		writeJSON(w, http.StatusBadRequest, openAIError(msg, "invalid_request_error", param, ""))
		return
	}
	if len(s.answers) == 0 {
		writeJSON(w, http.StatusInternalServerError, openAIError("the fake has no answer left", "server_error", "", ""))
		return
	}
	a := s.answers[0]
	s.answers = s.answers[1:]
	echo := func(text string) string {
		if a.echoKey {
			return strings.ReplaceAll(text, "KEY", strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "))
		}
		return text
	}
	for k, v := range a.headers {
		w.Header().Set(k, v)
	}
	if a.status != http.StatusOK {
		writeJSON(w, a.status, echo(a.body))
		return
	}
	withContent := slices.Contains(anySlice(body["include"]), any("reasoning.encrypted_content"))
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	flusher := w.(http.Flusher)
	for i, e := range a.events {
		data := strings.Replace(echo(e.data), "SEQ", strconv.Itoa(i), 1)
		if !withContent {
			// Without the include, OpenAI sends no encrypted content.
			data = strings.ReplaceAll(data, rsItem, rsItemNoContent)
		}
		s.note(data)
		_, _ = fmt.Fprintf(w, "event: %s\ndata: %s\n\n", e.typ, data)
		flusher.Flush()
	}
	if a.cut {
		panic(http.ErrAbortHandler) // drops the connection mid-stream
	}
}

// note records the function calls an event's response emitted, with the
// reasoning item before them.
func (s *respServer) note(data string) {
	var event struct {
		Type     string `json:"type"`
		Response struct {
			Output []map[string]any `json:"output"`
		} `json:"response"`
	}
	if json.Unmarshal([]byte(data), &event) != nil || event.Type != "response.completed" {
		return
	}
	var last *reasoningRef
	for _, item := range event.Response.Output {
		switch item["type"] {
		case "reasoning":
			// An item without its content (a server that ignored the
			// include) could never be sent back: no rule for its calls.
			last = nil
			if enc, _ := item["encrypted_content"].(string); enc != "" {
				last = &reasoningRef{id: item["id"].(string), enc: enc}
			}
		case "function_call":
			if last != nil {
				s.emitted[item["call_id"].(string)] = *last
			}
		}
	}
}

// check is the request's fault, as OpenAI words it, or "".
func (s *respServer) check(body map[string]any) (message, param string) {
	if body["stream"] != true {
		return "the fake streams only", "stream"
	}
	input := anySlice(body["input"])
	items := make([]map[string]any, len(input))
	for i, it := range input {
		items[i], _ = it.(map[string]any)
	}
	store, stored := body["store"].(bool)
	notStored := stored && !store
	for i, item := range items {
		if item["type"] == "reasoning" && notStored {
			if enc, _ := item["encrypted_content"].(string); enc == "" {
				return fmt.Sprintf("Item with id '%v' not found. Items are not persisted when `store` is set to false. Try again with `store` set to true, or remove this item from your input.", item["id"]), fmt.Sprintf("input[%d]", i)
			}
		}
		if item["type"] != "function_call_output" {
			continue
		}
		callID, _ := item["call_id"].(string)
		call := slices.IndexFunc(items, func(it map[string]any) bool { return it["type"] == "function_call" && it["call_id"] == callID })
		if call < 0 || call > i {
			return fmt.Sprintf("No tool call found for function call output with call_id %s.", callID), "input"
		}
		ref, ok := s.emitted[callID]
		if !ok || !notStored {
			continue
		}
		carried := slices.ContainsFunc(items[:call], func(it map[string]any) bool {
			return it["type"] == "reasoning" && it["id"] == ref.id && it["encrypted_content"] == ref.enc
		})
		if !carried {
			return fmt.Sprintf("Item 'fc_1' of type 'function_call' was provided without its required 'reasoning' item: '%s'.", ref.id), "input"
		}
	}
	return "", ""
}

func (s *respServer) requests() []map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.bodies)
}

func writeJSON(w http.ResponseWriter, status int, body string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, body)
}

func anySlice(v any) []any { s, _ := v.([]any); return s }

func responsesSpec(baseURL string) agentsagatype.ModelSpec {
	return agentsagatype.ModelSpec{
		Provider:  agentsagatype.ProviderOpenAIResponses,
		Name:      "o4-mini",
		BaseURL:   baseURL,
		MaxTokens: 2048,
		Reasoning: &agentsagatype.Thinking{Effort: "high"},
	}
}

func newResponsesModel(t *testing.T, baseURL string) activities.Model {
	t.Helper()
	m, err := activities.NewOpenAIResponsesModel(responsesSpec(baseURL), testAPIKey, &http.Client{Timeout: 10 * time.Second})
	require.NoError(t, err)
	return m
}

var weatherTool = agentsagatype.ToolDef{Name: "get_weather", Description: "The weather in a city.",
	Parameters: json.RawMessage(`{"type":"object","properties":{"city":{"type":"string","maxLength":100}},"required":["city"]}`)}

func weatherQuestion() []agentsagatype.Message {
	return []agentsagatype.Message{
		{Role: "system", Content: "You are terse."},
		{Role: "user", Content: "Weather in Paris?"},
	}
}

// toolCallAnswer is a reasoning item, then a call of get_weather.
func toolCallAnswer() answer {
	calls, callItem := callEvents(1, "call_1", "get_weather", `{"city":`, `"Paris"}`)
	events := slices.Concat(lifecycleStart(), reasoningEvents(rsItem), calls,
		[]sseEvent{completed([]string{rsItem, callItem}, usageJSON(900, 0, 180, 128))})
	return answer{status: http.StatusOK, events: events}
}

func textAnswer(deltas ...string) answer {
	text, item := textEvents(0, deltas...)
	return answer{status: http.StatusOK, events: slices.Concat(lifecycleStart(), text, []sseEvent{completed([]string{item}, usageJSON(1000, 0, 20, 0))})}
}

func TestResponsesStreamsTextToOnTextInOrder(t *testing.T) {
	text, msgItem := textEvents(1, "Hel", "lo, ", "world")
	srv := newRespServer(t, answer{status: http.StatusOK, events: slices.Concat(lifecycleStart(), reasoningEvents(rsItem), text,
		[]sseEvent{completed([]string{rsItem, msgItem}, usageJSON(1200, 1024, 300, 256))})})
	var chunks []string
	turn, err := newResponsesModel(t, srv.URL).Turn(context.Background(), activities.ModelRequest{
		Messages: weatherQuestion(), OnText: func(c string) { chunks = append(chunks, c) }})
	require.NoError(t, err)
	// The reasoning summary is not the reply's text.
	assert.Equal(t, []string{"Hel", "lo, ", "world"}, chunks)
	assert.Equal(t, "Hello, world", turn.Content)
	assert.Empty(t, turn.ToolCalls)
	assert.Empty(t, turn.Refusal)
	assert.Equal(t, "o4-mini-2025-04-16", turn.Model)
	// input_tokens includes the cached 1024; output_tokens the 256 of
	// reasoning, priced as output.
	assert.Equal(t, agentsagatype.Usage{InputTokens: 1200, OutputTokens: 300, CachedInputTokens: 1024}, turn.Usage)
	// The reasoning item is kept as it came, byte for byte.
	require.NotNil(t, turn.Reasoning)
	assert.Equal(t, activities.ReasoningOpenAIResponses, turn.Reasoning.Provider)
	assert.Equal(t, "["+rsItem+"]", string(turn.Reasoning.Data))
}

func TestResponsesRequestFields(t *testing.T) {
	srv := newRespServer(t, textAnswer("ok"))
	_, err := newResponsesModel(t, srv.URL).Turn(context.Background(), activities.ModelRequest{
		Messages: weatherQuestion(), Tools: []agentsagatype.ToolDef{weatherTool, {Name: "now"}}, CacheKey: "run-42"})
	require.NoError(t, err)
	reqs := srv.requests()
	require.Len(t, reqs, 1)
	body := reqs[0]
	assert.Equal(t, "Bearer "+testAPIKey, srv.auths[0])
	assert.Equal(t, "o4-mini", body["model"])
	assert.Equal(t, true, body["stream"])
	assert.Equal(t, false, body["store"])
	assert.Equal(t, []any{"reasoning.encrypted_content"}, body["include"])
	assert.Equal(t, map[string]any{"effort": "high"}, body["reasoning"])
	assert.Equal(t, "run-42", body["prompt_cache_key"])
	assert.EqualValues(t, 2048, body["max_output_tokens"])
	assert.NotContains(t, body, "instructions")
	assert.NotContains(t, body, "previous_response_id")
	assert.Equal(t, []any{
		map[string]any{"type": "message", "role": "system", "content": "You are terse."},
		map[string]any{"type": "message", "role": "user", "content": "Weather in Paris?"},
	}, body["input"])
	assert.Equal(t, []any{
		map[string]any{"type": "function", "name": "get_weather", "description": "The weather in a city.", "strict": false,
			"parameters": map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string", "maxLength": float64(100)}}, "required": []any{"city"}}},
		map[string]any{"type": "function", "name": "now", "strict": false, "parameters": map[string]any{"type": "object"}},
	}, body["tools"])

	// Without reasoning, a token cap or a cache key, none is sent.
	srv = newRespServer(t, textAnswer("ok"))
	m, err := activities.NewOpenAIResponsesModel(agentsagatype.ModelSpec{Provider: agentsagatype.ProviderOpenAIResponses, Name: "gpt-4.1", BaseURL: srv.URL}, "", nil)
	require.NoError(t, err)
	_, err = m.Turn(context.Background(), activities.ModelRequest{Messages: weatherQuestion()})
	require.NoError(t, err)
	body = srv.requests()[0]
	for _, field := range []string{"reasoning", "prompt_cache_key", "max_output_tokens"} {
		assert.NotContains(t, body, field)
	}
	assert.Equal(t, false, body["store"])
	assert.Empty(t, srv.auths[0], "an empty key sends no Authorization")
}

// followUp is the conversation as the engine builds it after the tool
// call: the assistant message with its calls and its reasoning (read back
// from the ledger, as JSON), then the tool's output.
func followUp(t *testing.T, turn agentsagatype.ModelTurn) []agentsagatype.Message {
	t.Helper()
	assistant := agentsagatype.Message{Role: "assistant", Content: turn.Content, ToolCalls: turn.ToolCalls, Reasoning: turn.Reasoning}
	stored, err := json.Marshal(assistant)
	require.NoError(t, err)
	var read agentsagatype.Message
	require.NoError(t, json.Unmarshal(stored, &read))
	return append(weatherQuestion(), read, agentsagatype.Message{Role: "tool", ToolCallID: "call_1", Name: "get_weather", Content: `{"celsius":18}`})
}

func TestResponsesToolCallWithReasoningIsSentBackUnchanged(t *testing.T) {
	srv := newRespServer(t, toolCallAnswer(), textAnswer("18°C in Paris."))
	m := newResponsesModel(t, srv.URL)
	var chunks []string
	turn, err := m.Turn(context.Background(), activities.ModelRequest{Messages: weatherQuestion(), Tools: []agentsagatype.ToolDef{weatherTool},
		OnText: func(c string) { chunks = append(chunks, c) }})
	require.NoError(t, err)
	assert.Empty(t, chunks, "arguments are not text")
	assert.Empty(t, turn.Content)
	assert.Equal(t, []agentsagatype.ToolCall{{ID: "call_1", Name: "get_weather", Arguments: `{"city":"Paris"}`}}, turn.ToolCalls)
	assert.Equal(t, agentsagatype.Usage{InputTokens: 900, OutputTokens: 180}, turn.Usage)
	require.NotNil(t, turn.Reasoning)
	assert.Equal(t, "["+rsItem+"]", string(turn.Reasoning.Data))

	next, err := m.Turn(context.Background(), activities.ModelRequest{Messages: followUp(t, turn), Tools: []agentsagatype.ToolDef{weatherTool}})
	require.NoError(t, err, "the fake refuses a call's output without its reasoning")
	assert.Equal(t, "18°C in Paris.", next.Content)
	assert.Nil(t, next.Reasoning)

	reqs := srv.requests()
	require.Len(t, reqs, 2)
	input := anySlice(reqs[1]["input"])
	require.Len(t, input, 5)
	var sent, want map[string]any
	require.NoError(t, json.Unmarshal([]byte(rsItem), &want))
	sent = input[2].(map[string]any)
	assert.Equal(t, want, sent, "the reasoning item goes back as it came")
	assert.Equal(t, map[string]any{"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": `{"city":"Paris"}`}, input[3])
	assert.Equal(t, map[string]any{"type": "function_call_output", "call_id": "call_1", "output": `{"celsius":18}`}, input[4])
}

func TestResponsesFollowUpWithoutReasoningIsRejected(t *testing.T) {
	for name, reasoning := range map[string]*agentsagatype.Reasoning{
		"none": nil,
		// Another provider's reasoning is left out, not sent.
		"another provider's": {Provider: activities.ReasoningAnthropic, Data: json.RawMessage(`[{"type":"thinking","thinking":"hm","signature":"sig"}]`)},
		// An item altered on the way is not the one OpenAI emitted.
		"altered": {Provider: activities.ReasoningOpenAIResponses, Data: json.RawMessage(`[` + strings.Replace(rsItem, "enc-reasoning-1", "enc-reasoning-2", 1) + `]`)},
	} {
		t.Run(name, func(t *testing.T) {
			srv := newRespServer(t, toolCallAnswer(), textAnswer("never"))
			m := newResponsesModel(t, srv.URL)
			turn, err := m.Turn(context.Background(), activities.ModelRequest{Messages: weatherQuestion(), Tools: []agentsagatype.ToolDef{weatherTool}})
			require.NoError(t, err)
			turn.Reasoning = reasoning
			_, err = m.Turn(context.Background(), activities.ModelRequest{Messages: followUp(t, turn)})
			var httpErr *activities.HTTPError
			require.ErrorAs(t, err, &httpErr)
			assert.Equal(t, http.StatusBadRequest, httpErr.StatusCode)
			assert.Contains(t, err.Error(), "without its required 'reasoning' item")
			c := activities.Classify(err)
			assert.False(t, c.Retryable)
			assert.Equal(t, http.StatusBadRequest, c.Status)
			for _, item := range anySlice(srv.requests()[1]["input"]) {
				assert.NotEqual(t, "thinking", item.(map[string]any)["type"])
			}
		})
	}
}

func TestResponsesReasoningWithoutEncryptedContentIsNotKept(t *testing.T) {
	// A server that ignores the include sends reasoning items without
	// their content; under store:false they could not be found again.
	calls, callItem := callEvents(1, "call_1", "get_weather", `{"city":"Paris"}`)
	srv := newRespServer(t, answer{status: http.StatusOK, events: slices.Concat(lifecycleStart(), reasoningEvents(rsItemNoContent), calls,
		[]sseEvent{completed([]string{rsItemNoContent, callItem}, usageJSON(10, 0, 5, 0))})}, textAnswer("fine"))
	m := newResponsesModel(t, srv.URL)
	turn, err := m.Turn(context.Background(), activities.ModelRequest{Messages: weatherQuestion()})
	require.NoError(t, err)
	assert.Nil(t, turn.Reasoning)
	_, err = m.Turn(context.Background(), activities.ModelRequest{Messages: followUp(t, turn)})
	require.NoError(t, err)
}

func TestResponsesRefusal(t *testing.T) {
	refusalItem := `{"id":"msg_1","type":"message","status":"completed","role":"assistant","content":[{"type":"refusal","refusal":"I can't help with that."}]}`
	refused := slices.Concat(lifecycleStart(), []sseEvent{
		ev("response.output_item.added", `{"type":"response.output_item.added","sequence_number":SEQ,"output_index":0,"item":{"id":"msg_1","type":"message","status":"in_progress","role":"assistant","content":[]}}`),
		ev("response.content_part.added", `{"type":"response.content_part.added","sequence_number":SEQ,"item_id":"msg_1","output_index":0,"content_index":0,"part":{"type":"refusal","refusal":""}}`),
		ev("response.refusal.delta", `{"type":"response.refusal.delta","sequence_number":SEQ,"item_id":"msg_1","output_index":0,"content_index":0,"delta":"I can't help with that."}`),
		ev("response.refusal.done", `{"type":"response.refusal.done","sequence_number":SEQ,"item_id":"msg_1","output_index":0,"content_index":0,"refusal":"I can't help with that."}`),
		ev("response.content_part.done", `{"type":"response.content_part.done","sequence_number":SEQ,"item_id":"msg_1","output_index":0,"content_index":0,"part":{"type":"refusal","refusal":"I can't help with that."}}`),
		ev("response.output_item.done", `{"type":"response.output_item.done","sequence_number":SEQ,"output_index":0,"item":`+refusalItem+`}`),
		completed([]string{refusalItem}, usageJSON(50, 0, 8, 0)),
	})
	filteredText, filteredItem := textEvents(0, "Here is how to ")
	filtered := slices.Concat(lifecycleStart(), filteredText, []sseEvent{
		ev("response.incomplete", `{"type":"response.incomplete","sequence_number":SEQ,"response":`+
			respObject("incomplete", filteredItem, usageJSON(50, 0, 4, 0), `"error":null,"incomplete_details":{"reason":"content_filter"}`)+`}`),
	})
	srv := newRespServer(t, answer{status: http.StatusOK, events: refused}, answer{status: http.StatusOK, events: filtered})
	m := newResponsesModel(t, srv.URL)
	var chunks []string
	turn, err := m.Turn(context.Background(), activities.ModelRequest{Messages: weatherQuestion(), OnText: func(c string) { chunks = append(chunks, c) }})
	require.NoError(t, err)
	assert.Equal(t, "I can't help with that.", turn.Refusal)
	assert.Empty(t, turn.Content)
	assert.Empty(t, chunks, "a refusal is not text")
	assert.Equal(t, agentsagatype.Usage{InputTokens: 50, OutputTokens: 8}, turn.Usage)

	turn, err = m.Turn(context.Background(), activities.ModelRequest{Messages: weatherQuestion()})
	require.NoError(t, err)
	assert.Equal(t, "Here is how to ", turn.Refusal, "the content filter's stop is a refusal")
	assert.Empty(t, turn.Content)
	assert.Empty(t, turn.ToolCalls)
}

func TestResponsesRateLimitIsRetryableAfterItsWait(t *testing.T) {
	srv := newRespServer(t, answer{status: http.StatusTooManyRequests, headers: map[string]string{"Retry-After": "7", "X-Ratelimit-Remaining-Requests": "0"},
		body: openAIError("Rate limit reached for o4-mini in organization org-x on requests per min (RPM): Limit 500, Used 500, Requested 1.", "requests", "", "rate_limit_exceeded")})
	turn, err := newResponsesModel(t, srv.URL).Turn(context.Background(), activities.ModelRequest{Messages: weatherQuestion()})
	var httpErr *activities.HTTPError
	require.ErrorAs(t, err, &httpErr)
	assert.Equal(t, http.StatusTooManyRequests, httpErr.StatusCode)
	assert.Equal(t, 7*time.Second, httpErr.RetryAfter)
	c := activities.Classify(err)
	assert.True(t, c.Retryable)
	assert.Equal(t, 7*time.Second, c.RetryAfter)
	assert.Equal(t, http.StatusTooManyRequests, c.Status)
	assert.Len(t, srv.requests(), 1, "one attempt: the SDK's retries are off")
	assert.Zero(t, turn)
}

func TestResponsesBrokenStreams(t *testing.T) {
	text, _ := textEvents(0, "Hel", "lo")
	partial := slices.Concat(lifecycleStart(), text)
	failed := func(code, message string) sseEvent {
		return ev("response.failed", `{"type":"response.failed","sequence_number":SEQ,"response":`+
			respObject("failed", "", "", `"error":{"code":"`+code+`","message":"`+message+`"},"incomplete_details":null`)+`}`)
	}
	for _, tc := range []struct {
		name      string
		answer    answer
		retryable bool
		status    int
		says      string
	}{
		{name: "ends before response.completed", answer: answer{status: http.StatusOK, events: partial}, retryable: true, says: "without response.completed"},
		{name: "connection dropped", answer: answer{status: http.StatusOK, events: partial, cut: true}, retryable: true, says: "the stream broke"},
		{name: "error event, server error", retryable: true, says: "The server had an error",
			answer: answer{status: http.StatusOK, echoKey: true, events: append(slices.Clone(partial), ev("error",
				`{"type":"error","sequence_number":SEQ,"error":{"type":"server_error","code":"server_error","message":"The server had an error (key KEY).","param":null}}`))}},
		{name: "error event, rate limit", retryable: true, says: "rate_limit_exceeded",
			answer: answer{status: http.StatusOK, events: append(slices.Clone(partial), ev("error",
				`{"type":"error","sequence_number":SEQ,"error":{"type":"tokens","code":"rate_limit_exceeded","message":"Rate limit reached","param":null}}`))}},
		{name: "error event, invalid request", status: http.StatusBadRequest, says: "context_length_exceeded",
			answer: answer{status: http.StatusOK, echoKey: true, events: append(slices.Clone(lifecycleStart()), ev("error",
				`{"type":"error","sequence_number":SEQ,"error":{"type":"invalid_request_error","code":"context_length_exceeded","message":"Your input exceeds the context window of this model (key KEY).","param":"input"}}`))}},
		{name: "documented error event, unknown code", retryable: true, says: "ERR_SOMETHING",
			answer: answer{status: http.StatusOK, events: append(slices.Clone(partial), ev("error",
				`{"type":"error","sequence_number":SEQ,"code":"ERR_SOMETHING","message":"Something went wrong","param":null}`))}},
		{name: "documented error event, invalid prompt", status: http.StatusBadRequest, says: "invalid_prompt",
			answer: answer{status: http.StatusOK, echoKey: true, events: append(slices.Clone(lifecycleStart()), ev("error",
				`{"type":"error","sequence_number":SEQ,"code":"invalid_prompt","message":"Invalid prompt (key KEY).","param":null}`))}},
		{name: "response.failed, server error", retryable: true, says: "server_error",
			answer: answer{status: http.StatusOK, echoKey: true, events: append(slices.Clone(partial), failed("server_error", "The model failed (key KEY)."))}},
		{name: "response.failed, invalid prompt", status: http.StatusBadRequest, says: "invalid_prompt",
			answer: answer{status: http.StatusOK, echoKey: true, events: append(slices.Clone(lifecycleStart()), failed("invalid_prompt", "Invalid prompt (key KEY)."))}},
		{name: "401 echoing the key", status: http.StatusUnauthorized, says: "Incorrect API key",
			answer: answer{status: http.StatusUnauthorized, echoKey: true, body: openAIError("Incorrect API key provided: KEY.", "invalid_request_error", "", "invalid_api_key")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newRespServer(t, tc.answer)
			var chunks []string
			turn, err := newResponsesModel(t, srv.URL).Turn(context.Background(), activities.ModelRequest{Messages: weatherQuestion(),
				OnText: func(c string) { chunks = append(chunks, c) }})
			require.Error(t, err)
			t.Log(err)
			assert.Zero(t, turn, "never a partial turn")
			assert.Contains(t, err.Error(), tc.says)
			assert.NotContains(t, err.Error(), testAPIKey)
			assert.NotContains(t, fmt.Sprintf("%+v", err), testAPIKey)
			c := activities.Classify(err)
			assert.Equal(t, tc.retryable, c.Retryable, "classified as %+v: %v", c, err)
			assert.Equal(t, tc.status, c.Status)
			var httpErr *activities.HTTPError
			if errors.As(err, &httpErr) {
				assert.NotContains(t, httpErr.Body, testAPIKey)
			}
			assert.Len(t, srv.requests(), 1)
		})
	}
}

func TestResponsesModelRejectsBadSpec(t *testing.T) {
	_, err := activities.NewOpenAIResponsesModel(agentsagatype.ModelSpec{Provider: agentsagatype.ProviderOpenAI, Name: "o4-mini"}, "", nil)
	assert.ErrorContains(t, err, "openai-responses")
	_, err = activities.NewOpenAIResponsesModel(agentsagatype.ModelSpec{Provider: agentsagatype.ProviderOpenAIResponses}, "", nil)
	assert.ErrorContains(t, err, "model name is empty")

	// A schema that is not an object, or a role no one knows, fails the
	// turn before anything is sent.
	srv := newRespServer(t)
	m := newResponsesModel(t, srv.URL)
	_, err = m.Turn(context.Background(), activities.ModelRequest{Messages: weatherQuestion(), Tools: []agentsagatype.ToolDef{{Name: "bad", Parameters: json.RawMessage(`[1]`)}}})
	assert.ErrorContains(t, err, "tools[0] (bad)")
	_, err = m.Turn(context.Background(), activities.ModelRequest{Messages: []agentsagatype.Message{{Role: "narrator"}}})
	assert.ErrorContains(t, err, `unknown role "narrator"`)
	assert.Empty(t, srv.requests())
}

func TestResponsesProviderIsRegistered(t *testing.T) {
	models, err := activities.NewModels(nil)
	require.NoError(t, err)
	assert.Contains(t, models.Providers(), agentsagatype.ProviderOpenAIResponses)
}

func TestResponsesOutputFromDoneItemsWhenCompletedHasNone(t *testing.T) {
	// A terminal event without its output (a proxy may trim it): the
	// items each output_item.done carried, in order.
	calls, _ := callEvents(1, "call_1", "get_weather", `{"city":"Paris"}`)
	srv := newRespServer(t, answer{status: http.StatusOK, events: slices.Concat(lifecycleStart(), reasoningEvents(rsItem), calls,
		[]sseEvent{completed(nil, usageJSON(10, 0, 5, 0))})})
	turn, err := newResponsesModel(t, srv.URL).Turn(context.Background(), activities.ModelRequest{Messages: weatherQuestion()})
	require.NoError(t, err)
	assert.Equal(t, []agentsagatype.ToolCall{{ID: "call_1", Name: "get_weather", Arguments: `{"city":"Paris"}`}}, turn.ToolCalls)
	require.NotNil(t, turn.Reasoning)
	assert.Equal(t, "["+rsItem+"]", string(turn.Reasoning.Data))
}

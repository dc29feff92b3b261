package activities_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/activities"
	"github.com/agentsaga/agentsaga/agentsagatype"
)

const geminiTestKey = "AIzaSy-test-gemini-key-0123456789"

// geminiSignature is the thought signature the fake issues: bytes that are
// not text, so that any re-encoding on the way back shows.
var geminiSignature = base64.StdEncoding.EncodeToString([]byte{0x0a, 0xff, 0x00, 0x80, 0x7f, 0xfe, 0x12, 0x34, 0xc3, 0x28, 0x01, 0x02})

// geminiFake is a loopback Gemini API speaking the documented REST wire
// format: POST /v1beta/models/{model}:streamGenerateContent?alt=sse
// answered with SSE "data: " lines of GenerateContentResponse JSON, or
// with an error status and Google's error JSON. Like Gemini 3, it refuses
// (400 INVALID_ARGUMENT) a request whose functionResponse follows a model
// functionCall that lacks the thoughtSignature the fake issued with it, or
// carries other bytes.
type geminiFake struct {
	URL     string
	mu      sync.Mutex
	replies []geminiFakeReply
	bodies  []map[string]any
	headers []http.Header
	queries []string
	// issued is each signed function call's signature, by function name.
	issued map[string]string
}

// geminiFakeReply is one answer: an SSE stream of chunks (status 0 or 200),
// or an error status with headers and body. cut ends a stream without its
// last chunk's terminator, as a dropped connection does.
type geminiFakeReply struct {
	status  int
	headers map[string]string
	body    string
	chunks  []string
}

func newGeminiFake(t *testing.T, replies ...geminiFakeReply) *geminiFake {
	t.Helper()
	f := &geminiFake{replies: replies, issued: map[string]string{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/v1beta/models/gemini-2.5-flash:streamGenerateContent" || r.URL.Query().Get("alt") != "sse" {
			http.Error(w, "unexpected "+r.Method+" "+r.URL.String(), http.StatusNotFound)
			return
		}
		raw, _ := io.ReadAll(r.Body)
		var body map[string]any
		if err := json.Unmarshal(raw, &body); err != nil {
			http.Error(w, "body is not JSON: "+err.Error(), http.StatusBadRequest)
			return
		}
		f.mu.Lock()
		n := len(f.bodies)
		f.bodies = append(f.bodies, body)
		f.headers = append(f.headers, r.Header.Clone())
		f.queries = append(f.queries, r.URL.RawQuery)
		bad := f.missingSignature(body)
		var reply geminiFakeReply
		if n < len(f.replies) {
			reply = f.replies[n]
		} else if len(f.replies) > 0 {
			reply = f.replies[len(f.replies)-1]
		}
		f.mu.Unlock()
		if bad != "" {
			writeGeminiError(w, http.StatusBadRequest, nil, fmt.Sprintf(`{
  "error": {
    "code": 400,
    "message": "Function call is missing a thought_signature in functionCall parts. This is required for tools to work correctly, and missing thought_signature may lead to degraded model performance. Additional data, function call %s , position 2. Please refer to https://ai.google.dev/gemini-api/docs/thought-signatures for more details.",
    "status": "INVALID_ARGUMENT"
  }
}`, "`default_api:"+bad+"`"))
			return
		}
		if reply.status != 0 && reply.status != http.StatusOK {
			writeGeminiError(w, reply.status, reply.headers, reply.body)
			return
		}
		for k, v := range reply.headers {
			w.Header().Set(k, v)
		}
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		flusher, _ := w.(http.Flusher)
		for _, chunk := range reply.chunks {
			f.noteIssued(chunk)
			_, _ = io.WriteString(w, "data: "+chunk+"\r\n\r\n")
			if flusher != nil {
				flusher.Flush()
			}
		}
	}))
	t.Cleanup(srv.Close)
	f.URL = srv.URL
	return f
}

func writeGeminiError(w http.ResponseWriter, status int, headers map[string]string, body string) {
	for k, v := range headers {
		w.Header().Set(k, v)
	}
	w.Header().Set("Content-Type", "application/json; charset=UTF-8")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, body)
}

// noteIssued records the signature of each signed function call a chunk
// carries.
func (f *geminiFake) noteIssued(chunk string) {
	var resp struct {
		Candidates []struct {
			Content struct {
				Parts []struct {
					FunctionCall *struct {
						Name string `json:"name"`
					} `json:"functionCall"`
					ThoughtSignature string `json:"thoughtSignature"`
				} `json:"parts"`
			} `json:"content"`
		} `json:"candidates"`
	}
	if json.Unmarshal([]byte(chunk), &resp) != nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range resp.Candidates {
		for _, p := range c.Content.Parts {
			if p.FunctionCall != nil && p.ThoughtSignature != "" {
				f.issued[p.FunctionCall.Name] = p.ThoughtSignature
			}
		}
	}
}

// missingSignature is the name of a signed function call that a request
// sends back, followed by its functionResponse, without its signature
// (or with other bytes); "" if there is none.
func (f *geminiFake) missingSignature(body map[string]any) string {
	contents, _ := body["contents"].([]any)
	for i, c := range contents {
		content, _ := c.(map[string]any)
		if content["role"] != "model" || i+1 >= len(contents) {
			continue
		}
		next, _ := contents[i+1].(map[string]any)
		if !hasPart(next, "functionResponse") {
			continue
		}
		parts, _ := content["parts"].([]any)
		for _, p := range parts {
			part, _ := p.(map[string]any)
			call, ok := part["functionCall"].(map[string]any)
			if !ok {
				continue
			}
			name, _ := call["name"].(string)
			want, signed := f.issued[name]
			if got, _ := part["thoughtSignature"].(string); signed && got != want {
				return name
			}
		}
	}
	return ""
}

func hasPart(content map[string]any, field string) bool {
	parts, _ := content["parts"].([]any)
	for _, p := range parts {
		if part, _ := p.(map[string]any); part[field] != nil {
			return true
		}
	}
	return false
}

func (f *geminiFake) requests() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.bodies)
}

func (f *geminiFake) body(i int) map[string]any {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.bodies[i]
}

func newGemini(t *testing.T, baseURL string, edit ...func(*agentsagatype.ModelSpec)) activities.Model {
	t.Helper()
	spec := agentsagatype.ModelSpec{Provider: agentsagatype.ProviderGemini, Name: "gemini-2.5-flash", BaseURL: baseURL}
	for _, e := range edit {
		e(&spec)
	}
	m, err := activities.NewGeminiModel(spec, geminiTestKey, &http.Client{Timeout: 10 * time.Second})
	require.NoError(t, err)
	return m
}

// path walks a decoded JSON value by object keys and array indexes.
func jsonAt(t *testing.T, v any, steps ...any) any {
	t.Helper()
	for _, s := range steps {
		switch s := s.(type) {
		case string:
			m, ok := v.(map[string]any)
			require.Truef(t, ok, "at %q: not an object: %v", s, v)
			v = m[s]
		case int:
			a, ok := v.([]any)
			require.Truef(t, ok && s < len(a), "at [%d]: not an array that long: %v", s, v)
			v = a[s]
		}
	}
	return v
}

func TestGeminiModelStreamsText(t *testing.T) {
	f := newGeminiFake(t, geminiFakeReply{chunks: []string{
		`{"candidates": [{"content": {"parts": [{"text": "Hel"}], "role": "model"}, "index": 0}], "usageMetadata": {"promptTokenCount": 21, "totalTokenCount": 21}, "modelVersion": "gemini-2.5-flash", "responseId": "rsp-1"}`,
		`{"candidates": [{"content": {"parts": [{"text": "lo, "}], "role": "model"}, "index": 0}], "usageMetadata": {"promptTokenCount": 21, "totalTokenCount": 21}, "modelVersion": "gemini-2.5-flash", "responseId": "rsp-1"}`,
		`{"candidates": [{"content": {"parts": [{"text": "world."}], "role": "model"}, "finishReason": "STOP", "index": 0}], "usageMetadata": {"promptTokenCount": 21, "candidatesTokenCount": 4, "totalTokenCount": 25, "promptTokensDetails": [{"modality": "TEXT", "tokenCount": 21}]}, "modelVersion": "gemini-2.5-flash-001", "responseId": "rsp-1"}`,
	}})
	m := newGemini(t, f.URL, func(s *agentsagatype.ModelSpec) {
		s.MaxTokens = 2048
		s.Thinking = &agentsagatype.Thinking{BudgetTokens: 1024}
	})
	var streamed []string
	req := activities.ModelRequest{
		Messages: []agentsagatype.Message{
			{Role: "system", Content: "You are terse."},
			{Role: "user", Content: "Say hello."},
			{Role: "system", Content: "Answer in English."},
		},
		Tools: []agentsagatype.ToolDef{{Name: "lookup", Description: "Looks a word up.",
			Parameters: json.RawMessage(`{"type":"object","properties":{"word":{"type":"string"}},"required":["word"]}`)},
			{Name: "now"}},
		OnText: func(chunk string) { streamed = append(streamed, chunk) },
	}
	turn, err := m.Turn(context.Background(), req)
	require.NoError(t, err)
	assert.Equal(t, []string{"Hel", "lo, ", "world."}, streamed)
	assert.Equal(t, agentsagatype.ModelTurn{Content: "Hello, world.", Model: "gemini-2.5-flash-001",
		Usage: agentsagatype.Usage{InputTokens: 21, OutputTokens: 4}}, turn)
	require.Equal(t, 1, f.requests())

	// The key goes in the x-goog-api-key header, never in the URL.
	f.mu.Lock()
	header, query := f.headers[0], f.queries[0]
	f.mu.Unlock()
	assert.Equal(t, geminiTestKey, header.Get("X-Goog-Api-Key"))
	assert.Equal(t, "alt=sse", query)
	assert.NotContains(t, query, geminiTestKey)

	body := f.body(0)
	assert.Equal(t, "You are terse.\n\nAnswer in English.", jsonAt(t, body, "systemInstruction", "parts", 0, "text"))
	assert.Len(t, body["contents"], 1)
	assert.Equal(t, "user", jsonAt(t, body, "contents", 0, "role"))
	assert.Equal(t, "Say hello.", jsonAt(t, body, "contents", 0, "parts", 0, "text"))
	assert.EqualValues(t, 1024, jsonAt(t, body, "generationConfig", "thinkingConfig", "thinkingBudget"))
	assert.Nil(t, jsonAt(t, body, "generationConfig", "thinkingConfig", "includeThoughts"))
	assert.EqualValues(t, 2048, jsonAt(t, body, "generationConfig", "maxOutputTokens"))
	decls := jsonAt(t, body, "tools", 0, "functionDeclarations")
	assert.Equal(t, []any{
		map[string]any{"name": "lookup", "description": "Looks a word up.", "parametersJsonSchema": map[string]any{
			"type": "object", "properties": map[string]any{"word": map[string]any{"type": "string"}}, "required": []any{"word"}}},
		map[string]any{"name": "now"},
	}, decls)
}

func TestGeminiModelThinkingOffAndDynamic(t *testing.T) {
	for _, budget := range []int64{0, -1} {
		t.Run(fmt.Sprint(budget), func(t *testing.T) {
			f := newGeminiFake(t, geminiFakeReply{chunks: []string{
				`{"candidates": [{"content": {"parts": [{"text": "ok"}], "role": "model"}, "finishReason": "STOP", "index": 0}], "usageMetadata": {"promptTokenCount": 3, "candidatesTokenCount": 1, "totalTokenCount": 4}, "modelVersion": "gemini-2.5-flash"}`,
			}})
			m := newGemini(t, f.URL, func(s *agentsagatype.ModelSpec) { s.Thinking = &agentsagatype.Thinking{BudgetTokens: budget} })
			_, err := m.Turn(context.Background(), userAsks("hi"))
			require.NoError(t, err)
			assert.EqualValues(t, budget, jsonAt(t, f.body(0), "generationConfig", "thinkingConfig", "thinkingBudget"))
		})
	}
	// No thinking in the spec: the model's default, no thinkingConfig.
	f := newGeminiFake(t, geminiFakeReply{chunks: []string{
		`{"candidates": [{"content": {"parts": [{"text": "ok"}], "role": "model"}, "finishReason": "STOP", "index": 0}], "modelVersion": "gemini-2.5-flash"}`,
	}})
	_, err := newGemini(t, f.URL).Turn(context.Background(), userAsks("hi"))
	require.NoError(t, err)
	config, _ := f.body(0)["generationConfig"].(map[string]any)
	assert.NotContains(t, config, "thinkingConfig")
}

// geminiCallReply is a reply that thinks, then says a sentence and calls
// two functions in parallel, without ids: the first call carries the
// turn's thought signature, as Gemini sends it.
var geminiCallReply = geminiFakeReply{chunks: []string{
	`{"candidates": [{"content": {"parts": [{"text": "Let me look "}], "role": "model"}, "index": 0}], "usageMetadata": {"promptTokenCount": 1200, "totalTokenCount": 1200, "cachedContentTokenCount": 1024}, "modelVersion": "gemini-2.5-flash"}`,
	`{"candidates": [{"content": {"parts": [{"text": "that up."}, {"functionCall": {"name": "lookup", "args": {"word": "saga", "limit": 3}}, "thoughtSignature": "` + geminiSignature + `"}, {"functionCall": {"name": "now"}}], "role": "model"}, "finishReason": "STOP", "index": 0}], "usageMetadata": {"promptTokenCount": 1200, "candidatesTokenCount": 30, "thoughtsTokenCount": 210, "cachedContentTokenCount": 1024, "totalTokenCount": 1440, "cacheTokensDetails": [{"modality": "TEXT", "tokenCount": 1024}]}, "modelVersion": "gemini-2.5-flash"}`,
}}

var geminiDoneReply = geminiFakeReply{chunks: []string{
	`{"candidates": [{"content": {"parts": [{"text": "A saga is a long story."}], "role": "model"}, "finishReason": "STOP", "index": 0}], "usageMetadata": {"promptTokenCount": 1300, "candidatesTokenCount": 8, "totalTokenCount": 1308}, "modelVersion": "gemini-2.5-flash"}`,
}}

// geminiFollowUp is the next request as the engine builds it from its
// conversation: the reply as an assistant message (through the ledger's
// JSON, reasoning included), then the tool results.
func geminiFollowUp(t *testing.T, first agentsagatype.ModelTurn, reasoning *agentsagatype.Reasoning) activities.ModelRequest {
	t.Helper()
	reply := agentsagatype.Message{Seq: 3, Role: "assistant", Content: first.Content, ToolCalls: first.ToolCalls, Reasoning: reasoning}
	stored, err := json.Marshal(reply)
	require.NoError(t, err)
	var back agentsagatype.Message
	require.NoError(t, json.Unmarshal(stored, &back))
	return activities.ModelRequest{Messages: []agentsagatype.Message{
		{Role: "system", Content: "Use the tools."},
		{Role: "user", Content: "What is a saga?"},
		back,
		{Role: "tool", ToolCallID: first.ToolCalls[0].ID, Name: "lookup", Content: `{"definition":"a long story"}`},
		{Role: "tool", ToolCallID: first.ToolCalls[1].ID, Content: "2026-01-01T00:00:00Z"},
	}}
}

func TestGeminiModelThoughtSignatureGoesBack(t *testing.T) {
	f := newGeminiFake(t, geminiCallReply, geminiDoneReply)
	m := newGemini(t, f.URL, func(s *agentsagatype.ModelSpec) { s.Thinking = &agentsagatype.Thinking{BudgetTokens: -1} })
	first, err := m.Turn(context.Background(), userAsks("What is a saga?"))
	require.NoError(t, err)

	assert.Equal(t, "Let me look that up.", first.Content)
	assert.Equal(t, []agentsagatype.ToolCall{
		{ID: "call_0_lookup", Name: "lookup", Arguments: `{"limit":3,"word":"saga"}`},
		{ID: "call_1_now", Name: "now", Arguments: `{}`},
	}, first.ToolCalls)
	// Thinking is billed as output; the cached part of the prompt is
	// counted apart.
	assert.Equal(t, agentsagatype.Usage{InputTokens: 1200, OutputTokens: 240, CachedInputTokens: 1024}, first.Usage)
	require.NotNil(t, first.Reasoning)
	assert.Equal(t, activities.ReasoningGemini, first.Reasoning.Provider)
	assert.Contains(t, string(first.Reasoning.Data), geminiSignature)
	// Reasoning stays out of workflow history.
	history, err := json.Marshal(first)
	require.NoError(t, err)
	assert.NotContains(t, string(history), geminiSignature)

	done, err := m.Turn(context.Background(), geminiFollowUp(t, first, first.Reasoning))
	require.NoError(t, err)
	assert.Equal(t, "A saga is a long story.", done.Content)
	require.Equal(t, 2, f.requests())

	// The model turn goes back part for part: the text as it was split
	// (unsigned pieces joined), each call with the signature it came
	// with, unchanged, and no id Gemini never gave.
	body := f.body(1)
	assert.Equal(t, "Use the tools.", jsonAt(t, body, "systemInstruction", "parts", 0, "text"))
	contents := jsonAt(t, body, "contents").([]any)
	require.Len(t, contents, 3)
	assert.Equal(t, map[string]any{"role": "model", "parts": []any{
		map[string]any{"text": "Let me look that up."},
		map[string]any{"functionCall": map[string]any{"name": "lookup", "args": map[string]any{"word": "saga", "limit": float64(3)}},
			"thoughtSignature": geminiSignature},
		map[string]any{"functionCall": map[string]any{"name": "now"}},
	}}, contents[1])
	// Both results in one user turn, each naming its function (the
	// second found from the call it answers).
	assert.Equal(t, map[string]any{"role": "user", "parts": []any{
		map[string]any{"functionResponse": map[string]any{"name": "lookup", "response": map[string]any{"output": `{"definition":"a long story"}`}}},
		map[string]any{"functionResponse": map[string]any{"name": "now", "response": map[string]any{"output": "2026-01-01T00:00:00Z"}}},
	}}, contents[2])
}

func TestGeminiModelFollowUpWithoutSignatureIsRefused(t *testing.T) {
	changed := func(first agentsagatype.ModelTurn) *agentsagatype.Reasoning {
		sig, _ := base64.StdEncoding.DecodeString(geminiSignature)
		sig[0] ^= 0x01
		data := strings.Replace(string(first.Reasoning.Data), geminiSignature, base64.StdEncoding.EncodeToString(sig), 1)
		require.NotEqual(t, string(first.Reasoning.Data), data)
		return &agentsagatype.Reasoning{Provider: activities.ReasoningGemini, Data: json.RawMessage(data)}
	}
	for name, reasoning := range map[string]func(agentsagatype.ModelTurn) *agentsagatype.Reasoning{
		"none": func(agentsagatype.ModelTurn) *agentsagatype.Reasoning { return nil },
		"another provider's": func(first agentsagatype.ModelTurn) *agentsagatype.Reasoning {
			return &agentsagatype.Reasoning{Provider: activities.ReasoningAnthropic, Data: first.Reasoning.Data}
		},
		"changed bytes": changed,
	} {
		t.Run(name, func(t *testing.T) {
			f := newGeminiFake(t, geminiCallReply, geminiDoneReply)
			m := newGemini(t, f.URL)
			first, err := m.Turn(context.Background(), userAsks("What is a saga?"))
			require.NoError(t, err)
			require.NotNil(t, first.Reasoning)

			_, err = m.Turn(context.Background(), geminiFollowUp(t, first, reasoning(first)))
			var httpErr *activities.HTTPError
			require.ErrorAs(t, err, &httpErr)
			assert.Equal(t, http.StatusBadRequest, httpErr.StatusCode)
			assert.Equal(t, "gemini streamGenerateContent", httpErr.Op)
			assert.Contains(t, httpErr.Body, "missing a thought_signature")
			assert.Contains(t, httpErr.Body, "INVALID_ARGUMENT")
			c := activities.Classify(err)
			assert.False(t, c.Retryable, "a request Gemini refuses is refused again")
			assert.Equal(t, http.StatusBadRequest, c.Status)
			assert.Equal(t, 2, f.requests(), "one request per turn")
		})
	}
}

func TestGeminiModelChangedTextKeepsCallSignatures(t *testing.T) {
	// The reasoning no longer matches the message (its text was cleaned,
	// say): the turn is rebuilt from the message, and the calls still
	// carry their signatures.
	f := newGeminiFake(t, geminiCallReply, geminiDoneReply)
	m := newGemini(t, f.URL)
	first, err := m.Turn(context.Background(), userAsks("What is a saga?"))
	require.NoError(t, err)
	first.Content = "Let me look it up."
	_, err = m.Turn(context.Background(), geminiFollowUp(t, first, first.Reasoning))
	require.NoError(t, err)
	assert.Equal(t, []any{
		map[string]any{"text": "Let me look it up."},
		map[string]any{"functionCall": map[string]any{"name": "lookup", "args": map[string]any{"word": "saga", "limit": float64(3)}},
			"thoughtSignature": geminiSignature},
		map[string]any{"functionCall": map[string]any{"name": "now"}},
	}, jsonAt(t, f.body(1), "contents", 1, "parts"))
}

func TestGeminiModelCallIDsAndSignedTextGoBack(t *testing.T) {
	// Gemini 3 gives calls ids and may sign a text part (here an empty one
	// at the end): ids go back on the call and its response, and every
	// signed part as it came.
	textSig := base64.StdEncoding.EncodeToString([]byte("text-signature-bytes"))
	f := newGeminiFake(t, geminiFakeReply{chunks: []string{
		`{"candidates": [{"content": {"parts": [{"text": "Checking.", "thoughtSignature": "` + textSig + `"}], "role": "model"}, "index": 0}], "modelVersion": "gemini-3-pro-preview"}`,
		`{"candidates": [{"content": {"parts": [{"functionCall": {"id": "fc-7x", "name": "lookup", "args": {"word": "saga"}}, "thoughtSignature": "` + geminiSignature + `"}], "role": "model"}, "index": 0}], "modelVersion": "gemini-3-pro-preview"}`,
		`{"candidates": [{"content": {"parts": [{"text": "", "thoughtSignature": "` + textSig + `"}], "role": "model"}, "finishReason": "STOP", "index": 0}], "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 5, "totalTokenCount": 15}, "modelVersion": "gemini-3-pro-preview"}`,
	}}, geminiDoneReply)
	m := newGemini(t, f.URL)
	first, err := m.Turn(context.Background(), userAsks("What is a saga?"))
	require.NoError(t, err)
	assert.Equal(t, []agentsagatype.ToolCall{{ID: "fc-7x", Name: "lookup", Arguments: `{"word":"saga"}`}}, first.ToolCalls)

	req := activities.ModelRequest{Messages: []agentsagatype.Message{
		{Role: "user", Content: "What is a saga?"},
		{Role: "assistant", Content: first.Content, ToolCalls: first.ToolCalls, Reasoning: first.Reasoning},
		{Role: "tool", ToolCallID: "fc-7x", Name: "lookup", Content: "a long story"},
	}}
	_, err = m.Turn(context.Background(), req)
	require.NoError(t, err)
	assert.Equal(t, []any{
		map[string]any{"text": "Checking.", "thoughtSignature": textSig},
		map[string]any{"functionCall": map[string]any{"id": "fc-7x", "name": "lookup", "args": map[string]any{"word": "saga"}},
			"thoughtSignature": geminiSignature},
		map[string]any{"thoughtSignature": textSig},
	}, jsonAt(t, f.body(1), "contents", 1, "parts"))
	assert.Equal(t, map[string]any{"functionResponse": map[string]any{"id": "fc-7x", "name": "lookup",
		"response": map[string]any{"output": "a long story"}}}, jsonAt(t, f.body(1), "contents", 2, "parts", 0))
}

func TestGeminiModelThoughtsAreNotText(t *testing.T) {
	f := newGeminiFake(t, geminiFakeReply{chunks: []string{
		`{"candidates": [{"content": {"parts": [{"text": "**Planning** I should greet.", "thought": true}], "role": "model"}, "index": 0}]}`,
		`{"candidates": [{"content": {"parts": [{"text": "Hi."}], "role": "model"}, "finishReason": "STOP", "index": 0}], "usageMetadata": {"promptTokenCount": 5, "candidatesTokenCount": 2, "thoughtsTokenCount": 17, "totalTokenCount": 24}}`,
	}})
	var streamed []string
	req := userAsks("hi")
	req.OnText = func(s string) { streamed = append(streamed, s) }
	turn, err := newGemini(t, f.URL).Turn(context.Background(), req)
	require.NoError(t, err)
	assert.Equal(t, "Hi.", turn.Content)
	assert.Equal(t, []string{"Hi."}, streamed)
	assert.Equal(t, agentsagatype.Usage{InputTokens: 5, OutputTokens: 19}, turn.Usage)
	assert.Nil(t, turn.Reasoning, "nothing signed, nothing to send back")
}

func TestGeminiModelRateLimitedIsRetryable(t *testing.T) {
	const quota = `{
  "error": {
    "code": 429,
    "message": "You exceeded your current quota, please check your plan and billing details.",
    "status": "RESOURCE_EXHAUSTED",
    "details": [
      {"@type": "type.googleapis.com/google.rpc.QuotaFailure", "violations": [{"quotaMetric": "generativelanguage.googleapis.com/generate_content_free_tier_requests", "quotaId": "GenerateRequestsPerMinutePerProjectPerModel-FreeTier"}]},
      {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "41s"}
    ]
  }
}`
	t.Run("Retry-After", func(t *testing.T) {
		f := newGeminiFake(t, geminiFakeReply{status: http.StatusTooManyRequests, headers: map[string]string{"Retry-After": "7"}, body: quota})
		_, err := newGemini(t, f.URL).Turn(context.Background(), userAsks("hi"))
		var httpErr *activities.HTTPError
		require.ErrorAs(t, err, &httpErr)
		assert.Equal(t, http.StatusTooManyRequests, httpErr.StatusCode)
		assert.Contains(t, httpErr.Body, "RESOURCE_EXHAUSTED")
		c := activities.Classify(err)
		assert.True(t, c.Retryable)
		assert.Equal(t, 7*time.Second, c.RetryAfter, "the header wins")
		assert.Equal(t, 1, f.requests(), "the SDK does not retry")
	})
	t.Run("RetryInfo", func(t *testing.T) {
		f := newGeminiFake(t, geminiFakeReply{status: http.StatusTooManyRequests, body: quota})
		_, err := newGemini(t, f.URL).Turn(context.Background(), userAsks("hi"))
		c := activities.Classify(err)
		assert.True(t, c.Retryable)
		assert.Equal(t, http.StatusTooManyRequests, c.Status)
		assert.Equal(t, 41*time.Second, c.RetryAfter, "Google's RetryInfo says when")
		assert.Equal(t, 1, f.requests())
	})
}

func TestGeminiModelUnavailableIsRetryable(t *testing.T) {
	f := newGeminiFake(t, geminiFakeReply{status: http.StatusServiceUnavailable,
		body: `{"error": {"code": 503, "message": "The model is overloaded. Please try again later.", "status": "UNAVAILABLE"}}`})
	_, err := newGemini(t, f.URL).Turn(context.Background(), userAsks("hi"))
	var httpErr *activities.HTTPError
	require.ErrorAs(t, err, &httpErr)
	assert.Equal(t, http.StatusServiceUnavailable, httpErr.StatusCode)
	assert.Equal(t, `gemini streamGenerateContent: HTTP 503: {"error": {"code": 503, "message": "The model is overloaded. Please try again later.", "status": "UNAVAILABLE"}}`, err.Error())
	assert.True(t, activities.Classify(err).Retryable)
	assert.Equal(t, 1, f.requests(), "the SDK does not retry")
}

func TestGeminiModelBadRequestIsNotRetryable(t *testing.T) {
	f := newGeminiFake(t, geminiFakeReply{status: http.StatusBadRequest,
		body: `{"error": {"code": 400, "message": "* GenerateContentRequest.contents: contents is not specified\n", "status": "INVALID_ARGUMENT"}}`})
	_, err := newGemini(t, f.URL).Turn(context.Background(), userAsks("hi"))
	c := activities.Classify(err)
	assert.False(t, c.Retryable)
	assert.Equal(t, http.StatusBadRequest, c.Status)
}

func TestGeminiModelRefusals(t *testing.T) {
	for name, c := range map[string]struct {
		chunks []string
		want   string
	}{
		"finishReason SAFETY": {[]string{
			`{"candidates": [{"content": {"parts": [{"text": "Here is how"}], "role": "model"}, "index": 0}]}`,
			`{"candidates": [{"finishReason": "SAFETY", "index": 0, "safetyRatings": [{"category": "HARM_CATEGORY_DANGEROUS_CONTENT", "probability": "HIGH", "blocked": true}]}], "usageMetadata": {"promptTokenCount": 8, "candidatesTokenCount": 3, "totalTokenCount": 11}}`,
		}, "Gemini stopped the answer (finishReason SAFETY)"},
		"finishReason RECITATION": {[]string{
			`{"candidates": [{"content": {"parts": [{"text": "It was"}], "role": "model"}, "finishReason": "RECITATION", "index": 0}], "usageMetadata": {"promptTokenCount": 8, "candidatesTokenCount": 3, "totalTokenCount": 11}}`,
		}, "Gemini stopped the answer (finishReason RECITATION)"},
		"blocked prompt": {[]string{
			`{"promptFeedback": {"blockReason": "PROHIBITED_CONTENT"}, "usageMetadata": {"promptTokenCount": 8, "candidatesTokenCount": 3, "totalTokenCount": 11}, "modelVersion": "gemini-2.5-flash"}`,
		}, "Gemini blocked the prompt (blockReason PROHIBITED_CONTENT)"},
	} {
		t.Run(name, func(t *testing.T) {
			f := newGeminiFake(t, geminiFakeReply{chunks: c.chunks})
			turn, err := newGemini(t, f.URL).Turn(context.Background(), userAsks("how do I make a weapon?"))
			require.NoError(t, err, "a refusal is an answer, never retried")
			assert.Equal(t, c.want, turn.Refusal)
			assert.Empty(t, turn.Content)
			assert.Empty(t, turn.ToolCalls)
			assert.Nil(t, turn.Reasoning)
			assert.Equal(t, agentsagatype.Usage{InputTokens: 8, OutputTokens: 3}, turn.Usage)
		})
	}
}

func TestGeminiModelBrokenStreamIsRetryable(t *testing.T) {
	for name, chunks := range map[string][]string{
		"no finishReason": {
			`{"candidates": [{"content": {"parts": [{"text": "Hel"}], "role": "model"}, "index": 0}]}`,
		},
		"error event": {
			`{"candidates": [{"content": {"parts": [{"text": "Hel"}], "role": "model"}, "index": 0}]}`,
			`{"error": {"code": 500, "message": "An internal error has occurred (key ` + geminiTestKey + `).", "status": "INTERNAL"}}`,
		},
		"finishReason unspecified": {
			`{"candidates": [{"content": {"parts": [{"text": "Hel"}], "role": "model"}, "finishReason": "FINISH_REASON_UNSPECIFIED", "index": 0}]}`,
		},
		"finishReason CONTINUATION": {
			`{"candidates": [{"content": {"parts": [{"text": "Hel"}], "role": "model"}, "index": 0}]}`,
			`{"candidates": [{"content": {"parts": [{"text": "lo"}], "role": "model"}, "finishReason": "CONTINUATION", "continuationToken": "Y2hlY2twb2ludC0x", "index": 0}]}`,
		},
		"not JSON": {
			`{"candidates": [{"content": {"parts": [{"text": "Hel"}], "role": "model"}, "index": 0}]}`,
			`{"candidates": [{"content": `,
		},
	} {
		t.Run(name, func(t *testing.T) {
			f := newGeminiFake(t, geminiFakeReply{chunks: chunks})
			turn, err := newGemini(t, f.URL).Turn(context.Background(), userAsks("hi"))
			require.Error(t, err)
			assert.Equal(t, agentsagatype.ModelTurn{}, turn, "never a partial turn")
			var httpErr *activities.HTTPError
			assert.NotErrorAs(t, err, &httpErr)
			assert.Contains(t, err.Error(), "gemini streamGenerateContent: the stream broke after")
			assert.NotContains(t, err.Error(), geminiTestKey)
			assert.True(t, activities.Classify(err).Retryable)
			assert.Equal(t, 1, f.requests(), "no automatic continuation")
		})
	}
}

func TestGeminiModelKeyNeverInAnError(t *testing.T) {
	// A proxy that echoes the request back.
	body := fmt.Sprintf(`{"error": {"code": 400, "message": "API key not valid: %s (x-goog-api-key: \"%s\")", "status": "INVALID_ARGUMENT"}}`, geminiTestKey, geminiTestKey)
	f := newGeminiFake(t, geminiFakeReply{status: http.StatusBadRequest, body: body})
	_, err := newGemini(t, f.URL).Turn(context.Background(), userAsks("hi"))
	var httpErr *activities.HTTPError
	require.ErrorAs(t, err, &httpErr)
	assert.NotContains(t, err.Error(), geminiTestKey)
	assert.NotContains(t, httpErr.Body, geminiTestKey)
	assert.Contains(t, httpErr.Body, "API key not valid")

	// A server that is not there: the SDK's error quotes the request.
	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close()
	_, err = newGemini(t, dead.URL+"/"+geminiTestKey).Turn(context.Background(), userAsks("hi"))
	require.Error(t, err)
	assert.NotContains(t, err.Error(), geminiTestKey)
	assert.True(t, activities.Classify(err).Retryable)
}

func TestGeminiModelIgnoresEnvironment(t *testing.T) {
	// Neither the server, nor the backend, nor the API version, nor a key
	// may come from the environment: only the spec and the key the worker
	// read from model.api_key_env.
	t.Setenv("GOOGLE_API_KEY", "AIza-from-env-google")
	t.Setenv("GEMINI_API_KEY", "AIza-from-env-gemini")
	t.Setenv("GOOGLE_GEMINI_BASE_URL", "http://127.0.0.1:1")
	t.Setenv("GOOGLE_GENAI_USE_VERTEXAI", "true")
	t.Setenv("GOOGLE_CLOUD_PROJECT", "env-project")
	t.Setenv("GOOGLE_CLOUD_LOCATION", "us-central1")
	t.Setenv("GOOGLE_GENAI_API_VERSION", "v1")
	f := newGeminiFake(t, geminiDoneReply)
	_, err := newGemini(t, f.URL).Turn(context.Background(), userAsks("hi"))
	require.NoError(t, err)
	f.mu.Lock()
	assert.Equal(t, geminiTestKey, f.headers[0].Get("X-Goog-Api-Key"))
	f.mu.Unlock()

	// Without a key the SDK would take one from the environment.
	_, err = activities.NewGeminiModel(agentsagatype.ModelSpec{Provider: agentsagatype.ProviderGemini, Name: "gemini-2.5-flash"}, "", nil)
	require.ErrorContains(t, err, "no API key")
}

func TestNewGeminiModelRejectsBadSpec(t *testing.T) {
	for name, spec := range map[string]agentsagatype.ModelSpec{
		"another provider": {Provider: agentsagatype.ProviderOpenAI, Name: "gemini-2.5-flash"},
		"no name":          {Provider: agentsagatype.ProviderGemini},
		"vertex":           {Provider: agentsagatype.ProviderGemini, Name: "gemini-2.5-flash", Project: "p", Region: "us-central1"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := activities.NewGeminiModel(spec, geminiTestKey, nil)
			require.Error(t, err)
			assert.NotContains(t, err.Error(), geminiTestKey)
		})
	}
}

func TestGeminiModelBadRequestTranslation(t *testing.T) {
	f := newGeminiFake(t, geminiDoneReply)
	m := newGemini(t, f.URL)
	_, err := m.Turn(context.Background(), activities.ModelRequest{Messages: []agentsagatype.Message{{Role: "robot", Content: "x"}}})
	require.ErrorContains(t, err, `unknown role "robot"`)
	_, err = m.Turn(context.Background(), activities.ModelRequest{Messages: []agentsagatype.Message{{Role: "user", Content: "x"}},
		Tools: []agentsagatype.ToolDef{{Name: "bad", Parameters: json.RawMessage(`[1]`)}}})
	require.ErrorContains(t, err, "tools[0] (bad): parameters: not a JSON object")
	_, err = m.Turn(context.Background(), activities.ModelRequest{Messages: []agentsagatype.Message{{Role: "tool", ToolCallID: "x", Content: "y"}}})
	require.ErrorContains(t, err, "names no function")
	assert.Equal(t, 0, f.requests())
}

func TestGeminiModelIsRegistered(t *testing.T) {
	models, err := activities.NewModels(nil)
	require.NoError(t, err)
	assert.Contains(t, models.Providers(), agentsagatype.ProviderGemini)
}

package activities_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/activities"
	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/providerwire"
)

const testAPIKey = "sk-test-secret-123"

// chatServer is a fake chat-completions endpoint. It answers every request
// with status, headers and body (a 200's body is a chat.completion, which
// it streams when the request asks), and counts the requests it saw.
type chatServer struct {
	URL      string
	requests atomic.Int32
	lastBody atomic.Pointer[[]byte]
	lastAuth atomic.Pointer[string]
}

func newChatServer(t *testing.T, status int, headers map[string]string, body string) *chatServer {
	t.Helper()
	cs := &chatServer{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cs.requests.Add(1)
		if r.Method != http.MethodPost || r.URL.Path != "/v1/chat/completions" {
			http.Error(w, "unexpected "+r.Method+" "+r.URL.Path, http.StatusNotFound)
			return
		}
		b, _ := io.ReadAll(r.Body)
		auth := r.Header.Get("Authorization")
		cs.lastBody.Store(&b)
		cs.lastAuth.Store(&auth)
		for k, v := range headers {
			w.Header().Set(k, v)
		}
		if status == http.StatusOK {
			if err := providerwire.WriteChatCompletion(w, providerwire.Streams(b), []byte(body)); err != nil {
				t.Errorf("chat server: %v", err)
				http.Error(w, err.Error(), http.StatusInternalServerError)
			}
			return
		}
		if w.Header().Get("Content-Type") == "" {
			w.Header().Set("Content-Type", "application/json")
		}
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}))
	t.Cleanup(srv.Close)
	cs.URL = srv.URL + "/v1"
	return cs
}

func newModel(t *testing.T, baseURL, apiKey string) activities.Model {
	t.Helper()
	m, err := activities.NewOpenAIModel(agentsagatype.ModelSpec{
		Provider: agentsagatype.ProviderOpenAI,
		Name:     "gpt-4o-mini",
		BaseURL:  baseURL,
	}, apiKey, &http.Client{Timeout: 10 * time.Second})
	require.NoError(t, err)
	return m
}

func userAsks(q string) activities.ModelRequest {
	return activities.ModelRequest{Messages: []agentsagatype.Message{{Role: "user", Content: q}}}
}

const plainAnswer = `{
  "id": "chatcmpl-123",
  "object": "chat.completion",
  "created": 1677652288,
  "model": "gpt-4o-mini-2024-07-18",
  "system_fingerprint": "fp_44709d6fcb",
  "choices": [{
    "index": 0,
    "message": {"role": "assistant", "content": "Hello there.", "refusal": null, "annotations": []},
    "logprobs": null,
    "finish_reason": "stop"
  }],
  "usage": {"prompt_tokens": 9, "completion_tokens": 12, "total_tokens": 21}
}`

func TestOpenAIModelPlainAnswer(t *testing.T) {
	srv := newChatServer(t, http.StatusOK, nil, plainAnswer)
	turn, err := newModel(t, srv.URL, testAPIKey).Turn(context.Background(), userAsks("hi"))
	require.NoError(t, err)
	assert.Equal(t, agentsagatype.ModelTurn{
		Content: "Hello there.",
		Usage:   agentsagatype.Usage{InputTokens: 9, OutputTokens: 12},
		Model:   "gpt-4o-mini-2024-07-18",
	}, turn)
}

func TestOpenAIModelToolCalls(t *testing.T) {
	// The second call's arguments are cut off mid-string: the model may
	// produce invalid JSON and the workflow must see it as written.
	const body = `{
  "id": "chatcmpl-456",
  "object": "chat.completion",
  "created": 1677652288,
  "model": "gpt-4o-mini",
  "choices": [{
    "index": 0,
    "message": {
      "role": "assistant",
      "content": null,
      "refusal": null,
      "tool_calls": [
        {"id": "call_a", "type": "function", "function": {"name": "search", "arguments": "{\"q\": \"temporal\",  \"n\": 3}"}},
        {"id": "call_b", "type": "function", "function": {"name": "fetch", "arguments": "{\"url\": \"http://exa"}}
      ]
    },
    "logprobs": null,
    "finish_reason": "tool_calls"
  }],
  "usage": {"prompt_tokens": 50, "completion_tokens": 20, "total_tokens": 70, "prompt_tokens_details": {"cached_tokens": 32}}
}`
	srv := newChatServer(t, http.StatusOK, nil, body)
	turn, err := newModel(t, srv.URL, testAPIKey).Turn(context.Background(), userAsks("find it"))
	require.NoError(t, err)
	assert.Empty(t, turn.Content)
	assert.Equal(t, []agentsagatype.ToolCall{
		{ID: "call_a", Name: "search", Arguments: `{"q": "temporal",  "n": 3}`},
		{ID: "call_b", Name: "fetch", Arguments: `{"url": "http://exa`},
	}, turn.ToolCalls)
	assert.Equal(t, agentsagatype.Usage{InputTokens: 50, OutputTokens: 20, CachedInputTokens: 32}, turn.Usage, "prompt_tokens counts the cached part")
}

func TestOpenAIModelRequestTranslation(t *testing.T) {
	srv := newChatServer(t, http.StatusOK, nil, plainAnswer)
	m, err := activities.NewOpenAIModel(agentsagatype.ModelSpec{
		Provider:  agentsagatype.ProviderOpenAI,
		Name:      "llama3.1",
		BaseURL:   srv.URL,
		MaxTokens: 256,
	}, testAPIKey, nil)
	require.NoError(t, err)

	_, err = m.Turn(context.Background(), activities.ModelRequest{
		Messages: []agentsagatype.Message{
			{Role: "system", Content: "Be brief."},
			{Role: "user", Content: "Weather in Paris?"},
			{Role: "assistant", ToolCalls: []agentsagatype.ToolCall{
				{ID: "call_1", Name: "weather", Arguments: `{"city":"Paris"}`},
			}},
			{Role: "tool", ToolCallID: "call_1", Name: "weather", Content: "18C, cloudy"},
		},
		Tools: []agentsagatype.ToolDef{
			{
				Name:        "weather",
				Description: "Current weather for a city.",
				Parameters:  json.RawMessage(`{"type":"object","properties":{"city":{"type":"string","maxLength":100}},"required":["city"]}`),
			},
			{Name: "now"},
		},
	})
	require.NoError(t, err)

	assert.Equal(t, "Bearer "+testAPIKey, *srv.lastAuth.Load())
	var got struct {
		Model               string `json:"model"`
		MaxCompletionTokens int64  `json:"max_completion_tokens"`
		Messages            []struct {
			Role       string          `json:"role"`
			Content    json.RawMessage `json:"content"`
			ToolCallID string          `json:"tool_call_id"`
			ToolCalls  []struct {
				ID       string `json:"id"`
				Type     string `json:"type"`
				Function struct {
					Name      string `json:"name"`
					Arguments string `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"messages"`
		Tools []struct {
			Type     string `json:"type"`
			Function struct {
				Name        string          `json:"name"`
				Description string          `json:"description"`
				Parameters  json.RawMessage `json:"parameters"`
			} `json:"function"`
		} `json:"tools"`
	}
	require.NoError(t, json.Unmarshal(*srv.lastBody.Load(), &got))

	assert.Equal(t, "llama3.1", got.Model)
	assert.EqualValues(t, 256, got.MaxCompletionTokens)

	require.Len(t, got.Messages, 4)
	var roles []string
	for _, msg := range got.Messages {
		roles = append(roles, msg.Role)
	}
	assert.Equal(t, []string{"system", "user", "assistant", "tool"}, roles)
	assert.JSONEq(t, `"Be brief."`, string(got.Messages[0].Content))
	require.Len(t, got.Messages[2].ToolCalls, 1)
	call := got.Messages[2].ToolCalls[0]
	assert.Equal(t, "call_1", call.ID)
	assert.Equal(t, "function", call.Type)
	assert.Equal(t, "weather", call.Function.Name)
	assert.Equal(t, `{"city":"Paris"}`, call.Function.Arguments)
	assert.Equal(t, "call_1", got.Messages[3].ToolCallID)
	assert.JSONEq(t, `"18C, cloudy"`, string(got.Messages[3].Content))

	require.Len(t, got.Tools, 2)
	assert.Equal(t, "function", got.Tools[0].Type)
	assert.Equal(t, "weather", got.Tools[0].Function.Name)
	assert.Equal(t, "Current weather for a city.", got.Tools[0].Function.Description)
	assert.JSONEq(t, `{"type":"object","properties":{"city":{"type":"string","maxLength":100}},"required":["city"]}`,
		string(got.Tools[0].Function.Parameters))
	assert.Equal(t, "now", got.Tools[1].Function.Name)
	assert.JSONEq(t, `{"type":"object"}`, string(got.Tools[1].Function.Parameters))
}

func TestOpenAIModelNoAPIKeySendsNoAuthorization(t *testing.T) {
	// A key in the environment must not leak to a local server.
	t.Setenv("OPENAI_API_KEY", "sk-from-env")
	srv := newChatServer(t, http.StatusOK, nil, plainAnswer)
	_, err := newModel(t, srv.URL, "").Turn(context.Background(), userAsks("hi"))
	require.NoError(t, err)
	assert.Empty(t, *srv.lastAuth.Load())
}

func TestOpenAIModelRefusal(t *testing.T) {
	const body = `{
  "id": "chatcmpl-789",
  "object": "chat.completion",
  "created": 1677652288,
  "model": "gpt-4o-mini",
  "choices": [{
    "index": 0,
    "message": {"role": "assistant", "content": null, "refusal": "I can't help with that."},
    "logprobs": null,
    "finish_reason": "stop"
  }],
  "usage": {"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12}
}`
	srv := newChatServer(t, http.StatusOK, nil, body)
	turn, err := newModel(t, srv.URL, testAPIKey).Turn(context.Background(), userAsks("something bad"))
	require.NoError(t, err)
	assert.Equal(t, "I can't help with that.", turn.Refusal)
	assert.Empty(t, turn.Content)
	assert.Empty(t, turn.ToolCalls)
}

func TestOpenAIModelNoChoices(t *testing.T) {
	srv := newChatServer(t, http.StatusOK, nil,
		`{"id":"x","object":"chat.completion","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":1,"completion_tokens":0,"total_tokens":1}}`)
	_, err := newModel(t, srv.URL, testAPIKey).Turn(context.Background(), userAsks("hi"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "openai chat.completions")
	assert.Contains(t, err.Error(), "no choices")
}

func TestOpenAIModelHTTPErrorBadRequest(t *testing.T) {
	const body = `{"error":{"message":"Invalid value for 'model'.","type":"invalid_request_error","param":"model","code":null}}`
	srv := newChatServer(t, http.StatusBadRequest, nil, body)
	_, err := newModel(t, srv.URL, testAPIKey).Turn(context.Background(), userAsks("hi"))

	var httpErr *activities.HTTPError
	require.ErrorAs(t, err, &httpErr)
	assert.Equal(t, "openai chat.completions", httpErr.Op)
	assert.Equal(t, http.StatusBadRequest, httpErr.StatusCode)
	assert.Contains(t, httpErr.Body, "Invalid value for 'model'.")
	assert.Zero(t, httpErr.RetryAfter)
	assert.Nil(t, httpErr.ShouldRetry)
	assert.Equal(t, "openai chat.completions: HTTP 400: "+body, err.Error())
}

func TestOpenAIModelHTTPErrorRetryHintsAndNoSDKRetry(t *testing.T) {
	srv := newChatServer(t, http.StatusServiceUnavailable,
		map[string]string{"retry-after": "2", "x-should-retry": "true"},
		`{"error":{"message":"The server is overloaded.","type":"server_error"}}`)
	_, err := newModel(t, srv.URL, testAPIKey).Turn(context.Background(), userAsks("hi"))

	var httpErr *activities.HTTPError
	require.ErrorAs(t, err, &httpErr)
	assert.Equal(t, http.StatusServiceUnavailable, httpErr.StatusCode)
	assert.Equal(t, 2*time.Second, httpErr.RetryAfter)
	require.NotNil(t, httpErr.ShouldRetry)
	assert.True(t, *httpErr.ShouldRetry)
	// The SDK would retry a 503 that says x-should-retry: true; one request
	// proves its retries are off.
	assert.EqualValues(t, 1, srv.requests.Load())
}

func TestOpenAIModelHTTPErrorRetryAfterMs(t *testing.T) {
	srv := newChatServer(t, http.StatusTooManyRequests,
		map[string]string{"retry-after-ms": "1500", "retry-after": "2", "x-should-retry": "false"},
		`{"error":{"message":"Rate limit reached.","type":"requests","code":"rate_limit_exceeded"}}`)
	_, err := newModel(t, srv.URL, testAPIKey).Turn(context.Background(), userAsks("hi"))

	var httpErr *activities.HTTPError
	require.ErrorAs(t, err, &httpErr)
	assert.Equal(t, http.StatusTooManyRequests, httpErr.StatusCode)
	assert.Equal(t, 1500*time.Millisecond, httpErr.RetryAfter)
	require.NotNil(t, httpErr.ShouldRetry)
	assert.False(t, *httpErr.ShouldRetry)
	assert.EqualValues(t, 1, srv.requests.Load())
}

func TestOpenAIModelHTTPErrorOddBodies(t *testing.T) {
	// Whatever the body, the status must reach the retry classifier: a
	// proxy's HTML page, and a string "error" the SDK cannot decode.
	for name, body := range map[string]string{
		"html":         "<html>502 Bad Gateway</html>",
		"string error": `{"error":"model \"llama9\" not found"}`,
	} {
		t.Run(name, func(t *testing.T) {
			srv := newChatServer(t, http.StatusBadGateway, nil, body)
			_, err := newModel(t, srv.URL, testAPIKey).Turn(context.Background(), userAsks("hi"))

			var httpErr *activities.HTTPError
			require.ErrorAs(t, err, &httpErr)
			assert.Equal(t, http.StatusBadGateway, httpErr.StatusCode)
			assert.Equal(t, body, httpErr.Body)
		})
	}
}

func TestOpenAIModelHTTPErrorRedactsAPIKey(t *testing.T) {
	srv := newChatServer(t, http.StatusUnauthorized, nil,
		fmt.Sprintf(`{"error":{"message":"bad key: Bearer %s","type":"invalid_request_error"}}`, testAPIKey))
	_, err := newModel(t, srv.URL, testAPIKey).Turn(context.Background(), userAsks("hi"))

	var httpErr *activities.HTTPError
	require.ErrorAs(t, err, &httpErr)
	assert.Equal(t, http.StatusUnauthorized, httpErr.StatusCode)
	assert.NotContains(t, err.Error(), testAPIKey)
	assert.Contains(t, err.Error(), "[redacted]")
}

func TestOpenAIModelConnectionRefused(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close() // nothing listens there any more

	_, err := newModel(t, url, testAPIKey).Turn(context.Background(), userAsks("hi"))
	require.Error(t, err)
	var httpErr *activities.HTTPError
	assert.False(t, errors.As(err, &httpErr), "a network error is not an HTTP answer")
	assert.True(t, strings.HasPrefix(err.Error(), "openai chat.completions: "), err.Error())
	assert.NotContains(t, err.Error(), testAPIKey)
}

func TestOpenAIModelUnknownRole(t *testing.T) {
	srv := newChatServer(t, http.StatusOK, nil, plainAnswer)
	_, err := newModel(t, srv.URL, testAPIKey).Turn(context.Background(), activities.ModelRequest{
		Messages: []agentsagatype.Message{{Role: "narrator", Content: "meanwhile"}},
	})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `messages[0]: unknown role "narrator"`)
	assert.Zero(t, srv.requests.Load())
}

func TestOpenAIModelBadToolSchema(t *testing.T) {
	srv := newChatServer(t, http.StatusOK, nil, plainAnswer)
	_, err := newModel(t, srv.URL, testAPIKey).Turn(context.Background(), activities.ModelRequest{
		Messages: []agentsagatype.Message{{Role: "user", Content: "hi"}},
		Tools:    []agentsagatype.ToolDef{{Name: "broken", Parameters: json.RawMessage(`[1,2]`)}},
	})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "tools[0] (broken)")
	assert.Zero(t, srv.requests.Load())
}

func TestNewOpenAIModelRejectsBadSpec(t *testing.T) {
	_, err := activities.NewOpenAIModel(agentsagatype.ModelSpec{Provider: agentsagatype.ProviderScripted, Name: "x"}, "", nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "provider")

	_, err = activities.NewOpenAIModel(agentsagatype.ModelSpec{Provider: agentsagatype.ProviderOpenAI}, "", nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "model name")
}

func TestNewHTTPError(t *testing.T) {
	resp := func(status int, headers map[string]string) *http.Response {
		h := http.Header{}
		for k, v := range headers {
			h.Set(k, v)
		}
		return &http.Response{StatusCode: status, Header: h}
	}

	t.Run("no hints", func(t *testing.T) {
		e := activities.NewHTTPError("tool search", resp(500, nil), nil)
		assert.Equal(t, 500, e.StatusCode)
		assert.Zero(t, e.RetryAfter)
		assert.Nil(t, e.ShouldRetry)
		assert.Equal(t, "tool search: HTTP 500", e.Error())
	})
	t.Run("retry-after seconds", func(t *testing.T) {
		e := activities.NewHTTPError("op", resp(429, map[string]string{"Retry-After": "7"}), nil)
		assert.Equal(t, 7*time.Second, e.RetryAfter)
	})
	t.Run("retry-after-ms wins", func(t *testing.T) {
		e := activities.NewHTTPError("op", resp(429, map[string]string{"Retry-After": "7", "retry-after-ms": "250.5"}), nil)
		assert.Equal(t, 250500*time.Microsecond, e.RetryAfter)
	})
	t.Run("retry-after HTTP date", func(t *testing.T) {
		at := time.Now().Add(30 * time.Second).UTC().Format(http.TimeFormat)
		e := activities.NewHTTPError("op", resp(503, map[string]string{"Retry-After": at}), nil)
		assert.InDelta(t, 30*time.Second, e.RetryAfter, float64(2*time.Second))
	})
	t.Run("retry-after in the past or garbage", func(t *testing.T) {
		past := time.Now().Add(-time.Minute).UTC().Format(http.TimeFormat)
		assert.Zero(t, activities.NewHTTPError("op", resp(503, map[string]string{"Retry-After": past}), nil).RetryAfter)
		assert.Zero(t, activities.NewHTTPError("op", resp(503, map[string]string{"Retry-After": "soon"}), nil).RetryAfter)
		assert.Zero(t, activities.NewHTTPError("op", resp(503, map[string]string{"Retry-After": "-3"}), nil).RetryAfter)
	})
	t.Run("x-should-retry", func(t *testing.T) {
		e := activities.NewHTTPError("op", resp(409, map[string]string{"X-Should-Retry": "false"}), nil)
		require.NotNil(t, e.ShouldRetry)
		assert.False(t, *e.ShouldRetry)
		assert.Nil(t, activities.NewHTTPError("op", resp(409, map[string]string{"X-Should-Retry": "maybe"}), nil).ShouldRetry)
	})
	t.Run("body is capped at 512 bytes", func(t *testing.T) {
		e := activities.NewHTTPError("op", resp(500, nil), []byte(strings.Repeat("é", 400)))
		assert.LessOrEqual(t, len(e.Body), 512)
		assert.Equal(t, strings.Repeat("é", 256), e.Body)
	})
}

// ExampleNewOpenAIModel talks to a local OpenAI-compatible server, as it
// would to Ollama at http://localhost:11434/v1.
func ExampleNewOpenAIModel() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		request, _ := io.ReadAll(r.Body)
		// The model asks for the reply as a stream, and the server sends it
		// in chunks, as Ollama does.
		_ = providerwire.WriteChatCompletion(w, providerwire.Streams(request), []byte(`{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"llama3.1",
			"choices":[{"index":0,"message":{"role":"assistant","content":"Paris."},"finish_reason":"stop"}],
			"usage":{"prompt_tokens":14,"completion_tokens":2,"total_tokens":16}}`))
	}))
	defer srv.Close()

	model, err := activities.NewOpenAIModel(agentsagatype.ModelSpec{
		Provider: agentsagatype.ProviderOpenAI,
		Name:     "llama3.1",
		BaseURL:  srv.URL + "/v1",
	}, "", nil) // local servers need no key
	if err != nil {
		fmt.Println(err)
		return
	}
	turn, err := model.Turn(context.Background(), activities.ModelRequest{
		Messages: []agentsagatype.Message{{Role: "user", Content: "Capital of France?"}},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%s %s (%d tokens)\n", turn.Model, turn.Content, turn.Usage.Total())
	// Output: llama3.1 Paris. (16 tokens)
}

package activities_test

import (
	"bytes"
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
	"github.com/agentsaga/agentsaga/budget"
	"github.com/agentsaga/agentsaga/internal/providerwire"
)

// messagesServer is a fake Anthropic Messages endpoint (POST /v1/messages).
// It answers every request with status, headers and body (a 200's body is a
// message, which it streams when the request asks), and keeps what the last
// request sent.
type messagesServer struct {
	URL         string
	requests    atomic.Int32
	lastBody    atomic.Pointer[[]byte]
	lastHeaders atomic.Pointer[http.Header]
}

func newMessagesServer(t *testing.T, status int, headers map[string]string, body string) *messagesServer {
	t.Helper()
	ms := &messagesServer{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ms.requests.Add(1)
		if r.Method != http.MethodPost || r.URL.Path != "/v1/messages" {
			http.Error(w, "unexpected "+r.Method+" "+r.URL.Path, http.StatusNotFound)
			return
		}
		b, _ := io.ReadAll(r.Body)
		h := r.Header.Clone()
		ms.lastBody.Store(&b)
		ms.lastHeaders.Store(&h)
		for k, v := range headers {
			w.Header().Set(k, v)
		}
		if status == http.StatusOK {
			if err := providerwire.WriteMessage(w, providerwire.Streams(b), []byte(body)); err != nil {
				t.Errorf("messages server: %v", err)
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
	ms.URL = srv.URL
	return ms
}

func newAnthropic(t *testing.T, baseURL, apiKey string) activities.Model {
	t.Helper()
	m, err := activities.NewAnthropicModel(agentsagatype.ModelSpec{
		Provider: agentsagatype.ProviderAnthropic,
		Name:     "claude-sonnet-4-5",
		BaseURL:  baseURL,
	}, apiKey, &http.Client{Timeout: 10 * time.Second})
	require.NoError(t, err)
	return m
}

const anthropicPlainAnswer = `{
  "id": "msg_01XFDUDYJgAACzvnptvVoYEL",
  "type": "message",
  "role": "assistant",
  "model": "claude-sonnet-4-5-20250929",
  "content": [{"type": "text", "text": "Hello there."}],
  "stop_reason": "end_turn",
  "stop_sequence": null,
  "usage": {"input_tokens": 9, "output_tokens": 12, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
}`

func TestAnthropicModelPlainAnswer(t *testing.T) {
	srv := newMessagesServer(t, http.StatusOK, nil, anthropicPlainAnswer)
	turn, err := newAnthropic(t, srv.URL, testAPIKey).Turn(context.Background(), userAsks("hi"))
	require.NoError(t, err)
	assert.Equal(t, agentsagatype.ModelTurn{
		Content: "Hello there.",
		Usage:   agentsagatype.Usage{InputTokens: 9, OutputTokens: 12},
		Model:   "claude-sonnet-4-5-20250929",
	}, turn)
	assert.EqualValues(t, 1, srv.requests.Load())
}

func TestAnthropicModelToolUse(t *testing.T) {
	const body = `{
  "id": "msg_02",
  "type": "message",
  "role": "assistant",
  "model": "claude-sonnet-4-5-20250929",
  "content": [
    {"type": "text", "text": "Let me look that up."},
    {"type": "tool_use", "id": "toolu_01A", "name": "search", "input": {"q": "temporal", "n": 3}},
    {"type": "tool_use", "id": "toolu_01B", "name": "now", "input": {}}
  ],
  "stop_reason": "tool_use",
  "stop_sequence": null,
  "usage": {"input_tokens": 50, "output_tokens": 20, "cache_read_input_tokens": 1200, "cache_creation_input_tokens": 30}
}`
	srv := newMessagesServer(t, http.StatusOK, nil, body)
	turn, err := newAnthropic(t, srv.URL, testAPIKey).Turn(context.Background(), userAsks("find it"))
	require.NoError(t, err)
	assert.Equal(t, "Let me look that up.", turn.Content)
	require.Len(t, turn.ToolCalls, 2)
	assert.Equal(t, "toolu_01A", turn.ToolCalls[0].ID)
	assert.Equal(t, "search", turn.ToolCalls[0].Name)
	assert.JSONEq(t, `{"q": "temporal", "n": 3}`, turn.ToolCalls[0].Arguments)
	assert.Equal(t, "toolu_01B", turn.ToolCalls[1].ID)
	assert.Equal(t, "now", turn.ToolCalls[1].Name)
	assert.JSONEq(t, `{}`, turn.ToolCalls[1].Arguments)
	assert.Equal(t, agentsagatype.Usage{InputTokens: 50 + 1200 + 30, OutputTokens: 20, CachedInputTokens: 1200, CacheWriteTokens: 30}, turn.Usage,
		"input_tokens leaves out what the cache read and wrote")
	assert.Empty(t, turn.Refusal)
}

func TestAnthropicModelRequestTranslation(t *testing.T) {
	t.Setenv("ANTHROPIC_API_KEY", "sk-ant-from-env")
	t.Setenv("ANTHROPIC_AUTH_TOKEN", "token-from-env")
	t.Setenv("ANTHROPIC_CUSTOM_HEADERS", "X-Leak: yes")
	srv := newMessagesServer(t, http.StatusOK, nil, anthropicPlainAnswer)
	m, err := activities.NewAnthropicModel(agentsagatype.ModelSpec{
		Provider:  agentsagatype.ProviderAnthropic,
		Name:      "claude-haiku-4-5",
		BaseURL:   srv.URL,
		MaxTokens: 256,
	}, testAPIKey, nil)
	require.NoError(t, err)

	_, err = m.Turn(context.Background(), activities.ModelRequest{
		Messages: []agentsagatype.Message{
			{Role: "system", Content: "Be brief."},
			{Role: "user", Content: "Weather in Paris and the time?"},
			{Role: "assistant", Content: "Checking.", ToolCalls: []agentsagatype.ToolCall{
				{ID: "toolu_1", Name: "weather", Arguments: `{"city":"Paris"}`},
				{ID: "toolu_2", Name: "now", Arguments: `{"tz": "Europe/Pa`},
			}},
			{Role: "tool", ToolCallID: "toolu_1", Name: "weather", Content: "18C, cloudy"},
			{Role: "tool", ToolCallID: "toolu_2", Name: "now", Content: "invalid arguments"},
			// The workflow appends its budget note as a trailing system
			// message on every turn.
			{Role: "system", Content: "Budget: 2 steps left."},
		},
		Tools: []agentsagatype.ToolDef{
			{
				Name:        "weather",
				Description: "Current weather for a city.",
				Parameters:  json.RawMessage(`{"type":"object","properties":{"city":{"type":"string","maxLength":100}},"required":["city"],"additionalProperties":false}`),
			},
			{Name: "now"},
		},
	})
	require.NoError(t, err)

	h := *srv.lastHeaders.Load()
	assert.Equal(t, testAPIKey, h.Get("X-Api-Key"))
	assert.NotEmpty(t, h.Get("Anthropic-Version"))
	assert.Empty(t, h.Get("Authorization"), "no credential from the environment")
	assert.Empty(t, h.Get("X-Leak"), "no headers from the environment")

	var got struct {
		Model     string `json:"model"`
		MaxTokens int64  `json:"max_tokens"`
		System    []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"system"`
		Messages []struct {
			Role    string `json:"role"`
			Content []struct {
				Type      string          `json:"type"`
				Text      string          `json:"text"`
				ID        string          `json:"id"`
				Name      string          `json:"name"`
				Input     json.RawMessage `json:"input"`
				ToolUseID string          `json:"tool_use_id"`
				Content   []struct {
					Type string `json:"type"`
					Text string `json:"text"`
				} `json:"content"`
			} `json:"content"`
		} `json:"messages"`
		Tools []struct {
			Name        string          `json:"name"`
			Description string          `json:"description"`
			InputSchema json.RawMessage `json:"input_schema"`
		} `json:"tools"`
	}
	require.NoError(t, json.Unmarshal(*srv.lastBody.Load(), &got))

	assert.Equal(t, "claude-haiku-4-5", got.Model)
	assert.EqualValues(t, 256, got.MaxTokens)

	var system []string
	for _, block := range got.System {
		assert.Equal(t, "text", block.Type)
		system = append(system, block.Text)
	}
	assert.Contains(t, strings.Join(system, "\n"), "Be brief.")
	assert.NotContains(t, strings.Join(system, "\n"), "Budget: 2 steps left.",
		"the budget note changes every turn: in the system prompt it would invalidate the cached prefix")

	require.Len(t, got.Messages, 3, "system messages leave the list; both tool results share one user message")
	assert.Equal(t, "user", got.Messages[0].Role)
	require.Len(t, got.Messages[0].Content, 1)
	assert.Equal(t, "Weather in Paris and the time?", got.Messages[0].Content[0].Text)

	assistant := got.Messages[1]
	assert.Equal(t, "assistant", assistant.Role)
	require.Len(t, assistant.Content, 3)
	assert.Equal(t, "text", assistant.Content[0].Type)
	assert.Equal(t, "Checking.", assistant.Content[0].Text)
	assert.Equal(t, "tool_use", assistant.Content[1].Type)
	assert.Equal(t, "toolu_1", assistant.Content[1].ID)
	assert.Equal(t, "weather", assistant.Content[1].Name)
	assert.JSONEq(t, `{"city":"Paris"}`, string(assistant.Content[1].Input))
	assert.Equal(t, "tool_use", assistant.Content[2].Type)
	assert.Equal(t, "toolu_2", assistant.Content[2].ID)
	assert.JSONEq(t, `{"_raw":"{\"tz\": \"Europe/Pa"}`, string(assistant.Content[2].Input),
		"arguments that are not JSON are sent as text")

	results := got.Messages[2]
	assert.Equal(t, "user", results.Role)
	require.Len(t, results.Content, 3, "both tool results, then the budget note, after the cache's last breakpoint")
	assert.Equal(t, "text", results.Content[2].Type)
	assert.Equal(t, "Budget: 2 steps left.", results.Content[2].Text)
	for i, want := range []struct{ id, text string }{{"toolu_1", "18C, cloudy"}, {"toolu_2", "invalid arguments"}} {
		block := results.Content[i]
		assert.Equal(t, "tool_result", block.Type)
		assert.Equal(t, want.id, block.ToolUseID)
		require.Len(t, block.Content, 1)
		assert.Equal(t, "text", block.Content[0].Type)
		assert.Equal(t, want.text, block.Content[0].Text)
	}

	require.Len(t, got.Tools, 2)
	assert.Equal(t, "weather", got.Tools[0].Name)
	assert.Equal(t, "Current weather for a city.", got.Tools[0].Description)
	assert.JSONEq(t, `{"type":"object","properties":{"city":{"type":"string","maxLength":100}},"required":["city"],"additionalProperties":false}`,
		string(got.Tools[0].InputSchema))
	assert.Equal(t, "now", got.Tools[1].Name)
	assert.JSONEq(t, `{"type":"object"}`, string(got.Tools[1].InputSchema))
}

func TestAnthropicModelDefaultMaxTokens(t *testing.T) {
	srv := newMessagesServer(t, http.StatusOK, nil, anthropicPlainAnswer)
	_, err := newAnthropic(t, srv.URL, testAPIKey).Turn(context.Background(), userAsks("hi"))
	require.NoError(t, err)
	var got struct {
		MaxTokens int64           `json:"max_tokens"`
		System    json.RawMessage `json:"system"`
	}
	require.NoError(t, json.Unmarshal(*srv.lastBody.Load(), &got))
	assert.EqualValues(t, 1024, got.MaxTokens)
	assert.Empty(t, got.System, "no system messages, no system field")
}

func TestAnthropicModelRefusal(t *testing.T) {
	for name, tc := range map[string]struct{ content, want string }{
		"with text":    {`[{"type": "text", "text": "I can't help with that."}]`, "I can't help with that."},
		"without text": {`[]`, "refused"},
	} {
		t.Run(name, func(t *testing.T) {
			srv := newMessagesServer(t, http.StatusOK, nil, `{
  "id": "msg_03", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
  "content": `+tc.content+`,
  "stop_reason": "refusal", "stop_sequence": null,
  "usage": {"input_tokens": 5, "output_tokens": 7}
}`)
			turn, err := newAnthropic(t, srv.URL, testAPIKey).Turn(context.Background(), userAsks("something bad"))
			require.NoError(t, err)
			assert.Equal(t, tc.want, turn.Refusal)
			assert.Empty(t, turn.Content)
			assert.Empty(t, turn.ToolCalls)
			assert.Equal(t, agentsagatype.Usage{InputTokens: 5, OutputTokens: 7}, turn.Usage)
		})
	}
}

func TestAnthropicModelHTTPErrorBadRequest(t *testing.T) {
	const body = `{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: Field required"},"request_id":"req_011"}`
	srv := newMessagesServer(t, http.StatusBadRequest, map[string]string{"request-id": "req_011"}, body)
	_, err := newAnthropic(t, srv.URL, testAPIKey).Turn(context.Background(), userAsks("hi"))

	var httpErr *activities.HTTPError
	require.ErrorAs(t, err, &httpErr)
	assert.Equal(t, "anthropic messages", httpErr.Op)
	assert.Equal(t, http.StatusBadRequest, httpErr.StatusCode)
	assert.Contains(t, httpErr.Body, "max_tokens: Field required")
	assert.Nil(t, httpErr.ShouldRetry)
	assert.False(t, budget.RetryableStatus(httpErr.StatusCode, httpErr.ShouldRetry))
	assert.Equal(t, "anthropic messages: HTTP 400: "+body, err.Error())
	assert.EqualValues(t, 1, srv.requests.Load())
}

func TestAnthropicModelOverloadedNoSDKRetry(t *testing.T) {
	// No x-should-retry: the SDK would retry a 529 by itself if its
	// retries were on.
	srv := newMessagesServer(t, 529, nil,
		`{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`)
	_, err := newAnthropic(t, srv.URL, testAPIKey).Turn(context.Background(), userAsks("hi"))

	var httpErr *activities.HTTPError
	require.ErrorAs(t, err, &httpErr)
	assert.Equal(t, 529, httpErr.StatusCode)
	assert.Nil(t, httpErr.ShouldRetry)
	assert.Contains(t, httpErr.Body, "overloaded_error")
	assert.True(t, budget.RetryableStatus(httpErr.StatusCode, httpErr.ShouldRetry))
	assert.EqualValues(t, 1, srv.requests.Load(), "exactly one request: retries are Temporal's")
}

func TestAnthropicModelRateLimitRetryAfter(t *testing.T) {
	srv := newMessagesServer(t, http.StatusTooManyRequests,
		map[string]string{"retry-after": "3", "x-should-retry": "true"},
		`{"type":"error","error":{"type":"rate_limit_error","message":"Number of request tokens has exceeded your per-minute rate limit"}}`)
	_, err := newAnthropic(t, srv.URL, testAPIKey).Turn(context.Background(), userAsks("hi"))

	var httpErr *activities.HTTPError
	require.ErrorAs(t, err, &httpErr)
	assert.Equal(t, http.StatusTooManyRequests, httpErr.StatusCode)
	assert.Equal(t, 3*time.Second, httpErr.RetryAfter)
	require.NotNil(t, httpErr.ShouldRetry)
	assert.True(t, *httpErr.ShouldRetry)
	assert.EqualValues(t, 1, srv.requests.Load())
}

func TestAnthropicModelHTTPErrorOddBody(t *testing.T) {
	const body = "<html>502 Bad Gateway</html>"
	srv := newMessagesServer(t, http.StatusBadGateway, map[string]string{"Content-Type": "text/html"}, body)
	_, err := newAnthropic(t, srv.URL, testAPIKey).Turn(context.Background(), userAsks("hi"))

	var httpErr *activities.HTTPError
	require.ErrorAs(t, err, &httpErr)
	assert.Equal(t, http.StatusBadGateway, httpErr.StatusCode)
	assert.Equal(t, body, httpErr.Body)
}

func TestAnthropicModelHTTPErrorRedactsAPIKey(t *testing.T) {
	srv := newMessagesServer(t, http.StatusUnauthorized, nil,
		fmt.Sprintf(`{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key %s"}}`, testAPIKey))
	_, err := newAnthropic(t, srv.URL, testAPIKey).Turn(context.Background(), userAsks("hi"))

	var httpErr *activities.HTTPError
	require.ErrorAs(t, err, &httpErr)
	assert.Equal(t, http.StatusUnauthorized, httpErr.StatusCode)
	assert.NotContains(t, err.Error(), testAPIKey)
	assert.Contains(t, err.Error(), "[redacted]")
}

func TestAnthropicModelConnectionRefused(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close() // nothing listens there any more

	_, err := newAnthropic(t, url, testAPIKey).Turn(context.Background(), userAsks("hi"))
	require.Error(t, err)
	var httpErr *activities.HTTPError
	assert.False(t, errors.As(err, &httpErr), "a network error is not an HTTP answer")
	assert.True(t, strings.HasPrefix(err.Error(), "anthropic messages: "), err.Error())
	assert.NotContains(t, err.Error(), testAPIKey)
}

func TestAnthropicModelUnknownRole(t *testing.T) {
	srv := newMessagesServer(t, http.StatusOK, nil, anthropicPlainAnswer)
	_, err := newAnthropic(t, srv.URL, testAPIKey).Turn(context.Background(), activities.ModelRequest{
		Messages: []agentsagatype.Message{{Role: "narrator", Content: "meanwhile"}},
	})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `messages[0]: unknown role "narrator"`)
	assert.Zero(t, srv.requests.Load())
}

func TestAnthropicModelBadToolSchema(t *testing.T) {
	srv := newMessagesServer(t, http.StatusOK, nil, anthropicPlainAnswer)
	for name, schema := range map[string]string{
		"not an object":   `[1,2]`,
		"not type object": `{"type":"string"}`,
	} {
		t.Run(name, func(t *testing.T) {
			_, err := newAnthropic(t, srv.URL, testAPIKey).Turn(context.Background(), activities.ModelRequest{
				Messages: []agentsagatype.Message{{Role: "user", Content: "hi"}},
				Tools:    []agentsagatype.ToolDef{{Name: "broken", Parameters: json.RawMessage(schema)}},
			})
			require.Error(t, err)
			assert.Contains(t, err.Error(), "tools[0] (broken)")
		})
	}
	assert.Zero(t, srv.requests.Load())
}

func TestNewAnthropicModelRejectsBadSpec(t *testing.T) {
	_, err := activities.NewAnthropicModel(agentsagatype.ModelSpec{Provider: agentsagatype.ProviderOpenAI, Name: "x"}, "", nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "provider")

	_, err = activities.NewAnthropicModel(agentsagatype.ModelSpec{Provider: agentsagatype.ProviderAnthropic}, "", nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "model name")

}

// The SDK refuses a non-streaming request whose max_tokens could take more
// than ten minutes; a streamed one may take as long as it needs.
func TestAnthropicModelTakesAMaxTokensPastTenMinutes(t *testing.T) {
	srv := newMessagesServer(t, http.StatusOK, nil, anthropicPlainAnswer)
	m, err := activities.NewAnthropicModel(agentsagatype.ModelSpec{
		Provider: agentsagatype.ProviderAnthropic, Name: "claude-sonnet-4-5", BaseURL: srv.URL, MaxTokens: 64000,
	}, testAPIKey, nil)
	require.NoError(t, err)
	_, err = m.Turn(context.Background(), userAsks("hi"))
	require.NoError(t, err)
	var got struct {
		MaxTokens int64 `json:"max_tokens"`
	}
	require.NoError(t, json.Unmarshal(*srv.lastBody.Load(), &got))
	assert.EqualValues(t, 64000, got.MaxTokens)
}

func TestAnthropicModelSpecValidate(t *testing.T) {
	assert.NoError(t, agentsagatype.ModelSpec{Provider: agentsagatype.ProviderAnthropic, Name: "claude-sonnet-4-5"}.Validate())
	err := agentsagatype.ModelSpec{Provider: agentsagatype.ProviderAnthropic}.Validate()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "model.name")
	err = agentsagatype.ModelSpec{Provider: "gemini-pro-max"}.Validate()
	require.Error(t, err)
	assert.Contains(t, err.Error(), `unknown provider "gemini-pro-max"`)
	assert.Contains(t, err.Error(), "anthropic")
}

// ExampleNewAnthropicModel talks to a server that speaks the Anthropic
// Messages API; without BaseURL it is https://api.anthropic.com.
func ExampleNewAnthropicModel() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		request, _ := io.ReadAll(r.Body)
		// The model asks for the reply as a stream, and the server sends it
		// as events, as the Messages API does.
		_ = providerwire.WriteMessage(w, providerwire.Streams(request), []byte(`{"id":"msg_1","type":"message","role":"assistant","model":"claude-haiku-4-5",
			"content":[{"type":"text","text":"Paris."}],"stop_reason":"end_turn","stop_sequence":null,
			"usage":{"input_tokens":14,"output_tokens":2}}`))
	}))
	defer srv.Close()

	model, err := activities.NewAnthropicModel(agentsagatype.ModelSpec{
		Provider:  agentsagatype.ProviderAnthropic,
		Name:      "claude-haiku-4-5",
		BaseURL:   srv.URL,
		APIKeyEnv: "ANTHROPIC_API_KEY", // the worker reads the key from here
	}, "sk-ant-example", nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	turn, err := model.Turn(context.Background(), activities.ModelRequest{
		Messages: []agentsagatype.Message{
			{Role: "system", Content: "Answer in one word."},
			{Role: "user", Content: "Capital of France?"},
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%s %s (%d tokens)\n", turn.Model, turn.Content, turn.Usage.Total())
	// Output: claude-haiku-4-5 Paris. (16 tokens)
}

// roundTripFunc answers requests without a network.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func TestAnthropicModelIgnoresEnvironment(t *testing.T) {
	// Neither the server nor a credential may come from the environment:
	// only the spec and the key the worker read from model.api_key_env.
	t.Setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:1")
	t.Setenv("ANTHROPIC_API_KEY", "sk-ant-from-env")
	t.Setenv("ANTHROPIC_AUTH_TOKEN", "token-from-env")
	var seen atomic.Pointer[http.Request]
	client := &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		seen.Store(r)
		events, err := providerwire.MessageEvents([]byte(anthropicPlainAnswer), providerwire.FakePiece)
		if err != nil {
			return nil, err
		}
		return &http.Response{
			StatusCode: http.StatusOK,
			Header:     http.Header{"Content-Type": {"text/event-stream"}},
			Body:       io.NopCloser(bytes.NewReader(providerwire.Encode(events))),
			Request:    r,
		}, nil
	})}
	m, err := activities.NewAnthropicModel(agentsagatype.ModelSpec{
		Provider: agentsagatype.ProviderAnthropic,
		Name:     "claude-sonnet-4-5",
	}, "", client)
	require.NoError(t, err)
	_, err = m.Turn(context.Background(), userAsks("hi"))
	require.NoError(t, err)

	r := seen.Load()
	require.NotNil(t, r)
	assert.Equal(t, "https://api.anthropic.com/v1/messages", r.URL.String())
	assert.Empty(t, r.Header.Get("X-Api-Key"))
	assert.Empty(t, r.Header.Get("Authorization"))
}

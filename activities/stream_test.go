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
	"github.com/agentsaga/agentsaga/internal/wire"
)

// streamServer is a loopback provider that answers every request with
// serve, and keeps the last request's body.
type streamServer struct {
	URL         string
	lastRequest atomic.Pointer[[]byte]
}

func newStreamServer(t *testing.T, serve func(w http.ResponseWriter)) *streamServer {
	t.Helper()
	s := &streamServer{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		s.lastRequest.Store(&body)
		serve(w)
	}))
	t.Cleanup(srv.Close)
	s.URL = srv.URL
	return s
}

// request is the last request's body, decoded.
func (s *streamServer) request(t *testing.T) map[string]any {
	t.Helper()
	body := s.lastRequest.Load()
	require.NotNil(t, body, "no request came")
	var got map[string]any
	require.NoError(t, json.Unmarshal(*body, &got))
	return got
}

// events is reply cut by encode into deltas of piece characters.
func events(t *testing.T, encode func([]byte, int) ([]providerwire.Event, error), reply string, piece int) []providerwire.Event {
	t.Helper()
	evs, err := encode([]byte(reply), piece)
	require.NoError(t, err)
	return evs
}

// watchedTurn is model's turn for question, with the chunks of text it
// handed to OnText on the way.
func watchedTurn(model activities.Model, question string) (agentsagatype.ModelTurn, []string, error) {
	var chunks []string
	req := userAsks(question)
	req.OnText = func(chunk string) { chunks = append(chunks, chunk) }
	turn, err := model.Turn(context.Background(), req)
	return turn, chunks, err
}

// streamedCompletion has content, two function calls and a custom one,
// so that every kind of fragment is assembled, and cached tokens.
const streamedCompletion = `{
  "id": "chatcmpl-stream", "object": "chat.completion", "created": 1700000000, "model": "gpt-4o-mini-2024-07-18",
  "choices": [{
    "index": 0,
    "message": {
      "role": "assistant",
      "content": "Hello there, streaming world.",
      "refusal": null,
      "tool_calls": [
        {"id": "call_a", "type": "function", "function": {"name": "search", "arguments": "{\"q\": \"temporal workflows\", \"n\": 3}"}},
        {"id": "call_b", "type": "function", "function": {"name": "fetch", "arguments": "{\"url\": \"http://exa"}},
        {"id": "call_c", "type": "custom", "custom": {"name": "grep", "input": "pattern: stream.*broke"}}
      ]
    },
    "finish_reason": "tool_calls"
  }],
  "usage": {"prompt_tokens": 50, "completion_tokens": 20, "total_tokens": 70, "prompt_tokens_details": {"cached_tokens": 32}}
}`

func TestOpenAIStreamInManyChunks(t *testing.T) {
	streamed := events(t, providerwire.ChatCompletionEvents, streamedCompletion, 3)
	srv := newStreamServer(t, func(w http.ResponseWriter) { _ = providerwire.WriteStream(w, streamed) })
	turn, chunks, err := watchedTurn(newModel(t, srv.URL, testAPIKey), "find it")
	require.NoError(t, err)

	assert.Greater(t, len(streamed), 30, "the reply came in many chunks")
	assert.Equal(t, []string{"Hel", "lo ", "the", "re,", " st", "rea", "min", "g w", "orl", "d."}, chunks,
		"every piece of content, in order")
	assert.Equal(t, agentsagatype.ModelTurn{
		Content: "Hello there, streaming world.",
		ToolCalls: []agentsagatype.ToolCall{
			{ID: "call_a", Name: "search", Arguments: `{"q": "temporal workflows", "n": 3}`},
			{ID: "call_b", Name: "fetch", Arguments: `{"url": "http://exa`},
			{ID: "call_c", Name: "grep", Arguments: "pattern: stream.*broke"},
		},
		Usage: agentsagatype.Usage{InputTokens: 50, OutputTokens: 20, CachedInputTokens: 32},
		Model: "gpt-4o-mini-2024-07-18",
	}, turn)
	assert.Equal(t, turn.Content, strings.Join(chunks, ""))

	sent := srv.request(t)
	assert.Equal(t, true, sent["stream"])
	assert.Equal(t, map[string]any{"include_usage": true}, sent["stream_options"], "usage is only streamed when asked for")
}

// streamedMessage has thinking, two text blocks around a tool_use, and
// cache reads and writes.
const streamedMessage = `{
  "id": "msg_stream", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5-20250929",
  "content": [
    {"type": "thinking", "thinking": "The user wants the order.", "signature": "sig=="},
    {"type": "text", "text": "Let me look that up. "},
    {"type": "tool_use", "id": "toolu_01A", "name": "search", "input": {"q": "temporal workflows", "n": 3}},
    {"type": "text", "text": "One moment."}
  ],
  "stop_reason": "tool_use", "stop_sequence": null,
  "usage": {"input_tokens": 50, "output_tokens": 20, "cache_read_input_tokens": 1200, "cache_creation_input_tokens": 30}
}`

func TestAnthropicStreamInManyEvents(t *testing.T) {
	streamed := events(t, providerwire.MessageEvents, streamedMessage, 4)
	srv := newStreamServer(t, func(w http.ResponseWriter) { _ = providerwire.WriteStream(w, streamed) })
	turn, chunks, err := watchedTurn(newAnthropic(t, srv.URL, testAPIKey), "find it")
	require.NoError(t, err)

	assert.Greater(t, len(streamed), 25, "the reply came in many events")
	assert.Equal(t, []string{"Let ", "me l", "ook ", "that", " up.", " ", "One ", "mome", "nt."}, chunks,
		"every piece of text, in order, and none of the thinking")
	assert.Equal(t, agentsagatype.ModelTurn{
		Content:   "Let me look that up. One moment.",
		ToolCalls: []agentsagatype.ToolCall{{ID: "toolu_01A", Name: "search", Arguments: `{"q": "temporal workflows", "n": 3}`}},
		Usage:     agentsagatype.Usage{InputTokens: 50 + 1200 + 30, OutputTokens: 20, CachedInputTokens: 1200, CacheWriteTokens: 30},
		Model:     "claude-sonnet-4-5-20250929",
		Reasoning: &agentsagatype.Reasoning{Provider: activities.ReasoningAnthropic,
			Data: json.RawMessage(`[{"type":"thinking","thinking":"The user wants the order.","signature":"sig=="}]`)},
	}, turn)
	assert.Equal(t, turn.Content, strings.Join(chunks, ""))
	assert.Equal(t, true, srv.request(t)["stream"])
}

// How a stream is cut short.
type streamCut int

const (
	dropConnection streamCut = iota // the connection closes mid-body
	endEarly                        // the body ends, well formed, before the last event
	errorEvent                      // the server sends an error event
)

// serveCut writes the first n events, then cuts the stream as how says;
// an error event is failure.
func serveCut(w http.ResponseWriter, streamed []providerwire.Event, n int, how streamCut, failure providerwire.Event) {
	sent := streamed[:n]
	if how == errorEvent {
		sent = append(sent[:n:n], failure)
	}
	_ = providerwire.WriteStream(w, sent)
	if how == dropConnection {
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			_ = conn.Close()
		}
	}
}

// A stream cut short is an error that names the call and what broke,
// retryable, and never a partial turn; the watchers have seen what came
// before the cut.
func TestStreamCutShort(t *testing.T) {
	const text = "The order shipped on Monday and arrives on Friday."
	for _, p := range []struct {
		provider string
		model    func(t *testing.T, url string) activities.Model
		streamed []providerwire.Event
		n        int    // the events sent before the cut
		received string // what the error says came
		last     string // what a whole stream ends with
		failure  providerwire.Event
		failed   []string // what the error says of the error event
		status   int      // the status the error event's type stands for
	}{
		{
			provider: "openai chat.completions",
			model:    func(t *testing.T, url string) activities.Model { return newModel(t, url, testAPIKey) },
			streamed: events(t, providerwire.ChatCompletionEvents, `{"id":"chatcmpl-cut","object":"chat.completion","created":1,"model":"gpt-4o-mini",
				"choices":[{"index":0,"message":{"role":"assistant","content":"`+text+`"},"finish_reason":"stop"}],
				"usage":{"prompt_tokens":9,"completion_tokens":12,"total_tokens":21}}`, 4),
			// The role, then three pieces of text.
			n: 4, received: "the stream broke after 4 chunks", last: "data: [DONE]",
			failure: providerwire.Event{Data: []byte(`{"error":{"message":"The server had an error while processing your request. (key ` + testAPIKey + `)","type":"server_error"}}`)},
			failed:  []string{"server_error", "The server had an error while processing your request."},
			status:  http.StatusInternalServerError,
		},
		{
			provider: "anthropic messages",
			model:    func(t *testing.T, url string) activities.Model { return newAnthropic(t, url, testAPIKey) },
			streamed: events(t, providerwire.MessageEvents, `{"id":"msg_cut","type":"message","role":"assistant","model":"claude-sonnet-4-5",
				"content":[{"type":"text","text":"`+text+`"}],
				"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":9,"output_tokens":12}}`, 4),
			// message_start, a ping (which the SDK passes over),
			// content_block_start, then three pieces of text.
			n: 6, received: "the stream broke after 5 events", last: "message_stop",
			failure: providerwire.Event{Name: "error", Data: []byte(`{"type":"error","error":{"type":"overloaded_error","message":"Overloaded (key ` + testAPIKey + `)"}}`)},
			failed:  []string{"overloaded_error", "Overloaded"},
			status:  529,
		},
	} {
		for name, tc := range map[string]struct {
			how  streamCut
			want []string
		}{
			"connection dropped": {dropConnection, []string{"unexpected EOF"}},
			"no last event":      {endEarly, []string{"it ended without " + p.last}},
			"error event":        {errorEvent, append([]string{"error event: "}, p.failed...)},
		} {
			t.Run(p.provider+" "+name, func(t *testing.T) {
				srv := newStreamServer(t, func(w http.ResponseWriter) { serveCut(w, p.streamed, p.n, tc.how, p.failure) })
				turn, chunks, err := watchedTurn(p.model(t, srv.URL), "where is my order?")
				require.Error(t, err)
				assert.Zero(t, turn, "no partial turn")
				assert.True(t, strings.HasPrefix(err.Error(), p.provider+": "+p.received+": "), err.Error())
				for _, want := range tc.want {
					assert.Contains(t, err.Error(), want)
				}
				assert.NotContains(t, err.Error(), testAPIKey)
				if tc.how == dropConnection {
					assert.ErrorIs(t, err, io.ErrUnexpectedEOF)
				}
				var httpErr *activities.HTTPError
				if tc.how == errorEvent {
					// The answer was a 200, whose status says nothing; the
					// event's type says what its status would have.
					assert.Equal(t, activities.Classification{ErrType: wire.ErrTypeHTTP, Retryable: true, Status: p.status}, activities.Classify(err))
				} else {
					assert.False(t, errors.As(err, &httpErr), "the answer was a 200: its status says nothing of the failure")
					assert.Equal(t, activities.Classification{ErrType: wire.ErrTypeTransient, Retryable: true}, activities.Classify(err))
				}
				assert.Equal(t, []string{"The ", "orde", "r sh"}, chunks, "the watchers saw what came before the cut")
			})
		}
	}
}

// A tool_use input that streamed as something other than JSON is a broken
// stream, not a call without arguments.
func TestAnthropicStreamToolInputNotJSON(t *testing.T) {
	const message = `{"id":"msg_bad","type":"message","role":"assistant","model":"claude-sonnet-4-5",
		"content":[{"type":"tool_use","id":"toolu_bad","name":"delete_user","input":{"id":42}}],
		"stop_reason":"tool_use","stop_sequence":null,"usage":{"input_tokens":9,"output_tokens":12}}`
	streamed := events(t, providerwire.MessageEvents, message, 3)
	var broken []providerwire.Event
	for _, e := range streamed {
		// Drop the input's last piece, "42}": what is left is not JSON.
		if e.Name == "content_block_delta" && strings.Contains(string(e.Data), `42}`) {
			continue
		}
		broken = append(broken, e)
	}
	require.Len(t, broken, len(streamed)-1)
	srv := newStreamServer(t, func(w http.ResponseWriter) { _ = providerwire.WriteStream(w, broken) })

	turn, err := newAnthropic(t, srv.URL, testAPIKey).Turn(context.Background(), userAsks("delete user 42"))
	require.Error(t, err)
	assert.Zero(t, turn)
	assert.Contains(t, err.Error(), "tool_use toolu_bad: the streamed input is not JSON")
	assert.True(t, activities.Classify(err).Retryable)
}

// Chunks that belong to another completion (another id) cannot be one
// reply.
func TestOpenAIStreamOfTwoCompletions(t *testing.T) {
	first := events(t, providerwire.ChatCompletionEvents,
		`{"id":"a","choices":[{"index":0,"message":{"role":"assistant","content":"one"},"finish_reason":"stop"}]}`, 0)
	second := events(t, providerwire.ChatCompletionEvents,
		`{"id":"b","choices":[{"index":0,"message":{"role":"assistant","content":"two"},"finish_reason":"stop"}]}`, 0)
	mixed := append(append([]providerwire.Event{}, first[:2]...), second...)
	srv := newStreamServer(t, func(w http.ResponseWriter) { _ = providerwire.WriteStream(w, mixed) })

	_, err := newModel(t, srv.URL, testAPIKey).Turn(context.Background(), userAsks("hi"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "openai chat.completions: the stream broke after 3 chunks: the chunk does not continue the completion")
}

// A stream that ends properly but holds no choice is no reply.
func TestOpenAIStreamWithoutChoices(t *testing.T) {
	srv := newStreamServer(t, func(w http.ResponseWriter) {
		_ = providerwire.WriteStream(w, []providerwire.Event{providerwire.Done})
	})
	_, err := newModel(t, srv.URL, testAPIKey).Turn(context.Background(), userAsks("hi"))
	require.Error(t, err)
	assert.Equal(t, "openai chat.completions: the reply has no choices (0 chunks)", err.Error())
	assert.True(t, activities.Classify(err).Retryable)
}

// An answer refused before any stream began is classified by its status,
// as it was before the models streamed: a 429 and a 500 are retried (a
// 429 after the server's Retry-After), a 401 is not, and the API key an
// error body echoes is redacted.
func TestStreamRefusedBeforeItBegins(t *testing.T) {
	models := map[string]struct {
		model func(t *testing.T, url string) activities.Model
		serve func(t *testing.T, status int, headers map[string]string, body string) string
		body  string
	}{
		"openai": {
			model: func(t *testing.T, url string) activities.Model { return newModel(t, url, testAPIKey) },
			serve: func(t *testing.T, status int, headers map[string]string, body string) string {
				return newChatServer(t, status, headers, body).URL
			},
			body: `{"error":{"message":"refused for Bearer ` + testAPIKey + `","type":"server_error"}}`,
		},
		"anthropic": {
			model: func(t *testing.T, url string) activities.Model { return newAnthropic(t, url, testAPIKey) },
			serve: func(t *testing.T, status int, headers map[string]string, body string) string {
				return newMessagesServer(t, status, headers, body).URL
			},
			body: `{"type":"error","error":{"type":"api_error","message":"refused for x-api-key ` + testAPIKey + `"}}`,
		},
	}
	for provider, p := range models {
		for _, tc := range []struct {
			status     int
			headers    map[string]string
			retryable  bool
			errType    string
			retryAfter time.Duration
		}{
			{http.StatusTooManyRequests, map[string]string{"retry-after": "3"}, true, wire.ErrTypeHTTP, 3 * time.Second},
			{http.StatusInternalServerError, nil, true, wire.ErrTypeHTTP, 0},
			{http.StatusUnauthorized, nil, false, wire.ErrTypePermission, 0},
		} {
			t.Run(fmt.Sprintf("%s %d", provider, tc.status), func(t *testing.T) {
				_, chunks, err := watchedTurn(p.model(t, p.serve(t, tc.status, tc.headers, p.body)), "hi")

				var httpErr *activities.HTTPError
				require.ErrorAs(t, err, &httpErr)
				assert.Equal(t, tc.status, httpErr.StatusCode)
				assert.Equal(t, activities.Classification{ErrType: tc.errType, Retryable: tc.retryable, Status: tc.status, RetryAfter: tc.retryAfter},
					activities.Classify(err))
				assert.NotContains(t, err.Error(), testAPIKey)
				assert.Contains(t, err.Error(), "[redacted]")
				assert.Empty(t, chunks)
			})
		}
	}
}

// An error event is cut to size after the API key is redacted from it: a
// key the cut would halve leaves no part of itself behind.
func TestStreamErrorEventKeepsNoPartOfTheKey(t *testing.T) {
	// The key begins 8 bytes before the 512th byte of the event's data.
	prefix := `{"type":"error","error":{"type":"api_error","message":"`
	data := prefix + strings.Repeat(".", 512-8-len(prefix)) + testAPIKey + `"}}`
	for provider, model := range map[string]func(t *testing.T, url string) activities.Model{
		"openai":    func(t *testing.T, url string) activities.Model { return newModel(t, url, testAPIKey) },
		"anthropic": func(t *testing.T, url string) activities.Model { return newAnthropic(t, url, testAPIKey) },
	} {
		t.Run(provider, func(t *testing.T) {
			srv := newStreamServer(t, func(w http.ResponseWriter) {
				_ = providerwire.WriteStream(w, []providerwire.Event{{Name: "error", Data: []byte(data)}})
			})
			_, err := model(t, srv.URL).Turn(context.Background(), userAsks("hi"))
			require.Error(t, err)
			assert.Contains(t, err.Error(), "error event: "+prefix)
			assert.NotContains(t, err.Error(), testAPIKey[:8])
		})
	}
}

package agentsagatest_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/anthropics/anthropic-sdk-go"
	anthropicoption "github.com/anthropics/anthropic-sdk-go/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/agentsagatest"
)

const (
	fakeCompletion = `{"id":"chatcmpl-1","object":"chat.completion","created":1700000000,"model":"gpt-fake",` +
		`"choices":[{"index":0,"message":{"role":"assistant","content":"ann is on the pro plan, since March."},"finish_reason":"stop"}],` +
		`"usage":{"prompt_tokens":12,"completion_tokens":9,"total_tokens":21}}`
	fakeMessage = `{"id":"msg_1","type":"message","role":"assistant","model":"claude-fake",` +
		`"content":[{"type":"text","text":"ann is on the pro plan, since March."}],"stop_reason":"end_turn","stop_sequence":null,` +
		`"usage":{"input_tokens":12,"output_tokens":9}}`
)

// fakeServer answers every request with reply through WriteReply.
func fakeServer(t *testing.T, reply string) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if err := agentsagatest.WriteReply(w, body, []byte(reply)); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// The official SDKs read WriteReply's answers, whole and streamed, as the
// reply said.
func TestWriteReplyIsReadByTheProvidersSDKs(t *testing.T) {
	const want = "ann is on the pro plan, since March."
	t.Run("openai", func(t *testing.T) {
		client := openai.NewClient(option.WithBaseURL(fakeServer(t, fakeCompletion).URL), option.WithAPIKey("test"), option.WithMaxRetries(0))
		params := openai.ChatCompletionNewParams{Model: "gpt-fake", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("ann's plan?")}}
		whole, err := client.Chat.Completions.New(t.Context(), params)
		require.NoError(t, err)
		assert.Equal(t, want, whole.Choices[0].Message.Content)

		stream := client.Chat.Completions.NewStreaming(t.Context(), params)
		var acc openai.ChatCompletionAccumulator
		chunks := 0
		for stream.Next() {
			acc.AddChunk(stream.Current())
			chunks++
		}
		require.NoError(t, stream.Err())
		assert.Equal(t, want, acc.Choices[0].Message.Content)
		assert.Greater(t, chunks, 4, "the text comes in deltas of a few characters")
		assert.EqualValues(t, 21, acc.Usage.TotalTokens)
	})
	t.Run("anthropic", func(t *testing.T) {
		client := anthropic.NewClient(anthropicoption.WithBaseURL(fakeServer(t, fakeMessage).URL), anthropicoption.WithAPIKey("test"), anthropicoption.WithMaxRetries(0))
		params := anthropic.MessageNewParams{Model: "claude-fake", MaxTokens: 100,
			Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("ann's plan?"))}}
		whole, err := client.Messages.New(t.Context(), params)
		require.NoError(t, err)
		assert.Equal(t, want, whole.Content[0].Text)

		stream := client.Messages.NewStreaming(t.Context(), params)
		var message anthropic.Message
		for stream.Next() {
			require.NoError(t, message.Accumulate(stream.Current()))
		}
		require.NoError(t, stream.Err())
		require.Len(t, message.Content, 1)
		assert.Equal(t, want, message.Content[0].Text)
		assert.EqualValues(t, 9, message.Usage.OutputTokens)
	})
}

// A reply of neither kind is refused, naming what it is, and nothing is
// written: the fake's own handler answers instead.
func TestWriteReplyRefusesAReplyOfNoKnownKind(t *testing.T) {
	for name, reply := range map[string]string{
		"another object": `{"object":"list","data":[]}`,
		"not JSON":       `ann is on the pro plan`,
	} {
		t.Run(name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			err := agentsagatest.WriteReply(rec, []byte(`{"stream":true}`), []byte(reply))
			require.Error(t, err)
			assert.Contains(t, err.Error(), "agentsagatest: the reply")
			assert.Zero(t, rec.Body.Len())
			assert.Empty(t, rec.Header().Get("Content-Type"))
			_, err = agentsagatest.ReplyStream([]byte(reply), 4)
			require.Error(t, err)
		})
	}
}

// A fake that paces its stream writes ReplyStream's events one at a time.
func ExampleReplyStream() {
	events, err := agentsagatest.ReplyStream([]byte(`{"id":"c1","object":"chat.completion","model":"gpt-fake",`+
		`"choices":[{"index":0,"message":{"role":"assistant","content":"hello there"},"finish_reason":"stop"}]}`), 6)
	if err != nil {
		panic(err)
	}
	for _, e := range events {
		fmt.Print(string(e))
	}
	// Output:
	// data: {"id":"c1","object":"chat.completion.chunk","model":"gpt-fake","choices":[{"index":0,"delta":{"role":"assistant"},"finish_reason":null}]}
	//
	// data: {"id":"c1","object":"chat.completion.chunk","model":"gpt-fake","choices":[{"index":0,"delta":{"content":"hello "},"finish_reason":null}]}
	//
	// data: {"id":"c1","object":"chat.completion.chunk","model":"gpt-fake","choices":[{"index":0,"delta":{"content":"there"},"finish_reason":null}]}
	//
	// data: {"id":"c1","object":"chat.completion.chunk","model":"gpt-fake","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}
	//
	// data: [DONE]
}

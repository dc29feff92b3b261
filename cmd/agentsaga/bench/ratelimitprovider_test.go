package bench_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/activities"
	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/cmd/agentsaga/bench"
)

func startProvider(t *testing.T, cfg bench.ProviderConfig) *bench.RateLimitProvider {
	t.Helper()
	if cfg.Tool == "" {
		cfg.Tool = "word_count"
	}
	if cfg.Turns == 0 {
		cfg.Turns = 3
	}
	p, err := bench.StartRateLimitProvider(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// post sends one chat.completions request of about promptChars characters
// with maxTokens (none when negative) and toolResults tool results.
func post(t *testing.T, url, apiKey string, promptChars int, maxTokens int64, toolResults int) (*http.Response, []byte) {
	t.Helper()
	messages := []map[string]any{{"role": "user", "content": strings.Repeat("x", promptChars)}}
	for i := range toolResults {
		messages = append(messages,
			map[string]any{"role": "assistant", "tool_calls": []map[string]any{{"id": fmt.Sprint("c", i), "type": "function", "function": map[string]any{"name": "word_count", "arguments": "{}"}}}},
			map[string]any{"role": "tool", "tool_call_id": fmt.Sprint("c", i), "content": "{}"})
	}
	req := map[string]any{"model": "bench", "messages": messages,
		"tools": []map[string]any{{"type": "function", "function": map[string]any{"name": "word_count", "parameters": map[string]any{"type": "object"}}}}}
	if maxTokens >= 0 {
		req["max_completion_tokens"] = maxTokens
	}
	body, err := json.Marshal(req)
	require.NoError(t, err)
	r, err := http.NewRequest(http.MethodPost, url+"/chat/completions", strings.NewReader(string(body)))
	require.NoError(t, err)
	r.Header.Set("Authorization", "Bearer "+apiKey)
	r.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(r)
	require.NoError(t, err)
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, data
}

// rateLimits is what a reply's rate-limit headers say, as OpenAI writes
// them: limits and what remains of them as integers, resets in Go's
// duration notation, retry-after-ms in milliseconds. A header that is
// absent or does not parse fails the test.
type rateLimits struct {
	requestsLimit, requestsRemaining, tokensLimit, tokensRemaining int64
	requestsReset, tokensReset                                     time.Duration
}

func readRateLimits(t *testing.T, h http.Header) rateLimits {
	t.Helper()
	integer := func(name string) int64 {
		n, err := strconv.ParseInt(h.Get(name), 10, 64)
		require.NoError(t, err, name)
		return n
	}
	duration := func(name string) time.Duration {
		d, err := time.ParseDuration(h.Get(name))
		require.NoError(t, err, name)
		return d
	}
	return rateLimits{requestsLimit: integer("x-ratelimit-limit-requests"), requestsRemaining: integer("x-ratelimit-remaining-requests"),
		tokensLimit: integer("x-ratelimit-limit-tokens"), tokensRemaining: integer("x-ratelimit-remaining-tokens"),
		requestsReset: duration("x-ratelimit-reset-requests"), tokensReset: duration("x-ratelimit-reset-tokens")}
}

// retryAfter is a 429's retry-after-ms.
func retryAfter(t *testing.T, h http.Header) time.Duration {
	t.Helper()
	ms, err := strconv.ParseInt(h.Get("retry-after-ms"), 10, 64)
	require.NoError(t, err, "retry-after-ms")
	return time.Duration(ms) * time.Millisecond
}

// The request bucket holds a minute's requests and no more; the next one
// is refused with OpenAI's 429: its error body, its headers, and a
// Retry-After of the time the bucket has room again. (That the engine reads
// these headers is the ratelimit scenario's test, and internal/quota's.)
func TestProviderRefusesPastTheRequestLimit(t *testing.T) {
	p := startProvider(t, bench.ProviderConfig{RequestsPerMinute: 3, TokensPerMinute: 100_000, CompletionTokens: 10})
	for i := range 3 {
		resp, body := post(t, p.URL(), "sk-a", 40, 20, 0)
		require.Equal(t, http.StatusOK, resp.StatusCode, "request %d: %s", i+1, body)
		observed := readRateLimits(t, resp.Header)
		assert.Equal(t, int64(3), observed.requestsLimit)
		assert.Equal(t, int64(2-i), observed.requestsRemaining)
		assert.Equal(t, int64(100_000), observed.tokensLimit)
		assert.Positive(t, observed.requestsReset, "x-ratelimit-reset-requests %q", resp.Header.Get("x-ratelimit-reset-requests"))
		assert.Empty(t, resp.Header.Get("retry-after"), "no retry-after on a 200")
		assert.Empty(t, resp.Header.Get("retry-after-ms"), "no retry-after on a 200")
	}
	began := time.Now()
	resp, body := post(t, p.URL(), "sk-a", 40, 20, 0)
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	var e struct {
		Error struct {
			Message string  `json:"message"`
			Type    string  `json:"type"`
			Code    string  `json:"code"`
			Param   *string `json:"param"`
		} `json:"error"`
	}
	require.NoError(t, json.Unmarshal(body, &e), "%s", body)
	assert.Equal(t, "requests", e.Error.Type)
	assert.Equal(t, "rate_limit_exceeded", e.Error.Code)
	assert.Contains(t, e.Error.Message, "Rate limit reached for requests")
	assert.Contains(t, e.Error.Message, "requests per min (RPM): Limit 3")
	for _, name := range []string{"x-ratelimit-limit-requests", "x-ratelimit-limit-tokens", "x-ratelimit-remaining-requests",
		"x-ratelimit-remaining-tokens", "x-ratelimit-reset-requests", "x-ratelimit-reset-tokens", "retry-after", "retry-after-ms"} {
		assert.NotEmpty(t, resp.Header.Get(name), name)
	}
	assert.Zero(t, readRateLimits(t, resp.Header).requestsRemaining)
	// One request refills in 20 s; three have gone in the last moments.
	assert.WithinRange(t, began.Add(retryAfter(t, resp.Header)), began.Add(15*time.Second), began.Add(21*time.Second))
	assert.Equal(t, "20", resp.Header.Get("retry-after"), "whole seconds, rounded up")

	// Another key has its own quota.
	resp, _ = post(t, p.URL(), "sk-b", 40, 20, 0)
	assert.Equal(t, http.StatusOK, resp.StatusCode)

	a := p.Counts("sk-a")
	assert.Equal(t, int64(4), a.Requests)
	assert.Equal(t, int64(3), a.Answered)
	assert.Equal(t, int64(1), a.RateLimited)
	assert.Equal(t, int64(1), a.RateLimitedByRPM)
	assert.InDelta(t, 0.25, a.Share429(), 1e-9)
	// 40 characters are 10 tokens, a message's framing 4, the tool
	// definition its share; the reply used 10 of its 20.
	assert.Equal(t, a.PromptTokens+a.CompletionTokens, a.TokensAdmitted)
	assert.Equal(t, int64(30), a.CompletionTokens)
	assert.Equal(t, int64(1), p.Counts("sk-b").Answered)
}

// The token bucket counts a request's prompt and its max tokens as it
// arrives, gives back what the reply did not use, and refuses a request
// that does not fit with OpenAI's "tokens" 429.
func TestProviderRefusesPastTheTokenLimit(t *testing.T) {
	p := startProvider(t, bench.ProviderConfig{RequestsPerMinute: 1000, TokensPerMinute: 1200, CompletionTokens: 50})
	// About 100 + 4 + the tool's tokens of prompt, 400 reserved for the
	// reply, 50 used: two fit at once, the third's reservation does not
	// until the first two give back their unused 350 each.
	resp, body := post(t, p.URL(), "sk-t", 400, 400, 0)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
	first := readRateLimits(t, resp.Header)
	assert.Equal(t, int64(1200), first.tokensLimit)
	used := p.Counts("sk-t").TokensAdmitted
	assert.Greater(t, used, int64(150))
	// The headers say what was left after the reservation.
	assert.InDelta(t, 1200-(used+350), first.tokensRemaining, 1)

	// A reservation larger than what is left: refused, typed "tokens".
	resp, body = post(t, p.URL(), "sk-t", 400, 1200-used, 0)
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode, "%s", body)
	assert.Contains(t, string(body), `"type":"tokens"`)
	assert.Contains(t, string(body), "tokens per min (TPM): Limit 1200")
	assert.Positive(t, retryAfter(t, resp.Header))
	assert.Positive(t, readRateLimits(t, resp.Header).tokensReset, "x-ratelimit-reset-tokens %q", resp.Header.Get("x-ratelimit-reset-tokens"))
	c := p.Counts("sk-t")
	assert.Equal(t, int64(1), c.RateLimitedByTPM)
	assert.Equal(t, int64(0), c.RateLimitedByRPM)

	// Larger than the whole limit: never fits.
	resp, body = post(t, p.URL(), "sk-t", 8000, 0, 0)
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	assert.Contains(t, string(body), "Request too large")
}

// openai-go, the SDK the engine and the baselines use, reads the replies:
// turns before the last call the spec's tool, the last answers, usage is
// reported; a 429 is an *openai.Error the engine classifies by status.
func TestProviderSpeaksOpenAIsWireFormat(t *testing.T) {
	cfg := bench.ProviderConfig{RequestsPerMinute: 2, TokensPerMinute: 10_000, Turns: 2, CompletionTokens: 30}
	cfg.LatencyMin, cfg.LatencyMax = 5*time.Millisecond, 10*time.Millisecond
	p := startProvider(t, cfg)
	client := openai.NewClient(option.WithBaseURL(p.URL()), option.WithAPIKey("sk-sdk"), option.WithMaxRetries(0))
	ctx := context.Background()
	tool := openai.ChatCompletionFunctionTool(openai.FunctionDefinitionParam{Name: "word_count",
		Parameters: openai.FunctionParameters{"type": "object", "properties": map[string]any{"text": map[string]any{"type": "string"}}}})
	params := openai.ChatCompletionNewParams{Model: "gpt-bench", MaxCompletionTokens: openai.Int(64), Tools: []openai.ChatCompletionToolUnionParam{tool},
		Messages: []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("You count words."), openai.UserMessage("Count the words of a sentence.")}}
	resp, err := client.Chat.Completions.New(ctx, params)
	require.NoError(t, err)
	require.Len(t, resp.Choices, 1)
	msg := resp.Choices[0].Message
	require.Len(t, msg.ToolCalls, 1)
	assert.Equal(t, "word_count", msg.ToolCalls[0].Function.Name)
	var args struct{ Text string }
	require.NoError(t, json.Unmarshal([]byte(msg.ToolCalls[0].Function.Arguments), &args))
	assert.NotEmpty(t, args.Text)
	assert.Equal(t, "tool_calls", resp.Choices[0].FinishReason)
	assert.Positive(t, resp.Usage.PromptTokens)
	assert.Equal(t, int64(30), resp.Usage.CompletionTokens)

	params.Messages = append(params.Messages, msg.ToParam(), openai.ToolMessage(`{"words": 6}`, msg.ToolCalls[0].ID))
	resp, err = client.Chat.Completions.New(ctx, params)
	require.NoError(t, err)
	assert.Empty(t, resp.Choices[0].Message.ToolCalls)
	assert.Contains(t, resp.Choices[0].Message.Content, "Done")
	assert.Equal(t, "stop", resp.Choices[0].FinishReason)

	_, err = client.Chat.Completions.New(ctx, params)
	var apiErr *openai.Error
	require.True(t, errors.As(err, &apiErr), "%v", err)
	assert.Equal(t, http.StatusTooManyRequests, apiErr.StatusCode)
	assert.Equal(t, "requests", apiErr.Type)
	assert.Equal(t, "rate_limit_exceeded", apiErr.Code)

	// GET /_counts names keys by the provider's names for them, never the
	// key.
	r, err := http.Get(strings.TrimSuffix(p.URL(), "/v1") + bench.CountsPath)
	require.NoError(t, err)
	defer r.Body.Close()
	var counts map[string]bench.ProviderCounts
	require.NoError(t, json.NewDecoder(r.Body).Decode(&counts))
	name := p.KeyName("sk-sdk")
	assert.Equal(t, "key-1", name)
	require.Contains(t, counts, name)
	assert.Equal(t, int64(3), counts[name].Requests)
	assert.Equal(t, int64(1), counts[name].RateLimited)
	assert.NotContains(t, fmt.Sprint(counts), "sk-sdk")
}

// The engine's model streams its requests: the provider answers them in
// chunks, which it reads back as the same tool call, answer and usage.
func TestProviderStreamsToTheEngine(t *testing.T) {
	p := startProvider(t, bench.ProviderConfig{RequestsPerMinute: 100, TokensPerMinute: 100_000, Turns: 2, CompletionTokens: 30})
	model, err := activities.NewOpenAIModel(agentsagatype.ModelSpec{Provider: agentsagatype.ProviderOpenAI, Name: "gpt-bench", BaseURL: p.URL()}, "sk-stream", nil)
	require.NoError(t, err)
	var chunks []string
	req := activities.ModelRequest{
		Messages: []agentsagatype.Message{{Role: "user", Content: "Count the words of a sentence."}},
		Tools:    []agentsagatype.ToolDef{{Name: "word_count"}},
		OnText:   func(chunk string) { chunks = append(chunks, chunk) },
	}
	ctx := context.Background()
	turn, err := model.Turn(ctx, req)
	require.NoError(t, err)
	require.Len(t, turn.ToolCalls, 1)
	call := turn.ToolCalls[0]
	assert.Equal(t, "word_count", call.Name)
	assert.True(t, json.Valid([]byte(call.Arguments)), call.Arguments)
	assert.Positive(t, turn.Usage.InputTokens)
	assert.Equal(t, int64(30), turn.Usage.OutputTokens)

	req.Messages = append(req.Messages,
		agentsagatype.Message{Role: "assistant", ToolCalls: turn.ToolCalls},
		agentsagatype.Message{Role: "tool", ToolCallID: call.ID, Content: `{"words": 6}`})
	turn, err = model.Turn(ctx, req)
	require.NoError(t, err)
	assert.Contains(t, turn.Content, "Done")
	assert.Greater(t, len(chunks), 1, "the answer came in pieces")
	assert.Equal(t, turn.Content, strings.Join(chunks, ""))
	assert.Equal(t, int64(2), p.Counts("sk-stream").Requests)
}

// Many keys at once, under -race: each key's admissions stay within its
// own bucket, whatever the others do.
func TestProviderKeysAreIndependentUnderConcurrency(t *testing.T) {
	const keys, perKey, limit = 4, 30, 10
	p := startProvider(t, bench.ProviderConfig{RequestsPerMinute: limit, TokensPerMinute: 1_000_000, CompletionTokens: 5})
	var wg sync.WaitGroup
	for k := range keys {
		for range perKey {
			wg.Go(func() {
				resp, body := post(t, p.URL(), fmt.Sprint("sk-", k), 40, 10, 0)
				if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusTooManyRequests {
					t.Errorf("status %d: %s", resp.StatusCode, body)
				}
			})
		}
	}
	wg.Wait()
	for k := range keys {
		c := p.Counts(fmt.Sprint("sk-", k))
		assert.Equal(t, int64(perKey), c.Requests)
		// The bucket starts with 10 and refills one every 6 s.
		assert.GreaterOrEqual(t, c.Answered, int64(limit))
		assert.LessOrEqual(t, c.Answered, int64(limit+1))
		assert.Equal(t, c.Requests, c.Answered+c.RateLimited)
	}
}

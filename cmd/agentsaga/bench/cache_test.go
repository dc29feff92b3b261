package bench_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/cmd/agentsaga/bench"
)

// cacheClient posts raw messages requests to a fake server.
type cacheClient struct {
	t   *testing.T
	url string
}

func newCacheClient(t *testing.T, turns int) (*bench.AnthropicCache, cacheClient) {
	s := bench.NewAnthropicCache(turns, "word_count")
	server := httptest.NewServer(s)
	t.Cleanup(server.Close)
	return s, cacheClient{t: t, url: server.URL}
}

// post sends body (marshalled) and returns the status and the decoded
// reply: a message, or an error's message.
func (c cacheClient) post(body any) (int, map[string]any, string) {
	data, err := json.Marshal(body)
	require.NoError(c.t, err)
	resp, err := http.Post(c.url+"/v1/messages", "application/json", bytes.NewReader(data))
	require.NoError(c.t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(c.t, err)
	var out map[string]any
	require.NoError(c.t, json.Unmarshal(raw, &out), string(raw))
	if resp.StatusCode != http.StatusOK {
		e, _ := out["error"].(map[string]any)
		require.Equal(c.t, "error", out["type"], string(raw))
		require.Equal(c.t, "invalid_request_error", e["type"], string(raw))
		return resp.StatusCode, out, e["message"].(string)
	}
	return resp.StatusCode, out, ""
}

func usage(t *testing.T, reply map[string]any) (input, read, write int64) {
	u, ok := reply["usage"].(map[string]any)
	require.True(t, ok, "usage in %v", reply)
	return int64(u["input_tokens"].(float64)), int64(u["cache_read_input_tokens"].(float64)), int64(u["cache_creation_input_tokens"].(float64))
}

var ephemeral = map[string]any{"type": "ephemeral"}

func text(s string, cached bool) map[string]any {
	b := map[string]any{"type": "text", "text": s}
	if cached {
		b["cache_control"] = ephemeral
	}
	return b
}

// A request with five cache_control blocks is refused with the API's
// error; four are accepted.
func TestCacheServerRefusesAFifthBreakpoint(t *testing.T) {
	_, c := newCacheClient(t, 3)
	five := []any{text("a", true), text("b", true), text("c", true), text("d", true), text("e", true)}
	status, _, msg := c.post(map[string]any{"model": "m", "max_tokens": 100,
		"messages": []any{map[string]any{"role": "user", "content": five}}})
	assert.Equal(t, http.StatusBadRequest, status)
	assert.Equal(t, "A maximum of 4 blocks with cache_control may be provided. Found 5.", msg)

	// One on the system prompt and four in the messages is five too.
	status, _, msg = c.post(map[string]any{"model": "m", "max_tokens": 100, "system": []any{text("s", true)},
		"messages": []any{map[string]any{"role": "user", "content": five[:4]}}})
	assert.Equal(t, http.StatusBadRequest, status)
	assert.Contains(t, msg, "Found 5.")

	status, _, _ = c.post(map[string]any{"model": "m", "max_tokens": 100,
		"messages": []any{map[string]any{"role": "user", "content": five[:4]}}})
	assert.Equal(t, http.StatusOK, status)
}

// A prefix under 1,024 tokens is never cached; one over is written at
// its breakpoint and read by the next request that repeats it, whose new
// part is written from there to its own last breakpoint.
func TestCacheServerCachesAsDocumented(t *testing.T) {
	s, c := newCacheClient(t, 10)
	short := strings.Repeat("short ", 100) // ~150 tokens
	req := map[string]any{"model": "m", "max_tokens": 100, "system": []any{text(short, true)},
		"messages": []any{map[string]any{"role": "user", "content": []any{text("hi", true)}}}}
	for range 2 {
		status, reply, msg := c.post(req)
		require.Equal(t, http.StatusOK, status, msg)
		input, read, write := usage(t, reply)
		assert.Zero(t, read, "a prefix under 1,024 tokens is not cached")
		assert.Zero(t, write)
		assert.Positive(t, input)
	}

	long := strings.Repeat("the handbook ", 800) // ~2,600 tokens
	first := map[string]any{"model": "m", "max_tokens": 100, "system": []any{text(long, true)},
		"messages": []any{map[string]any{"role": "user", "content": []any{text("question one", true), text("a note after the breakpoint", false)}}}}
	status, reply, msg := c.post(first)
	require.Equal(t, http.StatusOK, status, msg)
	input, read, write := usage(t, reply)
	assert.Zero(t, read, "nothing cached yet")
	assert.Greater(t, write, int64(2000), "the system prompt and the first message are written")
	assert.Positive(t, input, "the note after the last breakpoint is plain input")
	assert.Less(t, input, int64(20))

	// The next turn: the same prefix (its breakpoint moved on), a new
	// message, a new note.
	second := map[string]any{"model": "m", "max_tokens": 100, "system": []any{text(long, true)},
		"messages": []any{
			map[string]any{"role": "user", "content": []any{text("question one", false)}},
			map[string]any{"role": "assistant", "content": []any{text("answer one", false)}},
			map[string]any{"role": "user", "content": []any{text("question two", true), text("another note", false)}}}}
	status, reply, msg = c.post(second)
	require.Equal(t, http.StatusOK, status, msg)
	input2, read2, write2 := usage(t, reply)
	assert.Equal(t, write, read2, "the previous request's prefix is read, found by looking back from the breakpoint")
	assert.Positive(t, write2, "the new turn is written")
	assert.Less(t, write2, int64(20))
	assert.Positive(t, input2)

	// Changed system text: nothing of it is read.
	changed := map[string]any{"model": "m", "max_tokens": 100, "system": []any{text(long+"!", true)},
		"messages": []any{map[string]any{"role": "user", "content": []any{text("question one", true)}}}}
	status, reply, msg = c.post(changed)
	require.Equal(t, http.StatusOK, status, msg)
	_, read3, write3 := usage(t, reply)
	assert.Zero(t, read3)
	assert.Positive(t, write3)

	totals := s.Totals()
	assert.Equal(t, 5, totals.Requests)
	assert.Equal(t, read2, totals.CacheReadTokens)
	assert.Equal(t, write+write2+write3, totals.CacheWriteTokens)
}

// With thinking on, the final assistant message that holds a tool_use
// must begin with the thinking block the server issued with it,
// unchanged: left out, or changed, it is a 400.
func TestCacheServerEnforcesThinkingBlocks(t *testing.T) {
	_, c := newCacheClient(t, 5)
	thinking := map[string]any{"type": "enabled", "budget_tokens": 1024}
	goal := map[string]any{"role": "user", "content": "count the words"}
	status, _, msg := c.post(map[string]any{"model": "m", "max_tokens": 1024, "thinking": thinking, "messages": []any{goal}})
	assert.Equal(t, http.StatusBadRequest, status)
	assert.Contains(t, msg, "`max_tokens` must be greater than `thinking.budget_tokens`")
	status, _, msg = c.post(map[string]any{"model": "m", "max_tokens": 4096, "thinking": map[string]any{"type": "enabled", "budget_tokens": 1000},
		"messages": []any{goal}})
	assert.Equal(t, http.StatusBadRequest, status)
	assert.Contains(t, msg, "greater than or equal to 1024")

	tools := []any{map[string]any{"name": "word_count", "input_schema": map[string]any{"type": "object"}}}
	status, reply, msg := c.post(map[string]any{"model": "m", "max_tokens": 4096, "thinking": thinking, "tools": tools, "messages": []any{goal}})
	require.Equal(t, http.StatusOK, status, msg)
	content := reply["content"].([]any)
	require.Len(t, content, 3)
	think, toolUse := content[0].(map[string]any), content[2].(map[string]any)
	require.Equal(t, "thinking", think["type"])
	require.NotEmpty(t, think["signature"])
	require.Equal(t, "tool_use", toolUse["type"])
	result := map[string]any{"role": "user", "content": []any{map[string]any{"type": "tool_result", "tool_use_id": toolUse["id"], "content": "25"}}}
	send := func(assistant []any) (int, string) {
		status, _, msg := c.post(map[string]any{"model": "m", "max_tokens": 4096, "thinking": thinking, "tools": tools,
			"messages": []any{goal, map[string]any{"role": "assistant", "content": assistant}, result}})
		return status, msg
	}

	status, msg = send([]any{content[1], toolUse})
	assert.Equal(t, http.StatusBadRequest, status, "the thinking block left out")
	assert.True(t, strings.HasPrefix(msg, "messages.1.content.0.type: Expected `thinking` or `redacted_thinking`, but found `text`. "+
		"When `thinking` is enabled, a final `assistant` message must start with a thinking block"), msg)
	status, msg = send([]any{toolUse})
	assert.Equal(t, http.StatusBadRequest, status)
	assert.Contains(t, msg, "but found `tool_use`")

	changed := map[string]any{"type": "thinking", "thinking": think["thinking"].(string) + " (edited)", "signature": think["signature"]}
	status, msg = send([]any{changed, content[1], toolUse})
	assert.Equal(t, http.StatusBadRequest, status, "a changed thinking block")
	assert.Contains(t, msg, "Invalid `signature` in `thinking` block")

	status, msg = send([]any{think, content[1], toolUse})
	assert.Equal(t, http.StatusOK, status, msg)
}

// The scenario, short: 6 turns with a 2,000-token system prompt. Both
// runs complete; caching reads the cache and costs less; the engine's
// figures match the server's.
func TestCacheSmoke(t *testing.T) {
	cfg := bench.DefaultCache
	cfg.Turns, cfg.SystemTokens, cfg.Timeout = 6, 2000, 2*time.Minute
	res := inProcess(t, bench.Cache, cfg, bench.PrintCache)
	for _, r := range []bench.CacheRun{res.Cached, res.Uncached} {
		assert.Equal(t, agentsagatype.RunCompleted, r.Status, "caching %v: %s", r.Caching, r.Reason)
		assert.Equal(t, cfg.Turns, r.Turns)
		assert.Empty(t, r.Errors, "caching %v: the server refused nothing", r.Caching)
		assert.InEpsilon(t, r.ServerUSD, r.RunUSD, 0.01)
	}
	assert.Positive(t, res.Cached.Totals.CacheReadTokens)
	assert.Zero(t, res.Uncached.Totals.CacheReadTokens+res.Uncached.Totals.CacheWriteTokens)
	assert.Less(t, res.InputRatio, 1.0)
}

package bench

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A cache entry lives 5 minutes unused; a read refreshes it.
func TestCacheEntriesExpireUnusedAndReadsRefreshThem(t *testing.T) {
	s := NewAnthropicCache(3, "word_count")
	clock := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	s.now = func() time.Time { return clock }
	body, err := json.Marshal(map[string]any{"model": "m", "max_tokens": 100,
		"system":   []any{map[string]any{"type": "text", "text": strings.Repeat("the handbook ", 800), "cache_control": map[string]any{"type": "ephemeral"}}},
		"messages": []any{map[string]any{"role": "user", "content": "hello"}}})
	require.NoError(t, err)
	bill := func() (read, write int64) {
		_, _, err := s.answer(body)
		require.NoError(t, err)
		r := s.Requests()
		last := r[len(r)-1]
		return last.CacheReadTokens, last.CacheWriteTokens
	}
	_, written := bill()
	require.Greater(t, written, int64(CacheMinTokens))
	for _, step := range []time.Duration{4 * time.Minute, 4 * time.Minute, 4*time.Minute + 59*time.Second} {
		clock = clock.Add(step)
		read, write := bill()
		assert.Equal(t, written, read, "read within 5 minutes of its last use, after %v", step)
		assert.Zero(t, write)
	}
	clock = clock.Add(CacheTTL)
	read, write := bill()
	assert.Zero(t, read, "5 minutes unused: expired")
	assert.Equal(t, written, write, "and written again")
}

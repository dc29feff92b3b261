package bench_test

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/cmd/agentsaga/bench"
	"github.com/agentsaga/agentsaga/workflows"
)

// The long scenario, small: 5 and 15 turns of 4 KiB outputs. It checks
// only what holds however the engine keeps its history (the runs complete
// and the figures add up), never a timing or a target.
func TestLongSmoke(t *testing.T) {
	cfg := bench.LongConfig{Turns: []int{5, 15}, OutputBytes: 4 << 10, PerTurnTimeout: 3 * time.Second}
	rows := inProcess(t, bench.Long, cfg, func(w io.Writer, rows []bench.LongRow) { bench.PrintLong(w, "long, small", cfg, rows) })

	require.Len(t, rows, 2)
	for _, r := range rows {
		assert.Equal(t, "completed", r.Outcome, "%d turns", r.Turns)
		assert.Equal(t, "completed", r.LedgerStatus, "%d turns", r.Turns)
		assert.Equal(t, r.Turns, r.TurnsDone, "one tool call a turn")
		assert.GreaterOrEqual(t, r.Executions, 1)
		assert.GreaterOrEqual(t, r.ModelRequests, r.Turns+1, "a request a turn, and the answer")
		assert.Positive(t, r.HistoryBytes)
		assert.Positive(t, r.LargestPayload)
		assert.LessOrEqual(t, int64(r.LargestPayload), r.HistoryBytes)
		assert.InDelta(t, float64(r.HistoryBytes)/float64(r.Turns), r.BytesPerTurn, 1e-6)
		assert.Positive(t, r.LargestRequestTokens)
		assert.GreaterOrEqual(t, r.LargestRequestBytes, 4*(r.LargestRequestTokens-1))
		assert.Zero(t, r.ConversationGaps, "every request showed the turns done")
		assert.Positive(t, r.Seconds)
		require.Len(t, r.Series, r.Turns)
		for i, p := range r.Series {
			assert.Equal(t, i+1, p.Turn)
			assert.Positive(t, p.HistoryBytes)
			assert.LessOrEqual(t, p.HistoryBytes, r.HistoryBytes)
			if i > 0 {
				assert.GreaterOrEqual(t, p.HistoryBytes, r.Series[i-1].HistoryBytes, "history only grows")
			}
		}
	}
	short, long := rows[0], rows[1]
	assert.Greater(t, long.HistoryEvents, short.HistoryEvents, "more turns, more events")
	assert.Greater(t, long.HistoryBytes, short.HistoryBytes)
	assert.Greater(t, long.ModelRequests, short.ModelRequests)

	targets := bench.LongTargets(cfg, rows)
	require.NotEmpty(t, targets)
	assert.Equal(t, "met", targets[0].Verdict, "the longest run completed: %+v", targets[0])
	for _, target := range targets {
		assert.Contains(t, []string{"met", "MISSED", "n/a"}, target.Verdict, target.Target)
	}

	chart := filepath.Join(t.TempDir(), "long.png")
	require.NoError(t, bench.LongChart(chart, rows))
	info, err := os.Stat(chart)
	require.NoError(t, err)
	assert.Greater(t, info.Size(), int64(1000))
}

// The spec the scenario runs parses, and context_tokens is written only
// when asked for.
func TestLongSpec(t *testing.T) {
	spec, err := workflows.ParseSpec([]byte(bench.LongSpec(1000, "http://127.0.0.1:1/v1", "http://127.0.0.1:2/page", 0)))
	require.NoError(t, err)
	assert.Equal(t, "openai", spec.Model.Provider)
	assert.Equal(t, "http://127.0.0.1:1/v1", spec.Model.BaseURL)
	assert.GreaterOrEqual(t, spec.Budget.Steps, 1000+5)
	require.Len(t, spec.Tools, 1)
	assert.Equal(t, "http", spec.Tools[0].Kind)
	assert.NotContains(t, bench.LongSpec(10, "u", "v", 0), "context_tokens")
	assert.Contains(t, bench.LongSpec(10, "u", "v", 32000), "context_tokens: 32000")
}

// Pages are as long as asked, say their turn first, and differ per turn.
func TestLongPage(t *testing.T) {
	a, b := bench.LongPage(1, 10, 50<<10), bench.LongPage(2, 10, 50<<10)
	assert.Len(t, a, 50<<10)
	assert.True(t, strings.HasPrefix(a, "turn 1 of 10:"))
	assert.NotEqual(t, a[100:], b[100:])
	assert.Equal(t, a, bench.LongPage(1, 10, 50<<10), "the same turn, the same page")
}

package bench_test

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/cmd/agentsaga/bench"
)

// Issue 22's dev-server test: two `agentsaga worker` processes of the
// built binary share one API key whose token limit binds (the runs need
// more tokens than a minute's burst), and the fleet limiter keeps them
// inside it: every run completes, and the provider answers 429 to at most
// 1% of the requests.
func TestRateLimitTwoProcessesShareOneKey(t *testing.T) {
	cfg := bench.DefaultRateLimit
	// 6 runs x 3 turns of 200-270 tokens each (the engine's conversation
	// decides which): 3,600-4,900 tokens, more than a 3,000 TPM key's
	// burst, so the limit holds the last turns back for 10-40 s; requests
	// do not bind.
	cfg.Processes, cfg.Runs, cfg.Turns, cfg.GoalChars = []int{2}, 6, 3, 0
	cfg.RequestsPerMinute, cfg.TokensPerMinute = 600, 3000
	cfg.Contenders, cfg.PoolMaxConns, cfg.Timeout = []string{bench.RateLimitAgentsaga}, 4, 2*time.Minute
	cfg.TemporalBin, cfg.Executable, cfg.DatabaseURL = processBench(t)
	result := runScenario(t, bench.RateLimit, cfg, bench.PrintRateLimit)

	require.Len(t, result.Rows, 1)
	row := result.Rows[0]
	figures, _ := json.Marshal(row.Provider)
	ledgerRow, _ := json.Marshal(row.Quota)
	t.Logf("provider: %s\nthe ledger's quota row: %s", figures, ledgerRow)
	assert.Greater(t, row.Provider.TokensAdmitted, cfg.TokensPerMinute, "the runs needed more than a minute's burst, so the limit bound")
	assert.Equal(t, cfg.Runs, row.Completed, "every run completed: %v", row.Outcomes)
	assert.LessOrEqual(t, row.Share429, 0.01, "the provider answered 429 to at most 1%% of the requests: %d of %d", row.Provider.RateLimited, row.Provider.Requests)
	assert.Zero(t, row.RetryTokens, "no retry token is spent on quota")
	assert.Equal(t, int64(cfg.Runs*cfg.Turns), row.Provider.Answered, "one answered request a turn")
	assert.Equal(t, cfg.Runs*cfg.Turns, row.Turns, "every turn's wait was read from the histories")
}

// The table says which targets an agentsaga row met and missed, the
// plain rows get none, and the chart draws every row.
func TestRateLimitTableAndChart(t *testing.T) {
	result := bench.RateLimitResult{Config: bench.DefaultRateLimit, Server: "dev server in memory", Rows: []bench.RateLimitRow{
		{Contender: bench.RateLimitSDKContender, Processes: 2, Runs: 24, Completed: 15, Share429: 0.62, QuotaShare: 0.97, RetryTokens: 210,
			Provider: bench.ProviderCounts{Requests: 400, RateLimited: 248}},
		{Contender: bench.RateLimitPerProcessContender, Processes: 2, Runs: 24, Completed: 24, Share429: 0.31, QuotaShare: 0.95, RetryTokens: 60},
		{Contender: bench.RateLimitAgentsagaContender, Processes: 2, Runs: 24, Completed: 24, Share429: 0.004, QuotaShare: 0.91, WaitP95Ms: 41_000},
		{Contender: bench.RateLimitAgentsagaContender, Processes: 4, Runs: 24, Completed: 23, Share429: 0.02, QuotaShare: 0.80, RetryTokens: 1},
	}}
	var out strings.Builder
	bench.PrintRateLimit(&out, result)
	table := out.String()
	t.Log(table)
	assert.Contains(t, table, "TARGET agentsaga fleet limiter, 2 processes: 429 share 0.4% < 1% (met); 91% of the quota >= 85% (met); 24 of 24 runs completed (met); 0 retry tokens = 0 (met)")
	assert.Contains(t, table, "TARGET agentsaga fleet limiter, 4 processes: 429 share 2.0% < 1% (MISSED); 80% of the quota >= 85% (MISSED); 23 of 24 runs completed (MISSED); 1 retry tokens = 0 (MISSED)")
	assert.Equal(t, 2, strings.Count(table, "TARGET"), "only the agentsaga rows have targets")
	assert.Contains(t, table, "41.0 s", "long waits read in seconds")

	path := filepath.Join(t.TempDir(), "ratelimit.png")
	require.NoError(t, bench.RateLimitChart(path, result.Rows))
	assertPNG(t, path)
}

// The ideal is the quota's time for every run's turns past the first
// minute's burst, or a run's own chain of turns when the quota does not
// bind.
func TestRateLimitIdealSeconds(t *testing.T) {
	cfg := bench.RateLimitConfig{Runs: 10, Turns: 6, RequestsPerMinute: 120, TokensPerMinute: 6000}
	cfg.LatencyMin, cfg.LatencyMax = 100*time.Millisecond, 300*time.Millisecond
	// 60 turns of 200 tokens: 12,000 tokens, 6,000 past the burst at 100 a
	// second.
	assert.InDelta(t, 60, bench.RateLimitIdealSeconds(cfg, bench.ProviderCounts{Answered: 30, TokensAdmitted: 6000}), 1e-9)
	// A quota that does not bind: six turns of 200 ms each.
	cfg.TokensPerMinute, cfg.RequestsPerMinute = 1_000_000, 1000
	assert.InDelta(t, 1.2, bench.RateLimitIdealSeconds(cfg, bench.ProviderCounts{Answered: 30, TokensAdmitted: 6000}), 1e-9)
}

package bench_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/cmd/agentsaga/bench"
)

// Issue 43's goodput, small: 6 runs under a cap that admits about two of
// them at a time, on 2 worker processes of the built binary. The period's
// runs complete or wait queued, none cut short and nothing over the cap;
// period resets drain the queue; every run was admitted once, took its
// turns once, and nothing is held at the end. How many complete is not
// asserted: it depends on the estimate, not on this test.
func TestSpendGoodputSmall(t *testing.T) {
	cfg := bench.DefaultSpend
	cfg.Processes, cfg.Runs, cfg.ToolCalls, cfg.CapUSD, cfg.RunUSD = []int{2}, 6, 1, 0.8, 0.6
	cfg.LatencyMin, cfg.LatencyMax, cfg.Contenders, cfg.PoolMaxConns, cfg.Timeout = 0, 20*time.Millisecond, []string{bench.SpendAgentsaga}, 4, 2*time.Minute
	cfg.TemporalBin, cfg.Executable, cfg.DatabaseURL = processBench(t)
	result := runScenario(t, bench.Spend, cfg, bench.PrintSpend)

	assert.Positive(t, result.AloneUSD, "one run alone was measured")
	assert.Positive(t, result.Payable)
	require.Len(t, result.Rows, 1)
	row := result.Rows[0]
	assert.Equal(t, bench.SpendAgentsagaContender, row.Contender)
	assert.Zero(t, row.OverspendUSD, "nothing spent past the cap")
	assert.Zero(t, row.Partial, "no run cut short: %v", row.Outcomes)
	assert.Positive(t, row.Completed, "the cap admitted runs: %v", row.Outcomes)
	assert.Positive(t, row.Queued, "the cap could not pay for every run: %v", row.Outcomes)
	assert.Equal(t, cfg.Runs, row.Completed+row.Queued, "every other run queued: %v", row.Outcomes)

	require.NotEmpty(t, row.Resets, "the queued runs waited for a reset")
	completed, requests := row.Completed, row.Requests
	for i, p := range row.Resets {
		assert.LessOrEqual(t, p.SpentUSD, cfg.CapUSD+1e-9, "period %d stayed under its cap", i+1)
		completed += p.Completed
		requests += p.Requests
	}
	assert.Zero(t, row.Resets[len(row.Resets)-1].Queued, "the resets drained the queue")
	assert.Equal(t, cfg.Runs, completed, "every run completed, in one period or another")
	assert.Equal(t, int64(cfg.Runs*(cfg.ToolCalls+1)), requests, "each run took its turns once")

	require.NotNil(t, row.Admission)
	assert.Equal(t, cfg.Runs, row.Admission.Admitted, "each run admitted once")
	assert.Zero(t, row.Admission.StillAdmitted, "no admission left open")
	assert.Zero(t, row.Admission.HeldUSD, "no run reservation left held")
	assert.Zero(t, row.Admission.ReservedUSD, "nothing left reserved in the spend periods")
}

// Issue 43's fairness bench, small: A's 20 runs, then B's 3, under the
// engine's round robin (max_concurrent_runs on the root account), on 2
// worker processes of the built binary with 2 activity slots each. Every
// run completes and reaches the provider, each was admitted once, and
// nothing is left admitted or held. Timings are printed, not asserted.
func TestFairnessRoundRobinSmall(t *testing.T) {
	cfg := bench.DefaultFairness
	cfg.RunsA, cfg.RunsB, cfg.BAfter, cfg.MaxActivities, cfg.MaxConcurrentRuns = 20, 3, 2, 2, 4
	cfg.LatencyMin, cfg.LatencyMax, cfg.Contenders, cfg.PoolMaxConns, cfg.Timeout = 10*time.Millisecond, 20*time.Millisecond, []string{bench.FairnessEngine}, 4, 2*time.Minute
	cfg.TemporalBin, cfg.Executable, cfg.DatabaseURL = processBench(t)
	result := runScenario(t, bench.Fairness, cfg, bench.PrintFairness)

	require.Len(t, result.Baselines, 2)
	idle, alone := result.Baselines[0], result.Baselines[1]
	assert.Equal(t, cfg.RunsB, idle.BFirstTurn.N, "every one of B's idle runs reached the provider")
	assert.Equal(t, map[string]int{"completed": cfg.RunsB}, idle.Outcomes)
	assert.Equal(t, map[string]int{"completed": cfg.RunsA}, alone.Outcomes)
	assert.Positive(t, alone.ARunsPerSecond)

	require.Len(t, result.Rows, 1)
	row := result.Rows[0]
	assert.Equal(t, bench.FairnessEngineContender, row.Contender)
	assert.Equal(t, map[string]int{"completed": cfg.RunsA + cfg.RunsB}, row.Run.Outcomes)
	assert.Equal(t, cfg.RunsB, row.Run.BFirstTurn.N, "every one of B's runs reached the provider")
	if assert.NotNil(t, row.Run.BPhases, "where B's time went, read from its histories") {
		assert.Equal(t, cfg.RunsB, row.Run.BPhases.ActivityQueued.N)
		assert.Positive(t, row.Run.BPhases.WorkflowTask.Max)
	}
	assert.GreaterOrEqual(t, row.Run.AEndedBeforeB, cfg.BAfter, "B started once A's runs were under way")
	assert.Positive(t, row.Run.ARunsPerSecond)
	assert.Positive(t, row.BSlowdown)
	assert.Positive(t, row.AShare)
	assert.Equal(t, cfg.RunsA+cfg.RunsB, row.Run.Admission.Admitted, "each run admitted once")
	assert.Zero(t, row.Run.Admission.StillAdmitted, "no admission left open")
	assert.Zero(t, row.Run.Admission.HeldUSD, "nothing held")
}

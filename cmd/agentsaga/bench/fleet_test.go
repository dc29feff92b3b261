package bench_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/cmd/agentsaga/bench"
)

// A tiny fleet on real processes: the built binary's `agentsaga worker` and
// `bench fleet-worker`, two of each, on the in-memory dev server. The
// figures must add up; their speed is not asserted.
func TestFleetSmoke(t *testing.T) {
	cfg := bench.DefaultFleet
	// The DBOS contender has its own test, TestFleetDBOS.
	cfg.Processes, cfg.Runs, cfg.Calls, cfg.Servers, cfg.DBOS = []int{2}, 2, 2, []string{bench.FleetMemoryServer}, false
	cfg.TemporalBin, cfg.Executable, cfg.DatabaseURL = processBench(t)
	result := runScenario(t, bench.Fleet, cfg, bench.PrintFleet)

	require.Len(t, result.Rows, 3)
	plain, loop, saga := result.Rows[0], result.Rows[1], result.Rows[2]
	assert.Equal(t, bench.FleetPlainContender, plain.Contender)
	assert.Equal(t, bench.FleetPlainLoopContender, loop.Contender)
	assert.Equal(t, bench.FleetAgentsagaContender, saga.Contender)
	for _, row := range result.Rows {
		assert.Equal(t, 2, row.Processes)
		assert.Equal(t, 4, row.Calls, "%s: runs x calls", row.Contender)
		assert.Equal(t, row.Calls, row.Requests, "%s: the downstream saw every call once", row.Contender)
		assert.Positive(t, row.CallsPerSec, row.Contender)
		assert.Positive(t, row.StartToCloseMs, "%s: latencies read from the histories", row.Contender)
		assert.Positive(t, row.EventsPerCall, row.Contender)
		assert.LessOrEqual(t, row.Workers, 2, "%s: only the scenario's processes ran calls", row.Contender)
	}
	assert.Equal(t, 1.0, plain.Ratio)
	assert.Positive(t, saga.Ratio)
	assert.InDelta(t, saga.CallsPerSec/plain.CallsPerSec, saga.Ratio, 1e-9)
	assert.Equal(t, 1.0, plain.ActivitiesPerCall, "the plain side runs its calls and nothing else")
	assert.Equal(t, 2.0, loop.ActivitiesPerCall, "the plain agent loop adds two model turns to a run's two calls")
	assert.InDelta(t, saga.CallsPerSec/loop.CallsPerSec, saga.LoopRatio, 1e-9)
	assert.Less(t, loop.Statements, saga.Statements, "the plain agent loop uses no Postgres")
	assert.Greater(t, saga.ActivitiesPerCall, 1.0, "a run also makes its model turns and bookkeeping")
	assert.Positive(t, saga.StatementsPerCall, "the ledger's statements were counted")
	assert.Less(t, plain.Statements, saga.Statements)
	assert.NotEmpty(t, result.StatementSource)
}

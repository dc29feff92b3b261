package bench_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/cmd/agentsaga/bench"
)

// The DBOS contender alone, tiny, on real executor processes (`agentsaga
// bench dbos-worker`) and no Temporal server: every tool call is made once,
// each step is checkpointed, and the timings are read back.
func TestFleetDBOS(t *testing.T) {
	cfg := bench.DefaultFleet
	cfg.Processes, cfg.Runs, cfg.Calls, cfg.Servers, cfg.DBOS, cfg.Settle = []int{2}, 3, 4, nil, true, time.Second
	// No Temporal server: the executors need only the binary and Postgres.
	_, cfg.Executable, cfg.DatabaseURL = processBench(t)
	result := runScenario(t, bench.Fleet, cfg, bench.PrintFleet)

	require.Len(t, result.Rows, 1)
	row := result.Rows[0]
	assert.Equal(t, bench.FleetDBOSContender, row.Contender)
	assert.Equal(t, bench.FleetDBOSServer, row.Server)
	assert.Equal(t, cfg.Runs*cfg.Calls, row.Calls, "runs x calls")
	assert.Equal(t, row.Calls, row.Requests, "the downstream saw as many requests as calls")
	assert.Equal(t, row.Calls, row.Keys, "and each call's key once")
	assert.InDelta(t, float64(cfg.Calls+2)/float64(cfg.Calls), row.ActivitiesPerCall, 1e-9, "a run checkpoints its calls and two model steps")
	assert.Positive(t, row.CallsPerSec)
	assert.Positive(t, row.Statements, "the executors' statements were counted in DBOS's database")
	assert.Equal(t, int64(cfg.Runs), row.Writes["workflow_status"].Inserted, "the bench's enqueues were counted too")
	assert.Positive(t, row.FirstStepMs, "a run waits for a queue poll before its first step")
	assert.GreaterOrEqual(t, row.StepGapP99Ms, row.StepGapP50Ms)
	assert.LessOrEqual(t, row.Workers, 2, "only the scenario's executors ran runs")
	assert.Positive(t, row.WorkerCPUMs+row.PostgresCPUMs)
	assert.Zero(t, row.ServerCPUMs, "there is no Temporal server")
}

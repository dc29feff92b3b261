package bench_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/cmd/agentsaga/bench"
)

// One kill a contender, on real processes: each run goes on after its
// worker or executor is killed, completes, and makes each call's effect
// under one key, the cut calls sent again with it. How long the takeover
// took is not asserted beyond its being measured: the suite runs on a
// loaded machine.
func TestTakeover(t *testing.T) {
	temporalBin, executable, databaseURL := processBench(t)
	cfg := bench.DefaultTakeover
	cfg.Kills, cfg.Calls = 1, 3
	cfg.TemporalBin, cfg.Executable, cfg.DatabaseURL = temporalBin, executable, databaseURL
	// Three contenders, each starting two processes and one more after its
	// kill: the test took 179 s, its build included, at a load of about 20
	// on 2 cores, too near runScenario's three minutes.
	result := runScenarioWithin(t, 6*time.Minute, bench.Takeover, cfg, bench.PrintTakeover)

	require.Len(t, result.Rows, len(cfg.Contenders))
	for _, row := range result.Rows {
		require.Len(t, row.Kills, 1, row.Contender)
		kill := row.Kills[0]
		assert.NotEmpty(t, kill.Killed, row.Contender)
		assert.Equal(t, cfg.Calls, kill.Keys, "%s: every call reached the downstream under its own key", row.Contender)
		assert.Zero(t, kill.Lost, row.Contender)
		assert.Positive(t, kill.Resent, "%s: the kill cut a call short, and it was sent again", row.Contender)
		assert.Equal(t, cfg.Calls+kill.Resent, kill.Requests, "%s: a cut call sent twice, the others once", row.Contender)
		assert.Positive(t, kill.ResumedMs, "%s: the takeover was measured", row.Contender)
		assert.GreaterOrEqual(t, kill.AllResentMs, kill.ResumedMs, row.Contender)
		assert.Greater(t, kill.DoneMs, kill.AllResentMs, "%s: the run ended after its last call was sent again", row.Contender)
		assert.NotEmpty(t, row.Dominant, row.Contender)
	}
}

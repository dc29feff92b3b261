package bench_test

import (
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/cmd/agentsaga/bench"
)

// A short storm: the unbudgeted baseline sends more load through the outage
// and meets more errors; agentsaga recovers within one budget window.
func TestStormSmoke(t *testing.T) {
	t.Parallel()
	// The service takes 10 a second, 2.5 times the calls' rate: under the
	// suite's own load (the library's tests beside these) the released
	// calls go out in bunches, and at 6 a second a bunch of 10 met 503s
	// twelve seconds after the outage. The recovery this proves is the
	// breaker's; `make bench` measures its speed on a quiet machine.
	cfg := bench.StormConfig{Runs: 4, CallsPerSecond: 4, RatePerSecond: 10, Latency: 5 * time.Millisecond,
		OutageFrom: 2 * time.Second, OutageTo: 8 * time.Second, Duration: 20 * time.Second, ScheduleToClose: 15 * time.Second}
	rows := inProcess(t, bench.Storm, cfg, func(w io.Writer, rows []bench.StormRow) { bench.PrintStorm(w, "storm", cfg, rows) })
	require.Len(t, rows, 2)
	agentsaga, baseline := rows[0], rows[1]
	assert.Greater(t, baseline.Requests, agentsaga.Requests, "the baseline's retries add load")
	assert.Greater(t, baseline.Failures, agentsaga.Failures, "and meet more 503s")
	require.GreaterOrEqual(t, agentsaga.RecoverySeconds, 0, "agentsaga recovers after the outage")
	assert.LessOrEqual(t, agentsaga.RecoverySeconds, agentsaga.TargetSeconds, "within one budget window")
}

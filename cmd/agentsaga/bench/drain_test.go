package bench_test

import (
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/cmd/agentsaga/bench"
)

// A small backlog: with its rate declared, the tool's parked calls come
// back at what the service takes; without, at the adaptive release rate,
// not the fixed 2 a second it replaces; no call is lost either way.
func TestDrainSmoke(t *testing.T) {
	t.Parallel()
	cfg := bench.DrainConfig{Calls: 40, RatePerSecond: 10, Latency: 5 * time.Millisecond, Outage: 6 * time.Second}
	rows := inProcess(t, bench.Drain, cfg, func(w io.Writer, rows []bench.DrainRow) { bench.PrintDrain(w, cfg, rows) })
	require.Len(t, rows, 2)
	declared, undeclared := rows[0], rows[1]
	for _, r := range rows {
		assert.Equal(t, cfg.Calls, r.Calls, r.Contender)
		assert.Zero(t, r.FailedCalls, "%s: a parked call waits, it does not fail", r.Contender)
	}
	// 40 calls at 10 a second take 4 s; at the fixed 2 a second the
	// adaptive rate replaced, at least 20: its last release comes 19.5 s
	// after its first, and the suite's load can only make that later. So a
	// bound under 20 s tells the two apart on any machine, and the room
	// below it is for that load, which once stretched the declared drain
	// to 11 s. Stop 57's CI run failed in this package with the drain
	// among the last tests running, at the 15 s bound this had; its log
	// did not name the test. How near the drain comes to the service's
	// rate is `make bench`'s to say, on a quiet machine.
	assert.Less(t, declared.DrainSeconds, 19, "the declared rate drains the backlog faster than the old fixed 2 a second")
	assert.Less(t, undeclared.DrainSeconds, 19, "the adaptive rate starts at 10 a second, not the old fixed 2")
	assert.Positive(t, undeclared.LearnedRate, "the bench reads the rate the drain left")
}

package bench_test

import (
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/agentsaga/agentsaga/cmd/agentsaga/bench"
)

// A short single-tool outage: more calls than the breaker's threshold fail
// at once and open it, the rest are parked, and once the tool is back every
// run completes; nobody is asked.
func TestToolOutageSmoke(t *testing.T) {
	t.Parallel()
	cfg := bench.ToolOutageConfig{Runs: 12, Outage: 8 * time.Second}
	result := inProcess(t, bench.ToolOutage, cfg, func(w io.Writer, r bench.ToolOutageResult) { bench.PrintToolOutage(w, "tool outage", r) })
	assert.Zero(t, result.Escalations, "an outage shorter than the threshold pages no one")
	assert.Equal(t, cfg.Runs, result.Completed)
	assert.GreaterOrEqual(t, result.LongestRunSeconds, cfg.Outage.Seconds(), "the runs waited the outage out")
	assert.Less(t, result.Requests, 3*cfg.Runs, "the parked calls sent nothing while they waited")
}

package bench_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/cmd/agentsaga/bench"
)

// A short single-tool outage: more calls than the breaker's threshold fail
// at once and open it, the rest are parked, and once the tool is back every
// run completes; nobody is asked.
func TestToolOutageSmoke(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cfg := bench.ToolOutageConfig{Runs: 12, Outage: 8 * time.Second}
	result, err := bench.ToolOutage(ctx, temporalClient, pooledDatabase(t), cfg)
	require.NoError(t, err)
	var out strings.Builder
	bench.PrintToolOutage(&out, "tool outage", result)
	t.Log("\n" + out.String())
	assert.Zero(t, result.Escalations, "an outage shorter than the threshold pages no one")
	assert.Equal(t, cfg.Runs, result.Completed)
	assert.GreaterOrEqual(t, result.LongestRunSeconds, cfg.Outage.Seconds(), "the runs waited the outage out")
	assert.Less(t, result.Requests, 3*cfg.Runs, "the parked calls sent nothing while they waited")
}

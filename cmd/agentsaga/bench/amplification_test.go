package bench_test

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/cmd/agentsaga/bench"
)

// A short amplification run: the ordering of the contenders holds and
// agentsaga meets its target. It runs beside the other parallel smoke
// tests: in-process, on its own database, it mostly waits on its
// contenders' timeouts and breaker, and it counts requests, not time.
func TestAmplificationSmoke(t *testing.T) {
	t.Parallel()
	rows := inProcess(t, bench.Amplification, bench.AmplificationConfig{Runs: 4, Calls: 3, Workers: 2},
		func(w io.Writer, rows []bench.Row) { bench.PrintRows(w, "amplification under a 100% outage", rows) })
	require.Len(t, rows, 5)
	breakers, agentsaga, perWorker, stacked, unbounded := rows[0], rows[1], rows[2], rows[3], rows[4]
	// Twelve calls are about the breaker's threshold, so its 1.1 holds only
	// for a fleet that outnumbers it (the full scenario); here it must at
	// least send no more than the budgets alone.
	assert.LessOrEqual(t, breakers.Amplification, agentsaga.Amplification, "the breaker stops what the budgets would still send")
	assert.LessOrEqual(t, agentsaga.Amplification, agentsaga.Target, "agentsaga meets its target")
	assert.LessOrEqual(t, agentsaga.Amplification, perWorker.Amplification)
	assert.Greater(t, stacked.Amplification, 10.0, "stacked layers multiply: 2 x 3 x 3 = 18 per call")
	assert.Greater(t, unbounded.Amplification, agentsaga.Amplification, "an unbounded policy retries until its timeout")
	assert.Greater(t, unbounded.Amplification, 3.0)

	// The benchmark's runs were started as users start them, so the UI
	// lists them under the namespaced name, never as a bare AgentRun.
	count := func(workflowType string) int64 {
		n, err := temporalClient.CountWorkflow(context.Background(), &workflowservice.CountWorkflowExecutionsRequest{
			Query: "WorkflowType = '" + workflowType + "'"})
		require.NoError(t, err)
		return n.GetCount()
	}
	assert.Eventually(t, func() bool { return count(agentsagatype.NamePrefix+"AgentRun") >= 4 }, 10*time.Second, 100*time.Millisecond)
	assert.Zero(t, count("AgentRun"), "a run started around the facade")
}

package bench_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/testsuite"

	"github.com/agentsaga/agentsaga/agentsagatest"
	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/cmd/agentsaga/bench"
)

var temporalClient client.Client

func TestMain(m *testing.M) {
	agentsagatest.Main(m, func(server *testsuite.DevServer) { temporalClient = server.Client() })
}

// A short amplification run: the ordering of the contenders holds and
// agentsaga meets its target.
func TestAmplificationSmoke(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rows, err := bench.Amplification(ctx, temporalClient, pooledDatabase(t), bench.AmplificationConfig{Runs: 4, Calls: 3, Workers: 2})
	require.NoError(t, err)
	var out strings.Builder
	bench.PrintRows(&out, "amplification under a 100% outage", rows)
	t.Log("\n" + out.String())
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
		n, err := temporalClient.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{
			Query: "WorkflowType = '" + workflowType + "'"})
		require.NoError(t, err)
		return n.GetCount()
	}
	assert.Eventually(t, func() bool { return count(agentsagatype.NamePrefix+"AgentRun") >= 4 }, 10*time.Second, 100*time.Millisecond)
	assert.Zero(t, count("AgentRun"), "a run started around the facade")
}

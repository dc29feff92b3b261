package bench_test

import (
	"context"
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"

	"github.com/agentsaga/agentsaga/cmd/agentsaga/bench"
)

// A short success run at p = 20%: the budget costs agentsaga no more than a
// call against three plain attempts, and both are near the ideal.
func TestSuccessSmoke(t *testing.T) {
	t.Parallel()
	success := func(ctx context.Context, c client.Client, databaseURL string, cfg bench.AmplificationConfig) ([]bench.SuccessRow, error) {
		return bench.Success(ctx, c, databaseURL, cfg, []float64{0.2})
	}
	rows := inProcess(t, success, bench.AmplificationConfig{Runs: 4, Calls: 5, Workers: 2},
		func(w io.Writer, rows []bench.SuccessRow) { bench.PrintSuccess(w, "success at p = 20%", rows) })
	require.Len(t, rows, 2)
	agentsaga, plain := rows[0], rows[1]
	assert.Equal(t, 20, agentsaga.LogicalCalls)
	assert.GreaterOrEqual(t, agentsaga.Succeeded, plain.Succeeded-1, "the retry budget does not cost successes when failures are independent")
	assert.GreaterOrEqual(t, agentsaga.SuccessRate, 0.9)
	assert.Greater(t, agentsaga.Requests, agentsaga.LogicalCalls, "failed attempts were retried")
}

// A short overhead run: both sides finish every call, and agentsaga's cost
// per call stays within a loose bound of the plain activity's (the real
// figure comes from `make bench`, not from a timed test). It is not
// parallel: the other smoke runs would load the dev server under one side.
func TestOverheadSmoke(t *testing.T) {
	rows := inProcess(t, bench.Overhead, bench.AmplificationConfig{Runs: 2, Calls: 10, Workers: 1},
		func(w io.Writer, rows []bench.OverheadRow) { bench.PrintOverhead(w, "overhead", rows) })
	require.Len(t, rows, 2)
	assert.Equal(t, 20, rows[0].Calls)
	assert.Equal(t, 20, rows[1].Calls)
	assert.Greater(t, rows[1].Ratio, 0.0)
	assert.Less(t, rows[1].Ratio, 5.0, "an order-of-magnitude regression would show here")
}

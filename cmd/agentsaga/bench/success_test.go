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

// A short success run at p = 20%: the budget costs agentsaga no more than a
// call against three plain attempts, and both are near the ideal.
func TestSuccessSmoke(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rows, err := bench.Success(ctx, temporalClient, pooledDatabase(t), bench.AmplificationConfig{Runs: 4, Calls: 5, Workers: 2}, []float64{0.2})
	require.NoError(t, err)
	var out strings.Builder
	bench.PrintSuccess(&out, "success at p = 20%", rows)
	t.Log("\n" + out.String())
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
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rows, err := bench.Overhead(ctx, temporalClient, pooledDatabase(t), bench.AmplificationConfig{Runs: 2, Calls: 10, Workers: 1})
	require.NoError(t, err)
	var out strings.Builder
	bench.PrintOverhead(&out, "overhead", rows)
	t.Log("\n" + out.String())
	require.Len(t, rows, 2)
	assert.Equal(t, 20, rows[0].Calls)
	assert.Equal(t, 20, rows[1].Calls)
	assert.Greater(t, rows[1].Ratio, 0.0)
	assert.Less(t, rows[1].Ratio, 5.0, "an order-of-magnitude regression would show here")
}

package bench_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/bench"
	"github.com/agentsaga/agentsaga/ledger/ledgertest"
)

// A small backlog: with its rate declared, the tool's parked calls come
// back at what the service takes, and drain sooner than at the breaker's
// own interval; no call is lost either way.
func TestDrainSmoke(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cfg := bench.DrainConfig{Calls: 40, RatePerSecond: 10, Latency: 5 * time.Millisecond, Outage: 6 * time.Second}
	rows, err := bench.Drain(ctx, temporalClient, ledgertest.NewPooledDatabase(t), cfg)
	require.NoError(t, err)
	var out strings.Builder
	bench.PrintDrain(&out, cfg, rows)
	t.Log("\n" + out.String())
	require.Len(t, rows, 2)
	declared, undeclared := rows[0], rows[1]
	for _, r := range rows {
		assert.Equal(t, cfg.Calls, r.Calls, r.Contender)
		assert.Zero(t, r.FailedCalls, "%s: a parked call waits, it does not fail", r.Contender)
	}
	// 40 calls at the breaker's 500 ms take about 20 s; at 10 a second, 4.
	assert.Less(t, declared.DrainSeconds, undeclared.DrainSeconds, "the declared rate drains the backlog sooner")
}

package bench_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/agentsagatest"
	"github.com/agentsaga/agentsaga/cmd/agentsaga/bench"
)

// A short ledger run: both sides write, and the figures are printed. It
// runs by count (pgbench -t), not in the benchmark's windows of seconds:
// beside the suite's other packages a one-second window once closed before
// pgbench had committed anything, and it printed no figure. A ledger that
// makes fewer calls than asked, or a pgbench that makes fewer
// transactions, fails it.
func TestLedgerSmoke(t *testing.T) {
	const clients, calls = 4, 50
	rows, err := bench.LedgerCounted(context.Background(), agentsagatest.NewDatabase(t), clients, calls)
	require.NoError(t, err)
	var out strings.Builder
	bench.PrintLedger(&out, "ledger writes", rows)
	t.Log("\n" + out.String())
	require.Len(t, rows, 2)
	for _, row := range rows {
		assert.Equal(t, clients, row.Clients, row.Contender)
		assert.Greater(t, row.Seconds, 0.0, row.Contender)
		assert.InDelta(t, clients*calls, row.WritesPerSec*row.Seconds, 0.5, "%s: every call made, and counted", row.Contender)
	}
	assert.Greater(t, rows[1].Ratio, 0.0)
}

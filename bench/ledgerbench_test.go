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

// A short ledger run: both sides write, and the figures are printed.
func TestLedgerSmoke(t *testing.T) {
	rows, err := bench.Ledger(context.Background(), ledgertest.NewDatabase(t), 4, 2*time.Second)
	require.NoError(t, err)
	var out strings.Builder
	bench.PrintLedger(&out, "ledger writes", rows)
	t.Log("\n" + out.String())
	require.Len(t, rows, 2)
	assert.Greater(t, rows[0].WritesPerSec, 0.0)
	assert.Greater(t, rows[1].WritesPerSec, 0.0)
	assert.Greater(t, rows[1].Ratio, 0.0)
}

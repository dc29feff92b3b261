package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/internal/ledgertest"
	"github.com/agentsaga/agentsaga/internal/wire"
	"github.com/agentsaga/agentsaga/worker"
)

// The admission queues by account (issue 43): the runs queued now and how
// long the oldest has waited, and the waits of the runs admitted in the
// last hour, at once (0) or after waiting.
func TestMetricsReportTheAdmissionQueues(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	store := ledgertest.NewHandle(t)
	db := ledgerdb.Of(store)
	m, err := worker.NewMetrics(store)
	require.NoError(t, err)
	defer m.Close()
	addr, err := m.Serve(ctx, "127.0.0.1:0")
	require.NoError(t, err)
	url := "http://" + addr.String() + worker.MetricsPath

	series := scrape(t, url)
	assert.False(t, hasPrefix(series, "agentsaga_runs_queued{"), "no account has queued: nothing to report")
	assert.Contains(t, series, `agentsaga_runs{status="queued"}`, "every status is reported, queued included")

	require.NoError(t, db.SetAccountLimits(ctx, ledgerdb.AccountLimits{Account: "acme", MaxConcurrentRuns: 1}, "ops"))
	admit := func(id, account string) string {
		adm, err := db.AdmitRun(ctx, wire.AdmitRequest{RunID: id, Account: account, SpecKey: "k", Priority: 3})
		require.NoError(t, err)
		return adm.Status
	}
	require.Equal(t, wire.AdmissionAdmitted, admit("holder", "acme"))
	require.Equal(t, wire.AdmissionQueued, admit("first", "acme/support"))
	require.Equal(t, wire.AdmissionQueued, admit("second", "acme/support"))
	// first has waited 90 s, second 30 s.
	_, err = db.Pool().Exec(ctx, `UPDATE run_admissions SET enqueued_at = clock_timestamp() - CASE run_id WHEN 'first' THEN interval '90 seconds' ELSE interval '30 seconds' END
		WHERE run_id IN ('first', 'second')`)
	require.NoError(t, err)

	series = scrape(t, url)
	assert.Equal(t, 2.0, series[`agentsaga_runs_queued{account="acme/support"}`])
	assert.InDelta(t, 90, series[`agentsaga_queue_oldest_wait_seconds{account="acme/support"}`], 5)
	assert.Zero(t, series[`agentsaga_runs_queued{account="acme"}`])
	assert.Equal(t, 1.0, series[`agentsaga_queue_admitted_last_hour{account="acme"}`])
	assert.InDelta(t, 0, series[`agentsaga_queue_admitted_wait_seconds{account="acme",stat="max"}`], 0.5, "admitted at once")

	// The holder ends: first is admitted after its wait.
	_, err = db.Pool().Exec(ctx, `SELECT agentsaga_admission_end('holder', 'completed')`)
	require.NoError(t, err)
	n, err := db.AdmitQueued(ctx, "acme")
	require.NoError(t, err)
	require.Equal(t, 1, n)
	series = scrape(t, url)
	assert.Equal(t, 1.0, series[`agentsaga_runs_queued{account="acme/support"}`])
	assert.InDelta(t, 30, series[`agentsaga_queue_oldest_wait_seconds{account="acme/support"}`], 5)
	assert.Equal(t, 1.0, series[`agentsaga_queue_admitted_last_hour{account="acme/support"}`])
	for _, stat := range []string{"p50", "p95", "max"} {
		assert.InDelta(t, 90, series[`agentsaga_queue_admitted_wait_seconds{account="acme/support",stat="`+stat+`"}`], 5, stat)
	}
	assert.Equal(t, 1.0, series[`agentsaga_queue_admitted_last_hour{account="acme"}`], "an account whose queue emptied still reports its last hour")
}

package main

import (
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/agentsagatest"
	"github.com/agentsaga/agentsaga/internal/dataset"
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/ledger"
)

// An eval of ten entries whose worker process is killed -9 once the first
// replay has ended: another worker takes the rest over, eval still prints
// every entry once, each passes, and the ledger holds one replay an entry.
func TestEvalSurvivesWorkerKill(t *testing.T) {
	dir := t.TempDir()
	bin := buildAgentsaga(t)
	server := startTemporalServer(t, dir)
	c := server.client(t, "default")
	databaseURL := agentsagatest.NewDatabase(t)
	handle, err := ledger.Open(t.Context(), databaseURL)
	require.NoError(t, err)
	t.Cleanup(handle.Close)
	store := ledgerdb.Of(handle)

	desk, _ := recordPayout(t, handle, "payout-prod-1")
	before := desk.count()
	entry, err := dataset.Export(t.Context(), store, "payout-prod-1")
	require.NoError(t, err)
	entry.Checks = payoutChecks
	file := filepath.Join(dir, "ten.jsonl")
	for range 10 {
		require.NoError(t, dataset.Append(file, entry))
	}

	first := startWorkerProcess(t, bin, "worker-1", server.address(), "default", databaseURL)
	waitPolling(t.Context(), t, c, first)
	t.Setenv("TEMPORAL_ADDRESS", server.address())
	t.Setenv("DATABASE_URL", databaseURL)
	type result struct {
		out string
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, err := runCLI(t, "eval", file, "--json", "--concurrency", "2")
		done <- result{out, err}
	}()

	count := func(where string) int {
		var n int
		require.NoError(t, store.Pool().QueryRow(t.Context(), `SELECT count(*) FROM runs WHERE workflow_id LIKE 'replay-eval-ten-%' AND `+where).Scan(&n))
		return n
	}
	require.Eventually(t, func() bool { return count("finished_at IS NOT NULL") >= 1 }, time.Minute, 5*time.Millisecond, "no replay ended")
	first.kill()
	endedAtKill := count("finished_at IS NOT NULL")
	t.Logf("worker-1 killed -9 with %d of 10 replays ended", endedAtKill)
	require.Less(t, endedAtKill, 10, "the kill came during the eval")
	second := startWorkerProcess(t, bin, "worker-2", server.address(), "default", databaseURL)
	waitPolling(t.Context(), t, c, second)

	var r result
	select {
	case r = <-done:
	case <-time.After(3 * time.Minute):
		t.Fatalf("eval did not end\n%s", second.log())
	}
	require.NoError(t, r.err, r.out)
	var outcomes []dataset.Outcome
	require.NoError(t, json.Unmarshal([]byte(r.out), &outcomes))
	require.Len(t, outcomes, 10)
	seen := map[string]bool{}
	for _, o := range outcomes {
		assert.False(t, seen[o.Entry], "%s reported twice", o.Entry)
		seen[o.Entry] = true
		assert.True(t, o.Passed, "%s: %+v", o.Entry, o.Checks)
		assert.Zero(t, o.Report.Divergences, "%s: %+v", o.Entry, o.Report.Rows)
	}
	assert.Len(t, seen, 10)
	assert.Equal(t, 10, count("true"), "one replay an entry")
	assert.Equal(t, 10, count("finished_at IS NOT NULL"))
	assert.Equal(t, before, desk.count(), "the desk heard nothing")
}

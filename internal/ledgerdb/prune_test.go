package ledgerdb_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/internal/ledgertest"
	"github.com/agentsaga/agentsaga/internal/runevents"
	"github.com/agentsaga/agentsaga/internal/wire"
)

// seedRun makes a run with an action (and its compensation), a leaf call,
// a message and an event, ends it with status (running: not at all), and moves its
// finish back by age.
func seedRun(ctx context.Context, t *testing.T, store *ledgerdb.Store, id, status string, age time.Duration) {
	t.Helper()
	require.NoError(t, store.StartRun(ctx, agentsagatype.Run{WorkflowID: id, RunID: "r", Goal: "g", Spec: []byte(`{}`)}))
	key := id + "/step-001-call-1-charge"
	_, err := store.ClaimAction(ctx, ledgerdb.ActionRequest{Key: key, WorkflowID: id, ActivityID: "step-001-call-1-charge", Tool: "charge",
		Arguments: `{}`, Compensation: &wire.CompensationRequest{Tool: "refund", ArgumentsTemplate: `{}`}}, time.Minute)
	require.NoError(t, err)
	_, err = store.CompleteAction(ctx, key, 1, `{"id":"ch"}`)
	require.NoError(t, err)
	_, err = store.BeginLeafCall(ctx, ledgerdb.LeafCall{WorkflowID: id, ActivityID: "step-001-call-1-charge", Key: key, Attempt: 1, Kind: "tool", Target: "charge"})
	require.NoError(t, err)
	require.NoError(t, store.AppendMessages(ctx, id, []ledgerdb.Message{{Seq: 0, Role: "user", Content: "g"}}))
	_, err = runevents.New(store.Pool()).Publish(ctx, id, runevents.Event{Key: key + "/started", Kind: runevents.ToolStarted, CallKey: key})
	require.NoError(t, err)
	if status == agentsagatype.RunRunning {
		return
	}
	require.NoError(t, store.FinishRun(ctx, id, agentsagatype.RunOutcome{Status: status}))
	_, err = store.Pool().Exec(ctx, `UPDATE runs SET finished_at = now() - $2::interval WHERE workflow_id = $1`, id, fmt.Sprintf("%d seconds", int(age.Seconds())))
	require.NoError(t, err)
}

// rowsOf counts a run's rows in every table Prune touches.
func rowsOf(ctx context.Context, t *testing.T, store *ledgerdb.Store, id string) int {
	t.Helper()
	total := 0
	for _, table := range []string{"runs", "actions", "compensations", "leaf_calls", "messages", "run_events", "run_event_heads", "run_event_inbox"} {
		var n int
		require.NoError(t, store.Pool().QueryRow(ctx, "SELECT count(*) FROM "+table+" WHERE workflow_id = $1", id).Scan(&n))
		total += n
	}
	return total
}

// Prune deletes old finished runs whole and old retry charges, in batches,
// and keeps what a human may still need: runs not finished, escalated or
// needing attention, however old, and anything recent.
func TestPruneKeepsWhatIsStillNeeded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := ledgertest.NewStore(t)
	old, recent := 40*24*time.Hour, time.Hour
	for i := range 3 {
		seedRun(ctx, t, store, fmt.Sprintf("old-completed-%d", i), agentsagatype.RunCompleted, old)
	}
	seedRun(ctx, t, store, "old-compensated", agentsagatype.RunCompensated, old)
	seedRun(ctx, t, store, "old-needs-attention", agentsagatype.RunNeedsAttention, old)
	seedRun(ctx, t, store, "recent-completed", agentsagatype.RunCompleted, recent)
	seedRun(ctx, t, store, "still-running", agentsagatype.RunRunning, 0)
	_, err := store.Pool().Exec(ctx, `INSERT INTO retry_charges (charge_key, kind, created_at) VALUES
		('old-1', 'withdraw', now() - interval '2 days'), ('old-2', 'deposit', now() - interval '25 hours'),
		('new-1', 'withdraw', now() - interval '1 hour')`)
	require.NoError(t, err)

	kept := []string{"old-needs-attention", "recent-completed", "still-running"}
	before := map[string]int{}
	for _, id := range kept {
		before[id] = rowsOf(ctx, t, store, id)
		require.GreaterOrEqual(t, before[id], 7, id)
	}

	_, err = store.Pool().Exec(ctx, `INSERT INTO api_start_requests (principal, idempotency_key, request_hash, workflow_id, created_at) VALUES
		('k', 'old', '\x00', 'wf-old', now() - interval '25 hours'), ('k', 'new', '\x00', 'wf-new', now() - interval '1 hour')`)
	require.NoError(t, err)

	_, err = store.Pool().Exec(ctx, `INSERT INTO run_admissions (run_id, account, root, spec_key, status) VALUES
		('old-completed-0', 'acme', 'acme', 's', 'ended'), ('recent-completed', 'acme', 'acme', 's', 'ended')`)
	require.NoError(t, err)

	report, err := store.Prune(ctx, ledgerdb.PruneOptions{Batch: 2}) // the defaults: 30 days, 24 h
	require.NoError(t, err)
	require.Equal(t, ledgerdb.PruneReport{Runs: 4, Charges: 2}, report)
	for _, gone := range []string{"old-completed-0", "old-completed-1", "old-completed-2", "old-compensated"} {
		require.Zero(t, rowsOf(ctx, t, store, gone), gone)
	}
	for _, id := range kept {
		require.Equal(t, before[id], rowsOf(ctx, t, store, id), id)
	}
	rows, err := store.Pool().Query(ctx, `SELECT idempotency_key FROM api_start_requests`)
	require.NoError(t, err)
	keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"new"}, keys, "an Idempotency-Key a day old is pruned")
	rows, err = store.Pool().Query(ctx, `SELECT run_id FROM run_admissions`)
	require.NoError(t, err)
	admissions, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"recent-completed"}, admissions, "a pruned run's admission goes with it")
	var charges int
	require.NoError(t, store.Pool().QueryRow(ctx, `SELECT count(*) FROM retry_charges WHERE charge_key LIKE 'new-%'`).Scan(&charges))
	require.Equal(t, 1, charges)

	again, err := store.Prune(ctx, ledgerdb.PruneOptions{})
	require.NoError(t, err)
	require.Equal(t, ledgerdb.PruneReport{}, again, "nothing left to prune")
}

// Pruners across the fleet take turns: while one holds the lock, the
// others are told so and delete nothing.
func TestPrunersTakeTurns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := ledgertest.NewStore(t)
	for i := range 20 {
		seedRun(ctx, t, store, fmt.Sprintf("old-%d", i), agentsagatype.RunCompleted, 40*24*time.Hour)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var pruned int64
	busy := 0
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			report, err := store.Prune(ctx, ledgerdb.PruneOptions{Batch: 1})
			mu.Lock()
			defer mu.Unlock()
			if errors.Is(err, ledgerdb.ErrPruneBusy) {
				busy++
				return
			}
			require.NoError(t, err)
			pruned += report.Runs
		}()
	}
	wg.Wait()
	require.EqualValues(t, 20, pruned, "every run pruned once, whoever did it (%d pruners were turned away)", busy)
}

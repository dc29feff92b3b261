package ledgerdb_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/internal/ledgertest"
	"github.com/agentsaga/agentsaga/internal/wire"
)

func candidateIDs(t *testing.T, store *ledgerdb.Store, olderThan time.Duration, after string, limit int) []string {
	t.Helper()
	runs, err := store.AbandonedCandidates(context.Background(), olderThan, after, limit)
	require.NoError(t, err)
	ids := []string{}
	for _, r := range runs {
		ids = append(ids, r.WorkflowID)
	}
	return ids
}

// The reconciler's candidates are the runs that have not ended, whatever
// their status, paged by workflow ID; a run the engine ended is never one.
func TestAbandonedCandidatesAreTheRunsThatHaveNotEnded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := ledgertest.NewStore(t)
	for _, id := range []string{"run-a", "run-b", "run-c", "run-d", "run-e", "run-a/step-001-call-1-helper"} {
		parent := ""
		if id == "run-a/step-001-call-1-helper" {
			parent = "run-a"
		}
		startRun(t, store, id, parent)
	}
	require.NoError(t, store.FinishRun(ctx, "run-b", agentsagatype.RunOutcome{Status: agentsagatype.RunCompleted, Reason: "the model answered"}))
	require.NoError(t, store.SetRunStatus(ctx, "run-c", agentsagatype.RunEscalated, "waiting"))
	require.NoError(t, store.SetRunStatus(ctx, "run-d", agentsagatype.RunNeedsAttention, "waiting"))
	_, err := store.MarkTerminated(ctx, "run-e", "the workflow was terminated")
	require.NoError(t, err)

	assert.Equal(t, []string{"run-a", "run-a/step-001-call-1-helper", "run-c", "run-d", "run-e"}, candidateIDs(t, store, 0, "", 10))
	assert.Equal(t, []string{"run-a", "run-a/step-001-call-1-helper"}, candidateIDs(t, store, 0, "", 2))
	assert.Equal(t, []string{"run-c", "run-d"}, candidateIDs(t, store, 0, "run-a/step-001-call-1-helper", 2))
	assert.Equal(t, []string{}, candidateIDs(t, store, 0, "run-e", 2))
	assert.Equal(t, []string{}, candidateIDs(t, store, time.Hour, "", 10), "runs younger than olderThan are left out")

	runs, err := store.AbandonedCandidates(ctx, 0, "run-a", 1)
	require.NoError(t, err)
	require.Len(t, runs, 1)
	assert.Equal(t, "run-a", runs[0].ParentWorkflowID)
	assert.Equal(t, agentsagatype.RunRunning, runs[0].Status)
}

// Marking is the gate: a run is marked terminated once, never after it
// ended, and the mark begins its rollback (no forward claim from then on;
// its compensations may still be claimed until it ends).
func TestMarkTerminatedMarksOnceAndClosesTheRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := ledgertest.NewStore(t)
	startRun(t, store, "wf", "")
	startRun(t, store, "done", "")
	require.NoError(t, store.FinishRun(ctx, "done", agentsagatype.RunOutcome{Status: agentsagatype.RunCompleted, Reason: "the model answered"}))

	charge := fencedRequest("wf", "step-001-call-1-charge")
	charge.Compensation = &wire.CompensationRequest{Tool: "refund", ArgumentsTemplate: `{"key": "{{key}}"}`}
	claim, err := store.ClaimAction(ctx, charge, time.Minute)
	require.NoError(t, err)
	_, err = store.CompleteAction(ctx, charge.Key, claim.Action.Attempts, `{"id": "ch_1"}`)
	require.NoError(t, err)

	const reason = `the workflow was terminated in Temporal by ops: '; DROP TABLE runs; --`
	marked, err := store.MarkTerminated(ctx, "wf", reason)
	require.NoError(t, err)
	assert.True(t, marked)
	run, err := store.GetRun(ctx, "wf")
	require.NoError(t, err)
	assert.Equal(t, agentsagatype.RunTerminated, run.Status)
	assert.Equal(t, reason, run.Reason)
	assert.Nil(t, run.FinishedAt, "marked, not ended: the walk ends it")

	marked, err = store.MarkTerminated(ctx, "wf", "a second reconciler")
	require.NoError(t, err)
	assert.False(t, marked, "a run is marked once")
	run, err = store.GetRun(ctx, "wf")
	require.NoError(t, err)
	assert.Equal(t, reason, run.Reason, "the first mark's reason stays")

	marked, err = store.MarkTerminated(ctx, "done", "late")
	require.NoError(t, err)
	assert.False(t, marked, "a run the engine ended is never marked")
	done, err := store.GetRun(ctx, "done")
	require.NoError(t, err)
	assert.Equal(t, agentsagatype.RunCompleted, done.Status)

	_, err = store.MarkTerminated(ctx, "nobody", "x")
	require.ErrorIs(t, err, ledgerdb.ErrNotFound)
	assert.ErrorContains(t, err, "ledger: mark run nobody terminated")

	_, err = store.ClaimAction(ctx, fencedRequest("wf", "step-002-call-1-charge"), time.Minute)
	require.ErrorIs(t, err, ledgerdb.ErrFenced, "no forward action of a terminated run may be claimed")
	refund := ledgerdb.ActionRequest{Key: charge.Key + "/compensate", WorkflowID: "wf", ActivityID: "step-001-call-1-charge/compensate",
		Tool: "refund", Arguments: `{"key": "wf/step-001-call-1-charge"}`, Compensates: charge.Key}
	claim, err = store.ClaimAction(ctx, refund, time.Minute)
	require.NoError(t, err, "its compensations may be claimed")
	assert.True(t, claim.Execute)
}

// A terminated run's sub-agents were terminated with it and never recorded
// their end: its rollback walks their stacks and ends them with it.
func TestFinishSubRunsEndsTheTreeBelowARun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := ledgertest.NewStore(t)
	startRun(t, store, "p", "")
	startRun(t, store, "p/step-001-call-1-helper", "p")
	startRun(t, store, "p/step-001-call-1-helper/step-001-call-1-helper", "p/step-001-call-1-helper")
	startRun(t, store, "p/step-002-call-1-helper", "p")
	startRun(t, store, "other", "")
	require.NoError(t, store.FinishRun(ctx, "p/step-002-call-1-helper", agentsagatype.RunOutcome{Status: agentsagatype.RunCompleted, Reason: "answered"}))
	_, err := store.BeginLeafCall(ctx, ledgerdb.LeafCall{WorkflowID: "p/step-001-call-1-helper", ActivityID: "step-001-model",
		Attempt: 1, Kind: ledgerdb.LeafModel, Target: "scripted"})
	require.NoError(t, err)

	n, err := store.FinishSubRuns(ctx, "p", agentsagatype.RunCompensated, "terminated with its parent p")
	require.NoError(t, err)
	assert.Equal(t, 2, n)
	for id, want := range map[string]string{
		"p":                        agentsagatype.RunRunning,
		"p/step-001-call-1-helper": agentsagatype.RunCompensated,
		"p/step-001-call-1-helper/step-001-call-1-helper": agentsagatype.RunCompensated,
		"p/step-002-call-1-helper":                        agentsagatype.RunCompleted,
		"other":                                           agentsagatype.RunRunning,
	} {
		run, err := store.GetRun(ctx, id)
		require.NoError(t, err)
		assert.Equal(t, want, run.Status, id)
		if want == agentsagatype.RunCompensated {
			assert.NotNil(t, run.FinishedAt, id)
			assert.Equal(t, "terminated with its parent p", run.Reason)
		}
	}
	child, err := store.GetRun(ctx, "p/step-001-call-1-helper")
	require.NoError(t, err)
	assert.Equal(t, 1, child.LeafCalls)
	leaves, err := store.ListLeafCalls(ctx, "p/step-001-call-1-helper")
	require.NoError(t, err)
	require.Len(t, leaves, 1)
	assert.Equal(t, "lost", leaves[0].Outcome)

	n, err = store.FinishSubRuns(ctx, "p", agentsagatype.RunCompensated, "again")
	require.NoError(t, err)
	assert.Zero(t, n, "ended runs stay as they ended")
}

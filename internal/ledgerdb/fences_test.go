package ledgerdb_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/internal/ledgertest"
)

func fencedRequest(workflowID, activityID string) ledgerdb.ActionRequest {
	return ledgerdb.ActionRequest{Key: workflowID + "/" + activityID, WorkflowID: workflowID, ActivityID: activityID,
		Tool: "charge", Arguments: `{"amount": 5}`}
}

func startRun(t *testing.T, store *ledgerdb.Store, workflowID, parent string) {
	t.Helper()
	require.NoError(t, store.StartRun(context.Background(), agentsagatype.Run{WorkflowID: workflowID, RunID: "r", ParentWorkflowID: parent, Goal: "g"}))
}

// The workflow gave up on a call: no attempt may claim its key afterwards,
// whether or not one had claimed it before.
func TestGivenUpKeyRefusesEveryLaterClaim(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := ledgertest.NewStore(t)

	// Never claimed: the give-up records the key, fenced.
	never := fencedRequest("wf", "step-001-call-1-charge")
	fenced, err := store.FenceAction(ctx, never, ledgerdb.FenceGivenUp)
	require.NoError(t, err)
	assert.False(t, fenced.Live)
	assert.Equal(t, agentsagatype.ActionFailed, fenced.Action.Status)
	assert.Zero(t, fenced.LeafCalls)
	_, err = store.ClaimAction(ctx, never, time.Minute)
	require.ErrorIs(t, err, ledgerdb.ErrFenced)
	assert.ErrorContains(t, err, "the workflow gave up on this call")

	// Failed retryably, then given up: the next attempt may not take it.
	failed := fencedRequest("wf", "step-002-call-1-charge")
	claim, err := store.ClaimAction(ctx, failed, time.Minute)
	require.NoError(t, err)
	_, err = store.FailAction(ctx, failed.Key, claim.Action.Attempts, "HTTP 503", "HTTPError", false)
	require.NoError(t, err)
	_, err = store.FenceAction(ctx, failed, ledgerdb.FenceGivenUp)
	require.NoError(t, err)
	_, err = store.ClaimAction(ctx, failed, time.Minute)
	require.ErrorIs(t, err, ledgerdb.ErrFenced)

	// Completed before the give-up: the give-up learns the truth, and a
	// later attempt still gets the stored result (that executes nothing).
	done := fencedRequest("wf", "step-003-call-1-charge")
	claim, err = store.ClaimAction(ctx, done, time.Minute)
	require.NoError(t, err)
	_, err = store.CompleteAction(ctx, done.Key, claim.Action.Attempts, `{"id":"ch_3"}`)
	require.NoError(t, err)
	fenced, err = store.FenceAction(ctx, done, ledgerdb.FenceGivenUp)
	require.NoError(t, err)
	assert.Equal(t, agentsagatype.ActionCompleted, fenced.Action.Status)
	assert.Equal(t, `{"id":"ch_3"}`, fenced.Action.Result)
	replay, err := store.ClaimAction(ctx, done, time.Minute)
	require.NoError(t, err)
	assert.False(t, replay.Execute)
}

// A give-up that finds an attempt still at work reports it live; the
// attempt may still settle the key (its effect may have happened), and
// once its lease lapses the key is settled as failed, outcome unknown.
func TestFenceWaitsForALiveHolderAndSettlesALapsedOne(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := ledgertest.NewStore(t)

	live := fencedRequest("wf", "step-001-call-1-charge")
	holder, err := store.ClaimAction(ctx, live, time.Minute)
	require.NoError(t, err)
	fenced, err := store.FenceAction(ctx, live, ledgerdb.FenceGivenUp)
	require.NoError(t, err)
	assert.True(t, fenced.Live, "the holder's lease is live")
	require.NoError(t, store.RenewLease(ctx, live.Key, holder.Action.Attempts, time.Minute), "a fenced key's live holder still renews")
	_, err = store.CompleteAction(ctx, live.Key, holder.Action.Attempts, "late but true")
	require.NoError(t, err, "the holder records what it did")
	fenced, err = store.FenceAction(ctx, live, ledgerdb.FenceGivenUp)
	require.NoError(t, err)
	assert.False(t, fenced.Live)
	assert.Equal(t, agentsagatype.ActionCompleted, fenced.Action.Status)
	assert.Equal(t, ledgerdb.FenceGivenUp, fenced.Action.FenceReason)

	lost := fencedRequest("wf", "step-002-call-1-charge")
	zombie, err := store.ClaimAction(ctx, lost, 50*time.Millisecond)
	require.NoError(t, err)
	leaf, err := store.BeginLeafCall(ctx, ledgerdb.LeafCall{WorkflowID: "wf", ActivityID: lost.ActivityID, Key: lost.Key, Attempt: 1, Kind: ledgerdb.LeafTool, Target: "charge"})
	require.NoError(t, err)
	time.Sleep(100 * time.Millisecond)
	fenced, err = store.FenceAction(ctx, lost, ledgerdb.FenceGivenUp)
	require.NoError(t, err)
	assert.False(t, fenced.Live)
	assert.Equal(t, agentsagatype.ActionFailed, fenced.Action.Status)
	assert.Contains(t, fenced.Action.Error, "outcome unknown")
	assert.Equal(t, 1, fenced.LeafCalls, "the lost attempt counts as a leaf call")
	_, err = store.CompleteAction(ctx, lost.Key, zombie.Action.Attempts, "zombie")
	require.ErrorIs(t, err, ledgerdb.ErrLeaseLost, "the zombie that wakes later cannot write")
	require.ErrorIs(t, store.RenewLease(ctx, lost.Key, zombie.Action.Attempts, time.Minute), ledgerdb.ErrLeaseLost)
	calls, err := store.ListLeafCalls(ctx, "wf")
	require.NoError(t, err)
	require.Len(t, calls, 1)
	assert.Equal(t, leaf, calls[0].ID)
	assert.Equal(t, "lost", calls[0].Outcome, "a killed attempt's leaf call does not stay in flight")
}

// A takeover marks the lost attempt's leaf call lost; the run's end marks
// any other (a model call's) lost too.
func TestLostAttemptsLeafCallsEnd(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := ledgertest.NewStore(t)
	startRun(t, store, "wf", "")

	req := fencedRequest("wf", "step-001-call-1-charge")
	_, err := store.ClaimAction(ctx, req, 20*time.Millisecond)
	require.NoError(t, err)
	_, err = store.BeginLeafCall(ctx, ledgerdb.LeafCall{WorkflowID: "wf", ActivityID: req.ActivityID, Key: req.Key, Attempt: 1, Kind: ledgerdb.LeafTool, Target: "charge"})
	require.NoError(t, err)
	_, err = store.BeginLeafCall(ctx, ledgerdb.LeafCall{WorkflowID: "wf", ActivityID: "step-002-model", Key: "wf/step-002-model", Attempt: 1, Kind: ledgerdb.LeafModel, Target: "openai"})
	require.NoError(t, err)
	time.Sleep(50 * time.Millisecond)
	takeover, err := store.ClaimAction(ctx, req, time.Minute)
	require.NoError(t, err)
	require.True(t, takeover.Execute)
	calls, err := store.ListLeafCalls(ctx, "wf")
	require.NoError(t, err)
	assert.Equal(t, "lost", calls[0].Outcome)
	assert.Equal(t, "in-flight", calls[1].Outcome)

	require.NoError(t, store.FinishRun(ctx, "wf", agentsagatype.RunOutcome{Status: agentsagatype.RunCompleted}))
	calls, err = store.ListLeafCalls(ctx, "wf")
	require.NoError(t, err)
	assert.Equal(t, "lost", calls[1].Outcome)
}

// Once a run ended, whatever its status, nothing of it may be claimed.
func TestEndedRunRefusesClaims(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := ledgertest.NewStore(t)
	for _, status := range []string{agentsagatype.RunCompleted, agentsagatype.RunCompensated, agentsagatype.RunNeedsAttention, agentsagatype.RunPartial} {
		wf := "wf-" + status
		startRun(t, store, wf, "")
		require.NoError(t, store.FinishRun(ctx, wf, agentsagatype.RunOutcome{Status: status}))
		_, err := store.ClaimAction(ctx, fencedRequest(wf, "step-001-call-1-charge"), time.Minute)
		require.ErrorIs(t, err, ledgerdb.ErrFenced, status)
		assert.ErrorContains(t, err, "the run has ended")
		comp := fencedRequest(wf, "step-001-call-1-charge/compensate")
		comp.Compensates = wf + "/step-001-call-1-charge"
		_, err = store.ClaimAction(ctx, comp, time.Minute)
		require.ErrorIs(t, err, ledgerdb.ErrFenced, "a compensation of an ended run (%s)", status)
	}
}

// A rollback closes the whole tree: no forward action of the run or of its
// sub-agents may be claimed, their compensations may, and the walk learns
// how many attempts are still at work.
func TestCloseRunFencesTheTreeAndCountsLiveLeases(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := ledgertest.NewStore(t)
	startRun(t, store, "parent", "")
	startRun(t, store, "parent/step-001-call-1-agent", "parent")
	startRun(t, store, "parent/step-001-call-1-agent/step-001-call-1-agent", "parent/step-001-call-1-agent")
	grandchild := "parent/step-001-call-1-agent/step-001-call-1-agent"

	busy := fencedRequest(grandchild, "step-001-call-1-charge")
	holder, err := store.ClaimAction(ctx, busy, time.Minute)
	require.NoError(t, err)
	live, err := store.CloseRun(ctx, "parent")
	require.NoError(t, err)
	assert.Equal(t, 1, live, "the grandchild's attempt is still at work")

	_, err = store.ClaimAction(ctx, fencedRequest("parent", "step-002-call-1-charge"), time.Minute)
	require.ErrorIs(t, err, ledgerdb.ErrFenced)
	assert.ErrorContains(t, err, "rollback has begun")
	_, err = store.ClaimAction(ctx, fencedRequest(grandchild, "step-002-call-1-charge"), time.Minute)
	require.ErrorIs(t, err, ledgerdb.ErrFenced, "a sub-agent's forward action")
	comp := fencedRequest("parent", "step-001-call-1-agent/step-001-call-1-agent/step-001-call-1-charge/compensate")
	comp.Compensates = busy.Key
	_, err = store.ClaimAction(ctx, comp, time.Minute)
	require.NoError(t, err, "a compensation may be claimed during the rollback")

	_, err = store.CompleteAction(ctx, busy.Key, holder.Action.Attempts, `{"id":"ch_1"}`)
	require.NoError(t, err)
	live, err = store.CloseRun(ctx, "parent")
	require.NoError(t, err)
	assert.Zero(t, live)
	action, err := store.GetAction(ctx, busy.Key)
	require.NoError(t, err)
	assert.Equal(t, ledgerdb.FenceRollback, action.FenceReason)
}

// Claims racing a rollback's close: every claim either commits before the
// close (and CloseRun sees it, fenced) or is refused. None slips in after
// the walk looked.
func TestClaimsRacingCloseRunAreAllSeen(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := ledgertest.NewStore(t)
	startRun(t, store, "wf", "")

	const claimers = 16
	var wg sync.WaitGroup
	var mu sync.Mutex
	var claimed []string
	start := make(chan struct{})
	for i := range claimers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for j := 0; ; j++ {
				req := fencedRequest("wf", fmt.Sprintf("step-%03d-call-%d-charge", j, i))
				claim, err := store.ClaimAction(ctx, req, time.Minute)
				if errors.Is(err, ledgerdb.ErrFenced) {
					return
				}
				if !assert.NoError(t, err) {
					return
				}
				mu.Lock()
				claimed = append(claimed, claim.Action.Key)
				mu.Unlock()
				_, err = store.CompleteAction(ctx, req.Key, claim.Action.Attempts, "ok")
				assert.NoError(t, err)
			}
		}()
	}
	close(start)
	time.Sleep(30 * time.Millisecond)
	_, err := store.CloseRun(ctx, "wf")
	require.NoError(t, err)
	wg.Wait()

	actions, err := store.ListActions(ctx, "wf")
	require.NoError(t, err)
	fencedAt := map[string]bool{}
	for _, a := range actions {
		fencedAt[a.Key] = a.FencedAt != nil
	}
	require.NotEmpty(t, claimed)
	unfenced := 0
	for _, key := range claimed {
		if !fencedAt[key] {
			unfenced++
		}
	}
	assert.Zero(t, unfenced, "claims that committed after the close looked (of %d)", len(claimed))
	t.Logf("claims before the close: %d; unfenced: %d", len(claimed), unfenced)
}

package ledgerdb_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/internal/ledgertest"
	"github.com/agentsaga/agentsaga/internal/wire"
)

func TestApprovalIsRecordedOnceAndDecidedOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := ledgertest.NewStore(t)
	req := agentsagatype.ApprovalRequest{Key: "wf-a/step-001-call-1-refund", WorkflowID: "wf-a", Call: "step-001-call-1-refund",
		Tool: "refund", Arguments: `{"amount":250}`, Why: "amount > 100"}
	first, err := store.RequestApproval(ctx, req)
	require.NoError(t, err)
	assert.Equal(t, agentsagatype.ApprovalAwaiting, first.Status)
	assert.True(t, first.DecidedAt.IsZero())
	again, err := store.RequestApproval(ctx, req) // delivered twice
	require.NoError(t, err)
	assert.Equal(t, first.RequestedAt, again.RequestedAt)

	waiting, err := store.AwaitingApprovals(ctx, 100)
	require.NoError(t, err)
	require.Len(t, waiting, 1)
	assert.Equal(t, req, waiting[0].ApprovalRequest)

	approved, err := store.DecideApproval(ctx, req.Key, agentsagatype.ApprovalApproved, "alice", "checked the order")
	require.NoError(t, err)
	assert.Equal(t, "alice", approved.DecidedBy)
	assert.False(t, approved.DecidedAt.IsZero())
	// A retried activity records the same decision again: no error.
	_, err = store.DecideApproval(ctx, req.Key, agentsagatype.ApprovalApproved, "alice", "checked the order")
	require.NoError(t, err)
	// A second operator is told who decided first.
	_, err = store.DecideApproval(ctx, req.Key, agentsagatype.ApprovalDenied, "bob", "no")
	require.ErrorIs(t, err, ledgerdb.ErrDecided)
	assert.Contains(t, err.Error(), "approved by alice")
	_, err = store.DecideApproval(ctx, "wf-a/nothing", agentsagatype.ApprovalApproved, "alice", "")
	require.ErrorIs(t, err, ledgerdb.ErrNotFound)
	// What a second operator is told: who decided first, when and why.
	first, err = store.GetApproval(ctx, req.Key)
	require.NoError(t, err)
	assert.Equal(t, approved, first)
	_, err = store.GetApproval(ctx, "wf-a/nothing")
	require.ErrorIs(t, err, ledgerdb.ErrNotFound)

	waiting, err = store.AwaitingApprovals(ctx, 100)
	require.NoError(t, err)
	assert.Empty(t, waiting)
	list, err := store.RunApprovals(ctx, "wf-a")
	require.NoError(t, err)
	require.Len(t, list, 1)
	assert.Equal(t, agentsagatype.ApprovalApproved, list[0].Status)
}

// A run that ended waits for nobody: its open requests leave the fleet's list.
func TestAwaitingApprovalsLeaveOutEndedRuns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := ledgertest.NewStore(t)
	for _, wf := range []string{"wf-live", "wf-ended"} {
		require.NoError(t, store.StartRun(ctx, agentsagatype.Run{WorkflowID: wf, Goal: "g"}))
		_, err := store.RequestApproval(ctx, agentsagatype.ApprovalRequest{Key: wf + "/c", WorkflowID: wf, Call: "c", Tool: "wire", Arguments: "{}"})
		require.NoError(t, err)
	}
	require.NoError(t, store.FinishRun(ctx, "wf-ended", agentsagatype.RunOutcome{Status: agentsagatype.RunCompensated}))
	waiting, err := store.AwaitingApprovals(ctx, 100)
	require.NoError(t, err)
	require.Len(t, waiting, 1)
	assert.Equal(t, "wf-live", waiting[0].WorkflowID)
}

// The run's total counts completed calls and calls that may have done
// their work; it leaves out calls compensated, rejected, or fenced before
// any attempt.
func TestLimitTotalCountsWhatMayHaveHappened(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := ledgertest.NewStore(t)
	const wf, limit = "wf-sum", "sum(amount) <= 200"
	hold := func(call string, amount float64) wire.LimitHeld {
		t.Helper()
		held, err := store.HoldLimit(ctx, wire.LimitHold{Key: wf + "/" + call, WorkflowID: wf, Tool: "refund", Limit: limit, Amount: amount, AtMost: 200})
		require.NoError(t, err)
		return held
	}
	run := func(call string, compensate bool) ledgerdb.ActionRequest {
		t.Helper()
		req := ledgerdb.ActionRequest{Key: wf + "/" + call, WorkflowID: wf, ActivityID: call, Tool: "refund", Arguments: "{}"}
		if compensate {
			req.Compensation = &wire.CompensationRequest{Tool: "cancel_refund", ArgumentsTemplate: "{}"}
		}
		claim, err := store.ClaimAction(ctx, req, time.Minute)
		require.NoError(t, err)
		require.True(t, claim.Execute)
		_, err = store.CompleteAction(ctx, req.Key, claim.Action.Attempts, "ok")
		require.NoError(t, err)
		return req
	}
	require.True(t, hold("c1", 80).Granted)
	run("c1", true)
	require.True(t, hold("c2", 80).Granted) // in flight: counts
	held := hold("c3", 80)
	assert.False(t, held.Granted, "80 + 80 + 80 > 200")
	assert.Equal(t, 160.0, held.Total)
	// c1 is compensated: its 80 no longer counts.
	require.NoError(t, store.SettleCompensation(ctx, wf+"/c1", "compensated", "", ""))
	held = hold("c3", 80)
	assert.True(t, held.Granted)
	assert.Equal(t, 80.0, held.Total)
	assert.True(t, hold("c3", 80).Granted, "holding the same call again is granted")
	// c2 was fenced before any attempt claimed it: it did nothing.
	_, err := store.FenceAction(ctx, ledgerdb.ActionRequest{Key: wf + "/c2", WorkflowID: wf, ActivityID: "c2", Tool: "refund", Arguments: "{}"}, "gave up")
	require.NoError(t, err)
	held = hold("c4", 120)
	assert.True(t, held.Granted, "80 (c3) + 120 = 200")
	assert.False(t, hold("c5", 0.01).Granted)
}

// Many pools and goroutines hold against one run's limit at once: the
// calls granted never add up to more than the limit.
func TestLimitNeverOverGrantsAcrossPools(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	stores := openWorkers(t, 3, 3)
	const perCall, atMost, calls = 7.0, 200.0, 90
	var granted atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, calls)
	for i := range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			held, err := stores[i%len(stores)].HoldLimit(ctx, wire.LimitHold{Key: fmt.Sprintf("wf-race/c%d", i), WorkflowID: "wf-race",
				Tool: "refund", Limit: "sum(amount) <= 200", Amount: perCall, AtMost: atMost})
			if err != nil {
				errs <- err
				return
			}
			if held.Granted {
				granted.Add(1)
			}
		}()
	}
	wg.Wait()
	close(errs)
	require.NoError(t, errors.Join(drain(errs)...))
	over := max(0, float64(granted.Load())*perCall-atMost)
	t.Logf("granted %d calls of %v against %v: over-admission %v", granted.Load(), perCall, atMost, over)
	assert.Equal(t, int64(28), granted.Load(), "28 calls of 7 fit in 200")
	assert.Zero(t, over)
}

func drain(errs <-chan error) []error {
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	return all
}

package ledgerdb_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/internal/ledgertest"
	"github.com/agentsaga/agentsaga/migrations"
)

func request(key string) ledgerdb.ActionRequest {
	return ledgerdb.ActionRequest{Key: "wf-1/" + key, WorkflowID: "wf-1", ActivityID: key, Tool: "charge", Arguments: `{"amount": 5, "currency": "eur"}`}
}

func TestClaimCompleteReplay(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := ledgertest.NewStore(t)

	claim, err := store.ClaimAction(ctx, request("step-001-call-1-charge"), time.Minute)
	require.NoError(t, err)
	require.True(t, claim.Execute)
	assert.Equal(t, 1, claim.Action.Attempts)

	done, err := store.CompleteAction(ctx, claim.Action.Key, claim.Action.Attempts, `{"id":"ch_1"}`)
	require.NoError(t, err)
	assert.Equal(t, agentsagatype.ActionCompleted, done.Status)

	// The same request with its keys in another order is the same request.
	again := request("step-001-call-1-charge")
	again.Arguments = `{"currency":"eur","amount":5}`
	replay, err := store.ClaimAction(ctx, again, time.Minute)
	require.NoError(t, err)
	assert.False(t, replay.Execute, "a completed key must not execute again")
	assert.Equal(t, `{"id":"ch_1"}`, replay.Action.Result)
}

func TestClaimConflictAndInFlight(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := ledgertest.NewStore(t)

	first, err := store.ClaimAction(ctx, request("k"), time.Minute)
	require.NoError(t, err)
	require.True(t, first.Execute)

	_, err = store.ClaimAction(ctx, request("k"), time.Minute)
	assert.ErrorIs(t, err, ledgerdb.ErrInFlight)

	other := request("k")
	other.Arguments = `{"amount": 500}`
	_, err = store.ClaimAction(ctx, other, time.Minute)
	assert.ErrorIs(t, err, ledgerdb.ErrConflict)
	assert.Contains(t, err.Error(), `{"amount": 500}`)
}

func TestFailedAttemptIsReclaimedAndRejectedIsStored(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := ledgertest.NewStore(t)

	first, err := store.ClaimAction(ctx, request("k"), time.Minute)
	require.NoError(t, err)
	_, err = store.FailAction(ctx, first.Action.Key, first.Action.Attempts, "HTTP 503", "HTTPError", false)
	require.NoError(t, err)

	second, err := store.ClaimAction(ctx, request("k"), time.Minute)
	require.NoError(t, err)
	require.True(t, second.Execute)
	assert.Equal(t, 2, second.Action.Attempts)
	_, err = store.FailAction(ctx, second.Action.Key, second.Action.Attempts, "HTTP 400: bad currency", "HTTPError", true)
	require.NoError(t, err)

	third, err := store.ClaimAction(ctx, request("k"), time.Minute)
	require.NoError(t, err)
	assert.False(t, third.Execute)
	assert.Equal(t, agentsagatype.ActionRejected, third.Action.Status)
	assert.Equal(t, "HTTP 400: bad currency", third.Action.Error)
	assert.Equal(t, "HTTPError", third.Action.ErrorType, "a stored failure replays as the type it failed with")
}

func TestExpiredLeaseIsTakenOverAndFirstResultWins(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := ledgertest.NewStore(t)

	lost, err := store.ClaimAction(ctx, request("k"), time.Millisecond)
	require.NoError(t, err)
	time.Sleep(20 * time.Millisecond)

	takeover, err := store.ClaimAction(ctx, request("k"), time.Minute)
	require.NoError(t, err, "a lease that ran out belongs to a lost worker")
	require.True(t, takeover.Execute)
	_, err = store.CompleteAction(ctx, takeover.Action.Key, takeover.Action.Attempts, "second")
	require.NoError(t, err)

	// The lost attempt comes back late: its write is refused, and the
	// stored result stays.
	late, err := store.CompleteAction(ctx, lost.Action.Key, lost.Action.Attempts, "first-but-late")
	require.ErrorIs(t, err, ledgerdb.ErrLeaseLost)
	assert.Equal(t, "second", late.Result)
	require.ErrorIs(t, store.RenewLease(ctx, lost.Action.Key, lost.Action.Attempts, time.Minute), ledgerdb.ErrLeaseLost,
		"a superseded attempt cannot renew the lease either")
}

// Many attempts of one key delivered at once: exactly one executes.
func TestConcurrentClaimsExecuteOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := ledgertest.NewStore(t)

	var executed, inFlight atomic.Int32
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			claim, err := store.ClaimAction(ctx, request("k"), time.Minute)
			switch {
			case errors.Is(err, ledgerdb.ErrInFlight):
				inFlight.Add(1)
			case err != nil:
				t.Error(err)
			case claim.Execute:
				executed.Add(1)
			}
		}()
	}
	wg.Wait()
	assert.Equal(t, int32(1), executed.Load())
	assert.Equal(t, int32(15), inFlight.Load())
}

// Hostile text goes through as data: every statement is parameterized.
func TestHostileKeysAreData(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := ledgertest.NewStore(t)
	hostile := ledgerdb.ActionRequest{Key: "wf'; DROP TABLE actions; --/x", WorkflowID: "wf'; DROP TABLE actions; --",
		ActivityID: "x", Tool: "t", Arguments: `{"q":"'); DELETE FROM runs; --"}`}
	claim, err := store.ClaimAction(ctx, hostile, time.Minute)
	require.NoError(t, err)
	require.True(t, claim.Execute)
	actions, err := store.ListActions(ctx, hostile.WorkflowID)
	require.NoError(t, err)
	require.Len(t, actions, 1)
	assert.Equal(t, hostile.Arguments, actions[0].Arguments)
}

func TestRunLifecycle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := ledgertest.NewStore(t)

	run := agentsagatype.Run{WorkflowID: "wf-1", RunID: "r-1", Goal: "find the refund policy", Spec: []byte(`{"goal":"x"}`)}
	require.NoError(t, store.StartRun(ctx, run))
	require.NoError(t, store.StartRun(ctx, run), "recording a start twice is a no-op")

	id, err := store.BeginLeafCall(ctx, ledgerdb.LeafCall{WorkflowID: "wf-1", ActivityID: "step-001-model", Key: "wf-1/step-001-model", Attempt: 1, Kind: ledgerdb.LeafModel, Target: "scripted"})
	require.NoError(t, err)
	require.NoError(t, store.EndLeafCall(ctx, id, nil))

	require.NoError(t, store.FinishRun(ctx, "wf-1", agentsagatype.RunOutcome{Status: agentsagatype.RunCompleted, Answer: "30 days", StepsUsed: 2, TokensUsed: 40}))
	got, err := store.GetRun(ctx, "wf-1")
	require.NoError(t, err)
	assert.Equal(t, agentsagatype.RunCompleted, got.Status)
	assert.Equal(t, "30 days", got.Answer)
	assert.Equal(t, 1, got.LeafCalls)
	assert.NotNil(t, got.FinishedAt)

	_, err = store.GetRun(ctx, "nope")
	assert.ErrorIs(t, err, ledgerdb.ErrNotFound)
	assert.ErrorIs(t, store.FinishRun(ctx, "nope", agentsagatype.RunOutcome{Status: agentsagatype.RunFailed}), ledgerdb.ErrNotFound)
}

func TestMigrationsTwiceIsNoop(t *testing.T) {
	t.Parallel()
	url := ledgertest.NewDatabase(t)
	applied, err := migrations.Apply(context.Background(), url)
	require.NoError(t, err)
	assert.Empty(t, applied)
}

func TestOpenUnreachableNamesAddress(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := ledgerdb.Open(ctx, "postgres://postgres@127.0.0.1:1/agentsaga?connect_timeout=2")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "127.0.0.1:1")
}

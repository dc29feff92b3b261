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
)

func leafOf(req ledgerdb.ActionRequest, attempt int) ledgerdb.LeafCall {
	return ledgerdb.LeafCall{WorkflowID: req.WorkflowID, ActivityID: req.ActivityID, Key: req.Key, Attempt: attempt,
		Kind: ledgerdb.LeafTool, Target: req.Tool}
}

func leafCalls(t *testing.T, store *ledgerdb.Store, workflowID string) []ledgerdb.LeafCall {
	t.Helper()
	calls, err := store.ListLeafCalls(context.Background(), workflowID)
	require.NoError(t, err)
	return calls
}

// The claim records the attempt's leaf call, in flight, and the completion
// ends it; only an attempt that executes gets one.
func TestClaimRecordsTheLeafCallAndTheCompletionEndsIt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := ledgertest.NewStore(t)
	req := request("step-001-call-1-charge")

	claim, err := store.ClaimCall(ctx, req, leafOf(req, 1), time.Minute)
	require.NoError(t, err)
	require.True(t, claim.Execute)
	require.Positive(t, claim.LeafCallID)
	calls := leafCalls(t, store, "wf-1")
	require.Len(t, calls, 1)
	assert.Equal(t, claim.LeafCallID, calls[0].ID)
	assert.Equal(t, "in-flight", calls[0].Outcome)
	assert.Equal(t, req.Key, calls[0].Key)
	assert.Equal(t, "charge", calls[0].Target)

	done, err := store.SettleAttempt(ctx, req.Key, claim.Action.Attempts, ledgerdb.AttemptEnd{
		Status: agentsagatype.ActionCompleted, Result: `{"id":"ch_1"}`, LeafCallID: claim.LeafCallID})
	require.NoError(t, err)
	assert.Equal(t, agentsagatype.ActionCompleted, done.Status)
	calls = leafCalls(t, store, "wf-1")
	assert.Equal(t, "ok", calls[0].Outcome)
	assert.NotNil(t, calls[0].FinishedAt)

	replay, err := store.ClaimCall(ctx, req, leafOf(req, 2), time.Minute)
	require.NoError(t, err)
	assert.False(t, replay.Execute)
	assert.Zero(t, replay.LeafCallID)
	assert.Len(t, leafCalls(t, store, "wf-1"), 1, "a replay leaves the process no more")
}

// A failed attempt's leaf call ends with its error; the takeover of a lost
// attempt marks that attempt's leaf call lost; a superseded attempt that
// finishes later still ends its own leaf call (it did leave the process)
// although its outcome is refused.
func TestLeafCallsOfFailedLostAndSupersededAttempts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := ledgertest.NewStore(t)
	req := request("step-001-call-1-charge")

	first, err := store.ClaimCall(ctx, req, leafOf(req, 1), time.Minute)
	require.NoError(t, err)
	_, err = store.SettleAttempt(ctx, req.Key, first.Action.Attempts, ledgerdb.AttemptEnd{Status: agentsagatype.ActionFailed,
		Cause: "HTTP 503", ErrorType: "HTTPError", LeafCallID: first.LeafCallID, CallErr: errors.New("HTTP 503")})
	require.NoError(t, err)

	lost, err := store.ClaimCall(ctx, req, leafOf(req, 2), 20*time.Millisecond)
	require.NoError(t, err)
	require.True(t, lost.Execute)
	time.Sleep(50 * time.Millisecond)
	takeover, err := store.ClaimCall(ctx, req, leafOf(req, 3), time.Minute)
	require.NoError(t, err)
	require.True(t, takeover.Execute)

	calls := leafCalls(t, store, "wf-1")
	require.Len(t, calls, 3)
	assert.Equal(t, "error", calls[0].Outcome)
	assert.Equal(t, "HTTP 503", calls[0].Error)
	assert.Equal(t, "lost", calls[1].Outcome, "taken over")
	assert.Equal(t, "in-flight", calls[2].Outcome)

	_, err = store.SettleAttempt(ctx, req.Key, lost.Action.Attempts, ledgerdb.AttemptEnd{
		Status: agentsagatype.ActionCompleted, Result: "late", LeafCallID: lost.LeafCallID})
	require.ErrorIs(t, err, ledgerdb.ErrLeaseLost)
	assert.Equal(t, "ok", leafCalls(t, store, "wf-1")[1].Outcome, "the late attempt's call did happen")
	action, err := store.GetAction(ctx, req.Key)
	require.NoError(t, err)
	assert.Equal(t, agentsagatype.ActionStarted, action.Status, "the holder's claim stands")

	require.NoError(t, store.DropLeafCall(ctx, takeover.LeafCallID))
	assert.Len(t, leafCalls(t, store, "wf-1"), 2, "an attempt that sent nothing leaves no leaf call")
}

// A claim refused by its run (ended, or rolling back) says why, whether or
// not the key was ever claimed, and records no leaf call.
func TestClaimCallRefusedByItsRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := ledgertest.NewStore(t)
	startRun(t, store, "ended", "")
	startRun(t, store, "closing", "")
	claimed := fencedRequest("ended", "step-001-call-1-charge")
	_, err := store.ClaimCall(ctx, claimed, leafOf(claimed, 1), 20*time.Millisecond)
	require.NoError(t, err)
	time.Sleep(50 * time.Millisecond)
	require.NoError(t, store.FinishRun(ctx, "ended", agentsagatype.RunOutcome{Status: agentsagatype.RunFailed, Reason: "gave up"}))
	_, err = store.CloseRun(ctx, "closing")
	require.NoError(t, err)

	for req, why := range map[ledgerdb.ActionRequest]string{
		claimed: "the run has ended",
		fencedRequest("ended", "step-002-call-1-charge"):   "the run has ended",
		fencedRequest("closing", "step-001-call-1-charge"): "the run's rollback has begun",
	} {
		_, err := store.ClaimCall(ctx, req, leafOf(req, 2), time.Minute)
		require.ErrorIs(t, err, ledgerdb.ErrFenced, req.Key)
		assert.Contains(t, err.Error(), why, req.Key)
	}
	assert.Len(t, leafCalls(t, store, "ended"), 1, "only the first claim's")
	assert.Empty(t, leafCalls(t, store, "closing"))
}

// A model turn's claim writes the appended messages, and once it holds the
// key reads the conversation as its plan fits it: the oldest output
// shortened, the pinned messages and the last turn whole. A stored turn
// reads nothing.
func TestClaimTurnWritesThenReadsTheConversation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := ledgertest.NewStore(t)
	long := make([]byte, 3000)
	for i := range long {
		long[i] = 'a' + byte(i%26)
	}
	require.NoError(t, store.AppendMessages(ctx, "wf-1", []ledgerdb.Message{
		{Seq: 2, Role: "assistant", ToolCalls: []byte(`[{"id":"1","name":"page","arguments":"{}"}]`), Tokens: 20},
		{Seq: 3, Role: "tool", Content: string(long), SourceKey: "wf-1/step-001-call-1-page", Tokens: 900},
		{Seq: 4, Role: "assistant", Content: "more", Tokens: 10},
		{Seq: 5, Role: "tool", Content: "short", Tokens: 10},
	}))
	req := ledgerdb.ActionRequest{Key: "wf-1/step-003-model", WorkflowID: "wf-1", ActivityID: "step-003-model",
		Tool: "model:scripted", Arguments: `{"through":6}`, Kind: ledgerdb.ActionModel}
	leaf := ledgerdb.LeafCall{Attempt: 1, Kind: ledgerdb.LeafModel, Target: "scripted"}
	turn := ledgerdb.TurnRead{WorkflowID: "wf-1", Through: 6,
		Append: []ledgerdb.Message{
			{Seq: 0, Role: "system", Content: "You read pages.", Pinned: true, Tokens: 10},
			{Seq: 1, Role: "user", Content: "Read them.", Pinned: true, Tokens: 10},
		},
		Fit: ledgerdb.FitRequest{Budget: 500, KeptTurns: 1, CutBytes: 100, CutTokens: 50, NoteTokens: 10}}

	claim, err := store.ClaimTurn(ctx, req, leaf, time.Minute, turn)
	require.NoError(t, err)
	require.True(t, claim.Execute)
	require.Positive(t, claim.LeafCallID)
	assert.Equal(t, ledgerdb.FitPlan{CutBefore: 4}, claim.Plan)
	require.Len(t, claim.Conversation, 6)
	for i, m := range claim.Conversation {
		assert.Equal(t, i, m.Seq)
	}
	assert.Equal(t, "You read pages.", claim.Conversation[0].Content, "the appended messages are read back")
	assert.True(t, claim.Conversation[0].Pinned)
	assert.JSONEq(t, `[{"id":"1","name":"page","arguments":"{}"}]`, string(claim.Conversation[2].ToolCalls))
	assert.Equal(t, string(long[:100]), claim.Conversation[3].Content, "the old output is read only in part")
	assert.Equal(t, 3000, claim.Conversation[3].Bytes)
	assert.Equal(t, "wf-1/step-001-call-1-page", claim.Conversation[3].SourceKey)
	assert.Equal(t, "short", claim.Conversation[5].Content)
	calls := leafCalls(t, store, "wf-1")
	require.Len(t, calls, 1)
	assert.Equal(t, ledgerdb.LeafModel, calls[0].Kind)

	_, err = store.SettleAttempt(ctx, req.Key, claim.Action.Attempts, ledgerdb.AttemptEnd{Status: agentsagatype.ActionCompleted,
		Result: `{"content":"done"}`, LeafCallID: claim.LeafCallID,
		Message: &ledgerdb.Message{Seq: 6, Role: "assistant", Content: "done"}})
	require.NoError(t, err)
	replay, err := store.ClaimTurn(ctx, req, leaf, time.Minute, turn)
	require.NoError(t, err)
	assert.False(t, replay.Execute)
	assert.Equal(t, `{"content":"done"}`, replay.Action.Result)
	assert.Empty(t, replay.Conversation)
	turns, err := store.ListModelTurns(ctx, "wf-1")
	require.NoError(t, err)
	assert.Len(t, turns, 1)
}

// queue starts n calls of fn while the store's batches are held, waits
// until all n statements are queued, then frees the batches.
func queue(t *testing.T, store *ledgerdb.Store, n int, fn func(i int)) {
	t.Helper()
	release := ledgerdb.HoldBatches(store)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { fn(i) })
	}
	require.Eventually(t, func() bool { return ledgerdb.QueuedStatements(store) == n }, 10*time.Second, time.Millisecond)
	release()
	wg.Wait()
}

// Calls that claim or complete while others are in flight go out together:
// one round trip and one commit for the lot, and each gets its own answer.
// Two attempts of one key in one batch: the first executes, the second
// finds it in flight.
func TestCallsMadeTogetherShareARoundTrip(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	statements := &ledgertest.Statements{}
	store := ledgertest.NewCountingStore(t, statements)
	const keys = 10
	claims := make([]ledgerdb.Claim, keys+1)
	errs := make([]error, keys+1)
	queue(t, store, keys+1, func(i int) {
		req := request(fmt.Sprintf("step-%03d-call-1-charge", min(i, keys-1))) // the last two: one key
		claims[i], errs[i] = store.ClaimCall(ctx, req, leafOf(req, 1), time.Minute)
	})
	sent := statements.Take()
	assert.Len(t, sent, keys+1)
	assert.Equal(t, 1, ledgertest.RoundTrips(sent), "one batch")
	executed := 0
	for i, err := range errs {
		if i >= keys-1 && errors.Is(err, ledgerdb.ErrInFlight) {
			continue
		}
		require.NoError(t, err, i)
		require.True(t, claims[i].Execute, i)
		executed++
	}
	assert.Equal(t, keys, executed, "every key once")

	queue(t, store, keys, func(i int) {
		claim := claims[i]
		if !claim.Execute {
			claim = claims[keys]
		}
		_, errs[i] = store.SettleAttempt(ctx, claim.Action.Key, claim.Action.Attempts, ledgerdb.AttemptEnd{
			Status: agentsagatype.ActionCompleted, Result: fmt.Sprint(i), LeafCallID: claim.LeafCallID})
	})
	sent = statements.Take()
	assert.Equal(t, 1, ledgertest.RoundTrips(sent), "one batch")
	for i := range keys {
		require.NoError(t, errs[i], i)
	}
	for _, leaf := range leafCalls(t, store, "wf-1") {
		assert.Equal(t, "ok", leaf.Outcome, leaf.Key)
	}
}

// A statement the server refuses aborts its batch's transaction: the batch
// is rolled back and its statements sent again one at a time, so the bad
// one fails its own call only and the others are written once.
func TestARefusedStatementFailsItsOwnCallOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	statements := &ledgertest.Statements{}
	store := ledgertest.NewCountingStore(t, statements)
	const n = 6
	errs := make([]error, n)
	queue(t, store, n, func(i int) {
		key := fmt.Sprintf("step-%03d-call-1-charge", i)
		if i == 3 {
			key = "bad\x00key" // Postgres refuses a NUL
		}
		req := request(key)
		_, errs[i] = store.ClaimCall(ctx, req, leafOf(req, 1), time.Minute)
	})
	for i, err := range errs {
		if i == 3 {
			assert.ErrorContains(t, err, "0x00", "the refused statement's own error")
			continue
		}
		assert.NoError(t, err, i)
	}
	sent := statements.Take()
	assert.Equal(t, 1+n, ledgertest.RoundTrips(sent), "the batch, then each alone")
	actions, err := store.ListActions(ctx, "wf-1")
	require.NoError(t, err)
	assert.Len(t, actions, n-1)
	assert.Len(t, leafCalls(t, store, "wf-1"), n-1, "the rolled-back batch left nothing behind")
}

// A call whose context ends while its statement waits for a batch leaves
// the queue, and its statement is never sent.
func TestACallThatGivesUpWhileQueuedSendsNothing(t *testing.T) {
	t.Parallel()
	statements := &ledgertest.Statements{}
	store := ledgertest.NewCountingStore(t, statements)
	release := ledgerdb.HoldBatches(store)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	req := request("step-001-call-1-charge")
	_, err := store.ClaimCall(ctx, req, leafOf(req, 1), time.Minute)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Zero(t, ledgerdb.QueuedStatements(store))
	release()
	assert.Empty(t, statements.Take())
	_, err = store.GetAction(context.Background(), req.Key)
	assert.ErrorIs(t, err, ledgerdb.ErrNotFound)
}

// Many calls at once, every key attempted twice, under -race: each key
// executes once, every leaf call ends, and the calls shared round trips.
func TestConcurrentCallsKeepTheirAnswers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := ledgertest.NewStore(t)
	const calls = 64
	var executed atomic.Int32
	var wg sync.WaitGroup
	for i := range calls {
		wg.Go(func() {
			req := request(fmt.Sprintf("step-%03d-call-1-charge", i/2))
			claim, err := store.ClaimCall(ctx, req, leafOf(req, 1+i%2), time.Minute)
			if errors.Is(err, ledgerdb.ErrInFlight) || !assert.NoError(t, err) || !claim.Execute {
				return
			}
			executed.Add(1)
			_, err = store.SettleAttempt(ctx, req.Key, claim.Action.Attempts, ledgerdb.AttemptEnd{
				Status: agentsagatype.ActionCompleted, Result: "ok", LeafCallID: claim.LeafCallID})
			assert.NoError(t, err)
		})
	}
	wg.Wait()
	assert.Equal(t, int32(calls/2), executed.Load(), "each key executed once")
	actions, err := store.ListActions(ctx, "wf-1")
	require.NoError(t, err)
	assert.Len(t, actions, calls/2)
	for _, a := range actions {
		assert.Equal(t, agentsagatype.ActionCompleted, a.Status, a.Key)
	}
	leaves := leafCalls(t, store, "wf-1")
	assert.Len(t, leaves, calls/2)
	for _, leaf := range leaves {
		assert.Equal(t, "ok", leaf.Outcome, leaf.Key)
	}
}

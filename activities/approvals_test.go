package activities_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"

	"github.com/agentsaga/agentsaga/activities"
	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/internal/ledgertest"
	"github.com/agentsaga/agentsaga/internal/runevents"
	"github.com/agentsaga/agentsaga/internal/wire"
)

// The source of a fork still waits on the approval request the fork
// closed: a human's decision sent to it fails for good naming the fork,
// its timeout records nothing and fails nothing, and its reminders and
// timeout are not published (nobody is to be reminded of the request).
func TestApprovalActivitiesOfAForkedSource(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := ledgertest.NewStore(t)
	acts := &activities.Activities{Ledger: store}
	require.NoError(t, store.StartRun(ctx, agentsagatype.Run{WorkflowID: "src", RunID: "r1", Goal: "refund", Spec: json.RawMessage(`{}`)}))
	claim, err := store.ClaimAction(ctx, ledgerdb.ActionRequest{Key: "src/step-001-model", WorkflowID: "src", ActivityID: "step-001-model",
		Tool: "model:scripted", Arguments: `{"through": 0, "finish": false}`, Kind: ledgerdb.ActionModel}, time.Minute)
	require.NoError(t, err)
	_, err = store.CompleteAction(ctx, claim.Action.Key, claim.Action.Attempts, `{"content": ""}`)
	require.NoError(t, err)
	const key = "src/step-001-call-1-refund"
	_, err = store.RequestApproval(ctx, agentsagatype.ApprovalRequest{Key: key, WorkflowID: "src", Call: "step-001-call-1-refund",
		Tool: "refund", Arguments: `{"amount": 250}`, Why: "amount > 100"})
	require.NoError(t, err)
	_, err = store.ForkRun(ctx, ledgerdb.ForkRequest{Source: "src", Fork: "src-fork", At: 1})
	require.NoError(t, err)

	_, err = newEnv(t, acts).ExecuteActivity(acts.DecideApproval, wire.ApprovalDecision{Key: key, Call: "step-001-call-1-refund", Approve: true, By: "bob"})
	var app *temporal.ApplicationError
	require.True(t, errors.As(err, &app), "%v", err)
	assert.Equal(t, wire.ErrTypeApprovalDecided, app.Type())
	assert.True(t, app.NonRetryable())
	assert.Contains(t, app.Message(), "the run was forked into src-fork")

	val, err := newEnv(t, acts).ExecuteActivity(acts.DecideApproval, wire.ApprovalDecision{Key: key, Call: "step-001-call-1-refund",
		By: "agentsaga", Reason: "nobody decided in time", TimedOut: true})
	require.NoError(t, err, "a timeout on a superseded request records nothing, and fails nothing")
	var recorded agentsagatype.Approval
	require.NoError(t, val.Get(&recorded))
	assert.Equal(t, agentsagatype.ApprovalSuperseded, recorded.Status)

	before, err := runevents.New(store.Pool()).Head(ctx, "src")
	require.NoError(t, err)
	for _, timedOut := range []bool{false, true} {
		_, err = newEnv(t, acts).ExecuteActivity(acts.PublishWaitEvent, wire.WaitEvent{WorkflowID: "src", Key: key + "/approval-0/x",
			Of: wire.WaitApproval, CallKey: key, Reminder: 1, TimedOut: timedOut})
		require.NoError(t, err)
	}
	after, err := runevents.New(store.Pool()).Head(ctx, "src")
	require.NoError(t, err)
	assert.Equal(t, before, after, "no reminder, no timeout published for a request a fork closed")
}

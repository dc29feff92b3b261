package activities_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/activities"
	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/internal/ledgertest"
	"github.com/agentsaga/agentsaga/internal/wire"
)

// A replay's rollback compensates nothing. Its recorded tools register no
// compensation; even one that found its way into its ledger (written here
// by hand) is not planned, while the same rows under a run that is no
// replay are.
func TestAReplaysRollbackPlansNothing(t *testing.T) {
	t.Parallel()
	store := ledgertest.NewStore(t)
	env := newEnv(t, &activities.Activities{Ledger: store})
	for _, run := range []struct {
		id, spec string
		planned  int
	}{
		{"charged", `{"tools":[{"name":"charge","kind":"http","url":"http://127.0.0.1:1/charge"}]}`, 1},
		{"replay-charged-1", `{"tools":[{"name":"charge","kind":"recorded","recording":{"source":"charged","replay":"replay-charged-1"}}]}`, 0},
	} {
		ctx := t.Context()
		require.NoError(t, store.StartRun(ctx, agentsagatype.Run{WorkflowID: run.id, RunID: "r", Goal: "g", Spec: []byte(run.spec)}))
		key := run.id + "/step-001-call-1-charge"
		_, err := store.ClaimAction(ctx, ledgerdb.ActionRequest{Key: key, WorkflowID: run.id, ActivityID: "step-001-call-1-charge",
			Tool: "charge", Arguments: `{}`, Compensation: &wire.CompensationRequest{Tool: "refund", ArgumentsTemplate: `{}`}}, time.Minute)
		require.NoError(t, err)
		_, err = store.CompleteAction(ctx, key, 1, `{"id":"ch"}`)
		require.NoError(t, err)

		val, err := env.ExecuteActivity(wire.ActivityRollbackPlan, wire.RollbackPlanRequest{WorkflowID: run.id})
		require.NoError(t, err)
		var plan wire.RollbackPlan
		require.NoError(t, val.Get(&plan))
		assert.Len(t, plan.Stack, run.planned, run.id)
	}
}

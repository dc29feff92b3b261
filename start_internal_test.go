package agentsaga

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/internal/ledgertest"
	"github.com/agentsaga/agentsaga/workflows"
)

// An account with fewer than burstRuns runs in flight has its new run's
// tasks weigh burstRuns times its weight; once it has burstRuns in flight
// (queued ones count, finished ones do not), its plain weight. Without a
// ledger the weight is left to the server (1).
func TestTaskPriorityWeighsASparseAccountUp(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	handle := ledgertest.NewHandle(t)
	store := ledgerdb.Of(handle)
	require.NoError(t, store.SetAccountLimits(ctx, ledgerdb.AccountLimits{Account: "acme", Weight: 3}, "test"))
	spec := RunSpec{Priority: 2, Budget: Budget{Account: "acme/support"}}
	p := taskPriority(ctx, handle, spec)
	assert.Equal(t, 2, p.PriorityKey)
	assert.Equal(t, "acme/support", p.FairnessKey)
	assert.Equal(t, float32(3*burstRuns), p.FairnessWeight, "no runs in flight: the parent's weight, weighed up")

	record := func(id string) {
		raw, err := json.Marshal(spec)
		require.NoError(t, err)
		require.NoError(t, store.StartRun(ctx, agentsagatype.Run{WorkflowID: id, RunID: "r", Goal: "g", Spec: raw}))
	}
	for i := range burstRuns - 1 {
		record(fmt.Sprintf("run-%d", i))
	}
	assert.Equal(t, float32(3*burstRuns), taskPriority(ctx, handle, spec).FairnessWeight, "one place short of the burst")
	record("run-last")
	assert.Equal(t, float32(3), taskPriority(ctx, handle, spec).FairnessWeight, "a full burst in flight: its plain weight")
	require.NoError(t, store.FinishRun(ctx, "run-0", agentsagatype.RunOutcome{Status: agentsagatype.RunCompleted}))
	assert.Equal(t, float32(3*burstRuns), taskPriority(ctx, handle, spec).FairnessWeight, "a finished run frees its place")
	other := taskPriority(ctx, handle, RunSpec{Budget: Budget{Account: "globex"}})
	assert.Equal(t, workflows.DefaultPriority, other.PriorityKey)
	assert.Equal(t, float32(burstRuns), other.FairnessWeight, "another account's runs are its own")

	assert.Zero(t, taskPriority(ctx, nil, spec).FairnessWeight, "no ledger: the server's default")
}

package api

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/cmd/agentsaga/apikeys"
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
)

// A fork and its source name each other in the run JSON (forked_from,
// forked_at_step, forks); forking takes runs:write.
func TestRunJSONLinksAForkAndItsSource(t *testing.T) {
	w := newWorld(t)
	reader := w.key("reader", "", apikeys.RunsRead)
	ctx := context.Background()
	w.run("src", "")
	claim, err := w.db.ClaimAction(ctx, ledgerdb.ActionRequest{Key: "src/step-001-model", WorkflowID: "src", ActivityID: "step-001-model",
		Tool: "model:scripted", Arguments: `{"through": 2, "finish": false}`, Kind: ledgerdb.ActionModel}, time.Minute)
	require.NoError(t, err)
	_, err = w.db.CompleteAction(ctx, claim.Action.Key, claim.Action.Attempts, `{}`)
	require.NoError(t, err)
	require.NoError(t, w.db.SetRunStatus(ctx, "src", agentsagatype.RunEscalated, ""))
	_, err = w.db.ForkRun(ctx, ledgerdb.ForkRequest{Source: "src", Fork: "src-fork", At: ledgerdb.ForkAtFailed})
	require.NoError(t, err)

	fork := w.do("GET", "/v1/runs/src-fork", reader, "")
	require.Equal(t, http.StatusOK, fork.status, "%s", fork.body)
	assert.Equal(t, "src", fork.json(t)["forked_from"])
	assert.EqualValues(t, 1, fork.json(t)["forked_at_step"])
	source := w.do("GET", "/v1/runs/src", reader, "")
	require.Equal(t, http.StatusOK, source.status, "%s", source.body)
	assert.Equal(t, []any{"src-fork"}, source.json(t)["forks"])

	refused := w.do("POST", "/v1/runs/src/fork", reader, `{"at": 1}`)
	assert.Equal(t, http.StatusForbidden, refused.status, "%s", refused.body)
}

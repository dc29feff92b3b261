package worker_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/internal/ledgertest"
	"github.com/agentsaga/agentsaga/internal/runevents"
	"github.com/agentsaga/agentsaga/workflows"
)

// A run publishes its calls as they start and end, and how it ended, to
// its event log (issue 33), once, with its status, reason and answer: what
// `agentsaga watch` stops at.
func TestARunPublishesItsEnding(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	store := ledgertest.NewHandle(t)
	queue := "run-events"
	w := startWorker(ctx, t, store, queue)
	defer w.Stop()
	tool := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		_, _ = rw.Write([]byte(`{"ok": true}`))
	}))
	defer tool.Close()

	id := "run-events-" + t.Name()
	run, err := temporalClient.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: queue}, workflows.AgentRun, itemsSpec(t, tool.URL, 2, ""))
	require.NoError(t, err)
	var result workflows.RunResult
	require.NoError(t, run.Get(ctx, &result))
	require.Equal(t, agentsagatype.RunCompleted, result.Status, result.Reason)

	events, err := runevents.New(ledgerdb.Of(store).Pool()).Read(ctx, id, 0, 100)
	require.NoError(t, err)
	var kinds []string
	for _, e := range events {
		kinds = append(kinds, e.Kind)
	}
	// Three turns and two fetches, each started and finished once, then
	// the ending; a run that never waited has nothing else.
	require.Equal(t, []string{runevents.TurnStarted, runevents.TurnFinished, runevents.ToolStarted, runevents.ToolFinished,
		runevents.TurnStarted, runevents.TurnFinished, runevents.ToolStarted, runevents.ToolFinished,
		runevents.TurnStarted, runevents.TurnFinished, runevents.RunFinished}, kinds)
	events = events[len(events)-1:]
	var ending struct {
		Status string `json:"status"`
		Reason string `json:"reason"`
		Answer string `json:"answer"`
		Steps  int    `json:"steps"`
	}
	require.NoError(t, json.Unmarshal(events[0].Data, &ending))
	assert.Equal(t, agentsagatype.RunCompleted, ending.Status)
	assert.Equal(t, result.Reason, ending.Reason)
	assert.Equal(t, "all 2 fetched", ending.Answer)
	assert.Equal(t, 3, ending.Steps)
}

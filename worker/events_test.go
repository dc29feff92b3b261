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

// A run's event log fills as the run runs (issue 33): each turn's start and
// text, each tool call's start and end with the call's key, and how the run
// ended, in order, each once; the run's history is what it was without it.
func TestARunPublishesItsEvents(t *testing.T) {
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
	spec := itemsSpec(t, tool.URL, 2, "")

	id := "run-events-" + t.Name()
	run, err := temporalClient.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: queue}, workflows.AgentRun, spec)
	require.NoError(t, err)
	var result workflows.RunResult
	require.NoError(t, run.Get(ctx, &result))
	require.Equal(t, agentsagatype.RunCompleted, result.Status, result.Reason)

	events, err := runevents.New(ledgerdb.Of(store).Pool()).Read(ctx, id, 0, 100)
	require.NoError(t, err)
	var kinds []string
	keys := map[string]bool{}
	for i, e := range events {
		assert.EqualValues(t, i+1, e.Seq)
		assert.False(t, keys[e.Key], "%s once", e.Key)
		keys[e.Key] = true
		kinds = append(kinds, e.Kind)
	}
	// Three turns: two that each call the tool (a scripted turn that only
	// calls a tool has no text), then the answer.
	require.Equal(t, []string{
		runevents.TurnStarted, runevents.ToolStarted, runevents.ToolFinished,
		runevents.TurnStarted, runevents.ToolStarted, runevents.ToolFinished,
		runevents.TurnStarted, runevents.TextDelta, runevents.RunFinished,
	}, kinds)
	started, finished := 0, 0
	for _, e := range events {
		switch e.Kind {
		case runevents.ToolStarted:
			started++
			assert.Contains(t, e.CallKey, id+"/step-", "the call's idempotency key")
		case runevents.ToolFinished:
			finished++
			var data struct {
				Tool   string `json:"tool"`
				Output string `json:"output"`
			}
			require.NoError(t, json.Unmarshal(e.Data, &data))
			assert.Equal(t, "fetch", data.Tool)
			assert.JSONEq(t, `{"ok": true}`, data.Output)
		case runevents.RunFinished:
			var data struct {
				Status string `json:"status"`
				Answer string `json:"answer"`
			}
			require.NoError(t, json.Unmarshal(e.Data, &data))
			assert.Equal(t, agentsagatype.RunCompleted, data.Status)
			assert.Equal(t, "all 2 fetched", data.Answer)
		}
	}
	assert.Equal(t, 2, started)
	assert.Equal(t, 2, finished)
	var delta runevents.Delta
	require.NoError(t, json.Unmarshal(events[7].Data, &delta))
	assert.Equal(t, "all 2 fetched", delta.Text)
}

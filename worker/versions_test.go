package worker_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/activityid"
	"github.com/agentsaga/agentsaga/internal/ledgertest"
	"github.com/agentsaga/agentsaga/internal/workertest"
	"github.com/agentsaga/agentsaga/workflows"
)

// The versioning rule at work, on one change (workflows/versions.go):
// a turn's failed calls are given up together. Both halves are checked on
// the same scenario, two refunds of one turn that both fail: the history
// recorded on the old code still replays and shows the old path, and a
// run started today records the version that implies it (today's
// executions record one change ID, agentsaga-commands, for every change)
// and takes the new one.
func TestGiveUpsTogetherIsBehindGetVersion(t *testing.T) {
	t.Parallel()
	const scenario = "failed-together"

	t.Run("an old history replays on the old path", func(t *testing.T) {
		t.Parallel()
		f, err := os.Open(corpusDir + "/" + scenario + ".json")
		require.NoError(t, err)
		defer f.Close()
		history, err := client.HistoryFromJSON(f, client.HistoryJSONOptions{})
		require.NoError(t, err)
		version, err := workertest.RecordedVersion(history.Events, "give-ups-together")
		require.NoError(t, err)
		require.Equal(t, workflow.DefaultVersion, version)
		require.False(t, giveUpAhead(t, history.Events), "the old code gave the calls up in order")
		replay(t, history, "corpus-"+scenario)
	})

	t.Run("a new run takes the new path", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		// The first call answers 2 s after the second: the new path gives
		// the second up while the first still runs, the old one never would.
		missing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if strings.HasSuffix(r.Header.Get("Idempotency-Key"), activityid.Tool(1, 1, "refund")) {
				time.Sleep(2 * time.Second)
			}
			http.Error(w, `{"error":"no such charge"}`, http.StatusNotFound)
		}))
		defer missing.Close()
		store := ledgertest.NewHandle(t)
		queue := fmt.Sprintf("versions-%d", time.Now().UnixNano())
		w := startWorker(ctx, t, store, queue)
		defer w.Stop()
		spec, err := workflows.ParseSpec([]byte(fmt.Sprintf("goal: refund two charges\nbudget: {steps: 4}\nmodel:\n  provider: scripted\n  script:\n"+
			"    - tool_calls: [{name: refund, arguments: {charge_id: ch_x, customer: ann}}, {name: refund, arguments: {charge_id: ch_y, customer: bob}}]\n"+
			"    - content: there was nothing to refund\n"+
			"tools:\n  - {name: refund, kind: http, url: %s/refund, timeout_seconds: 3}\n", missing.URL)))
		require.NoError(t, err)
		run, err := temporalClient.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: queue, TaskQueue: queue}, workflows.AgentRun, spec)
		require.NoError(t, err)
		var result workflows.RunResult
		require.NoError(t, run.Get(ctx, &result))
		require.Equal(t, agentsagatype.RunCompleted, result.Status, result.Reason)
		require.Equal(t, "there was nothing to refund", result.Answer)

		history, err := workertest.History(ctx, temporalClient, queue, run.GetRunID())
		require.NoError(t, err)
		version, err := workertest.RecordedVersion(history.Events, "agentsaga-commands")
		require.NoError(t, err)
		require.GreaterOrEqual(t, version, workflow.Version(1))
		legacy, err := workertest.RecordedVersion(history.Events, "give-ups-together")
		require.NoError(t, err)
		require.Equal(t, workflow.DefaultVersion, legacy, "a new run records no marker of its own for the older change")
		require.True(t, giveUpAhead(t, history.Events), "the second call was given up while the first still ran")
		replay(t, history, queue)
	})
}

// giveUpAhead checks that an execution gave up two calls, and returns
// whether it gave a call up while an earlier one still ran
// (workertest.GiveUps): the new path gives each call up as it fails, the
// old one in call order.
func giveUpAhead(t *testing.T, events []*historypb.HistoryEvent) bool {
	t.Helper()
	scheduled, ahead := workertest.GiveUps(events)
	require.Equal(t, 2, scheduled, "the scenario gives up two calls")
	return ahead
}

// replay replays a history on today's workflow code; a non-determinism
// error fails the test.
func replay(t *testing.T, history *historypb.History, id string) {
	t.Helper()
	replayer := sdkworker.NewWorkflowReplayer()
	replayer.RegisterWorkflow(workflows.AgentRun)
	require.NoError(t, replayer.ReplayWorkflowHistoryWithOptions(nil, history, sdkworker.ReplayWorkflowHistoryOptions{
		OriginalExecution: workflow.Execution{ID: id}}))
}

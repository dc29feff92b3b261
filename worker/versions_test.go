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
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/ledger/ledgertest"
	"github.com/agentsaga/agentsaga/workflows"
)

// The versioning rule at work, on one change (workflows/versions.go):
// a turn's failed calls are given up together. Both halves are checked on
// the same scenario, two refunds of one turn that both fail: the history
// recorded on the old code still replays and shows the old path, and a
// run started today records the version and takes the new one.
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
		require.Equal(t, workflow.DefaultVersion, recordedVersion(t, history.Events, "give-ups-together"))
		require.False(t, giveUpsOverlap(t, history.Events), "the old code gave up one call after the other")
		replay(t, history, "corpus-"+scenario)
	})

	t.Run("a new run takes the new path", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		missing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, `{"error":"no such charge"}`, http.StatusNotFound)
		}))
		defer missing.Close()
		store := ledgertest.NewStore(t)
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
		require.Equal(t, ledger.RunCompleted, result.Status, result.Reason)
		require.Equal(t, "there was nothing to refund", result.Answer)

		history := fetchHistory(ctx, t, queue, run.GetRunID())
		require.Equal(t, workflow.Version(1), recordedVersion(t, history.Events, "give-ups-together"))
		require.True(t, giveUpsOverlap(t, history.Events), "both give-ups were under way at once")
		replay(t, history, queue)
	})
}

// recordedVersion is the version an execution recorded for changeID, or
// DefaultVersion when it recorded none (it ran on code without the change).
func recordedVersion(t *testing.T, events []*historypb.HistoryEvent, changeID string) workflow.Version {
	t.Helper()
	dc := converter.GetDefaultDataConverter()
	for _, event := range events {
		marker := event.GetMarkerRecordedEventAttributes()
		if marker == nil || marker.GetMarkerName() != "Version" {
			continue
		}
		var id string
		require.NoError(t, dc.FromPayloads(marker.GetDetails()["change-id"], &id))
		if id == changeID {
			var version workflow.Version
			require.NoError(t, dc.FromPayloads(marker.GetDetails()["version"], &version))
			return version
		}
	}
	return workflow.DefaultVersion
}

// giveUpsOverlap says whether a second give-up was scheduled before the
// first one completed; it fails unless the history has two give-ups.
func giveUpsOverlap(t *testing.T, events []*historypb.HistoryEvent) bool {
	t.Helper()
	scheduled, open, overlapped := 0, map[int64]bool{}, false
	for _, event := range events {
		if attrs := event.GetActivityTaskScheduledEventAttributes(); attrs != nil && strings.HasSuffix(attrs.GetActivityId(), "/give-up") {
			scheduled++
			overlapped = overlapped || len(open) > 0
			open[event.GetEventId()] = true
		}
		if attrs := event.GetActivityTaskCompletedEventAttributes(); attrs != nil {
			delete(open, attrs.GetScheduledEventId())
		}
	}
	require.Equal(t, 2, scheduled, "the scenario gives up two calls")
	return overlapped
}

func fetchHistory(ctx context.Context, t *testing.T, id, runID string) *historypb.History {
	t.Helper()
	history := &historypb.History{}
	iter := temporalClient.GetWorkflowHistory(ctx, id, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for iter.HasNext() {
		event, err := iter.Next()
		require.NoError(t, err)
		history.Events = append(history.Events, event)
	}
	return history
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

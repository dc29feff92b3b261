package worker_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/workflows"
)

// searchSpec is a run that searches for n different queries, one a turn,
// through a search tool (read_only or not), then answers.
func searchSpec(t *testing.T, url string, n int, readOnly bool) workflows.RunSpec {
	t.Helper()
	return resolvedSpec(t, fmt.Sprintf(`
goal: find a supplier
budget: {steps: 30}
watchdog: {no_progress_turns: 3}
model:
  provider: scripted
  script:
%[1]s    - content: searched %[2]d queries
tools:
  - name: search
    kind: http
    url: %[3]s
    read_only: %[4]t
    parameters: {type: object, properties: {query: {type: string}}, required: [query]}
`, searchesScript(n), n, url, readOnly))
}

// A search tool that answers "no results" to every query. Declared
// read_only, its new queries are not progress: the first answer is new,
// the next three are nothing new, and the watchdog stops the run after
// those 3 turns (watchdog.no_progress_turns), naming the rule. The same
// tool not declared read_only is taken at its word that each new call
// changed something, and the run asks all 10 queries (issue 30).
func TestReadOnlyToolThatFindsNothingIsStoppedByTheWatchdog(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	store, queue := defaultBreakerWorker(ctx, t, "read-only")
	var requests atomic.Int64
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		requests.Add(1)
		fmt.Fprint(w, "no results")
	}))
	defer server.Close()
	const queries, turns = 10, 3

	id := "read-only-" + t.Name()
	run, err := temporalClient.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: queue}, workflows.AgentRun,
		searchSpec(t, server.URL, queries, true))
	require.NoError(t, err)
	var result workflows.RunResult
	require.NoError(t, run.Get(ctx, &result))
	assert.Equal(t, agentsagatype.RunPartial, result.Status, result.Reason)
	assert.Contains(t, result.Reason, "watchdog")
	assert.Contains(t, result.Reason, "(rule nothing new)")
	assert.Equal(t, int64(1+turns), requests.Load(), "searches sent: the first answer, then %d turns of nothing new", turns)
	stored, err := ledgerdb.Of(store).GetRun(ctx, id)
	require.NoError(t, err)
	assert.Equal(t, result.Reason, stored.Reason, "the ledger's reason")

	requests.Store(0)
	id += "-writes"
	run, err = temporalClient.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: queue}, workflows.AgentRun,
		searchSpec(t, server.URL, queries, false))
	require.NoError(t, err)
	require.NoError(t, run.Get(ctx, &result))
	assert.Equal(t, agentsagatype.RunCompleted, result.Status, result.Reason)
	assert.Equal(t, int64(queries), requests.Load(), "searches sent by the tool not declared read_only")
	t.Logf("read_only: stopped after %d searches with %q; not read_only: %d searches, %s", 1+turns, stored.Reason, requests.Load(), result.Status)
}

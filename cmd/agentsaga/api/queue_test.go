package api

import (
	"context"
	"net/http"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"

	"github.com/agentsaga/agentsaga/agentsagatest"
	"github.com/agentsaga/agentsaga/cmd/agentsaga/apikeys"
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
)

// signals is a Temporal client that only records the signals sent.
type signals struct {
	client.Client
	mu   sync.Mutex
	sent []string
}

func (s *signals) SignalWorkflow(_ context.Context, id, _, name string, _ any) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sent = append(s.sent, id+" "+name)
	return nil
}

// queue puts run id, charged to account, in its root account's queue
// behind a max_concurrent_runs of 1 that another run holds.
func (w *world) queue(id, account string) {
	w.t.Helper()
	w.run(id, account)
	require.True(w.t, agentsagatest.Admit(w.t, w.store, id, account, 3, 0), "%s is not queued", id)
}

// GET /v1/queue lists the queued runs the key sees, with their place and
// why they wait; POST /v1/runs/{id}/cancel-queued takes one out and tells
// its workflow; a run that is not queued is a 409 not-queued, another
// account's a 404; ?priority= on a start stands for the spec's.
func TestQueueRoutes(t *testing.T) {
	temporal := &signals{}
	w := newWorld(t, func(c *Config) { c.Client = temporal })
	ctx := context.Background()
	reader := w.key("reader", "acme", apikeys.RunsRead)
	writer := w.key("writer", "acme", apikeys.RunsRead, apikeys.RunsWrite)
	admin := w.key("admin", "", apikeys.RunsRead, apikeys.RunsWrite)
	for _, root := range []string{"acme", "globex"} {
		require.NoError(t, w.db.SetAccountLimits(ctx, ledgerdb.AccountLimits{Account: root, MaxConcurrentRuns: 1}, "ops"))
		w.run(root+"-holder", root)
		require.False(t, agentsagatest.Admit(t, w.store, root+"-holder", root, 3, 0), "%s-holder is queued", root)
	}
	w.queue("acme-1", "acme/support")
	w.queue("acme-2", "acme/sales")
	w.queue("globex-1", "globex")

	a := w.do("GET", "/v1/queue", reader, "")
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	queued := a.json(t)["queued"].([]any)
	require.Len(t, queued, 2, "another account's queued run does not exist for the key")
	first := queued[0].(map[string]any)
	assert.Equal(t, "acme-1", first["run_id"])
	assert.EqualValues(t, 1, first["place"])
	assert.EqualValues(t, 3, first["priority"])
	assert.Contains(t, first["reason"], "account acme runs 1 of its 1 concurrent runs")
	assert.Contains(t, first, "expected_start", "acme admitted a run in the last hour: its rate estimates the start")
	a = w.do("GET", "/v1/queue?account=acme/sales", reader, "")
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	require.Len(t, a.json(t)["queued"], 1)
	assert.EqualValues(t, 2, a.json(t)["queued"].([]any)[0].(map[string]any)["place"], "its place in its root's queue")
	a = w.do("GET", "/v1/queue?account=globex", reader, "")
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	assert.Empty(t, a.json(t)["queued"])
	a = w.do("GET", "/v1/queue", admin, "")
	require.Len(t, a.json(t)["queued"], 3, "a key bound to no account sees every queue")
	for _, bad := range []string{"/v1/queue?limit=5", "/v1/queue?account=a&account=b", "/v1/queue?account=%00"} {
		a = w.do("GET", bad, reader, "")
		assert.Equal(t, http.StatusBadRequest, a.status, "%s: %s", bad, a.body)
	}

	a = w.do("POST", "/v1/runs/acme-1/cancel-queued", reader, "")
	assert.Equal(t, http.StatusForbidden, a.status, "cancelling takes runs:write")
	a = w.do("POST", "/v1/runs/globex-1/cancel-queued", writer, "")
	assert.Equal(t, http.StatusNotFound, a.status, "another account's run does not exist for the key")
	a = w.do("POST", "/v1/runs/no-such-run/cancel-queued", writer, "")
	assert.Equal(t, http.StatusNotFound, a.status)
	a = w.do("POST", "/v1/runs/acme-1/cancel-queued", writer, `{"reason":"x"}`)
	assert.Equal(t, http.StatusBadRequest, a.status, "it takes no body: %s", a.body)
	a = w.do("POST", "/v1/runs/acme-holder/cancel-queued", writer, "")
	require.Equal(t, http.StatusConflict, a.status, "%s", a.body)
	assert.Contains(t, a.json(t)["type"], "#not-queued")
	assert.Contains(t, a.json(t)["detail"], "not waiting in an admission queue")
	assert.Empty(t, temporal.sent)

	a = w.do("POST", "/v1/runs/acme-1/cancel-queued", writer, "")
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	assert.Equal(t, map[string]any{"run": "acme-1", "cancelled": true, "by": "writer"}, a.json(t))
	assert.Equal(t, []string{"acme-1 agentsaga-admitted"}, temporal.sent, "the run is told, and ends")
	a = w.do("GET", "/v1/queue", reader, "")
	queued = a.json(t)["queued"].([]any)
	require.Len(t, queued, 1)
	assert.Equal(t, "acme-2", queued[0].(map[string]any)["run_id"])
	assert.EqualValues(t, 1, queued[0].(map[string]any)["place"])
	a = w.do("POST", "/v1/runs/acme-1/cancel-queued", writer, "")
	assert.Equal(t, http.StatusConflict, a.status, "once out, it is not queued: %s", a.body)

	for _, bad := range []string{"0", "6", "two", ""} {
		a = w.do("POST", "/v1/runs?priority="+bad, writer, helloSpec)
		require.Equal(t, http.StatusBadRequest, a.status, "priority %q: %s", bad, a.body)
		assert.Contains(t, a.json(t)["detail"], "give 1 (first in the admission queue) to 5 (last)")
	}
	assert.Zero(t, w.starts(), "bad input starts nothing")
	a = w.do("POST", "/v1/runs?id=urgent&priority=1", writer, helloSpec)
	require.Equal(t, http.StatusCreated, a.status, "%s", a.body)
	w.mu.Lock()
	assert.Equal(t, 1, w.started["urgent"].Priority)
	w.mu.Unlock()
	// The priority is part of the request an Idempotency-Key binds.
	a = w.do("POST", "/v1/runs?priority=2", writer, helloSpec, "Idempotency-Key", "k-1")
	require.Equal(t, http.StatusCreated, a.status, "%s", a.body)
	a = w.do("POST", "/v1/runs?priority=4", writer, helloSpec, "Idempotency-Key", "k-1")
	assert.Equal(t, http.StatusUnprocessableEntity, a.status, "%s", a.body)
}

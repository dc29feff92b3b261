package main

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"

	"github.com/agentsaga/agentsaga"
	"github.com/agentsaga/agentsaga/agentsagatest"
	"github.com/agentsaga/agentsaga/internal/activityid"
	"github.com/agentsaga/agentsaga/workflows"
)

var devServer *testsuite.DevServer

func TestMain(m *testing.M) {
	agentsagatest.Main(m, func(server *testsuite.DevServer) { devServer = server })
}

// A run calls the team's MCP tool: the tool list comes from the server,
// the call carries its key, the invoice is issued once.
func TestARunInvoicesThroughMCP(t *testing.T) {
	billing := &Billing{}
	id, result := runInvoice(t, billing)
	require.Equal(t, "completed", result.Status, result.Reason)
	require.Equal(t, 1, billing.Issued())
	require.Equal(t, []string{id + "/" + activityid.Tool(1, 1, "billing_create_invoice")}, billing.Keys(),
		"the invoice was issued under the call's key, from _meta")
}

// The billing backend is down for the first call: the typed tool's
// handler returns an error saying 503, the SDK sends it as text with
// isError, and agentsaga retries it under the same key, so the invoice is
// issued once, on the second attempt. Before, the status was lost and the
// 503 was a non-retryable Rejected: no invoice.
func TestATypedMCPToolsOutageIsRetried(t *testing.T) {
	billing := &Billing{Outage: 1}
	id, result := runInvoice(t, billing)
	require.Equal(t, "completed", result.Status, result.Reason)
	require.Equal(t, 2, billing.Calls(), "one 503, then the retry")
	require.Equal(t, 1, billing.Issued())
	require.Equal(t, []string{id + "/" + activityid.Tool(1, 1, "billing_create_invoice")}, billing.Keys(),
		"the retry carried the same key")
}

// runInvoice serves billing over streamable HTTP and runs Spec against it
// on an engine's worker, to its end.
func runInvoice(t *testing.T, billing *Billing) (string, agentsaga.RunResult) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	server := httptest.NewServer(billing.Handler())
	defer server.Close()

	c := devServer.Client()
	engine, err := agentsaga.New(ctx, agentsagatest.NewLedger(t), agentsaga.Config{})
	require.NoError(t, err)
	defer engine.Close()
	w := worker.New(c, engine.TaskQueue(), engine.WorkerOptions(worker.Options{}))
	engine.Register(w)
	require.NoError(t, w.Start())
	defer w.Stop()

	spec, err := workflows.ParseSpec([]byte(Spec(server.URL)))
	require.NoError(t, err)
	id := agentsagatest.RunID(t)
	run, err := engine.Start(ctx, c, id, spec, agentsaga.StartOptions{})
	require.NoError(t, err)
	result, err := run.Result(ctx)
	require.NoError(t, err)
	return id, result
}

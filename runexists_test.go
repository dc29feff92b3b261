package agentsaga_test

// Issue 30, item 4: a run ID is never silently reused. A Go team reused
// an ID after its dev server restarted: the run was accepted and answered
// from the old run's ledger rows. Start now asks the ledger by default.

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"

	"github.com/agentsaga/agentsaga"
	"github.com/agentsaga/agentsaga/agentsagatest"
	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/workertest"
	"github.com/agentsaga/agentsaga/ledger"
)

// docs/go-api.md's start, on a dev server that then restarts with a fresh
// in-memory state (a second server on the same ledger): Temporal has
// forgotten the run, the ledger has not, and the ID is refused, through
// Start and through Engine.Start. Start with neither a ledger nor the
// skip option is an error naming what is missing. With
// StartOptions.SkipLedgerCheck the start is allowed, and the new run is
// answered from the old one's rows: the refund is not made again.
func TestRunExistsInTheLedgerAfterTheDevServerRestarts(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	store := agentsagatest.NewLedger(t)
	var calls atomic.Int64
	tool := refundTool(t, &calls)
	cfg := agentsaga.Config{Tools: []agentsaga.Tool{tool}, TaskQueue: agentsagatest.RunID(t), Bucket: "bucket-" + t.Name()}
	spec := agentsaga.RunSpec{Goal: "refund o-1", Budget: agentsaga.Budget{Steps: 4},
		Model: agentsagatest.Script(agentsagatest.Call("refund_order", orderArgs{Order: "o-1"}), agentsagatest.Answer("refunded")),
		Tools: []agentsaga.ToolSpec{tool.Spec()}}
	id := agentsagatest.RunID(t)

	before, stopBefore := restartableServer(ctx, t, store, cfg)
	// docs/go-api.md's form (on this test's task queue).
	run, err := agentsaga.Start(ctx, before.Client(), id, spec, agentsaga.StartOptions{Ledger: store, TaskQueue: cfg.TaskQueue})
	require.NoError(t, err)
	result, err := run.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, agentsagatype.RunCompleted, result.Status, result.Reason)
	require.EqualValues(t, 1, calls.Load())
	stopBefore()

	after, _ := restartableServer(ctx, t, store, cfg)
	c := after.Client()
	_, err = c.DescribeWorkflowExecution(ctx, id, "")
	var notFound *serviceerror.NotFound
	require.ErrorAs(t, err, &notFound, "the restarted server has forgotten the run")

	_, err = agentsaga.Start(ctx, c, id, spec, agentsaga.StartOptions{Ledger: store, TaskQueue: cfg.TaskQueue})
	var exists *agentsaga.RunExistsError
	require.ErrorAs(t, err, &exists)
	require.Equal(t, agentsaga.RunExistsError{ID: id, InLedger: true}, *exists)
	require.ErrorAs(t, err, new(*agentsaga.RunExistsError))

	engine, err := agentsaga.New(ctx, store, cfg)
	require.NoError(t, err)
	_, err = engine.Start(ctx, c, id, spec, agentsaga.StartOptions{})
	require.ErrorAs(t, err, &exists, "the engine starts with the ledger it holds")
	require.True(t, exists.InLedger)

	_, err = agentsaga.Start(ctx, c, id, spec, agentsaga.StartOptions{TaskQueue: cfg.TaskQueue})
	require.ErrorIs(t, err, agentsaga.ErrNoLedger)
	require.ErrorContains(t, err, "StartOptions.Ledger")
	require.ErrorContains(t, err, "StartOptions.SkipLedgerCheck")
	_, err = c.DescribeWorkflowExecution(ctx, id, "")
	require.ErrorAs(t, err, &notFound, "nothing was started")

	// Skipping the check is allowed, and does what its name warns of.
	run, err = agentsaga.Start(ctx, c, id, spec, agentsaga.StartOptions{TaskQueue: cfg.TaskQueue, SkipLedgerCheck: true})
	require.NoError(t, err)
	result, err = run.Result(ctx)
	t.Logf("the reused ID's run ended %q (%s), error %v", result.Status, result.Reason, err)
	require.EqualValues(t, 1, calls.Load(), "the reused ID's refund was answered from the old run's row, not made")
}

// restartableServer starts a dev server of its own with an in-memory
// state, and an engine worker on it over store. stop stops both, the
// worker first; the test's cleanup does it too.
func restartableServer(ctx context.Context, t *testing.T, store *ledger.Store, cfg agentsaga.Config) (*testsuite.DevServer, func()) {
	t.Helper()
	server, err := workertest.StartDevServer(ctx)
	require.NoError(t, err)
	engine, err := agentsaga.New(ctx, store, cfg)
	require.NoError(t, err)
	w := worker.New(server.Client(), engine.TaskQueue(), engine.WorkerOptions(worker.Options{}))
	engine.Register(w)
	require.NoError(t, w.Start())
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		w.Stop()
		require.NoError(t, engine.Close())
		require.NoError(t, server.Stop())
	}
	t.Cleanup(stop)
	return server, stop
}

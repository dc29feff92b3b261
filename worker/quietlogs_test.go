package worker_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"

	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/ledger/ledgertest"
	"github.com/agentsaga/agentsaga/workflows"
)

// A run cancelled while a charge is in flight, then rolled back, is a run
// going as designed: the worker logs nothing at ERROR. Before, the
// cancelled attempt was an SDK "Activity error." at ERROR and the retry
// hook's "could not pay for a retry ... context canceled".
func TestACancelledRunLogsNothingAtError(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	store := ledgertest.NewStore(t)
	pay, url := startPayments(t, func(p *payments) { p.blockChargeOf = "bob" })

	queue := "quiet-" + t.Name()
	c, logs := startLoggedWorker(ctx, t, store, queue)

	spec, err := workflows.ParseSpec([]byte(fmt.Sprintf(`
goal: charge two customers
budget: {steps: 8}
model:
  provider: scripted
  script:
    - tool_calls: [{name: charge, arguments: {customer: ann, amount: 10}}]
    - tool_calls: [{name: charge, arguments: {customer: bob, amount: 20}}]
    - content: done
`+paymentTools, url)))
	require.NoError(t, err)
	id := "quiet-cancel-run"
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: queue}, workflows.AgentRun, spec)
	require.NoError(t, err)
	select {
	case <-pay.blocked:
	case <-ctx.Done():
		t.Fatal("bob's charge never reached the server")
	}
	require.NoError(t, c.CancelWorkflow(ctx, id, ""))
	var result workflows.RunResult
	require.NoError(t, run.Get(ctx, &result))
	require.Equal(t, ledger.RunCompensated, result.Status, result.Reason)
	select {
	case <-pay.closedByPeer:
	case <-time.After(10 * time.Second):
		t.Fatal("the in-flight charge was not abandoned")
	}

	text := logs.String()
	// Positive control: the cancelled attempt was logged, below ERROR.
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "retry hook: the attempt was cancelled") },
		10*time.Second, 100*time.Millisecond, "the cancelled charge's line:\n%s", text)
	for _, line := range strings.Split(logs.String(), "\n") {
		assert.NotContains(t, line, "level=ERROR", "a cancel is not an operator's problem")
	}
}

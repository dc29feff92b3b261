package worker_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/log"

	"github.com/agentsaga/agentsaga"
	"github.com/agentsaga/agentsaga/activities"
	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/ledgertest"
	"github.com/agentsaga/agentsaga/worker"
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
	store := ledgertest.NewHandle(t)
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
	require.Equal(t, agentsagatype.RunCompensated, result.Status, result.Reason)
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

// A Go tool that fails once, as a service it calls may, and then answers:
// the failure is the tool's own answer, retried as designed, so the worker
// logs it once at WARN (the retry hook, with its decision) and nothing at
// ERROR. Before, the SDK logged "Activity error." at ERROR on every failed
// attempt of a Go tool, because its error was not benign.
func TestAGoToolsRetriedErrorLogsNothingAtError(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	store := ledgertest.NewHandle(t)
	var calls atomic.Int32
	box := activities.NewToolbox()
	box.Register("reserve", func(_ context.Context, call activities.ToolInvocation) (string, error) {
		if calls.Add(1) == 1 {
			return "", errors.New("stock service busy, try again")
		}
		return `{"reserved": true}`, nil
	})

	logs := &syncBuffer{}
	logger := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	c, err := client.NewClientFromExisting(temporalClient, client.Options{Namespace: "default", Logger: log.NewStructuredLogger(logger)})
	require.NoError(t, err)
	defer c.Close()
	queue := "quiet-" + t.Name()
	w, err := worker.New(ctx, c, store, worker.Options{Config: agentsaga.Config{TaskQueue: queue, Toolbox: box}})
	require.NoError(t, err)
	require.NoError(t, w.Start())
	defer w.Stop()

	spec, err := workflows.ParseSpec([]byte(`
goal: reserve an item
budget: {steps: 4}
model:
  provider: scripted
  script:
    - tool_calls: [{name: reserve, arguments: {item: lamp}}]
    - content: reserved
tools:
  - name: reserve
    kind: go
`))
	require.NoError(t, err)
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "quiet-go-tool-run", TaskQueue: queue}, workflows.AgentRun, spec)
	require.NoError(t, err)
	var result workflows.RunResult
	require.NoError(t, run.Get(ctx, &result))
	require.Equal(t, agentsagatype.RunCompleted, result.Status, result.Reason)
	require.EqualValues(t, 2, calls.Load(), "failed once, then retried")

	text := logs.String()
	var warns []string
	for _, line := range strings.Split(text, "\n") {
		assert.NotContains(t, line, "level=ERROR", "a Go tool's expected failure is not an operator's problem")
		if strings.Contains(line, "level=WARN") && strings.Contains(line, "retry hook: the call failed") {
			warns = append(warns, line)
		}
	}
	require.Len(t, warns, 1, "one WARN line for the failed attempt:\n%s", text)
	assert.Contains(t, warns[0], "type=Transient")
	assert.Contains(t, warns[0], `decision="retry in `)
	assert.Contains(t, warns[0], "stock service busy")
}

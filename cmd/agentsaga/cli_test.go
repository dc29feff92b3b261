package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/testsuite"

	"github.com/agentsaga/agentsaga"
	"github.com/agentsaga/agentsaga/agentsagatest"
	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/cmd/agentsaga/internal/testbinary"
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/worker"
	"github.com/agentsaga/agentsaga/workflows"
)

var devServer *testsuite.DevServer

func TestMain(m *testing.M) {
	testbinary.Main(m, func(server *testsuite.DevServer) { devServer = server })
}

// runCLI runs the CLI in-process and returns what it printed.
func runCLI(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	cmd := rootCommand()
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(context.Background())
	return out.String(), err
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(path, []byte(content), 0o644))
	return path
}

// cliWorld points the CLI at the dev server and a fresh database, with a
// worker polling the default task queue, and returns the worker's ledger.
func cliWorld(t *testing.T) *ledgerdb.Store {
	t.Helper()
	databaseURL := agentsagatest.NewDatabase(t)
	t.Setenv("DATABASE_URL", databaseURL)
	t.Setenv("TEMPORAL_ADDRESS", devServer.FrontendHostPort())
	store, err := ledger.Open(context.Background(), databaseURL)
	require.NoError(t, err)
	t.Cleanup(store.Close)
	w, err := worker.New(context.Background(), devServer.Client(), store, worker.Options{Config: agentsaga.Config{TaskQueue: workflows.TaskQueue}})
	require.NoError(t, err)
	require.NoError(t, w.Start())
	t.Cleanup(w.Stop) // runs before store.Close: cleanups run last first
	return ledgerdb.Of(store)
}

// The CLI against a real dev server and Postgres: run --wait, then show.
func TestRunWaitAndShow(t *testing.T) {
	cliWorld(t)

	var refunds []string
	tool := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		refunds = append(refunds, r.Header.Get("Idempotency-Key"))
		fmt.Fprint(w, `{"refund_id":"rf_1"}`)
	}))
	defer tool.Close()
	spec := writeFile(t, "spec.yaml", fmt.Sprintf(`
goal: refund order 7
budget: {steps: 4}
model:
  provider: scripted
  script:
    - tool_calls: [{name: refund, arguments: {order: 7}}]
    - content: refunded order 7
tools:
  - {name: refund, kind: http, url: %q}
`, tool.URL))

	out, err := runCLI(t, "run", "--spec", spec, "--wait", "--json", "--id", "cli-run")
	require.NoError(t, err, out)
	var result workflows.RunResult
	require.NoError(t, json.Unmarshal([]byte(out), &result), out)
	assert.Equal(t, agentsagatype.RunCompleted, result.Status)
	assert.Equal(t, "refunded order 7", result.Answer)
	assert.Equal(t, []string{"cli-run/step-001-call-1-refund"}, refunds[:1])

	// What the Temporal UI shows as the run's summary is its goal.
	described, err := devServer.Client().DescribeWorkflowExecution(context.Background(), "cli-run", "")
	require.NoError(t, err)
	summary := described.GetExecutionConfig().GetUserMetadata().GetSummary()
	require.NotNil(t, summary, "the run has a UI summary")
	assert.Contains(t, string(summary.GetData()), "refund order 7")
	attrs := described.GetWorkflowExecutionInfo().GetSearchAttributes().GetIndexedFields()
	require.Contains(t, attrs, "AgentStatus", "the run keeps its typed search attributes")
	assert.Contains(t, string(attrs["AgentStatus"].GetData()), "completed")
	assert.Equal(t, "2", string(attrs["StepsUsed"].GetData()))

	// Without --json, --wait shows the run turn by turn, then the result.
	out, err = runCLI(t, "run", "--spec", spec, "--wait", "--id", "cli-run-live")
	require.NoError(t, err, out)
	assert.Contains(t, out, "turn 1   BUDGET LEFT: 4 steps")
	assert.Contains(t, out, `tool refund {"order":7} => {"refund_id":"rf_1"}`)
	assert.Contains(t, out, "status: completed")

	out, err = runCLI(t, "show", "cli-run")
	require.NoError(t, err, out)
	assert.Contains(t, out, "run cli-run: completed")
	assert.Contains(t, out, "steps used: 2")
	assert.Contains(t, out, "cli-run/step-001-call-1-refund")

	out, err = runCLI(t, "show", "cli-run", "--json")
	require.NoError(t, err, out)
	var shown struct {
		Run     agentsagatype.Run      `json:"run"`
		Actions []agentsagatype.Action `json:"actions"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &shown))
	require.Len(t, shown.Actions, 1)
	assert.Equal(t, `{"refund_id":"rf_1"}`, shown.Actions[0].Result)

	// A second run under a finished run's ID would share its idempotency
	// keys: refused, and the tool is not called.
	calls := len(refunds)
	out, err = runCLI(t, "run", "--spec", spec, "--wait", "--id", "cli-run")
	require.Error(t, err, out)
	assert.Contains(t, err.Error(), "start run cli-run")
	assert.Len(t, refunds, calls)
}

func TestBadInputGetsAClearErrorAndStartsNothing(t *testing.T) {
	databaseURL := agentsagatest.NewDatabase(t)
	t.Setenv("DATABASE_URL", databaseURL)
	t.Setenv("TEMPORAL_ADDRESS", devServer.FrontendHostPort())

	bad := writeFile(t, "bad.yaml", "goal: g\nbudget: {steps: 2}\nmodel: {provider: scripted, script: [{content: x}]}\ntools: [{name: search, kind: http}]\n")
	_, err := runCLI(t, "run", "--spec", bad, "--id", "bad-run")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "bad.yaml: spec: tools[0]: tool search: an http tool needs a url")
	_, err = devServer.Client().DescribeWorkflowExecution(context.Background(), "bad-run", "")
	assert.Error(t, err, "no workflow was started")

	_, err = runCLI(t, "run", "--spec", filepath.Join(t.TempDir(), "missing.yaml"))
	assert.ErrorContains(t, err, "missing.yaml: no such file")

	_, err = runCLI(t, "show", "no-such-run")
	assert.ErrorIs(t, err, ledgerdb.ErrNotFound)

	good := writeFile(t, "good.yaml", "goal: g\nbudget: {steps: 2}\nmodel: {provider: scripted, script: [{content: x}]}\n")
	t.Setenv("TEMPORAL_ADDRESS", "127.0.0.1:1")
	_, err = runCLI(t, "run", "--spec", good)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "temporal at 127.0.0.1:1")

	t.Setenv("DATABASE_URL", "postgres://postgres@127.0.0.1:1/agentsaga?connect_timeout=2")
	_, err = runCLI(t, "show", "x")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "postgres at 127.0.0.1:1")
	_, err = runCLI(t, "migrate")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "127.0.0.1:1")
}

// An escalated run is resumed from the CLI; a bad Update is refused with
// the validator's reason.
func TestResumeAndAbortFromTheCLI(t *testing.T) {
	store := cliWorld(t)

	spec := writeFile(t, "spec.yaml", `
goal: delete the production database
budget: {steps: 4}
model:
  provider: scripted
  script:
    - refusal: I will not do that without written approval.
    - content: I archived it instead, as instructed.
`)
	_, err := runCLI(t, "run", "--spec", spec, "--id", "cli-escalated")
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		run, err := store.GetRun(context.Background(), "cli-escalated")
		return err == nil && run.Status == agentsagatype.RunEscalated
	}, 30*time.Second, 100*time.Millisecond, "the refusal escalates the run")

	out, err := runCLI(t, "show", "cli-escalated")
	require.NoError(t, err)
	assert.Contains(t, out, "run cli-escalated: escalated")
	assert.Contains(t, out, "waiting for a human: The model refused")

	_, err = runCLI(t, "retry", "cli-escalated")
	assert.ErrorContains(t, err, "waiting on an escalation (resume or abort), where retry does not apply")
	_, err = runCLI(t, "resume", "cli-escalated")
	assert.ErrorContains(t, err, "--message is required")

	out, err = runCLI(t, "resume", "cli-escalated", "--message", "archive it instead", "--add-steps", "1")
	require.NoError(t, err, out)
	assert.Contains(t, out, "accepted: resume")
	var result workflows.RunResult
	require.NoError(t, devServer.Client().GetWorkflow(context.Background(), "cli-escalated", "").Get(context.Background(), &result))
	assert.Equal(t, agentsagatype.RunCompleted, result.Status)
	assert.Equal(t, "I archived it instead, as instructed.", result.Answer)

	_, err = runCLI(t, "abort", "cli-escalated", "--reason", "too late")
	assert.Error(t, err, "a finished run takes no Update")
}

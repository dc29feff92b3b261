package agentsaga_test

import (
	"context"
	"errors"
	"net/http"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"

	"github.com/agentsaga/agentsaga"
	"github.com/agentsaga/agentsaga/agentsagatest"
	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/internal/workertest"
)

var devServer *testsuite.DevServer

func TestMain(m *testing.M) {
	workertest.Main(m, func(server *testsuite.DevServer) { devServer = server })
}

type orderArgs struct {
	Order string `json:"order"`
}

type refund struct {
	RefundID string `json:"refund_id"`
	Key      string `json:"key"`
}

// refundTool is a typed tool that counts its calls and reports the key it
// was called under.
func refundTool(t *testing.T, calls *atomic.Int64) agentsaga.Tool {
	t.Helper()
	tool, err := agentsaga.NewTool("refund_order", "Refund an order.", func(ctx context.Context, args orderArgs) (refund, error) {
		calls.Add(1)
		return refund{RefundID: "rf-" + args.Order, Key: agentsaga.CallKey(ctx)}, nil
	}, agentsaga.WithTimeout(10*time.Second))
	require.NoError(t, err)
	return tool
}

// The engine in the test kit's environment: the typed tool is called with
// decoded arguments under the run's key, the built-ins are still there,
// and the action is in the ledger under this test's own workflow ID.
func TestEngineRunsATypedToolInTheTestKit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := agentsagatest.NewLedger(t)
	var calls atomic.Int64
	tool := refundTool(t, &calls)
	engine, err := agentsaga.New(ctx, store, agentsaga.Config{Tools: []agentsaga.Tool{tool}})
	require.NoError(t, err)
	env, id := agentsagatest.NewEnvironment(t, engine)
	spec, err := agentsaga.RunSpec{
		Goal:   "refund o-1",
		Budget: agentsaga.Budget{Steps: 5},
		Model: agentsagatest.Script(agentsagatest.Call("refund_order", orderArgs{Order: "o-1"}),
			agentsagatest.Call("word_count", map[string]string{"text": "refund sent"}), agentsagatest.Answer("refunded")),
		Tools: []agentsaga.ToolSpec{tool.Spec(), {Name: "word_count", Kind: agentsagatype.ToolKindGo}},
	}.Resolve()
	require.NoError(t, err)
	env.ExecuteWorkflow(agentsaga.AgentRunWorkflow, spec)
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
	var result agentsaga.RunResult
	require.NoError(t, env.GetWorkflowResult(&result))
	require.Equal(t, "completed", result.Status, result.Reason)
	require.EqualValues(t, 1, calls.Load())

	actions, err := ledgerdb.Of(store).ListActions(ctx, id)
	require.NoError(t, err)
	require.Len(t, actions, 2, "the typed tool and the built-in word_count")
	require.Contains(t, actions[1].Result, `"words": 2`)
	require.Contains(t, actions[0].Result, `"refund_id":"rf-o-1"`)
	require.True(t, strings.HasPrefix(actions[0].Key, id+"/"), actions[0].Key)
	require.Contains(t, actions[0].Result, actions[0].Key, "the tool saw the key it was called under")
}

// A team's own activity called CallTool lives beside the engine's.
func CallTool(context.Context) (string, error) { return "the team's own", nil }

// On a real worker and dev server: the engine beside a team's CallTool, a
// custom model provider, Start's refusals (a reused ID, a bad spec) and a
// failed run's typed error.
func TestEngineOnATeamsWorker(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := devServer.Client()
	store := agentsagatest.NewLedger(t)
	queue := agentsagatest.RunID(t)
	var calls atomic.Int64
	tool := refundTool(t, &calls)
	engine, err := agentsaga.New(ctx, store, agentsaga.Config{TaskQueue: queue, Bucket: queue, Tools: []agentsaga.Tool{tool},
		Models: map[string]agentsaga.ModelFactory{"echo": func(spec agentsaga.ModelSpec, _ string, _ *http.Client) (agentsaga.Model, error) {
			return echoModel{fail: spec.Name == "fail"}, nil
		}}})
	require.NoError(t, err)
	w := worker.New(c, engine.TaskQueue(), engine.WorkerOptions(worker.Options{}))
	engine.Register(w)
	require.NotPanics(t, func() { w.RegisterActivity(CallTool) })
	require.NoError(t, w.Start())
	defer w.Stop()

	spec := agentsaga.RunSpec{Goal: "say hello", Budget: agentsaga.Budget{Steps: 2}, Model: agentsaga.ModelSpec{Provider: "echo"}}
	_, err = agentsaga.Start(ctx, c, agentsagatest.RunID(t), spec, agentsaga.StartOptions{TaskQueue: queue, Ledger: store})
	var invalid *agentsaga.InvalidSpecError
	require.ErrorAs(t, err, &invalid, "a provider the starter was not told of")
	require.ErrorContains(t, err, `unknown provider "echo"`)

	id := agentsagatest.RunID(t)
	run, err := agentsaga.Start(ctx, c, id, spec, agentsaga.StartOptions{TaskQueue: queue, ModelProviders: engine.Providers(), Ledger: store})
	require.NoError(t, err)
	result, err := run.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, "completed", result.Status, result.Reason)
	require.Equal(t, "echo: say hello", result.Answer)

	_, err = agentsaga.Start(ctx, c, id, spec, agentsaga.StartOptions{TaskQueue: queue, ModelProviders: engine.Providers(), Ledger: store})
	require.ErrorAs(t, err, new(*agentsaga.RunExistsError))
	var exists *agentsaga.RunExistsError
	require.ErrorAs(t, err, &exists)
	require.Equal(t, id, exists.ID)

	// A run whose model call fails ends failed: Result returns its result
	// in a *RunFailedError.
	failing := spec
	failing.Model = agentsaga.ModelSpec{Provider: "echo", Name: "fail"}
	run, err = agentsaga.Start(ctx, c, agentsagatest.RunID(t), failing, agentsaga.StartOptions{TaskQueue: queue, ModelProviders: engine.Providers(), Ledger: store})
	require.NoError(t, err)
	_, err = agentsaga.Get(c, run.ID).Result(ctx)
	var failed *agentsaga.RunFailedError
	require.ErrorAs(t, err, &failed)
	require.Equal(t, "failed", failed.Result.Status)
	require.Contains(t, failed.Result.Reason, "echo refuses to fail politely")
}

// echoModel answers with the goal; named "fail", it fails for good.
type echoModel struct{ fail bool }

func (m echoModel) Turn(_ context.Context, req agentsaga.ModelRequest) (agentsaga.ModelTurn, error) {
	if m.fail {
		return agentsaga.ModelTurn{}, agentsaga.Permanent(errors.New("echo refuses to fail politely"))
	}
	for _, m := range req.Messages {
		if m.Role == "user" { // the goal
			return agentsaga.ModelTurn{Content: "echo: " + m.Content}, nil
		}
	}
	return agentsaga.ModelTurn{}, agentsaga.Permanent(errors.New("echo: no goal in the conversation"))
}

// Importing the API brings the engine and its model SDKs, not the CLI
// worker's metrics (Prometheus, tally) or its migration tool (goose).
func TestTheAPIImportsNoMetricsOrMigrations(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	require.NoError(t, err, "%s", out)
	for _, heavy := range []string{"github.com/prometheus/", "github.com/uber-go/tally", "github.com/pressly/goose"} {
		require.NotContains(t, string(out), heavy)
	}
}

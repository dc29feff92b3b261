package agentsagatest

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"

	"github.com/agentsaga/agentsaga"
	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/ledgertest"
	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/workflows"
)

// NewLedger returns a store on a database of the test's own, migrated, on
// the Postgres at DATABASE_URL (default 127.0.0.1:5432, user postgres); it
// is dropped when the test ends.
func NewLedger(t testing.TB) *ledger.Store {
	t.Helper()
	return ledgertest.NewHandle(t)
}

// NewDatabase creates a database of the test's own, migrated, on the same
// Postgres as NewLedger, and returns its URL, for what opens its own
// connections (a worker process, agentsaga's CLI, a pgx pool). The URL
// sets no pool size: a pool opened on it holds up to 32 connections. The
// database is dropped when the test ends.
func NewDatabase(t testing.TB) string {
	t.Helper()
	return ledgertest.NewDatabase(t)
}

// Turn is one turn of a scripted model.
type Turn = agentsagatype.ScriptedTurn

// Script is a scripted model that plays turns in order, for a RunSpec's
// Model.
func Script(turns ...Turn) agentsaga.ModelSpec {
	return agentsaga.ModelSpec{Provider: agentsagatype.ProviderScripted, Script: turns}
}

// Call is a turn that asks for one tool call; args is encoded as JSON.
func Call(tool string, args any) Turn {
	raw, err := json.Marshal(args)
	if err != nil {
		panic(fmt.Sprintf("agentsagatest: encode the arguments of %s: %v", tool, err))
	}
	return Turn{ToolCalls: []agentsagatype.ScriptedCall{{Name: tool, Arguments: raw}}}
}

// Answer is a turn that answers, ending the run.
func Answer(text string) Turn { return Turn{Content: text} }

// Refuse is a turn in which the model refuses: the run escalates to a
// human.
func Refuse(reason string) Turn { return Turn{Refusal: reason} }

var runs atomic.Int64

// RunID is a workflow ID unique to this test and this process: the test's
// name, the time and a counter.
func RunID(t testing.TB) string {
	name := strings.NewReplacer("/", "-", " ", "-").Replace(t.Name())
	return fmt.Sprintf("%s-%d-%d", name, time.Now().UnixNano(), runs.Add(1))
}

// NewEnvironment returns a workflow test environment that runs the engine
// as a worker does (its workflows and namespaced activities registered, its
// retry hook installed) and the workflow ID its run will have, from RunID.
// Execute a run with env.ExecuteWorkflow(agentsaga.AgentRunWorkflow, spec)
// after resolving the spec (spec.Resolve), as agentsaga.Start does; or
// let Run do it all.
func NewEnvironment(t testing.TB, engine *agentsaga.Engine) (*testsuite.TestWorkflowEnvironment, string) {
	t.Helper()
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestWorkflowEnvironment()
	// The testsuite bounds a run at 3 s of wall clock by default, and the
	// engine's activities write to a real Postgres: a loaded CI machine
	// passes that bound on a run that is fine. A minute still ends a hang.
	env.SetTestTimeout(time.Minute)
	id := RunID(t)
	// The same machine can hold a workflow task past the SDK's 1 s
	// deadlock detector (TestEachRunHasItsOwnID did, at load 14 under
	// -race); 10 s still catches workflow code that blocks.
	env.SetWorkerOptions(engine.WorkerOptions(worker.Options{DeadlockDetectionTimeout: 10 * time.Second}))
	env.SetStartWorkflowOptions(client.StartWorkflowOptions{ID: id, TaskQueue: engine.TaskQueue()})
	engine.Register(env)
	return env, id
}

// Run runs spec in a NewEnvironment of its own until it ends, and returns
// how it ended. A run that ended failed returns its result too (Status
// "failed"). A run that does not end on its own (it waits for a human: use
// NewEnvironment and send the Update) or whose workflow fails otherwise
// fails the test.
func Run(t testing.TB, engine *agentsaga.Engine, spec agentsaga.RunSpec) agentsaga.RunResult {
	t.Helper()
	resolved, err := spec.ResolveFor(engine.Providers()...)
	if err != nil {
		t.Fatalf("agentsagatest: resolve the spec: %v", err)
	}
	env, id := NewEnvironment(t, engine)
	env.ExecuteWorkflow(agentsaga.AgentRunWorkflow, resolved)
	if !env.IsWorkflowCompleted() {
		t.Fatalf("agentsagatest: run %s did not end", id)
	}
	var result agentsaga.RunResult
	if err := env.GetWorkflowError(); err != nil {
		var appErr *temporal.ApplicationError
		if errors.As(err, &appErr) && appErr.Type() == workflows.ErrTypeRunFailed && appErr.Details(&result) == nil {
			return result
		}
		t.Fatalf("agentsagatest: run %s: %v", id, err)
	}
	if err := env.GetWorkflowResult(&result); err != nil {
		t.Fatalf("agentsagatest: the result of run %s: %v", id, err)
	}
	return result
}

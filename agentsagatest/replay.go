package agentsagatest

import (
	"context"
	"fmt"
	"testing"

	"go.temporal.io/sdk/testsuite"

	"github.com/agentsaga/agentsaga"
	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/dataset"
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/ledger"
)

// Recording is one recorded run of a dataset file, as agentsaga dataset
// add writes it: its goal, spec, tool calls with their answers, outcome,
// and the checks written beside it.
type Recording = dataset.Entry

// Outcome is a replay of a recording: the report against the recording
// (Report.Divergences, Report.FirstDivergence, Report.Candidate) and each
// check's result (Passed says all passed).
type Outcome = dataset.Outcome

// Recordings reads the recordings of a dataset file, in order.
func Recordings(t testing.TB, path string) []Recording {
	t.Helper()
	lines, err := dataset.Read(path)
	if err != nil {
		t.Fatalf("agentsagatest: %v", err)
	}
	out := make([]Recording, len(lines))
	for i, l := range lines {
		out[i] = l.Entry
	}
	return out
}

// Replay runs recording again in a test environment of its own, on a
// ledger of its own, as agentsaga eval does on the workers: every tool is
// answered from the recording, nothing is sent anywhere, and approvals are
// decided as the recording decided them. spec is the candidate (its model,
// scripted or real, its tools' rules, budget and instructions; the goal
// stays the recording's); nil replays the recording's own spec. The tools
// live names (read_only ones) are called for real, as replay --live does.
// It returns the report and the recording's checks; a replay that cannot
// run fails the test, a check that fails does not (the caller says what
// matters).
func Replay(t testing.TB, recording Recording, spec *agentsaga.RunSpec, live ...string) Outcome {
	t.Helper()
	store, engine, source := imported(t, recording)
	env, id := NewEnvironment(t, engine)
	replay, err := agentsaga.ReplaySpec(t.Context(), store, source, id, agentsaga.ReplayOptions{Spec: spec, Live: live})
	if err != nil {
		t.Fatalf("agentsagatest: %v", err)
	}
	resolved, err := replay.ResolveFor(engine.Providers()...)
	if err != nil {
		t.Fatalf("agentsagatest: resolve the replay's spec: %v", err)
	}
	env.ExecuteWorkflow(agentsaga.AgentRunWorkflow, resolved)
	if !env.IsWorkflowCompleted() {
		t.Fatalf("agentsagatest: replay %s did not end", id)
	}
	outcome, err := dataset.Judge(t.Context(), ledgerdb.Of(store), recording.Source, recording, source, id)
	if err != nil {
		t.Fatalf("agentsagatest: %v", err)
	}
	return outcome
}

// Fork is Replay from step at on (agentsaga eval --fork-at): the
// recording's steps before at are replayed as it made them, its model's
// calls scripted and every tool answered from it, so neither a model nor
// a tool is asked anything; the run is then forked at step at, and spec
// (nil: the recording's own) answers live from there, its tools answered
// from the recording in any order but those live names. A step the
// recording did not make, or a step before at at which its model asked
// for no tool call, fails the test. The outcome judges the fork, whose
// calls are the inherited ones before at and its own from at on.
//
//	recs := agentsagatest.Recordings(t, "testdata/payouts.jsonl")
//	out := agentsagatest.Fork(t, recs[0], 3, &candidate)
//	assert.True(t, out.Passed)
func Fork(t testing.TB, recording Recording, at int, spec *agentsaga.RunSpec, live ...string) Outcome {
	t.Helper()
	store, engine, source := imported(t, recording)
	prefixEnv, prefixID := NewEnvironment(t, engine)
	forkEnv, forkID := NewEnvironment(t, engine)
	candidate, err := agentsaga.ReplaySpec(t.Context(), store, source, forkID,
		agentsaga.ReplayOptions{Spec: spec, Live: live, Match: agentsagatype.MatchAnyOrder})
	if err != nil {
		t.Fatalf("agentsagatest: %v", err)
	}
	if candidate, err = candidate.ResolveFor(engine.Providers()...); err != nil {
		t.Fatalf("agentsagatest: resolve the candidate's spec: %v", err)
	}
	envs := map[string]*testsuite.TestWorkflowEnvironment{prefixID: prefixEnv, forkID: forkEnv}
	before, err := dataset.ForkAt(t.Context(), ledgerdb.Of(store), source, recording, at, candidate, prefixID, forkID,
		func(_ context.Context, id string, spec agentsaga.RunSpec, _ bool) error {
			resolved, err := spec.ResolveFor(engine.Providers()...)
			if err != nil {
				return err
			}
			envs[id].ExecuteWorkflow(agentsaga.AgentRunWorkflow, resolved)
			if !envs[id].IsWorkflowCompleted() {
				return fmt.Errorf("run %s did not end", id)
			}
			return nil
		})
	if err != nil {
		t.Fatalf("agentsagatest: %v", err)
	}
	outcome, err := dataset.JudgeFork(t.Context(), ledgerdb.Of(store), recording.Source, recording, source, before, forkID, at)
	if err != nil {
		t.Fatalf("agentsagatest: %v", err)
	}
	return outcome
}

// imported is a ledger of the test's own holding recording as an ended
// run (its ID is source), and an engine on it.
func imported(t testing.TB, recording Recording) (store *ledger.Store, engine *agentsaga.Engine, source string) {
	t.Helper()
	store = NewLedger(t)
	engine, err := agentsaga.New(t.Context(), store, agentsaga.Config{})
	if err != nil {
		t.Fatalf("agentsagatest: %v", err)
	}
	source = dataset.SourceID(recording.Source, 1, recording)
	ImportRecording(t, store, source, recording)
	return store, engine, source
}

// ImportRecording writes recording into store as the ended run id, with
// its calls, answer and outcome as recorded, as agentsaga eval imports a
// dataset's lines: for a test of what reads ended runs (a report, a page,
// a replay of one). A spec whose tools are recorded from another run
// (kind recorded) makes the run a replay of that run. An id the ledger
// already has fails the test.
func ImportRecording(t testing.TB, store *ledger.Store, id string, recording Recording) {
	t.Helper()
	wrote, err := dataset.Import(t.Context(), ledgerdb.Of(store), id, recording)
	if err != nil {
		t.Fatalf("agentsagatest: import run %s: %v", id, err)
	}
	if !wrote {
		t.Fatalf("agentsagatest: import run %s: the ledger has a run %s already", id, id)
	}
}

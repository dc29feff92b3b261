package dataset

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/internal/replayreport"
	"github.com/agentsaga/agentsaga/workflows"
)

// StartRun starts spec under id and waits for it to end; how (a worker
// fleet, a test environment) is the caller's. fork says the ledger already
// holds id's run row, written by the fork's move.
type StartRun func(ctx context.Context, id string, spec workflows.RunSpec, fork bool) error

// prefixScript is a scripted model that asks, at each step before at, the
// calls e's model asked at that step, and answers at step at, so that a
// replay of e with it writes e's conversation up to at without asking a
// live model anything. A step before at with no call (e's model only wrote
// text there) cannot be scripted: a turn without calls ends the run.
func prefixScript(e Entry, at int) (agentsagatype.ModelSpec, error) {
	if at < 1 {
		return agentsagatype.ModelSpec{}, fmt.Errorf("fork at step %d: steps start at 1", at)
	}
	if at > e.Steps {
		return agentsagatype.ModelSpec{}, fmt.Errorf("fork at step %d: past the recording's last step (it made %d)", at, e.Steps)
	}
	turns := make([]agentsagatype.ScriptedTurn, at)
	for _, c := range e.Calls {
		if c.Step >= 1 && c.Step < at && c.Agent != nil {
			// A replayed sub-agent's tools answer from the recording, but
			// its model is its spec's: it would be asked, live.
			return agentsagatype.ModelSpec{}, fmt.Errorf("fork at step %d: the recording's step %d started sub-agent %s, whose model a replay asks live; fork at or before step %d",
				at, c.Step, c.Tool, c.Step)
		}
		if c.Step >= 1 && c.Step < at {
			turns[c.Step-1].ToolCalls = append(turns[c.Step-1].ToolCalls, agentsagatype.ScriptedCall{Name: c.Tool, Arguments: c.Arguments})
		}
	}
	for i := range at - 1 {
		if len(turns[i].ToolCalls) == 0 {
			return agentsagatype.ModelSpec{}, fmt.Errorf("fork at step %d: the recording's step %d asked for no tool call, and only calls can be replayed before the fork", at, i+1)
		}
	}
	// Step at's turn is the fork's to make: this one only ends the
	// prefix's run there, so that the ledger has the step to fork at.
	turns[at-1].Content = fmt.Sprintf("(replayed to step %d for a what-if fork)", at)
	return agentsagatype.ModelSpec{Provider: agentsagatype.ProviderScripted, Script: turns}, nil
}

// ForkAt runs e, imported under source, to step at from its recording and
// forks it there into forkID with candidate, which runs live from at on
// (issue 45's what-if). The prefix, under prefixID, is a replay whose
// model is a script of e's calls before at and whose tools are answered
// from source: it asks no model and calls no tool. The fork inherits its
// conversation and effects through the ledger's move (ForkRun), as a fork
// of any run does. candidate is the fork's spec as a replay of source
// under forkID would have it (its tools recorded but those called live),
// resolved for the fleet's providers. It returns the prefix as it ended,
// read before the fork took its calls' actions (JudgeFork's before).
func ForkAt(ctx context.Context, store *ledgerdb.Store, source string, e Entry, at int, candidate workflows.RunSpec,
	prefixID, forkID string, start StartRun) (replayreport.Run, error) {
	script, err := prefixScript(e, at)
	if err != nil {
		return replayreport.Run{}, err
	}
	var recorded workflows.RunSpec
	if err := json.Unmarshal(e.Spec, &recorded); err != nil {
		return replayreport.Run{}, fmt.Errorf("fork at step %d: the recording's spec does not decode: %w", at, err)
	}
	recorded.Goal, recorded.Carried, recorded.Version = e.Goal, nil, 0
	recorded.Model = script
	prefix, err := recorded.Recorded(source, prefixID, agentsagatype.MatchInOrder)
	if err != nil {
		return replayreport.Run{}, fmt.Errorf("fork at step %d: the prefix's spec: %w", at, err)
	}
	if err := start(ctx, prefixID, prefix, false); err != nil {
		return replayreport.Run{}, fmt.Errorf("fork at step %d: replay the recording to it as %s: %w", at, prefixID, err)
	}
	before, err := replayreport.Load(ctx, store, prefixID)
	if err != nil {
		return replayreport.Run{}, fmt.Errorf("fork at step %d: %w", at, err)
	}
	spec, err := json.Marshal(candidate)
	if err != nil {
		return replayreport.Run{}, fmt.Errorf("fork at step %d: %w", at, err)
	}
	moved, err := store.ForkRun(ctx, ledgerdb.ForkRequest{Source: prefixID, Fork: forkID, At: at, Spec: spec, StartedBy: "eval"})
	if err != nil {
		return replayreport.Run{}, fmt.Errorf("fork at step %d: %w", at, err)
	}
	forked, err := candidate.Forked(workflows.Fork{Source: prefixID, At: moved.At, Seq: moved.Seq}, time.Now())
	if err != nil {
		return replayreport.Run{}, fmt.Errorf("fork at step %d: %w", at, err)
	}
	if err := start(ctx, forkID, forked, true); err != nil {
		return replayreport.Run{}, fmt.Errorf("fork at step %d: run the candidate from it as %s: %w", at, forkID, err)
	}
	return before, nil
}

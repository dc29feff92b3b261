package workflows

import (
	"fmt"
	"slices"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/agentsaga/agentsaga/agentsagatype"
)

// stopForFork escalates the run at the top of step when a fork asked it to
// stop (wire.SignalStopForFork), and returns the run's result when the human's
// answer ends it.
func (r *run) stopForFork(ctx workflow.Context, step int) *RunResult {
	if r.humans.forkStop == nil || !r.humans.forkStop.ReceiveAsync(nil) {
		return nil
	}
	for r.humans.forkStop.ReceiveAsync(nil) { // one stop for every signal sent so far
	}
	return r.escalate(ctx, fmt.Sprintf("stopped before step %d to be forked (agentsaga fork)", step))
}

// Fork is where a fork begins (issue 45, docs/forks.md): the run it was
// forked from, the step it makes live first, and its conversation's next
// place, as the ledger's move (ledgerdb.ForkRun) answered.
type Fork struct {
	Source string
	// At is the fork's first step; steps before it are the source's.
	At int
	// Seq is the conversation's next place: the ledger copied the
	// source's messages before it to the fork.
	Seq int
	// Message, when set, is the operator's, read by the model at step At
	// after the source's conversation.
	Message string
}

// Forked is the spec of a fork of a run: s (the source's spec, or the one
// replacing it) with the state a continue-as-new would carry, built so
// that the run's first execution starts at step f.At with the
// conversation the ledger copied, as a continued execution does. So the
// steps before f.At make no model call, no tool call and no spend, and the
// workflow emits what any continued execution emits, after its admission
// when it is charged to an account (run.admit). The budget's clock
// starts at start (or at its admission, when it waited), its steps count
// from f.At (a fork of step 40 of a 50-step run has 11 steps), and it has
// spent no tokens and no money: those were the source's.
//
// A spec naming an MCP server is refused: its tools are listed only when a
// run's first execution begins, and a fork's carries on.
func (s RunSpec) Forked(f Fork, start time.Time) (RunSpec, error) {
	if f.Source == "" || f.At < 1 || f.Seq < 0 {
		return RunSpec{}, fmt.Errorf("fork: source %q at step %d, message %d: a source, a step from 1 and a place from 0 are required", f.Source, f.At, f.Seq)
	}
	if len(f.Message) > maxInstruction {
		return RunSpec{}, fmt.Errorf("fork: the message is %d KiB; at most %d KiB (an instruction is sent whole in every request)", len(f.Message)>>10, maxInstruction>>10)
	}
	if i := slices.IndexFunc(s.Tools, agentsagatype.ToolSpec.IsMCPServer); i >= 0 {
		return RunSpec{}, fmt.Errorf("fork: tool %s is an MCP server, whose tools are listed only when a run starts; name each of its tools (mcp_tool) in the fork's spec", s.Tools[i].Name)
	}
	s.Carried = nil
	r, err := newRun(s, "", start)
	if err != nil {
		return RunSpec{}, fmt.Errorf("fork: %w", err)
	}
	r.conv.Step, r.conv.Seq = f.At, f.Seq
	r.budget.Used.Steps = f.At - 1
	// A new execution takes the newest commands, deadlines on its waits
	// for a person among them (commandsVersion10).
	r.humans.Deadlines = true
	if f.Message != "" {
		r.conv.say(agentsagatype.Message{Role: "user", Content: f.Message, Pinned: true})
	}
	r.trace.record(TraceEntry{Step: f.At, Kind: "fork", Replayed: true,
		Output: fmt.Sprintf("forked from %s at step %d: steps 1 to %d are its, answered from the ledger", f.Source, f.At, f.At-1)})
	c := r.carry()
	c.ForkedFrom = f.Source
	s.Carried = &c
	return s, nil
}

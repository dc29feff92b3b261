package dataset

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/internal/replayreport"
	"github.com/agentsaga/agentsaga/internal/wire"
)

// Export reads the ended run source from the ledger as an entry: what its
// model asked for, turn by turn, and what each call answered, with its
// attempts, error type and approval decision, which a replay of the entry
// gives again, all as the report reads them (replayreport.Load).
func Export(ctx context.Context, l replayreport.Ledger, source string) (Entry, error) {
	row, err := l.GetRun(ctx, source)
	if errors.Is(err, ledgerdb.ErrNotFound) {
		return Entry{}, fmt.Errorf("dataset: the ledger has no run %s", source)
	}
	if err != nil {
		return Entry{}, fmt.Errorf("dataset: read %s: %w", source, err)
	}
	switch {
	case row.ParentWorkflowID != "":
		return Entry{}, fmt.Errorf("dataset: %s is a sub-agent of %s; add its parent, whose entry holds it", source, row.ParentWorkflowID)
	case row.FinishedAt == nil:
		return Entry{}, fmt.Errorf("dataset: run %s has not ended (status %s)", source, row.Status)
	}
	if rec, ok := replayreport.RecordingOf(row.Spec); ok {
		// Its tools answer from another recording: a replay of it would
		// be refused, so its entry would be a dead line.
		return Entry{}, fmt.Errorf("dataset: %s is a replay of %s; add %s", source, rec.Source, rec.Source)
	}
	run, err := replayreport.Load(ctx, l, source)
	if err != nil {
		return Entry{}, fmt.Errorf("dataset: %w", err)
	}
	e := entryOf(run)
	e.Checks = []Check{}
	return e, nil
}

// entryOf is the entry of run, as the report read it, with the sub-agents
// its calls started nested under them.
func entryOf(run replayreport.Run) Entry {
	e := Entry{Version: Version, Source: run.ID, Goal: run.Goal, Spec: run.Spec, Answer: run.Answer, Status: run.Status,
		Reason: run.Reason, Steps: run.Steps, Tokens: run.Tokens, USD: run.USD, WallMS: run.Wall.Milliseconds()}
	for _, c := range run.Calls {
		call := Call{Step: c.Step, Tool: c.Tool, Arguments: rawJSON(c.Arguments), Sent: c.Sent, Output: c.Output, Error: c.Error,
			ErrorType: c.ErrorType, Attempts: c.Attempts}
		if a := c.Decided; a != nil && a.Status != agentsagatype.ApprovalAwaiting {
			call.Approval = &Decision{Status: a.Status, By: a.DecidedBy, Reason: a.Reason, Why: a.Why}
		}
		if c.Agent != nil {
			agent := entryOf(*c.Agent)
			call.Agent = &agent
		}
		e.Calls = append(e.Calls, call)
	}
	return e
}

// rawJSON is arguments as canonical JSON, or as a JSON string when they
// are not JSON (a model may send anything).
func rawJSON(arguments string) json.RawMessage {
	if json.Valid([]byte(arguments)) {
		return json.RawMessage(wire.CanonicalJSON(arguments))
	}
	quoted, _ := json.Marshal(arguments)
	return quoted
}

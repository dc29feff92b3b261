package dataset

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/activityid"
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
)

// SourceID is the workflow ID an entry is imported under: the dataset's
// name, the line, and a digest of the entry, so that importing the same
// entry again finds its run, and an entry edited in place is a new run
// rather than a stale one.
func SourceID(dataset string, line int, e Entry) string {
	encoded, _ := json.Marshal(e)
	sum := sha256.Sum256(encoded)
	name := strings.TrimSuffix(filepath.Base(dataset), filepath.Ext(dataset))
	name = unsafeID.ReplaceAllString(name, "-")
	return fmt.Sprintf("eval-%s-L%d-%s", name, line, hex.EncodeToString(sum[:4]))
}

var unsafeID = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// Import writes e into the ledger as the ended run id, as its recording
// left it: the run row, the model turns that asked for its calls, each sent
// call's action with its outcome and attempts, each decided approval. The
// recorded tools of a replay of id then answer from it as they answer from
// any recorded run. It reports whether it wrote (false: id was there).
func Import(ctx context.Context, store *ledgerdb.Store, id string, e Entry) (bool, error) {
	in, err := imported(id, e, time.Now())
	if err != nil {
		return false, fmt.Errorf("dataset: import %s: %w", id, err)
	}
	wrote, err := store.ImportRun(ctx, in)
	if err != nil {
		return false, fmt.Errorf("dataset: import %s: %w", id, err)
	}
	return wrote, nil
}

// imported is e as the ledger takes it under id, each sub-agent under the
// key of the call that started it, as the engine names a sub-agent.
func imported(id string, e Entry, now time.Time) (ledgerdb.Imported, error) {
	started := now.Add(-e.Wall())
	in := ledgerdb.Imported{Run: agentsagatype.Run{WorkflowID: id, RunID: "imported", Goal: e.Goal, Spec: e.Spec, Status: e.Status,
		Answer: e.Answer, Reason: e.Reason, StepsUsed: e.Steps, TokensUsed: e.Tokens, USDSpent: e.USD, Calls: len(e.Calls),
		StartedAt: started, FinishedAt: &now}}
	turns := map[int]*agentsagatype.ModelTurn{}
	var steps []int
	for _, c := range e.Calls {
		turn := turns[c.Step]
		if turn == nil {
			turn = &agentsagatype.ModelTurn{}
			turns[c.Step] = turn
			steps = append(steps, c.Step)
		}
		n := len(turn.ToolCalls) + 1
		arguments := string(c.Arguments)
		turn.ToolCalls = append(turn.ToolCalls, agentsagatype.ToolCall{ID: fmt.Sprintf("call_%d_%d", c.Step, n), Name: c.Tool, Arguments: arguments})
		callID := activityid.Tool(c.Step, n, c.Tool)
		key := activityid.Key(id, callID)
		if c.Agent != nil {
			// A sub-agent is a run, not an action: what its parent read of
			// it is the sub-agent's own answer.
			sub, err := imported(key, *c.Agent, now)
			if err != nil {
				return ledgerdb.Imported{}, err
			}
			in.SubAgents = append(in.SubAgents, sub)
		} else if c.Sent {
			a := agentsagatype.Action{Key: key, ActivityID: callID, Tool: c.Tool, Arguments: arguments, Status: agentsagatype.ActionCompleted,
				Result: c.Output, Attempts: c.Attempts}
			if c.Error != "" {
				a.Status, a.Error, a.ErrorType = agentsagatype.ActionFailed, c.Error, c.ErrorType
			}
			in.Actions = append(in.Actions, a)
		}
		if d := c.Approval; d != nil {
			in.Approvals = append(in.Approvals, agentsagatype.Approval{
				ApprovalRequest: agentsagatype.ApprovalRequest{Key: key, WorkflowID: id, Call: callID, Tool: c.Tool, Arguments: arguments, Why: d.Why},
				Status:          d.Status, DecidedBy: d.By, Reason: d.Reason})
		}
	}
	for _, step := range steps {
		result, err := json.Marshal(turns[step])
		if err != nil {
			return ledgerdb.Imported{}, err
		}
		callID := activityid.Model(step)
		in.Turns = append(in.Turns, agentsagatype.Action{Key: activityid.Key(id, callID), ActivityID: callID, Tool: "model",
			Arguments: "{}", Status: agentsagatype.ActionCompleted, Result: string(result), Attempts: 1})
	}
	return in, nil
}

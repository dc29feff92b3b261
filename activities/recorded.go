package activities

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"go.temporal.io/sdk/temporal"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/activityid"
	"github.com/agentsaga/agentsaga/internal/replayreport"
	"github.com/agentsaga/agentsaga/internal/wire"
)

// A recorded tool (kind recorded, agentsaga replay) is answered from the
// ledger of the run it replays: the recorded output, or the recorded
// error, of the recorded call it matches. Its spec holds no transport, so
// this file is the only way its calls go, and it reads Postgres only.

// recordedAnswer is what the source run recorded for one call, and how
// many attempts it took there: the replay charges the same leaf calls, so
// its budget runs down as the recording's did.
type recordedAnswer struct {
	output   string
	failure  *recordedFailure
	attempts int
}

// recordedFailure is a recorded call's error, handed back as it was
// recorded and never retried: another attempt would read the same row.
type recordedFailure struct {
	message, errType string
	attempts         int
}

func (e *recordedFailure) Error() string { return e.message }

// activityError is the failure the workflow reads: the recorded type (a
// refusal still asks a human), not retryable, caused by e, whose recorded
// attempts the retry hook puts in the details the workflow reads.
func (e *recordedFailure) activityError() error {
	errType := e.errType
	if errType == "" {
		errType = wire.ErrTypeRejected
	}
	return temporal.NewApplicationErrorWithOptions(e.message, errType, temporal.ApplicationErrorOptions{
		NonRetryable: true, Category: temporal.ApplicationErrorCategoryBenign, Cause: e,
	})
}

// notRecorded is the error of a call the recording has no answer for. The
// model reads it; it is not retryable, so it burns no retry.
func notRecorded(source, why string) error {
	return temporal.NewApplicationErrorWithOptions(fmt.Sprintf("not recorded in %s: %s", source, why), wire.ErrTypeNotRecorded,
		temporal.ApplicationErrorOptions{NonRetryable: true, Category: temporal.ApplicationErrorCategoryBenign})
}

// sourceRun is the recorded run that answers the calls of workflowID: the
// recording's source for the replay itself (rec.Replay). A sub-agent of
// the replay (its ID extends the call that started it) is answered by the
// sub-agent its parent's source started at the matching call, matched as a
// tool call is: the same n-th call of that sub-agent (in order), or the
// first unused one with the same arguments (any order). So a candidate that
// asks for its sub-agent a turn later still gets the recorded sub-agent's
// answers, and one the recording never started gets "not recorded".
func (a *Activities) sourceRun(ctx context.Context, rec agentsagatype.Recording, workflowID string) (string, error) {
	if workflowID == rec.Replay {
		return rec.Source, nil
	}
	cut := strings.LastIndex(workflowID, "/")
	if cut < 0 || !strings.HasPrefix(workflowID, rec.Replay+"/") {
		return "", temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("recorded tool: run %s is not the replay %s nor one of its sub-agents", workflowID, rec.Replay), wire.ErrTypeToolConfig, nil)
	}
	parent, callID := workflowID[:cut], workflowID[cut+1:]
	parentSource, err := a.sourceRun(ctx, rec, parent)
	if err != nil {
		return "", err
	}
	step, n, ok := activityid.ParseTool(callID)
	if !ok {
		return "", notRecorded(parentSource, fmt.Sprintf("sub-agent %s was not started by a tool call", workflowID))
	}
	mine, err := a.placedCalls(ctx, parent)
	if err != nil {
		return "", err
	}
	i := slices.IndexFunc(mine, func(c placedCall) bool { return c.step == step && c.n == n })
	if i < 0 {
		return "", notRecorded(parentSource, fmt.Sprintf("the turn of %s holds no call %d", parent, n))
	}
	call := mine[i]
	recorded, err := a.placedCalls(ctx, parentSource)
	if err != nil {
		return "", err
	}
	same := func(c placedCall) bool { return c.tool == call.tool }
	if rec.Match == agentsagatype.MatchAnyOrder {
		want := wire.CanonicalJSON(call.arguments)
		same = func(c placedCall) bool { return c.tool == call.tool && wire.CanonicalJSON(c.arguments) == want }
	}
	nth := 0
	for _, c := range mine[:i] {
		if same(c) {
			nth++
		}
	}
	for _, c := range recorded {
		if !same(c) {
			continue
		}
		if nth == 0 {
			return activityid.Key(parentSource, activityid.Tool(c.step, c.n, c.tool)), nil
		}
		nth--
	}
	return "", notRecorded(parentSource, fmt.Sprintf("it started no sub-agent %s to match the one at call %d of turn %d (arguments %s)",
		call.tool, n, step, clipArgs(wire.CanonicalJSON(call.arguments))))
}

// placedCall is a tool call a model asked for, at its place: turn step,
// n-th in the reply.
type placedCall struct {
	step, n         int
	tool, arguments string
}

// placedCalls are the tool calls of run's counted replies (the last
// completed model turn of each step), in order.
func (a *Activities) placedCalls(ctx context.Context, run string) ([]placedCall, error) {
	replies, err := a.replies(ctx, run)
	if err != nil {
		return nil, err
	}
	steps := slices.Sorted(maps.Keys(replies))
	var out []placedCall
	for _, step := range steps {
		for i, c := range replies[step].ToolCalls {
			out = append(out, placedCall{step: step, n: i + 1, tool: c.Name, arguments: c.Arguments})
		}
	}
	return out, nil
}

// replies are run's model replies that counted, by step, as the report
// reads them.
func (a *Activities) replies(ctx context.Context, run string) (map[int]agentsagatype.ModelTurn, error) {
	turns, err := a.Ledger.ListModelTurns(ctx, run)
	if err != nil {
		return nil, temporal.NewApplicationError(fmt.Sprintf("recorded tool: %v", err), wire.ErrTypeLedgerUnavailable)
	}
	return replayreport.Replies(turns), nil
}

// answerFromRecording finds the recorded call that answers this one, the
// call activityID of run workflowID, by the tool's matching mode.
func (a *Activities) answerFromRecording(ctx context.Context, tool agentsagatype.ToolSpec, workflowID, activityID, arguments string) (recordedAnswer, error) {
	rec := tool.Recording
	source, err := a.sourceRun(ctx, *rec, workflowID)
	if err != nil {
		return recordedAnswer{}, err
	}
	step, n, ok := activityid.ParseTool(activityID)
	if !ok {
		return recordedAnswer{}, notRecorded(source, fmt.Sprintf("call %s is not a tool call of a turn", activityID))
	}
	recorded, err := a.toolCalls(ctx, source, tool.Name)
	if err != nil {
		return recordedAnswer{}, err
	}
	mine, err := a.toolCalls(ctx, workflowID, tool.Name)
	if err != nil {
		return recordedAnswer{}, err
	}
	want := wire.CanonicalJSON(arguments)
	// The calls of this tool the replay made before this one: those of
	// earlier turns are in the ledger, settled; those earlier in this turn
	// run beside it and may not have claimed yet, so its model turn says
	// which there were.
	var before []agentsagatype.Action
	for _, m := range mine {
		if s, _, _ := activityid.ParseTool(m.ActivityID); s < step {
			before = append(before, m)
		}
	}
	sameTurn, err := a.earlierInTurn(ctx, workflowID, step, n, tool.Name)
	if err != nil {
		return recordedAnswer{}, err
	}
	var match *agentsagatype.Action
	switch rec.Match {
	case agentsagatype.MatchAnyOrder:
		used := 0
		for _, m := range before {
			if wire.CanonicalJSON(m.Arguments) == want {
				used++
			}
		}
		for _, args := range sameTurn {
			if wire.CanonicalJSON(args) == want {
				used++
			}
		}
		for i := range recorded {
			if wire.CanonicalJSON(recorded[i].Arguments) != want {
				continue
			}
			if used == 0 {
				match = &recorded[i]
				break
			}
			used--
		}
		if match == nil {
			return recordedAnswer{}, notRecorded(source, fmt.Sprintf("no unused recorded call of %s has the arguments %s", tool.Name, clipArgs(want)))
		}
	default:
		nth := len(before) + len(sameTurn)
		switch {
		case nth >= len(recorded):
			return recordedAnswer{}, notRecorded(source, fmt.Sprintf("%s was called %d times there; this is call %d", tool.Name, len(recorded), nth+1))
		case wire.CanonicalJSON(recorded[nth].Arguments) != want:
			return recordedAnswer{}, notRecorded(source, fmt.Sprintf("call %d of %s there had the arguments %s, not %s", nth+1, tool.Name,
				clipArgs(wire.CanonicalJSON(recorded[nth].Arguments)), clipArgs(want)))
		}
		match = &recorded[nth]
	}
	answer := recordedAnswer{attempts: match.Attempts}
	switch match.Status {
	case agentsagatype.ActionCompleted:
		answer.output = match.Result
	case agentsagatype.ActionRejected, agentsagatype.ActionFailed:
		answer.failure = &recordedFailure{message: match.Error, errType: match.ErrorType, attempts: match.Attempts}
	default:
		answer.failure = &recordedFailure{message: fmt.Sprintf("recorded without an outcome (%s): its attempt was lost", match.Status),
			errType: wire.ErrTypeTransient, attempts: match.Attempts}
	}
	return answer, nil
}

// toolCalls are run's forward calls of tool, in the order of their turns
// and their places in them.
func (a *Activities) toolCalls(ctx context.Context, run, tool string) ([]agentsagatype.Action, error) {
	actions, err := a.Ledger.ListActions(ctx, run)
	if err != nil {
		return nil, temporal.NewApplicationError(fmt.Sprintf("recorded tool: %v", err), wire.ErrTypeLedgerUnavailable)
	}
	actions = slices.DeleteFunc(actions, func(x agentsagatype.Action) bool {
		_, _, isCall := activityid.ParseTool(x.ActivityID)
		return x.Tool != tool || x.Compensates != "" || !isCall
	})
	slices.SortStableFunc(actions, func(x, y agentsagatype.Action) int {
		xs, xn, _ := activityid.ParseTool(x.ActivityID)
		ys, yn, _ := activityid.ParseTool(y.ActivityID)
		if xs != ys {
			return xs - ys
		}
		return xn - yn
	})
	return actions, nil
}

// earlierInTurn are the arguments of the calls of tool that come before
// call n in turn step's reply, as the ledger stored the reply.
func (a *Activities) earlierInTurn(ctx context.Context, run string, step, n int, tool string) ([]string, error) {
	if n <= 1 {
		return nil, nil
	}
	replies, err := a.replies(ctx, run)
	if err != nil {
		return nil, err
	}
	var args []string
	for i, c := range replies[step].ToolCalls {
		if i < n-1 && c.Name == tool {
			args = append(args, c.Arguments)
		}
	}
	return args, nil
}

func clipArgs(s string) string {
	if len(s) > 200 {
		return s[:200] + "..."
	}
	return s
}

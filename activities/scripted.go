package activities

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/agentsaga/agentsaga/agentsagatype"
)

// scriptedModel answers from a fixed list of turns: the Nth call made in a
// conversation (counted by its assistant messages) gets turn N. It makes no
// network call, so demos and tests are deterministic; it is one Model among
// others, not a stand-in for them.
type scriptedModel struct {
	Turns  []agentsagatype.ScriptedTurn
	Finish *agentsagatype.ScriptedTurn
}

// Turn returns the script's answer for this point of the conversation.
func (m scriptedModel) Turn(_ context.Context, req ModelRequest) (agentsagatype.ModelTurn, error) {
	n := req.OmittedTurns
	for _, msg := range req.Messages {
		if msg.Role == "assistant" {
			n++
		}
	}
	if req.Finish {
		finish := agentsagatype.ScriptedTurn{Content: "PARTIAL ANSWER: what the tool results above show.\nHANDOFF NOTE: the budget ran low before the goal was reached."}
		if m.Finish != nil {
			finish = *m.Finish
		}
		return m.answer(req, finish, n), nil
	}
	if n >= len(m.Turns) {
		return agentsagatype.ModelTurn{}, Permanent(fmt.Errorf("scripted model: the script has %d turns and this is turn %d", len(m.Turns), n+1))
	}
	return m.answer(req, m.Turns[n], n), nil
}

func (m scriptedModel) answer(req ModelRequest, turn agentsagatype.ScriptedTurn, n int) agentsagatype.ModelTurn {
	out := agentsagatype.ModelTurn{Content: turn.Content, Refusal: turn.Refusal, Model: agentsagatype.ProviderScripted}
	for i, call := range turn.ToolCalls {
		args := string(call.Arguments)
		var verbatim string
		if json.Unmarshal(call.Arguments, &verbatim) == nil {
			args = verbatim
		}
		if args == "" {
			args = "{}"
		}
		out.ToolCalls = append(out.ToolCalls, agentsagatype.ToolCall{ID: fmt.Sprintf("call_%d_%d", n+1, i+1), Name: call.Name, Arguments: args})
	}
	// Rough token counts keep budgets meaningful without a tokenizer.
	for _, msg := range req.Messages {
		out.Usage.InputTokens += int64(len(msg.Content)/4 + 1)
	}
	out.Usage.OutputTokens = int64(len(turn.Content)/4 + 1)
	return out
}

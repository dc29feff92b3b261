// Package convfit owns fitting a run's conversation to a model's context
// budget: a message's token estimate, the plan the ledger makes from the
// messages' sizes (what a model turn's claim asks for), and the request
// assembled from what the claim read, with old outputs shortened to
// previews and the oldest turns left out. Only package activities imports it.
package convfit

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/tiktoken-go/tokenizer"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/internal/textclip"
	"github.com/agentsaga/agentsaga/internal/wire"
)

// ToLedger is m as a conversation row.
//
// A turn's reasoning rides in its row's tool_calls, on the first call:
// every provider needs its reasoning back only with the tool calls it
// came with (Anthropic's thinking before tool_use, Gemini's signature on
// a function call, OpenAI's reasoning item before a function call), and
// the column is already read everywhere a conversation is (the claim's
// window), so no statement changes. A turn without tool calls keeps none.
func ToLedger(m agentsagatype.Message) ledgerdb.Message {
	row := ledgerdb.Message{Seq: m.Seq, Role: m.Role, Content: m.Content, ToolCallID: m.ToolCallID, Name: m.Name,
		Pinned: m.Pinned, SourceKey: m.Key, Tokens: EstimateTokens(m)}
	if len(m.ToolCalls) > 0 {
		calls := make([]storedCall, len(m.ToolCalls))
		for i, c := range m.ToolCalls {
			calls[i].ToolCall = c
		}
		calls[0].Reasoning = m.Reasoning
		row.ToolCalls, _ = json.Marshal(calls)
	}
	return row
}

// storedCall is a tool call as a conversation row keeps it.
type storedCall struct {
	agentsagatype.ToolCall
	Reasoning *agentsagatype.Reasoning `json:"reasoning,omitempty"`
}

// FromLedger is a conversation row as a Message.
func FromLedger(row ledgerdb.Message) agentsagatype.Message {
	m := agentsagatype.Message{Seq: row.Seq, Role: row.Role, Content: row.Content, ToolCallID: row.ToolCallID, Name: row.Name,
		Pinned: row.Pinned, Key: row.SourceKey}
	var calls []storedCall
	if len(row.ToolCalls) > 0 && json.Unmarshal(row.ToolCalls, &calls) == nil {
		for _, c := range calls {
			m.ToolCalls = append(m.ToolCalls, c.ToolCall)
			if c.Reasoning != nil {
				m.Reasoning = c.Reasoning
			}
		}
	}
	return m
}

// keptTurns is how many of the last assistant turns, with their tool
// results, a request keeps whole while older ones can make room.
const keptTurns = 2

// shortenedPreviewBytes bounds a shortened output in a request.
const shortenedPreviewBytes = 400

// Fitted is a request's conversation after fitting it to the context
// budget.
type Fitted struct {
	Messages  []agentsagatype.Message
	Tokens    int
	Shortened int
	Omitted   int
}

// Request says how a request fits its conversation, with trailing and
// extraTokens of tool definitions, to budget tokens. The model turn's claim
// makes the plan in the ledger from the messages' sizes alone
// (agentsaga_fit_plan) and reads only what the request sends, the outputs
// it shortens only in part, so a turn costs the same however long the run.
// First the oldest tool outputs and failed attempts shrink to previews,
// oldest first; the last keptTurns turns' outputs are kept whole while the
// rest can make room, then only the last turn's. When the previews still do
// not fit (a run of a thousand turns), the oldest turns are left out whole,
// their outputs still in the ledger for read_result. Only then does the last
// turn's output shrink too. Pinned messages (the system prompt, the goal, a
// human's instructions) are always sent, and so is the last turn. The plan
// is made from estimates of what previews will cost; a twentieth of slack
// keeps the request under the budget itself.
func Request(trailing []agentsagatype.Message, extraTokens, budget int) ledgerdb.FitRequest {
	trailingTokens := 0
	for _, m := range trailing {
		trailingTokens += EstimateTokens(m)
	}
	return ledgerdb.FitRequest{Budget: budget - budget/20, Trailing: trailingTokens + extraTokens, KeptTurns: keptTurns,
		CutBytes: shortenedPreviewBytes, CutTokens: shortenedTokens, NoteTokens: noteTokens}
}

// Claimed is the request a model turn's claim read the conversation
// for, with trailing after it.
func Claimed(claim ledgerdb.Claim, trailing []agentsagatype.Message) Fitted {
	msgs := make([]agentsagatype.Message, len(claim.Conversation))
	bytes := make(map[int]int, len(claim.Conversation))
	for i, row := range claim.Conversation {
		msgs[i] = FromLedger(row)
		bytes[row.Seq] = row.Bytes
	}
	return assemble(msgs, bytes, claim.Plan, trailing)
}

// shortenedTokens bounds what a shortened output costs in a request.
const shortenedTokens = 250

// noteTokens is room for the note that says what was shortened.
const noteTokens = 80

// assemble builds the request from the messages read (the omitted ones not
// read, the cut ones read only in part, whole holding each one's whole
// length): it shortens the cut ones, says what was left out where it was,
// and appends trailing.
func assemble(msgs []agentsagatype.Message, whole map[int]int, plan ledgerdb.FitPlan, trailing []agentsagatype.Message) Fitted {
	out := make([]agentsagatype.Message, 0, len(msgs)+1+len(trailing))
	shortened, told := 0, false
	var note *agentsagatype.Message
	leftOut := plan.Omitted > 0 || plan.CutBefore > 0
	for _, m := range msgs {
		if !told && !m.Pinned && leftOut {
			// Where what was left out begins.
			out = append(out, agentsagatype.Message{Role: "system"})
			note, told = &out[len(out)-1], true
		}
		if m.Seq < plan.CutBefore && !m.Pinned && m.Role == "tool" {
			if short, ok := shorten(m, whole[m.Seq]); ok {
				m.Content = short
				shortened++
			}
		}
		out = append(out, m)
	}
	var what []string
	if plan.Omitted > 0 {
		what = append(what, fmt.Sprintf("the %d oldest turns are left out", plan.Omitted))
	}
	if shortened > 0 {
		what = append(what, fmt.Sprintf("%d older tool outputs are shortened to previews", shortened))
	}
	if len(what) == 0 && note != nil {
		what = append(what, "some older outputs are read in part")
	}
	if len(what) > 0 {
		text := fmt.Sprintf("CONTEXT: to fit the context budget, %s. Every output is kept: call %s with a call's key "+
			"(the run's workflow ID, \"/\", and its activity ID, such as step-003-call-1-search) to read one back whole.",
			strings.Join(what, " and "), wire.ReadResultTool)
		if note != nil {
			note.Content = text
		} else {
			out = append(out, agentsagatype.Message{Role: "system", Content: text})
		}
	}
	out = append(out, trailing...)
	total := 0
	for _, m := range out {
		total += EstimateTokens(m)
	}
	return Fitted{Messages: out, Tokens: total, Shortened: shortened, Omitted: plan.Omitted}
}

// shorten is a tool message's content (of which only the start may have
// been read; whole is the whole's length) as a preview: a failed attempt in
// one line, an output as its start and where the whole is.
func shorten(m agentsagatype.Message, whole int) (string, bool) {
	if strings.HasPrefix(m.Content, "error: ") {
		line, _, _ := strings.Cut(m.Content, "\n")
		line, _ = textclip.CutAtRune(line, 200)
		return line, len(line) < whole
	}
	if whole <= shortenedPreviewBytes {
		return "", false
	}
	start, _ := textclip.CutAtRune(m.Content, shortenedPreviewBytes)
	if m.Key == "" {
		return fmt.Sprintf("%s... [shortened: %d bytes in all]", start, whole), true
	}
	return fmt.Sprintf("%s... [shortened: %d bytes in all; %s {\"key\": %q} reads it whole]",
		start, whole, wire.ReadResultTool, m.Key), true
}

// codec is the tokenizer the estimate counts with: o200k, OpenAI's current
// encoding. Other providers' tokenizers differ by some tens of percent, so
// the estimate adds a margin.
var codec = mustCodec()

func mustCodec() tokenizer.Codec {
	c, err := tokenizer.Get(tokenizer.O200kBase)
	if err != nil {
		panic(fmt.Sprintf("convfit: the o200k tokenizer is embedded and must load: %v", err))
	}
	return c
}

// EstimateTokens is a message's size in tokens, erring high: the tokenizer's
// count plus a fifth, and a few tokens of framing a message costs on the
// wire.
func EstimateTokens(m agentsagatype.Message) int {
	n := Count(m.Content)
	for _, c := range m.ToolCalls {
		n += Count(c.Name) + Count(c.Arguments) + 8
	}
	if m.Reasoning != nil {
		// Opaque (signatures, encrypted items): a token for every 3
		// bytes, on the high side of what base64 costs.
		n += len(m.Reasoning.Data) / 3
	}
	return n + n/5 + 8
}

// Count is s in tokens (o200k), every byte a token if it cannot be counted.
func Count(s string) int {
	if s == "" {
		return 0
	}
	n, err := codec.Count(s)
	if err != nil {
		return len(s) // every byte a token: high, never low
	}
	return n
}

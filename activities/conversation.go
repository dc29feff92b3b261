package activities

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/tiktoken-go/tokenizer"

	"github.com/agentsaga/agentsaga/ledger"
)

// PreviewBytes bounds the text of a tool result that workflow history
// carries: the whole output lives in the ledger.
const PreviewBytes = 1024

// Preview is s cut to at most PreviewBytes on a character boundary, with a
// marker saying how long the whole was.
func Preview(s string) string {
	if len(s) <= PreviewBytes {
		return s
	}
	marker := fmt.Sprintf("... [%d bytes in all]", len(s))
	cut, _ := cutAtRune(s, PreviewBytes-len(marker))
	return cut + marker
}

// Digest identifies a whole output by content, for the watchdog and the
// trace: two outputs with the same digest are the same.
func Digest(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:16])
}

// Conversation says which of a run's messages a model call sends: those
// before Through, once Append (messages the workflow itself produced: the
// system prompt, the goal, a human's instruction, a failed call's error) is
// written. The model's reply becomes message Through.
type Conversation struct {
	WorkflowID string    `json:"workflow_id"`
	Append     []Message `json:"append,omitempty"`
	Through    int       `json:"through"`
}

// MessageRef is where a tool call's output goes in the run's conversation.
type MessageRef struct {
	Seq        int    `json:"seq"`
	ToolCallID string `json:"tool_call_id,omitempty"`
	Name       string `json:"name,omitempty"`
}

// toLedger is m as a conversation row.
func (m Message) toLedger() ledger.Message {
	row := ledger.Message{Seq: m.Seq, Role: m.Role, Content: m.Content, ToolCallID: m.ToolCallID, Name: m.Name,
		Pinned: m.Pinned, SourceKey: m.Key, Tokens: estimateTokens(m)}
	if len(m.ToolCalls) > 0 {
		row.ToolCalls, _ = json.Marshal(m.ToolCalls)
	}
	return row
}

// fromLedger is a conversation row as a Message.
func fromLedger(row ledger.Message) Message {
	m := Message{Seq: row.Seq, Role: row.Role, Content: row.Content, ToolCallID: row.ToolCallID, Name: row.Name,
		Pinned: row.Pinned, Key: row.SourceKey}
	if len(row.ToolCalls) > 0 {
		_ = json.Unmarshal(row.ToolCalls, &m.ToolCalls)
	}
	return m
}

// ReadResultTool is the built-in tool that reads a shortened output back
// whole, by the key its preview names.
const ReadResultTool = "read_result"

// ReadResultDef is how read_result is offered to the model.
var ReadResultDef = ToolDef{
	Name:        ReadResultTool,
	Description: "Read back, whole, a tool output that was shortened to a preview. Pass the key its preview names.",
	Parameters:  json.RawMessage(`{"type":"object","properties":{"key":{"type":"string"}},"required":["key"],"additionalProperties":false}`),
}

// keptTurns is how many of the last assistant turns, with their tool
// results, a request keeps whole while older ones can make room.
const keptTurns = 2

// shortenedPreviewBytes bounds a shortened output in a request.
const shortenedPreviewBytes = 400

// fitted is a request's conversation after fitting it to the context
// budget.
type fitted struct {
	Messages  []Message
	Tokens    int
	Shortened int
}

// fitConversation reads the conversation conv sends and fits it, with
// trailing, to budget tokens: the sizes first, then the messages, the ones
// it shortens read only in part.
func (a *Activities) fitConversation(ctx context.Context, conv Conversation, trailing []Message, budget int) (fitted, error) {
	sizes, err := a.Ledger.MessageSizes(ctx, conv.WorkflowID, conv.Through)
	if err != nil {
		return fitted{}, err
	}
	trailingTokens := 0
	for _, m := range trailing {
		trailingTokens += estimateTokens(m)
	}
	cut := planFit(sizes, trailingTokens, budget)
	rows, err := a.Ledger.Messages(ctx, conv.WorkflowID, conv.Through, cut, shortenedPreviewBytes)
	if err != nil {
		return fitted{}, err
	}
	msgs := make([]Message, len(rows))
	bytes := make(map[int]int, len(cut))
	for i, row := range rows {
		msgs[i] = fromLedger(row)
		bytes[row.Seq] = row.Bytes
	}
	return assemble(msgs, bytes, cut, trailing), nil
}

// shortenedTokens bounds what a shortened output costs in a request.
const shortenedTokens = 250

// planFit decides which messages a request shortens to fit budget tokens,
// from their sizes alone: the oldest tool outputs and failed attempts
// first. Pinned messages (the system prompt, the goal, a human's
// instructions) are never shortened, nor are the outputs of the last
// keptTurns turns while the rest can make room; when it cannot, only the
// last turn's, and when even those do not fit, none (a preview names where
// each whole output is). trailing is the size of what follows the
// conversation (the budget note, finish instructions). budget <= 0 means no
// budget.
func planFit(sizes []ledger.MessageSize, trailing, budget int) []int {
	total := trailing + noteTokens
	for _, m := range sizes {
		total += sizeTokens(m)
	}
	var cut []int
	from := 0
	for _, kept := range []int{keptTurns, 1, 0} {
		protectedFrom := turnsFrom(sizes, kept)
		for i := from; i < protectedFrom && budget > 0 && total > budget; i++ {
			m := sizes[i]
			if m.Pinned || m.Role != "tool" || m.Bytes <= shortenedPreviewBytes {
				continue
			}
			total += min(shortenedTokens, sizeTokens(m)) - sizeTokens(m)
			cut = append(cut, m.Seq)
		}
		from = protectedFrom
	}
	return cut
}

// turnsFrom is the index where the last n assistant turns begin.
func turnsFrom(sizes []ledger.MessageSize, n int) int {
	i := len(sizes)
	for turns := 0; i > 0 && turns < n; {
		i--
		if sizes[i].Role == "assistant" {
			turns++
		}
	}
	return i
}

// noteTokens is room for the note that says what was shortened.
const noteTokens = 60

// sizeTokens is a message's size in tokens: its writer's estimate, or one
// token a byte when it has none (high, never low).
func sizeTokens(m ledger.MessageSize) int {
	if m.Tokens > 0 {
		return m.Tokens
	}
	return m.Bytes + 8
}

// assemble builds the request from the messages read (those in cut read
// only in part), shortening the cut ones, and appends a note telling the
// model what was shortened, then trailing.
func assemble(msgs []Message, bytes map[int]int, cut []int, trailing []Message) fitted {
	shortenSeq := map[int]bool{}
	for _, seq := range cut {
		shortenSeq[seq] = true
	}
	out := make([]Message, 0, len(msgs)+1+len(trailing))
	shortened := 0
	for _, m := range msgs {
		if shortenSeq[m.Seq] {
			if short, ok := shorten(m, bytes[m.Seq]); ok {
				m.Content = short
				shortened++
			}
		}
		out = append(out, m)
	}
	if shortened > 0 {
		out = append(out, Message{Role: "system", Content: fmt.Sprintf("CONTEXT: %d older tool outputs were shortened to previews "+
			"to fit the context budget. Call %s with the key a preview names to read one back whole.", shortened, ReadResultTool)})
	}
	out = append(out, trailing...)
	total := 0
	for _, m := range out {
		total += estimateTokens(m)
	}
	return fitted{Messages: out, Tokens: total, Shortened: shortened}
}

// shorten is a tool message's content (of which only the start may have
// been read; whole is the whole's length) as a preview: a failed attempt in
// one line, an output as its start and where the whole is.
func shorten(m Message, whole int) (string, bool) {
	if strings.HasPrefix(m.Content, "error: ") {
		line, _, _ := strings.Cut(m.Content, "\n")
		line, _ = cutAtRune(line, 200)
		return line, len(line) < whole
	}
	if whole <= shortenedPreviewBytes || m.Key == "" {
		return "", false
	}
	start, _ := cutAtRune(m.Content, shortenedPreviewBytes)
	return fmt.Sprintf("%s... [shortened: %d bytes in all; %s {\"key\": %q} reads it whole]",
		start, whole, ReadResultTool, m.Key), true
}

// codec is the tokenizer the estimate counts with: o200k, OpenAI's current
// encoding. Other providers' tokenizers differ by some tens of percent, so
// the estimate adds a margin.
var codec = mustCodec()

func mustCodec() tokenizer.Codec {
	c, err := tokenizer.Get(tokenizer.O200kBase)
	if err != nil {
		panic(fmt.Sprintf("activities: the o200k tokenizer is embedded and must load: %v", err))
	}
	return c
}

// estimateTokens is a message's size in tokens, erring high: the tokenizer's
// count plus a fifth, and a few tokens of framing a message costs on the
// wire.
func estimateTokens(m Message) int {
	n := count(m.Content)
	for _, c := range m.ToolCalls {
		n += count(c.Name) + count(c.Arguments) + 8
	}
	return n + n/5 + 8
}

func count(s string) int {
	if s == "" {
		return 0
	}
	n, err := codec.Count(s)
	if err != nil {
		return len(s) // every byte a token: high, never low
	}
	return n
}

// knownContextTokens are the context windows of models the README names,
// by name prefix; the longest matching prefix wins.
var knownContextTokens = map[string]int{
	"gpt-4o":     128000,
	"gpt-4.1":    1047576,
	"gpt-5":      400000,
	"o3":         200000,
	"o4-mini":    200000,
	"claude-":    200000,
	"llama3.1":   128000,
	"llama3.2":   128000,
	"qwen2.5":    32768,
	"mistral":    32768,
	"gemma":      8192,
	"phi3":       4096,
	"deepseek-r": 65536,
}

// DefaultContextTokens is the budget of a model nobody told us about:
// small enough to fit most.
const DefaultContextTokens = 32000

// ContextTokens is the spec's context budget, or the known window of its
// model, or DefaultContextTokens; less the room its reply needs.
func (m ModelSpec) ContextTokens() int {
	window := m.ContextWindow
	if window == 0 {
		best := ""
		for prefix, n := range knownContextTokens {
			if strings.HasPrefix(m.Name, prefix) && len(prefix) > len(best) {
				best, window = prefix, n
			}
		}
	}
	if window == 0 {
		window = DefaultContextTokens
	}
	reply := int(m.MaxTokens)
	if reply == 0 {
		reply = defaultReplyTokens
	}
	return max(window-reply, window/2)
}

// defaultReplyTokens is the room kept for the reply when the spec sets no
// max_tokens.
const defaultReplyTokens = 4096

package activities

import (
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
		Pinned: m.Pinned, SourceKey: m.Key}
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
// results, a request always keeps whole.
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

// fitContext fits msgs, plus the trailing instructions (the budget note and
// any finish instructions), to budget tokens. When they would not fit, the
// oldest tool outputs shrink to previews that name their key, and failed
// attempts collapse to one line, oldest first; pinned messages (the system
// prompt, the goal, a human's instructions) and the last keptTurns turns
// are never shortened. A note telling the model what was shortened goes
// last. budget <= 0 means no budget.
func fitContext(msgs []Message, trailing []Message, budget int) fitted {
	out := append([]Message(nil), msgs...)
	sizes := make([]int, len(out))
	total := 0
	for i, m := range out {
		sizes[i] = estimateTokens(m)
		total += sizes[i]
	}
	for _, m := range trailing {
		total += estimateTokens(m)
	}
	protectedFrom := len(out)
	for turns := 0; protectedFrom > 0 && turns < keptTurns; {
		protectedFrom--
		if out[protectedFrom].Role == "assistant" {
			turns++
		}
	}
	shortened := 0
	note := Message{Role: "system"}
	for i := 0; i < protectedFrom && budget > 0 && total+estimateTokens(note) > budget; i++ {
		m := out[i]
		if m.Pinned || m.Role != "tool" {
			continue
		}
		short, ok := shorten(m)
		if !ok {
			continue
		}
		out[i].Content = short
		size := estimateTokens(out[i])
		total += size - sizes[i]
		sizes[i] = size
		shortened++
		note.Content = fmt.Sprintf("CONTEXT: %d older tool outputs were shortened to previews to fit the context budget. "+
			"Call %s with the key a preview names to read one back whole.", shortened, ReadResultTool)
	}
	if shortened > 0 {
		out = append(out, note)
		total += estimateTokens(note)
	}
	out = append(out, trailing...)
	return fitted{Messages: out, Tokens: total, Shortened: shortened}
}

// shorten is a tool message's content as a preview: a failed attempt in
// one line, an output as its start and where the whole is.
func shorten(m Message) (string, bool) {
	if strings.HasPrefix(m.Content, "error: ") {
		line, _, _ := strings.Cut(m.Content, "\n")
		line, _ = cutAtRune(line, 200)
		return line, line != m.Content
	}
	if len(m.Content) <= shortenedPreviewBytes || m.Key == "" {
		return "", false
	}
	start, _ := cutAtRune(m.Content, shortenedPreviewBytes)
	return fmt.Sprintf("%s... [shortened: %d bytes in all; %s {\"key\": %q} reads it whole]",
		start, len(m.Content), ReadResultTool, m.Key), true
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

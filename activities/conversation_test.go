package activities

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/ledger"
)

// longConversation is a run of turns, each an assistant message calling a
// tool and the tool's output of outputBytes, after the system prompt and
// the goal; a human's long instruction sits in the middle.
func longConversation(turns, outputBytes int) []Message {
	msgs := []Message{
		{Seq: 0, Role: "system", Content: "You are an agent.", Pinned: true},
		{Seq: 1, Role: "user", Content: "Read the report.", Pinned: true},
	}
	for t := 1; t <= turns; t++ {
		msgs = append(msgs, Message{Seq: len(msgs), Role: "assistant", ToolCalls: []ToolCall{{ID: fmt.Sprint(t), Name: "page", Arguments: fmt.Sprintf(`{"turn":%d}`, t)}}})
		page := strings.Repeat(fmt.Sprintf("page %d says something new. ", t), outputBytes/26+1)[:outputBytes]
		msgs = append(msgs, Message{Seq: len(msgs), Role: "tool", Content: page, Key: fmt.Sprintf("wf/step-%03d-call-1-page", t)})
		if t == turns/2 {
			msgs = append(msgs, Message{Seq: len(msgs), Role: "user", Content: "Instruction from a human: " + strings.Repeat("keep going ", 200), Pinned: true})
		}
	}
	msgs = append(msgs, Message{Seq: len(msgs), Role: "tool", Content: "error: HTTP 503 from page\nstack trace\nmore lines", Key: ""})
	return msgs
}

// fit runs the same two steps CallModel does, from in-memory rows.
func fit(msgs []Message, trailing []Message, budget int) (fitted, []int) {
	sizes := make([]ledger.MessageSize, len(msgs))
	bytes := map[int]int{}
	for i, m := range msgs {
		sizes[i] = ledger.MessageSize{Seq: m.Seq, Role: m.Role, Pinned: m.Pinned, Key: m.Key, Tokens: estimateTokens(m), Bytes: len(m.Content)}
		bytes[m.Seq] = len(m.Content)
	}
	trailingTokens := 0
	for _, m := range trailing {
		trailingTokens += estimateTokens(m)
	}
	cut := planFit(sizes, trailingTokens, budget)
	read := make([]Message, len(msgs))
	for i, m := range msgs {
		read[i] = m
		for _, seq := range cut {
			if seq == m.Seq {
				read[i].Content, _ = cutAtRune(m.Content, shortenedPreviewBytes)
			}
		}
	}
	return assemble(read, bytes, cut, trailing), cut
}

func TestContextBudgetShortensOldOutputsAndKeepsWhatMatters(t *testing.T) {
	t.Parallel()
	msgs := longConversation(40, 50<<10)
	note := []Message{{Role: "system", Content: "BUDGET LEFT: 9 steps"}}
	const budget = 32000
	got, cut := fit(msgs, note, budget)

	require.NotEmpty(t, cut)
	assert.LessOrEqual(t, got.Tokens, budget, "the request fits its budget")
	assert.Equal(t, len(cut), got.Shortened)
	byContent := map[string]bool{}
	for _, m := range got.Messages {
		byContent[m.Content] = true
	}
	for _, m := range msgs {
		switch {
		case m.Pinned:
			assert.True(t, byContent[m.Content], "pinned message %d is sent whole", m.Seq)
		case m.Seq >= len(msgs)-2 && m.Role == "tool":
			assert.True(t, byContent[m.Content], "the last turn is sent whole (%d)", m.Seq)
		}
	}
	last := got.Messages[len(got.Messages)-1]
	assert.Equal(t, note[0], last, "the budget note goes last")
	shortened := got.Messages[3]
	assert.Contains(t, shortened.Content, `read_result {"key": "wf/step-001-call-1-page"} reads it whole`)
	assert.Contains(t, shortened.Content, fmt.Sprintf("%d bytes in all", 50<<10))
	assert.LessOrEqual(t, len(shortened.Content), shortenedPreviewBytes+200)
	var told bool
	for _, m := range got.Messages {
		told = told || strings.Contains(m.Content, "older tool outputs were shortened")
	}
	assert.True(t, told, "the model is told what was shortened")
}

func TestContextBudgetCollapsesFailedAttemptsToOneLine(t *testing.T) {
	t.Parallel()
	msgs := []Message{
		{Seq: 0, Role: "system", Content: "s", Pinned: true},
		{Seq: 1, Role: "assistant", ToolCalls: []ToolCall{{ID: "1", Name: "page", Arguments: "{}"}}},
		{Seq: 2, Role: "tool", Content: "error: HTTP 503\n" + strings.Repeat("trace line\n", 2000)},
	}
	for t := 0; t < 3; t++ {
		msgs = append(msgs, Message{Seq: len(msgs), Role: "assistant", Content: "next"})
	}
	got, _ := fit(msgs, nil, 1500)
	assert.Equal(t, "error: HTTP 503", got.Messages[2].Content)
}

func TestNoShorteningWhenItFits(t *testing.T) {
	t.Parallel()
	msgs := longConversation(3, 1000)
	got, cut := fit(msgs, nil, 100000)
	assert.Empty(t, cut)
	assert.Zero(t, got.Shortened)
	assert.Len(t, got.Messages, len(msgs))
}

func TestContextTokensDefaults(t *testing.T) {
	t.Parallel()
	assert.Equal(t, 128000-defaultReplyTokens, ModelSpec{Provider: ProviderOpenAI, Name: "gpt-4o-mini"}.ContextTokens())
	assert.Equal(t, 200000-1024, ModelSpec{Provider: ProviderAnthropic, Name: "claude-sonnet-4-5", MaxTokens: 1024}.ContextTokens())
	assert.Equal(t, DefaultContextTokens-defaultReplyTokens, ModelSpec{Provider: ProviderOpenAI, Name: "my-local-model"}.ContextTokens())
	assert.Equal(t, 16000-defaultReplyTokens, ModelSpec{Provider: ProviderOpenAI, Name: "gpt-4o", ContextWindow: 16000}.ContextTokens())
}

// The estimate errs high against the tokenizer's own count.
func TestEstimateErrsHigh(t *testing.T) {
	t.Parallel()
	text := strings.Repeat("The quick brown fox jumps over the lazy dog. 12345 ", 100)
	exact, err := codec.Count(text)
	require.NoError(t, err)
	assert.Greater(t, estimateTokens(Message{Content: text}), exact)
}

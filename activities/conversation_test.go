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

// fit runs the same two steps CallModel does, from in-memory rows: plan
// from the sizes, then read what the plan sends.
func fit(msgs []Message, trailing []Message, budget int) (fitted, fitPlan) {
	sizes := make([]ledger.MessageSize, len(msgs))
	whole := map[int]int{}
	for i, m := range msgs {
		sizes[i] = ledger.MessageSize{Seq: m.Seq, Role: m.Role, Pinned: m.Pinned, Key: m.Key, Tokens: estimateTokens(m), Bytes: len(m.Content)}
		whole[m.Seq] = len(m.Content)
	}
	trailingTokens := 0
	for _, m := range trailing {
		trailingTokens += estimateTokens(m)
	}
	plan := planFit(sizes, trailingTokens, budget)
	var read []Message
	for _, m := range msgs {
		if m.Seq < plan.OmitBefore && !m.Pinned {
			continue
		}
		if m.Seq < plan.CutBefore && m.Role == "tool" && !m.Pinned && len(m.Content) > shortenedPreviewBytes {
			m.Content, _ = cutAtRune(m.Content, shortenedPreviewBytes)
		}
		read = append(read, m)
	}
	return assemble(read, whole, plan, trailing), plan
}

func TestContextBudgetShortensOldOutputsAndKeepsWhatMatters(t *testing.T) {
	t.Parallel()
	msgs := longConversation(40, 50<<10)
	note := []Message{{Role: "system", Content: "BUDGET LEFT: 9 steps"}}
	const budget = 32000
	got, plan := fit(msgs, note, budget)

	require.Positive(t, plan.CutBefore)
	assert.Zero(t, plan.Omitted, "previews were enough")
	assert.LessOrEqual(t, got.Tokens, budget, "the request fits its budget")
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
	shortened := got.Messages[4]
	assert.Contains(t, shortened.Content, `read_result {"key": "wf/step-001-call-1-page"} reads it whole`)
	assert.Contains(t, got.Messages[2].Content, "shortened to previews", "the note sits where the shortening begins")
	assert.Contains(t, shortened.Content, fmt.Sprintf("%d bytes in all", 50<<10))
	assert.LessOrEqual(t, len(shortened.Content), shortenedPreviewBytes+200)
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
	assert.Equal(t, "error: HTTP 503", got.Messages[3].Content, "after the system prompt, the note and the call")
}

func TestNoShorteningWhenItFits(t *testing.T) {
	t.Parallel()
	msgs := longConversation(3, 1000)
	got, plan := fit(msgs, nil, 100000)
	assert.Zero(t, plan.CutBefore)
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

// A thousand turns do not fit even as previews: the oldest turns are left
// out whole (their outputs stay in the ledger), pinned messages and the
// last turn are still sent, and every tool result still follows its call.
func TestContextBudgetLeavesOutTheOldestTurnsOfAVeryLongRun(t *testing.T) {
	t.Parallel()
	msgs := longConversation(1000, 2<<10)
	const budget = 27904
	got, plan := fit(msgs, []Message{{Role: "system", Content: "BUDGET LEFT: 9 steps"}}, budget)
	require.Positive(t, plan.Omitted)
	assert.LessOrEqual(t, got.Tokens, budget)
	assert.Equal(t, plan.Omitted, got.Omitted)
	pinned := 0
	for i, m := range got.Messages {
		if m.Pinned {
			pinned++
		}
		if m.Role == "tool" && m.Key != "" {
			require.Positive(t, i)
			prev := got.Messages[i-1]
			assert.True(t, prev.Role == "assistant" || prev.Role == "tool", "tool result %d follows its call", m.Seq)
		}
	}
	assert.Equal(t, 3, pinned, "system prompt, goal and the human's instruction")
	var note string
	for _, m := range got.Messages {
		if strings.HasPrefix(m.Content, "CONTEXT:") {
			note = m.Content
		}
	}
	assert.Contains(t, note, "oldest turns are left out")
	assert.Equal(t, msgs[len(msgs)-2].Content, got.Messages[len(got.Messages)-3].Content, "the last turn's output is whole")
}

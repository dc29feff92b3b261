package convfit

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/internal/ledgertest"
)

// longConversation is a run of turns, each an assistant message calling a
// tool and the tool's output of outputBytes, after the system prompt and
// the goal; a human's long instruction sits in the middle.
func longConversation(turns, outputBytes int) []agentsagatype.Message {
	msgs := []agentsagatype.Message{
		{Seq: 0, Role: "system", Content: "You are an agent.", Pinned: true},
		{Seq: 1, Role: "user", Content: "Read the report.", Pinned: true},
	}
	for t := 1; t <= turns; t++ {
		msgs = append(msgs, agentsagatype.Message{Seq: len(msgs), Role: "assistant", ToolCalls: []agentsagatype.ToolCall{{ID: fmt.Sprint(t), Name: "page", Arguments: fmt.Sprintf(`{"turn":%d}`, t)}}})
		page := strings.Repeat(fmt.Sprintf("page %d says something new. ", t), outputBytes/26+1)[:outputBytes]
		msgs = append(msgs, agentsagatype.Message{Seq: len(msgs), Role: "tool", Content: page, Key: fmt.Sprintf("wf/step-%03d-call-1-page", t)})
		if t == turns/2 {
			msgs = append(msgs, agentsagatype.Message{Seq: len(msgs), Role: "user", Content: "Instruction from a human: " + strings.Repeat("keep going ", 200), Pinned: true})
		}
	}
	msgs = append(msgs, agentsagatype.Message{Seq: len(msgs), Role: "tool", Content: "error: HTTP 503 from page\nstack trace\nmore lines", Key: ""})
	return msgs
}

// fit runs what a model turn does, through the ledger: msgs are written as
// the run's conversation, the turn's claim plans from their sizes and reads
// what the plan sends, and the request is assembled. budget is the plan's
// own (CallModel's Request keeps a twentieth of slack besides).
func fit(t *testing.T, msgs []agentsagatype.Message, trailing []agentsagatype.Message, budget int) (Fitted, ledgerdb.FitPlan) {
	t.Helper()
	ctx := context.Background()
	store := ledgertest.NewStore(t)
	rows := make([]ledgerdb.Message, len(msgs))
	for i, m := range msgs {
		rows[i] = ToLedger(m)
	}
	req := Request(trailing, 0, 0)
	req.Budget = budget
	claim, err := store.ClaimTurn(ctx, ledgerdb.ActionRequest{Key: "wf/step-999-model", WorkflowID: "wf", ActivityID: "step-999-model",
		Tool: "model:scripted", Arguments: "{}", Kind: ledgerdb.ActionModel},
		ledgerdb.LeafCall{Attempt: 1, Kind: ledgerdb.LeafModel, Target: "scripted"}, time.Minute,
		ledgerdb.TurnRead{WorkflowID: "wf", Append: rows, Through: len(msgs), Fit: req})
	require.NoError(t, err)
	require.True(t, claim.Execute)
	return Claimed(claim, trailing), claim.Plan
}

func TestContextBudgetShortensOldOutputsAndKeepsWhatMatters(t *testing.T) {
	t.Parallel()
	msgs := longConversation(40, 50<<10)
	note := []agentsagatype.Message{{Role: "system", Content: "BUDGET LEFT: 9 steps"}}
	const budget = 32000
	got, plan := fit(t, msgs, note, budget)

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
	msgs := []agentsagatype.Message{
		{Seq: 0, Role: "system", Content: "s", Pinned: true},
		{Seq: 1, Role: "assistant", ToolCalls: []agentsagatype.ToolCall{{ID: "1", Name: "page", Arguments: "{}"}}},
		{Seq: 2, Role: "tool", Content: "error: HTTP 503\n" + strings.Repeat("trace line\n", 2000)},
	}
	for t := 0; t < 3; t++ {
		msgs = append(msgs, agentsagatype.Message{Seq: len(msgs), Role: "assistant", Content: "next"})
	}
	got, _ := fit(t, msgs, nil, 1500)
	assert.Equal(t, "error: HTTP 503", got.Messages[3].Content, "after the system prompt, the note and the call")
}

func TestNoShorteningWhenItFits(t *testing.T) {
	t.Parallel()
	msgs := longConversation(3, 1000)
	got, plan := fit(t, msgs, nil, 100000)
	assert.Zero(t, plan.CutBefore)
	assert.Zero(t, got.Shortened)
	assert.Len(t, got.Messages, len(msgs))
}

// The estimate errs high against the tokenizer's own Count.
func TestEstimateErrsHigh(t *testing.T) {
	t.Parallel()
	text := strings.Repeat("The quick brown fox jumps over the lazy dog. 12345 ", 100)
	exact, err := codec.Count(text)
	require.NoError(t, err)
	assert.Greater(t, EstimateTokens(agentsagatype.Message{Content: text}), exact)
}

// A thousand turns do not fit even as previews: the oldest turns are left
// out whole (their outputs stay in the ledger), pinned messages and the
// last turn are still sent, and every tool result still follows its call.
func TestContextBudgetLeavesOutTheOldestTurnsOfAVeryLongRun(t *testing.T) {
	t.Parallel()
	msgs := longConversation(1000, 2<<10)
	const budget = 27904
	got, plan := fit(t, msgs, []agentsagatype.Message{{Role: "system", Content: "BUDGET LEFT: 9 steps"}}, budget)
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

// referencePlan is the plan agentsaga_fit_plan makes, written in Go as
// the model the SQL must match (it was the engine's own planner before the
// plan moved into the turn's claim statement).
func referencePlan(sizes []ledgerdb.MessageSize, trailing, budget int) ledgerdb.FitPlan {
	shortens := func(m ledgerdb.MessageSize) bool {
		return !m.Pinned && m.Role == "tool" && m.Bytes > shortenedPreviewBytes
	}
	turnsFrom := func(n int) int { // the index where the last n assistant turns begin
		i := len(sizes)
		for turns := 0; i > 0 && turns < n; {
			i--
			if sizes[i].Role == "assistant" {
				turns++
			}
		}
		return i
	}
	tokens := make([]int, len(sizes))
	total := trailing + noteTokens
	for i, m := range sizes {
		tokens[i] = m.Tokens
		if m.Tokens <= 0 {
			tokens[i] = m.Bytes + 8
		}
		total += tokens[i]
	}
	var plan ledgerdb.FitPlan
	from := 0
	cut := func(kept int) {
		protectedFrom := turnsFrom(kept)
		for i := from; i < protectedFrom && budget > 0 && total > budget; i++ {
			plan.CutBefore = sizes[i].Seq + 1
			if shortens(sizes[i]) {
				short := min(shortenedTokens, tokens[i])
				total += short - tokens[i]
				tokens[i] = short
			}
		}
		from = max(from, protectedFrom)
	}
	cut(keptTurns)
	cut(1)
	last := turnsFrom(1)
	for i := 0; i < last && budget > 0 && total > budget; {
		if sizes[i].Role != "assistant" {
			i++
			continue
		}
		j := i + 1
		for j < len(sizes) && sizes[j].Role == "tool" {
			j++
		}
		if j > last {
			break
		}
		for k := i; k < j; k++ {
			if !sizes[k].Pinned {
				total -= tokens[k]
			}
		}
		plan.OmitBefore, plan.Omitted = sizes[j-1].Seq+1, plan.Omitted+1
		i = j
	}
	cut(0)
	return plan
}

// The ledger's planner makes the reference plan on random conversations:
// any roles in any order, pinned or not, estimated or not, outputs either
// side of the preview length, budgets from none to roomy.
func TestFitPlanInTheLedgerMatchesTheReference(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := ledgertest.NewStore(t)
	random := rand.New(rand.NewPCG(15, 3))
	roles := []string{"assistant", "tool", "tool", "user", "system"}
	var cut, omitted int
	for n := range 400 {
		sizes := make([]ledgerdb.MessageSize, random.IntN(60))
		seqs, tokens, bytes := make([]int32, len(sizes)), make([]int32, len(sizes)), make([]int32, len(sizes))
		assistant, tool, pinned := make([]bool, len(sizes)), make([]bool, len(sizes)), make([]bool, len(sizes))
		seq := 0
		total := 0
		for i := range sizes {
			seq += 1 + random.IntN(2) // seqs need not be dense
			m := ledgerdb.MessageSize{Seq: seq, Role: roles[random.IntN(len(roles))], Pinned: random.IntN(6) == 0,
				Bytes: random.IntN(2 * shortenedPreviewBytes), Tokens: random.IntN(400) - 100}
			if m.Tokens < 0 {
				m.Tokens = 0 // not estimated
			}
			sizes[i] = m
			seqs[i], tokens[i], bytes[i] = int32(m.Seq), int32(m.Tokens), int32(m.Bytes)
			assistant[i], tool[i], pinned[i] = m.Role == "assistant", m.Role == "tool", m.Pinned
			if m.Tokens > 0 {
				total += m.Tokens
			} else {
				total += m.Bytes + 8
			}
		}
		trailing := random.IntN(300)
		budget := random.IntN(total*3/2+2) - 1 // sometimes none, sometimes ample
		want := referencePlan(sizes, trailing, budget)
		var got ledgerdb.FitPlan
		require.NoError(t, store.Pool().QueryRow(ctx, `SELECT * FROM agentsaga_fit_plan($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)`,
			seqs, assistant, tool, pinned, tokens, bytes, trailing, budget, shortenedPreviewBytes, shortenedTokens, noteTokens, keptTurns).
			Scan(&got.CutBefore, &got.OmitBefore, &got.Omitted))
		require.Equal(t, want, got, "case %d: %d messages, trailing %d, budget %d: %+v", n, len(sizes), trailing, budget, sizes)
		if got.CutBefore > 0 {
			cut++
		}
		if got.Omitted > 0 {
			omitted++
		}
	}
	t.Logf("%d plans shortened outputs, %d left turns out", cut, omitted)
	assert.Greater(t, cut, 100, "the cases exercise the cuts")
	assert.Greater(t, omitted, 50, "and the omissions")
	assert.Less(t, cut, 350, "and plans that leave nothing out")
}

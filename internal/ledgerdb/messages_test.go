package ledgerdb_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/internal/ledgertest"
)

// The conversation is written once per place, read through a window that
// leaves old turns out and cuts old outputs, and paged for operators.
func TestConversationWindowAndPages(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := ledgertest.NewStore(t)
	msgs := []ledgerdb.Message{{Seq: 0, Role: "system", Content: "be brief", Pinned: true}, {Seq: 1, Role: "user", Content: "read", Pinned: true}}
	for i := 1; i <= 5; i++ {
		msgs = append(msgs,
			ledgerdb.Message{Seq: len(msgs), Role: "assistant", ToolCalls: []byte(fmt.Sprintf(`[{"id":"%d","name":"page","arguments":"{}"}]`, i))},
			ledgerdb.Message{Seq: len(msgs) + 1, Role: "tool", Content: strings.Repeat(fmt.Sprint(i), 2000), SourceKey: fmt.Sprintf("wf/step-%03d-call-1-page", i), Tokens: 700})
	}
	require.NoError(t, store.AppendMessages(ctx, "wf", msgs))
	again := msgs[3]
	again.Content = "a late second write"
	require.NoError(t, store.AppendMessages(ctx, "wf", []ledgerdb.Message{again}))

	sizes, err := store.MessageSizes(ctx, "wf", 100)
	require.NoError(t, err)
	require.Len(t, sizes, len(msgs))
	assert.Equal(t, 2000, sizes[3].Bytes, "the first write of a place stays")
	assert.Equal(t, 700, sizes[3].Tokens)

	// Leave out turns before seq 6, cut outputs before seq 10 to 100 bytes.
	window, err := store.Messages(ctx, "wf", 100, ledgerdb.MessageWindow{From: 6, CutBefore: 10, CutBytes: 100})
	require.NoError(t, err)
	var seqs []int
	for _, m := range window {
		seqs = append(seqs, m.Seq)
	}
	assert.Equal(t, []int{0, 1, 6, 7, 8, 9, 10, 11}, seqs, "pinned messages stay; older ones are left out")
	assert.Len(t, window[3].Content, 100, "an output before CutBefore is read in part")
	assert.Equal(t, 2000, window[3].Bytes, "with its whole length")
	assert.Len(t, window[7].Content, 2000, "a later output is read whole")

	page, total, err := store.ConversationPage(ctx, "wf", -1, 3, 10)
	require.NoError(t, err)
	assert.Equal(t, len(msgs), total)
	require.Len(t, page, 3)
	assert.Equal(t, 9, page[0].Seq, "the last three by default")
	assert.Len(t, page[2].Content, 10)
	page, _, err = store.ConversationPage(ctx, "wf", 0, 2, 10)
	require.NoError(t, err)
	assert.Equal(t, []int{0, 1}, []int{page[0].Seq, page[1].Seq})
}

// A model reply that only calls tools is recorded without text: the
// turn's stored JSON is its action's result, not what the model said, and
// sent back it would cost every later request its size.
func TestAToolCallingReplyIsRecordedWithoutText(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := ledgertest.NewStore(t)
	req := ledgerdb.ActionRequest{Key: "wf-calls/step-001-model", WorkflowID: "wf-calls", ActivityID: "step-001-model",
		Tool: "model:openai", Arguments: `{"through":1}`, Kind: ledgerdb.ActionModel}
	claim, err := store.ClaimTurn(ctx, req, ledgerdb.LeafCall{Attempt: 1, Kind: ledgerdb.LeafModel, Target: "openai"},
		time.Minute, ledgerdb.TurnRead{WorkflowID: "wf-calls", Through: 1, Append: []ledgerdb.Message{{Seq: 0, Role: "user", Content: "count"}}})
	require.NoError(t, err)
	stored := `{"tool_calls":[{"id":"c1","name":"word_count","arguments":"{}"}],"usage":{"input_tokens":40,"output_tokens":9}}`
	_, err = store.SettleAttempt(ctx, req.Key, claim.Action.Attempts, ledgerdb.AttemptEnd{Status: agentsagatype.ActionCompleted,
		Result: stored, LeafCallID: claim.LeafCallID,
		Message: &ledgerdb.Message{Seq: 1, Role: "assistant", ToolCalls: []byte(`[{"id":"c1","name":"word_count","arguments":"{}"}]`)}})
	require.NoError(t, err)
	msgs, err := store.Messages(ctx, "wf-calls", 10, ledgerdb.MessageWindow{})
	require.NoError(t, err)
	require.Len(t, msgs, 2)
	assert.Empty(t, msgs[1].Content, "the reply said nothing but its tool calls")
	assert.JSONEq(t, `[{"id":"c1","name":"word_count","arguments":"{}"}]`, string(msgs[1].ToolCalls))
	action, err := store.GetAction(ctx, req.Key)
	require.NoError(t, err)
	assert.Equal(t, stored, action.Result, "the action keeps the whole turn")
}

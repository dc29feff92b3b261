package ledgerdb_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/internal/ledgertest"
	"github.com/agentsaga/agentsaga/internal/runevents"
)

// eventsOf reads a run's whole log, as kind@key lines, and the events.
func eventsOf(t *testing.T, store *ledgerdb.Store, workflowID string) []runevents.Event {
	t.Helper()
	events, err := runevents.New(store.Pool()).Read(context.Background(), workflowID, 0, 1000)
	require.NoError(t, err)
	for i, e := range events {
		require.Equal(t, int64(i+1), e.Seq, "the log is numbered 1, 2, 3...")
	}
	return events
}

func kindsOf(events []runevents.Event) []string {
	kinds := make([]string, len(events))
	for i, e := range events {
		kinds[i] = e.Kind
	}
	return kinds
}

// A tool call's claim and settle publish its start and its end, each in
// the statement that writes it: no statement of their own.
func TestACallsStartAndEndRideOnItsClaimAndSettle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := ledgertest.NewStore(t)
	req := request("step-001-call-1-charge")

	claim, err := store.ClaimCall(ctx, req, leafOf(req, 1), time.Minute)
	require.NoError(t, err)
	events := eventsOf(t, store, "wf-1")
	require.Equal(t, []string{runevents.ToolStarted}, kindsOf(events))
	assert.Equal(t, req.Key, events[0].CallKey)
	assert.JSONEq(t, `{"attempt":1,"tool":"charge","arguments":"{\"amount\": 5, \"currency\": \"eur\"}"}`, string(events[0].Data))

	_, err = store.SettleAttempt(ctx, req.Key, claim.Action.Attempts, ledgerdb.AttemptEnd{
		Status: agentsagatype.ActionCompleted, Result: `{"id":"ch_1"}`, LeafCallID: claim.LeafCallID})
	require.NoError(t, err)
	events = eventsOf(t, store, "wf-1")
	require.Equal(t, []string{runevents.ToolStarted, runevents.ToolFinished}, kindsOf(events))
	assert.JSONEq(t, `{"attempt":1,"outcome":"ok","tool":"charge","status":"completed","output":"{\"id\":\"ch_1\"}"}`, string(events[1].Data))

	// A replay of the stored result sends nothing, and publishes nothing.
	replay, err := store.ClaimCall(ctx, req, leafOf(req, 2), time.Minute)
	require.NoError(t, err)
	require.False(t, replay.Execute)
	assert.Len(t, eventsOf(t, store, "wf-1"), 2)
}

// modelRequest is a model turn's claim of wf-1's step-001.
func modelRequest() (ledgerdb.ActionRequest, func(int) ledgerdb.LeafCall) {
	req := ledgerdb.ActionRequest{Key: "wf-1/step-001-model", WorkflowID: "wf-1", ActivityID: "step-001-model",
		Tool: "model:openai:gpt", Arguments: `{"through":2}`, Kind: ledgerdb.ActionModel}
	return req, func(attempt int) ledgerdb.LeafCall {
		return ledgerdb.LeafCall{WorkflowID: "wf-1", ActivityID: req.ActivityID, Key: req.Key, Attempt: attempt,
			Kind: ledgerdb.LeafModel, Target: "openai:gpt"}
	}
}

// A model attempt that streamed text and then failed voids that text, in
// its settle's statement, after the text it voids; the next attempt's text
// is new text, and the turn that succeeds says what it answered.
func TestAFailedAttemptsStreamedTextIsDiscardedByItsSettle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := ledgertest.NewStore(t)
	log := runevents.New(store.Pool())
	req, leaf := modelRequest()

	first, err := store.ClaimCall(ctx, req, leaf(1), time.Minute)
	require.NoError(t, err)
	text := log.NewBatcher(ctx, "wf-1", req.Key, 1).WithInterval(time.Hour)
	text.Add("Hel")
	text.Add("lo, wor")
	require.NoError(t, text.Flush())
	_, err = store.SettleAttempt(ctx, req.Key, first.Action.Attempts, ledgerdb.AttemptEnd{
		Status: agentsagatype.ActionFailed, Cause: "openai chat.completions: the stream broke", LeafCallID: first.LeafCallID,
		CallErr: errors.New("openai chat.completions: the stream broke")})
	require.NoError(t, err)

	second, err := store.ClaimCall(ctx, req, leaf(2), time.Minute)
	require.NoError(t, err)
	text = log.NewBatcher(ctx, "wf-1", req.Key, 2)
	text.Add("Hello, world")
	require.NoError(t, text.Flush())
	_, err = store.SettleAttempt(ctx, req.Key, second.Action.Attempts, ledgerdb.AttemptEnd{
		Status: agentsagatype.ActionCompleted, Result: `{"content":"Hello, world","tool_calls":[{"id":"c1","name":"search","arguments":"{}"}]}`,
		LeafCallID: second.LeafCallID})
	require.NoError(t, err)

	// The first attempt's first text went out at once, the rest in its
	// batch; the second attempt's one chunk at once.
	events := eventsOf(t, store, "wf-1")
	require.Equal(t, []string{runevents.TurnStarted, runevents.TextDelta, runevents.TextDelta, runevents.AttemptDiscarded, runevents.TurnFinished,
		runevents.TurnStarted, runevents.TextDelta, runevents.TurnFinished}, kindsOf(events))
	assert.Equal(t, req.Key+"/attempt-1/discarded", events[3].Key)
	assert.JSONEq(t, `{"attempt":1,"why":"openai chat.completions: the stream broke"}`, string(events[3].Data))
	assert.JSONEq(t, `{"attempt":1,"outcome":"error","model":"openai:gpt","error":"openai chat.completions: the stream broke"}`, string(events[4].Data))
	assert.JSONEq(t, `{"attempt":2,"outcome":"ok","model":"openai:gpt","status":"completed","text":"Hello, world","tool_calls":["search"]}`, string(events[7].Data))

}

// A worker killed mid-stream settles nothing. The attempt that takes the
// key over marks the lost one's leaf call lost, and its claim's statement
// voids the text the lost attempt streamed, before the new attempt starts.
func TestALostAttemptsTextIsDiscardedWhenTheNextAttemptTakesOver(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := ledgertest.NewStore(t)
	log := runevents.New(store.Pool())
	req, leaf := modelRequest()

	_, err := store.ClaimCall(ctx, req, leaf(1), time.Millisecond)
	require.NoError(t, err)
	text := log.NewBatcher(ctx, "wf-1", req.Key, 1)
	text.Add("partial")
	require.NoError(t, text.Flush())
	time.Sleep(20 * time.Millisecond) // the lease lapses: its worker is gone

	takeover, err := store.ClaimCall(ctx, req, leaf(2), time.Minute)
	require.NoError(t, err)
	require.True(t, takeover.Execute)
	events := eventsOf(t, store, "wf-1")
	require.Equal(t, []string{runevents.TurnStarted, runevents.TextDelta, runevents.AttemptDiscarded, runevents.TurnFinished,
		runevents.TurnStarted}, kindsOf(events))
	var finished struct{ Outcome string }
	require.NoError(t, json.Unmarshal(events[3].Data, &finished))
	assert.Equal(t, "lost", finished.Outcome)
}

// A stored turn that is not JSON (no real turn is) still settles: the
// watchers get less, the run nothing worse.
func TestATurnWhoseResultDoesNotDecodeStillSettles(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := ledgertest.NewStore(t)
	req, leaf := modelRequest()
	claim, err := store.ClaimCall(ctx, req, leaf(1), time.Minute)
	require.NoError(t, err)
	_, err = store.SettleAttempt(ctx, req.Key, claim.Action.Attempts, ledgerdb.AttemptEnd{
		Status: agentsagatype.ActionCompleted, Result: `not json {`, LeafCallID: claim.LeafCallID})
	require.NoError(t, err)
	events := eventsOf(t, store, "wf-1")
	require.Equal(t, []string{runevents.TurnStarted, runevents.TurnFinished}, kindsOf(events))
	assert.JSONEq(t, `{"attempt":1,"outcome":"ok","model":"openai:gpt","status":"completed"}`, string(events[1].Data))
}

// A streamed reply's last text goes out with its settle, in the settle's
// statement, before the turn's end: after the first text, which goes out
// at once, a reply that streams in one batch costs no statement of its
// own.
func TestASettlePublishesTheReplysLastText(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := ledgertest.NewStore(t)
	log := runevents.New(store.Pool())
	req, leaf := modelRequest()
	claim, err := store.ClaimCall(ctx, req, leaf(1), time.Minute)
	require.NoError(t, err)
	text := log.NewBatcher(ctx, "wf-1", req.Key, 1).WithInterval(time.Hour)
	text.Add("Hello, ")
	text.Add("world")
	last := text.Rest()
	require.NotNil(t, last)
	text.Add("too late") // after Rest: dropped
	_, err = store.SettleAttempt(ctx, req.Key, claim.Action.Attempts, ledgerdb.AttemptEnd{
		Status: agentsagatype.ActionCompleted, Result: `{"content":"Hello, world"}`, LeafCallID: claim.LeafCallID, Publish: last})
	require.NoError(t, err)
	events := eventsOf(t, store, "wf-1")
	require.Equal(t, []string{runevents.TurnStarted, runevents.TextDelta, runevents.TextDelta, runevents.TurnFinished}, kindsOf(events))
	assert.JSONEq(t, `{"attempt":1,"text":"Hello, "}`, string(events[1].Data))
	assert.Equal(t, req.Key+"/attempt-1/delta-2", events[2].Key)
	assert.JSONEq(t, `{"attempt":1,"text":"world"}`, string(events[2].Data))
	assert.Nil(t, text.Rest(), "what Rest took is not taken again")
}

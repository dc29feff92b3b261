package agentsaga_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga"
	"github.com/agentsaga/agentsaga/agentsagatest"
)

// recording is a dataset line of an ended run whose one tool, lookup, is
// called (recorded from source when source is set) with args at turn 1.
func recording(t *testing.T, source, replay, args string) agentsagatest.Recording {
	t.Helper()
	tool := map[string]any{"name": "lookup", "kind": "http", "url": "http://127.0.0.1:1/lookup"}
	if source != "" {
		tool = map[string]any{"name": "lookup", "kind": "recorded", "recording": map[string]any{"source": source, "replay": replay}}
	}
	data, err := json.Marshal(map[string]any{"goal": "find order Z", "status": "completed", "answer": "found it", "steps": 2,
		"spec":  map[string]any{"goal": "find order Z", "tools": []any{tool}},
		"calls": []any{map[string]any{"step": 1, "tool": "lookup", "arguments": json.RawMessage(args), "sent": true, "output": `{"id":"Z"}`}}})
	require.NoError(t, err)
	var r agentsagatest.Recording
	require.NoError(t, json.Unmarshal(data, &r))
	return r
}

// ReportReplay sets a replay beside its recording; a run that replays
// nothing, and a run the ledger lacks, are errors a caller can tell apart.
func TestReportReplay(t *testing.T) {
	t.Parallel()
	store := agentsagatest.NewLedger(t)
	agentsagatest.ImportRecording(t, store, "orders", recording(t, "", "", `{"order":"Z"}`))
	agentsagatest.ImportRecording(t, store, "replay-orders-1", recording(t, "orders", "replay-orders-1", `{"order": "Y"}`))

	report, err := agentsaga.ReportReplay(t.Context(), store, "replay-orders-1")
	require.NoError(t, err)
	assert.Equal(t, "orders", report.Recorded.ID)
	assert.Equal(t, "replay-orders-1", report.Candidate.ID)
	require.Len(t, report.Rows, 1)
	assert.Equal(t, agentsaga.ReplayArguments, report.Rows[0].Kind)
	assert.Equal(t, 1, report.Divergences)
	assert.Equal(t, 1, report.FirstDivergence)

	_, err = agentsaga.ReportReplay(t.Context(), store, "orders")
	assert.ErrorIs(t, err, agentsaga.ErrNotAReplay)
	_, err = agentsaga.ReportReplay(t.Context(), store, "no-such-run")
	assert.ErrorIs(t, err, agentsaga.ErrRunNotFound)
	assert.NotErrorIs(t, err, agentsaga.ErrNotAReplay)
}

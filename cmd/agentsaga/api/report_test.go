package api

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga"
	"github.com/agentsaga/agentsaga/agentsagatest"
	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/cmd/agentsaga/apikeys"
)

// ledgerCall is one tool call of an imported run: asked for at its
// turn, answered output (or refused before it was sent, when !sent).
type ledgerCall struct {
	step      int
	tool, arg string
	output    string
	sent      bool
}

// importRun writes an ended run into the ledger as a dataset's line is
// imported (agentsagatest.ImportRecording). A spec whose tools are
// recorded from source makes it a replay.
func (w *world) importRun(id, account, source, answer string, calls ...ledgerCall) {
	w.t.Helper()
	tool := map[string]any{"name": "lookup", "kind": "http", "url": "http://127.0.0.1:1/lookup"}
	if source != "" {
		replay := id
		if i := strings.Index(id, "/"); i >= 0 {
			replay = id[:i]
		}
		tool = map[string]any{"name": "lookup", "kind": "recorded",
			"recording": map[string]any{"source": source, "replay": replay, "match": "in-order"}}
	}
	line := map[string]any{"goal": "g", "spec": map[string]any{"goal": "g", "budget": map[string]any{"account": account}, "tools": []any{tool}},
		"status": agentsagatype.RunCompleted, "answer": answer, "steps": len(calls) + 1, "tokens": 100, "usd": 0.01, "wall_ms": 1000,
		"calls": []any{}}
	for _, c := range calls {
		line["calls"] = append(line["calls"].([]any), map[string]any{"step": c.step, "tool": c.tool, "arguments": json.RawMessage(c.arg),
			"sent": c.sent, "output": c.output})
	}
	data, err := json.Marshal(line)
	require.NoError(w.t, err)
	var recording agentsagatest.Recording
	require.NoError(w.t, json.Unmarshal(data, &recording))
	agentsagatest.ImportRecording(w.t, w.store, id, recording)
}

// GET /v1/runs/{id}/report: a replay gets its report against its source
// (its turn 2 asked with other arguments: one divergence, at turn 2); a
// run that is no replay is a 404 of its own type; a replay of another
// account, or of a source the key may not see, is the 404 a missing run
// gets; a key without runs:read is a 403.
func TestReplayReportRoute(t *testing.T) {
	w := newWorld(t)
	reader := w.key("reader", "acme", apikeys.RunsRead)
	w.importRun("src", "acme", "", "paid 40",
		ledgerCall{step: 1, tool: "lookup", arg: `{"order":"Z"}`, output: `{"total":40}`, sent: true},
		ledgerCall{step: 2, tool: "lookup", arg: `{"order":"Y"}`, output: `{"total":5}`, sent: true})
	w.importRun("replay-src-1", "acme", "src", "paid 5000",
		ledgerCall{step: 1, tool: "lookup", arg: `{"order": "Z"}`, output: `{"total":40}`, sent: true},
		ledgerCall{step: 2, tool: "lookup", arg: `{"order":"Q"}`})

	a := w.do("GET", "/v1/runs/replay-src-1/report", reader, "")
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	assert.Equal(t, "application/json", a.header.Get("Content-Type"))
	var report agentsaga.ReplayReport
	require.NoError(t, json.Unmarshal(a.body, &report))
	assert.Equal(t, "src", report.Recorded.ID)
	assert.Equal(t, "replay-src-1", report.Candidate.ID)
	assert.Equal(t, agentsagatype.RunCompleted, report.Candidate.Status)
	assert.Equal(t, 1, report.Divergences)
	assert.Equal(t, 2, report.FirstDivergence)
	assert.False(t, report.SameAnswer)
	require.Len(t, report.Rows, 2)
	assert.Equal(t, agentsaga.ReplaySame, report.Rows[0].Kind, "arguments are compared as canonical JSON")
	assert.Equal(t, agentsaga.ReplayArguments, report.Rows[1].Kind)
	assert.Equal(t, `{"order":"Q"}`, report.Rows[1].Candidate.Arguments)
	assert.False(t, report.Rows[1].Candidate.Sent)
	assert.Equal(t, "paid 5000", report.Candidate.Answer)

	// A sub-agent of the replay answers with its top replay's report,
	// which holds it under the call that started it.
	w.importRun("replay-src-1/step-002-call-1-ask", "acme", "src", "5")
	a = w.do("GET", "/v1/runs/replay-src-1%2Fstep-002-call-1-ask/report", reader, "")
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	assert.Equal(t, "src", a.json(t)["recorded"].(map[string]any)["id"])
	assert.Equal(t, "replay-src-1", a.json(t)["candidate"].(map[string]any)["id"])
	w.importRun("quiet", "acme", "", "")
	w.importRun("replay-quiet-1", "acme", "quiet", "")
	a = w.do("GET", "/v1/runs/replay-quiet-1/report", reader, "")
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	assert.Equal(t, []any{}, a.json(t)["rows"], "a replay with no calls has an empty list of rows")

	a = w.do("GET", "/v1/runs/src/report", reader, "")
	require.Equal(t, http.StatusNotFound, a.status, "%s", a.body)
	assert.Equal(t, "application/problem+json", a.header.Get("Content-Type"))
	p := a.json(t)
	assert.Equal(t, problemBase+"not-a-replay", p["type"])
	assert.Equal(t, "run src is not a replay: it has no recorded tools", p["detail"])
	assert.Equal(t, "src", p["run"])

	// Another account's replay, and a replay of another account's run,
	// answer as a missing run does.
	w.importRun("globex-src", "globex", "", "x")
	w.importRun("replay-globex-src-1", "globex", "globex-src", "x")
	w.importRun("replay-globex-src-2", "acme", "globex-src", "x")
	missing := w.do("GET", "/v1/runs/no-such-run/report", reader, "")
	require.Equal(t, http.StatusNotFound, missing.status)
	for hidden, named := range map[string]string{"replay-globex-src-1": "replay-globex-src-1", "replay-globex-src-2": "globex-src"} {
		a = w.do("GET", "/v1/runs/"+hidden+"/report", reader, "")
		require.Equal(t, http.StatusNotFound, a.status, "%s: %s", hidden, a.body)
		assert.Equal(t, strings.Replace(string(missing.body), "no-such-run", named, 1), string(a.body), hidden)
	}
	a = w.do("GET", "/v1/runs/replay-globex-src-1/report", w.key("globex-reader", "globex", apikeys.RunsRead), "")
	assert.Equal(t, http.StatusOK, a.status, "%s", a.body)
	// A replay whose recording is gone (pruned) is a 404 that says so.
	w.importRun("replay-gone-1", "acme", "gone", "x")
	a = w.do("GET", "/v1/runs/replay-gone-1/report", reader, "")
	require.Equal(t, http.StatusNotFound, a.status, "%s", a.body)
	assert.Contains(t, a.json(t)["detail"], "the run that replay-gone-1 replays is not in the ledger")

	a = w.do("GET", "/v1/runs/replay-src-1/report", w.key("decider", "acme", apikeys.ApprovalsDecide), "")
	require.Equal(t, http.StatusForbidden, a.status, "%s", a.body)
	assert.Contains(t, a.json(t)["detail"], "runs:read")
	a = w.do("GET", "/v1/runs/replay-src-1/report?x=1", reader, "")
	assert.Equal(t, http.StatusBadRequest, a.status, "%s", a.body)
}

package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga"
	"github.com/agentsaga/agentsaga/agentsagatest"
	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/dataset"
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/workflows"
)

// investigatorSpec hands a ticket to a sub-agent, which reads the ticket
// and the order, then pays out what it found. The customer's email is in
// the ticket and the order: what a dataset redacts.
const investigatorSpec = `
goal: Settle ticket T-9.
budget: {steps: 10}
model:
  provider: scripted
  script:
    - tool_calls: [{name: investigator, arguments: {task: read ticket T-9 and its order}}]
    - tool_calls: [{name: payout, arguments: {order: Q, amount: 30}}]
    - content: paid 30 on order Q, as the investigator found
tools:
  - {name: read_ticket, kind: http, url: "%[1]s/ticket", read_only: true, parameters: {type: object, properties: {ticket: {type: string}}}}
  - {name: read_order, kind: http, url: "%[1]s/order", read_only: true, parameters: {type: object, properties: {order: {type: string}}}}
  - name: payout
    kind: http
    url: "%[1]s/payout"
    parameters: {type: object, properties: {order: {type: string}, amount: {type: number}}, required: [order, amount]}
  - {name: investigator, kind: agent}
agents:
  investigator:
    tools: [read_ticket, read_order, payout]
    share: 0.5
    model:
      provider: scripted
      script:
        - tool_calls: [{name: read_ticket, arguments: {ticket: T-9}}]
        - tool_calls: [{name: read_order, arguments: {order: Q}}]
        - content: order Q arrived damaged; refund 30
`

// ticketDesk answers the investigator's tools, counting requests by path.
type ticketDesk struct {
	mu       sync.Mutex
	requests map[string]int
}

func (d *ticketDesk) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	d.mu.Lock()
	d.requests[r.URL.Path]++
	d.mu.Unlock()
	switch r.URL.Path {
	case "/ticket":
		fmt.Fprint(w, `{"text": "order Q came broken", "customer": {"email": "ann@example.com"}}`)
	case "/order":
		fmt.Fprint(w, `{"order": "Q", "total": 30, "customer": {"email": "ann@example.com"}}`)
	default:
		fmt.Fprint(w, `{"paid": true}`)
	}
}

func (d *ticketDesk) count(path string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	if path == "" {
		n := 0
		for _, c := range d.requests {
			n += c
		}
		return n
	}
	return d.requests[path]
}

// recordInvestigation records investigatorSpec under id on handle.
func recordInvestigation(t *testing.T, handle *ledger.Store, id string) (*ticketDesk, workflows.RunSpec) {
	t.Helper()
	desk := &ticketDesk{requests: map[string]int{}}
	server := httptest.NewServer(desk)
	t.Cleanup(server.Close)
	spec, err := workflows.ParseSpec(fmt.Appendf(nil, investigatorSpec, server.URL))
	require.NoError(t, err)
	recorded := suiteRun(t, handle, id, spec)
	require.Equal(t, agentsagatype.RunCompleted, recorded.Status, recorded.Reason)
	require.Equal(t, 3, desk.count(""), "the sub-agent read twice, the parent paid once")
	return desk, spec
}

// withInvestigatorScript is spec with the sub-agent's script replaced.
func withInvestigatorScript(spec workflows.RunSpec, script ...agentsagatype.ScriptedTurn) workflows.RunSpec {
	out := spec
	out.Agents = map[string]workflows.AgentSpec{}
	for name, a := range spec.Agents {
		if name == "investigator" {
			model := *a.Model
			model.Script = script
			a.Model = &model
		}
		out.Agents[name] = a
	}
	return out
}

func scriptCall(name, arguments string) agentsagatype.ScriptedTurn {
	return agentsagatype.ScriptedTurn{ToolCalls: []agentsagatype.ScriptedCall{{Name: name, Arguments: json.RawMessage(arguments)}}}
}

// A run whose sub-agent did the reading replays whole: the sub-agent's
// calls are answered from the sub-agent the recording started, the report
// sets its calls beside the recorded ones under the call that started it,
// and nothing reaches the desk. A candidate that starts the sub-agent a
// turn later still gets the recorded sub-agent's answers; one whose
// sub-agent pays out instead of reading the order is named at turn 1.2.
func TestReplayASubAgentFromItsRecording(t *testing.T) {
	t.Parallel()
	handle := agentsagatest.NewLedger(t)
	desk, spec := recordInvestigation(t, handle, "investigation")
	store := ledgerdb.Of(handle)

	replaySpec, err := agentsaga.ReplaySpec(t.Context(), handle, "investigation", "replay-investigation-1", agentsaga.ReplayOptions{})
	require.NoError(t, err)
	same := suiteRun(t, handle, "replay-investigation-1", replaySpec)
	require.Equal(t, agentsagatype.RunCompleted, same.Status, same.Reason)
	_, err = dataset.Export(t.Context(), store, "replay-investigation-1")
	require.ErrorContains(t, err, "dataset: replay-investigation-1 is a replay of investigation; add investigation")
	_, err = dataset.Export(t.Context(), store, "investigation/step-001-call-1-investigator")
	require.ErrorContains(t, err, "is a sub-agent of investigation; add its parent")
	report, err := agentsaga.ReportReplay(t.Context(), handle, "replay-investigation-1")
	require.NoError(t, err)
	var out strings.Builder
	report.Print(&out)
	t.Log("\n" + out.String())
	assert.Zero(t, report.Divergences, out.String())
	require.NotNil(t, report.Rows[0].Agent, "the sub-agent call carries its sub-agent's report")
	sub := report.Rows[0].Agent
	require.Len(t, sub.Rows, 2)
	assert.Equal(t, "replay-investigation-1/step-001-call-1-investigator", sub.Candidate.ID)
	for _, row := range sub.Rows {
		assert.Equal(t, agentsaga.ReplaySame, row.Kind)
		assert.NotContains(t, row.Candidate.Output, "not recorded")
	}
	assert.Contains(t, out.String(), "1.2")

	// The sub-agent a turn later: a read the recording's parent never made
	// comes first (not recorded), then the sub-agent, matched in order.
	later := spec
	later.Model.Script = []agentsagatype.ScriptedTurn{
		scriptCall("read_order", `{"order":"Q"}`),
		scriptCall("investigator", `{"task":"read ticket T-9 and its order"}`),
		scriptCall("payout", `{"order":"Q","amount":30}`),
		{Content: "paid 30"},
	}
	replaySpec, err = agentsaga.ReplaySpec(t.Context(), handle, "investigation", "replay-investigation-2", agentsaga.ReplayOptions{Spec: &later})
	require.NoError(t, err)
	suiteRun(t, handle, "replay-investigation-2", replaySpec)
	report, err = agentsaga.ReportReplay(t.Context(), handle, "replay-investigation-2")
	require.NoError(t, err)
	candidate := report.Candidate
	require.Len(t, candidate.Calls, 3)
	assert.Contains(t, candidate.Calls[0].Error, "not recorded in investigation")
	child := candidate.Calls[1].Agent
	require.NotNil(t, child)
	require.Len(t, child.Calls, 2)
	for _, c := range child.Calls {
		assert.Empty(t, c.Error, "the sub-agent started at turn 2 is answered by the one recorded at turn 1")
		assert.Contains(t, c.Output, "ann@example.com")
	}
	report, err = agentsaga.ReportReplay(t.Context(), handle, "replay-investigation-2")
	require.NoError(t, err)
	var moved *agentsaga.ReplayReport
	for _, row := range report.Rows {
		if row.Kind == agentsaga.ReplayNew && row.Candidate.Tool == "investigator" {
			moved = row.Agent
		}
	}
	require.NotNil(t, moved, "the report compares the moved sub-agent with the recorded one")
	assert.Zero(t, moved.Divergences)

	// The sub-agent pays 5,000 where the recording read the order.
	rogue := withInvestigatorScript(spec, scriptCall("read_ticket", `{"ticket":"T-9"}`), scriptCall("payout", `{"order":"Q","amount":5000}`),
		agentsagatype.ScriptedTurn{Content: "paid"})
	replaySpec, err = agentsaga.ReplaySpec(t.Context(), handle, "investigation", "replay-investigation-3", agentsaga.ReplayOptions{Spec: &rogue})
	require.NoError(t, err)
	suiteRun(t, handle, "replay-investigation-3", replaySpec)
	report, err = agentsaga.ReportReplay(t.Context(), handle, "replay-investigation-3")
	require.NoError(t, err)
	out.Reset()
	report.Print(&out)
	t.Log("\n" + out.String())
	assert.Equal(t, 1, report.FirstDivergence, "the sub-agent's divergence counts at the turn that started it")
	require.NotNil(t, report.Rows[0].Agent)
	assert.Equal(t, 2, report.Rows[0].Agent.FirstDivergence)
	assert.Regexp(t, `(?m)^1\.2\s+!missing\s+read_order`, out.String())
	assert.Regexp(t, `(?m)^1\.2\s+!new\s+-\s+payout .*error: not recorded in investigation/step-001`, out.String())

	// A candidate whose payouts over 100 need approval, and that starts
	// the sub-agent twice: the first sub-agent's 5,000 is denied for want
	// of a recorded decision, the second's because the recording never
	// started a second sub-agent.
	twice := withInvestigatorScript(spec, scriptCall("payout", `{"order":"Q","amount":5000}`), agentsagatype.ScriptedTurn{Content: "asked"})
	twice.Tools = append([]agentsagatype.ToolSpec(nil), spec.Tools...)
	for i := range twice.Tools {
		if twice.Tools[i].Name == "payout" {
			twice.Tools[i].Approval = &agentsagatype.ApprovalSpec{When: "amount > 100"}
		}
	}
	task := json.RawMessage(`{"task":"read ticket T-9 and its order"}`)
	twice.Model.Script = []agentsagatype.ScriptedTurn{
		{ToolCalls: []agentsagatype.ScriptedCall{{Name: "investigator", Arguments: task}, {Name: "investigator", Arguments: task}}},
		{Content: "done"},
	}
	replaySpec, err = agentsaga.ReplaySpec(t.Context(), handle, "investigation", "replay-investigation-4", agentsaga.ReplayOptions{Spec: &twice})
	require.NoError(t, err)
	suiteRun(t, handle, "replay-investigation-4", replaySpec)
	report, err = agentsaga.ReportReplay(t.Context(), handle, "replay-investigation-4")
	require.NoError(t, err)
	candidate = report.Candidate
	require.Len(t, candidate.Calls, 2)
	var approvals []string
	for _, c := range candidate.Calls {
		require.NotNil(t, c.Agent)
		require.NotEmpty(t, c.Agent.Calls)
		approvals = append(approvals, c.Agent.Calls[0].Approval)
		assert.False(t, c.Agent.Calls[0].Sent, "a denied payout is not sent")
	}
	assert.Contains(t, approvals[0], "denied by replay: no decision recorded in investigation/step-001-call-1-investigator")
	assert.Contains(t, approvals[1], "denied by replay: not recorded in investigation: it started no sub-agent investigator")

	assert.Equal(t, 3, desk.count(""), "no replay sent anything to the desk")
}

// A run with a sub-agent goes into a dataset whole: the sub-agent's
// recording nests under the call that started it, redacted alike; the
// entry replays from the file with 0 divergences, and a check on payouts
// counts the sub-agent's: a candidate whose sub-agent pays 5,000 fails it.
func TestDatasetHoldsSubAgents(t *testing.T) {
	t.Parallel()
	handle := agentsagatest.NewLedger(t)
	desk, spec := recordInvestigation(t, handle, "investigation-ds")

	entry, err := dataset.Export(t.Context(), ledgerdb.Of(handle), "investigation-ds")
	require.NoError(t, err)
	require.Len(t, entry.Calls, 2)
	agent := entry.Calls[0].Agent
	require.NotNil(t, agent, "the sub-agent's recording is in the entry")
	assert.Equal(t, "investigation-ds/step-001-call-1-investigator", agent.Source)
	require.Len(t, agent.Calls, 2)
	assert.Equal(t, "read_order", agent.Calls[1].Tool)
	assert.Equal(t, "sub-agent completed: order Q arrived damaged; refund 30", entry.Calls[0].Output)

	require.NoError(t, dataset.Redact(&entry, []string{"$.customer.email"}))
	encoded, err := json.Marshal(entry)
	require.NoError(t, err)
	assert.NotContains(t, string(encoded), "ann@example.com", "redaction reaches the sub-agent's recording")
	assert.Contains(t, entry.Calls[0].Agent.Calls[1].Output, dataset.Redacted)
	reread, err := dataset.Parse(encoded)
	require.NoError(t, err, "the entry reads back")

	reread.Checks = []dataset.Check{{MustNotCall: &dataset.CallCheck{Tool: "payout", When: "amount > 1000"}}, {Status: agentsagatype.RunCompleted}}
	same := agentsagatest.Replay(t, reread, nil)
	assert.True(t, same.Passed, "%+v", same.Checks)
	assert.Zero(t, same.Report.Divergences, "%+v", same.Report.Rows)

	rogue := withInvestigatorScript(spec, scriptCall("read_ticket", `{"ticket":"T-9"}`), scriptCall("payout", `{"order":"Q","amount":5000}`),
		agentsagatype.ScriptedTurn{Content: "paid"})
	failed := agentsagatest.Replay(t, reread, &rogue)
	assert.False(t, failed.Passed)
	assert.Contains(t, failed.Checks[0].Detail, `turn 1.2 called payout {"order":"Q","amount":5000}`)
	assert.Equal(t, 3, desk.count(""), "the evals sent nothing to the desk")
}

// --live calls a read_only tool for real, and only it; a tool that may
// change the world is refused as live.
func TestReplayLiveCallsOnlyReadOnlyTools(t *testing.T) {
	t.Parallel()
	handle := agentsagatest.NewLedger(t)
	desk, _ := recordInvestigation(t, handle, "investigation-live")

	_, err := agentsaga.ReplaySpec(t.Context(), handle, "investigation-live", "replay-investigation-live-0", agentsaga.ReplayOptions{Live: []string{"payout"}})
	require.ErrorContains(t, err, "--live payout: the tool is not marked read_only")

	replaySpec, err := agentsaga.ReplaySpec(t.Context(), handle, "investigation-live", "replay-investigation-live-1",
		agentsaga.ReplayOptions{Live: []string{"read_order"}})
	require.NoError(t, err)
	result := suiteRun(t, handle, "replay-investigation-live-1", replaySpec)
	require.Equal(t, agentsagatype.RunCompleted, result.Status, result.Reason)
	assert.Equal(t, 2, desk.count("/order"), "the sub-agent's read_order went to the desk again")
	assert.Equal(t, 1, desk.count("/ticket"), "read_ticket was answered from the recording")
	assert.Equal(t, 1, desk.count("/payout"), "the payout was answered from the recording")
}

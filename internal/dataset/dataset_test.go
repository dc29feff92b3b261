package dataset

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/internal/replayreport"
)

const payoutTool = `{"tools":[{"name":"payout","kind":"http","url":"http://x","parameters":{"type":"object","properties":{"amount":{"type":"number"}}}},{"name":"helper","kind":"agent"}],"agents":{"helper":{"tools":["payout"]}}}`

// A check counts the calls of the run's sub-agents too: a payout a
// sub-agent makes is a payout the run made, named by both turns.
func TestChecksCountSubAgentCalls(t *testing.T) {
	e := Entry{Version: Version, Source: "r", Spec: json.RawMessage(payoutTool), Checks: []Check{
		{MustNotCall: &CallCheck{Tool: "payout", When: "amount > 1000"}},
		{MustCall: &CallCheck{Tool: "payout"}},
	}}
	candidate := replayreport.Run{Calls: []replayreport.Call{
		{Step: 1, Tool: "helper", Arguments: `{"task":"pay"}`, Sent: true, Agent: &replayreport.Run{Calls: []replayreport.Call{
			{Step: 1, Tool: "payout", Arguments: `{"amount":10}`, Sent: true},
			{Step: 2, Tool: "payout", Arguments: `{"amount":5000}`, Sent: true},
		}}},
	}}
	results := Evaluate(e, candidate)
	require.Len(t, results, 2)
	assert.False(t, results[0].Passed)
	assert.Equal(t, `turn 1.2 called payout {"amount":5000}`, results[0].Detail)
	assert.True(t, results[1].Passed, "must_call finds the sub-agent's call")

	candidate.Calls[0].Agent.Calls = candidate.Calls[0].Agent.Calls[:1]
	assert.True(t, Passed(Evaluate(e, candidate)))
}

// A sub-agent's recording nests in its call; it needs its source and
// spec, and carries no checks of its own.
func TestParseChecksNestedSubAgents(t *testing.T) {
	line := func(agent string) []byte {
		return []byte(`{"version":1,"source":"r","spec":{},"checks":[],"calls":[{"step":1,"tool":"helper","arguments":{},"sent":true,"agent":` + agent + `}]}`)
	}
	e, err := Parse(line(`{"version":1,"source":"r/step-001-call-1-helper","spec":{},"calls":[],"checks":null}`))
	require.NoError(t, err)
	assert.Equal(t, "r/step-001-call-1-helper", e.Calls[0].Agent.Source)

	_, err = Parse(line(`{"version":1,"source":"","spec":{},"calls":[],"checks":null}`))
	assert.ErrorContains(t, err, "the sub-agent of call helper at turn 1 has no source run or no spec")
	_, err = Parse(line(`{"version":1,"source":"c","spec":{},"calls":[],"checks":[{"status":"completed"}]}`))
	assert.ErrorContains(t, err, "put them on the entry")
}

package replayreport

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func withAgent(calls ...Call) *Run { return &Run{ID: "child", Status: "completed", Calls: calls} }

// A sub-agent's calls are compared under the call that started it: its
// divergences count in the report's total, at the parent's turn, and the
// table names them by both turns.
func TestCompareNestsSubAgents(t *testing.T) {
	read := Call{Step: 1, Tool: "read", Arguments: `{"id": 1}`, Sent: true, Output: "a"}
	recorded := Run{ID: "rec", Calls: []Call{
		{Step: 1, Tool: "search", Arguments: `{}`, Sent: true, Output: "x"},
		{Step: 2, Tool: "helper", Arguments: `{"task":"t"}`, Sent: true, Output: "sub-agent completed: ok",
			Agent: withAgent(read, Call{Step: 2, Tool: "read", Arguments: `{"id":2}`, Sent: true, Output: "b"})},
	}}
	candidate := Run{ID: "cand", Calls: []Call{
		recorded.Calls[0],
		{Step: 2, Tool: "helper", Arguments: `{"task":"t"}`, Sent: true, Output: "sub-agent completed: ok",
			Agent: withAgent(read, Call{Step: 2, Tool: "read", Arguments: `{"id":3}`, Sent: true, Error: "not recorded"})},
	}}
	r := Compare(recorded, candidate)
	require.Len(t, r.Rows, 2)
	assert.Equal(t, Same, r.Rows[1].Kind, "the parent read the same answer")
	require.NotNil(t, r.Rows[1].Agent)
	assert.Equal(t, 1, r.Rows[1].Agent.Divergences)
	assert.Equal(t, 2, r.Rows[1].Agent.FirstDivergence)
	assert.Equal(t, 1, r.Divergences, "the sub-agent's divergence counts in the parent's")
	assert.Equal(t, 2, r.FirstDivergence, "at the turn that started it")

	var out strings.Builder
	r.Print(&out)
	assert.Regexp(t, `(?m)^2\.1\s+=\s+read`, out.String())
	assert.Regexp(t, `(?m)^2\.2\s+!arguments\s+read \{"id":2\}`, out.String())
	assert.Contains(t, out.String(), "divergences: 1, first at turn 2")

	same := Compare(recorded, recorded)
	assert.Zero(t, same.Divergences)
	assert.Zero(t, same.FirstDivergence)
}

func TestRecordingOf(t *testing.T) {
	rec, ok := RecordingOf([]byte(`{"tools":[{"name":"a","kind":"agent"},{"name":"b","kind":"recorded","recording":{"source":"run-1","replay":"replay-run-1-1"}}]}`))
	assert.True(t, ok)
	assert.Equal(t, "run-1", rec.Source)
	assert.Equal(t, "replay-run-1-1", rec.Replay)
	_, ok = RecordingOf([]byte(`{"tools":[{"name":"b","kind":"http","url":"http://x"}]}`))
	assert.False(t, ok)
	_, ok = RecordingOf([]byte(`not json`))
	assert.False(t, ok)
}

// A sub-agent asked for a turn later than the recording's is compared
// with the recorded one under its new row, as the replay matched it.
func TestCompareFollowsAMovedSubAgent(t *testing.T) {
	read := Call{Step: 1, Tool: "read", Arguments: `{}`, Sent: true, Output: "a"}
	helper := func(step int) Call {
		return Call{Step: step, Tool: "helper", Arguments: `{"task":"t"}`, Sent: true, Output: "sub-agent completed: ok", Agent: withAgent(read)}
	}
	recorded := Run{Calls: []Call{helper(1)}}
	candidate := Run{Calls: []Call{{Step: 1, Tool: "lookup", Arguments: `{}`, Sent: true, Error: "not recorded"}, helper(2)}}
	r := Compare(recorded, candidate)
	require.Len(t, r.Rows, 3)
	assert.Equal(t, Missing, r.Rows[0].Kind)
	assert.Equal(t, New, r.Rows[1].Kind)
	moved := r.Rows[2]
	assert.Equal(t, New, moved.Kind)
	require.NotNil(t, moved.Agent, "the moved sub-agent is compared with the recorded one")
	assert.Zero(t, moved.Agent.Divergences)
	assert.Equal(t, 3, r.Divergences)
}

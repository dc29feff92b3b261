package dataset

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The prefix of a what-if asks, at each step before the fork, the calls
// the recording's model asked there, and ends at the fork's step; a step
// it cannot script is an error naming it.
func TestPrefixScript(t *testing.T) {
	e := Entry{Steps: 4, Calls: []Call{
		{Step: 1, Tool: "read_ticket", Arguments: json.RawMessage(`{"ticket":"T-7"}`)},
		{Step: 2, Tool: "payout", Arguments: json.RawMessage(`{"amount":400}`)},
		{Step: 2, Tool: "note", Arguments: json.RawMessage(`{}`)},
	}}
	script, err := prefixScript(e, 3)
	require.NoError(t, err)
	require.Len(t, script.Script, 3)
	assert.Equal(t, "read_ticket", script.Script[0].ToolCalls[0].Name)
	assert.Len(t, script.Script[1].ToolCalls, 2)
	assert.Empty(t, script.Script[2].ToolCalls, "the fork's step only ends the prefix")

	for at, want := range map[int]string{
		0: "fork at step 0: steps start at 1",
		5: "fork at step 5: past the recording's last step (it made 4)",
		4: "fork at step 4: the recording's step 3 asked for no tool call",
	} {
		_, err := prefixScript(e, at)
		assert.ErrorContains(t, err, want)
	}
	e.Calls[0].Agent = &Entry{}
	_, err = prefixScript(e, 2)
	assert.ErrorContains(t, err, "step 1 started sub-agent read_ticket")
	_, err = prefixScript(e, 1)
	assert.NoError(t, err, "a fork at the sub-agent's step replays nothing before it")
}

package activities_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/activities"
	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/ledgertest"
	"github.com/agentsaga/agentsaga/internal/wire"
)

// Two attempts of one idempotency key delivered at the same moment (a
// retry racing a slow first attempt, or a duplicate task): the tool runs
// once, the ledger stores one result, and both deliveries return it.
func TestSameKeyDeliveredTwiceAtOnceExecutesOnce(t *testing.T) {
	t.Parallel()
	var executions atomic.Int32
	tool := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := executions.Add(1)
		// Slow enough that the second delivery reaches the ledger while
		// this one still holds the key.
		time.Sleep(500 * time.Millisecond)
		fmt.Fprintf(w, `{"charged":true,"execution":%d}`, n)
	}))
	defer tool.Close()

	acts := &activities.Activities{Ledger: ledgertest.NewStore(t)}
	req := wire.ToolCallRequest{
		Tool:      agentsagatype.ToolSpec{Name: "charge", Kind: agentsagatype.ToolKindHTTP, URL: tool.URL},
		Arguments: `{"amount": 5}`,
	}
	// Each test environment numbers its activities from zero under the same
	// workflow ID, so the two deliveries carry the same key.
	results := make([]wire.ToolResult, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i := range 2 {
		env := newEnv(t, acts)
		wg.Go(func() {
			val, err := env.ExecuteActivity(acts.CallTool, req)
			if err == nil {
				err = val.Get(&results[i])
			}
			errs[i] = err
		})
	}
	wg.Wait()
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])

	assert.EqualValues(t, 1, executions.Load(), "the tool ran once")
	assert.Equal(t, results[0].Output, results[1].Output, "both deliveries return the one stored result")
	assert.Contains(t, results[0].Output, `"execution":1`)
	assert.NotEqual(t, results[0].Replayed, results[1].Replayed, "one executed, the other was answered from the ledger")

	actions, err := acts.Ledger.ListActions(context.Background(), "default-test-workflow-id")
	require.NoError(t, err)
	require.Len(t, actions, 1, "one key, one action")
	assert.Equal(t, "completed", actions[0].Status)
	assert.Equal(t, results[0].Output, actions[0].Result)
	assert.Equal(t, 1, actions[0].Attempts, "the duplicate did not count as an attempt")
}

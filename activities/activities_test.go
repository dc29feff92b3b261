package activities_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/agentsaga/agentsaga/activities"
	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/ledgertest"
	"github.com/agentsaga/agentsaga/internal/toolcheck"
	"github.com/agentsaga/agentsaga/internal/wire"
)

// countingServer is an HTTP tool that records every Idempotency-Key it sees.
type countingServer struct {
	mu     sync.Mutex
	keys   map[string]int
	status int
}

func (c *countingServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c.mu.Lock()
	c.keys[r.Header.Get("Idempotency-Key")]++
	status := c.status
	c.mu.Unlock()
	if status != 0 {
		http.Error(w, `{"error":"nope"}`, status)
		return
	}
	fmt.Fprintf(w, `{"ok":true,"timeout":%q}`, r.Header.Get("Request-Timeout"))
}

func newEnv(t *testing.T, acts *activities.Activities) *testsuite.TestActivityEnvironment {
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestActivityEnvironment()
	activities.Register(env, acts, true)
	return env
}

func TestCallToolStoresResultAndNeverRunsAKeyTwice(t *testing.T) {
	t.Parallel()
	server := &countingServer{keys: map[string]int{}}
	ts := httptest.NewServer(server)
	defer ts.Close()

	acts := &activities.Activities{Ledger: ledgertest.NewStore(t)}
	req := wire.ToolCallRequest{
		Tool:      agentsagatype.ToolSpec{Name: "charge", Kind: agentsagatype.ToolKindHTTP, URL: ts.URL},
		Arguments: `{"amount": 5}`,
	}

	// Each test environment numbers its activities from zero, so two
	// environments deliver the same workflow ID + activity ID: the same key,
	// as a retry or a duplicate delivery would.
	for i := range 2 {
		val, err := newEnv(t, acts).ExecuteActivity(acts.CallTool, req)
		require.NoError(t, err)
		var result wire.ToolResult
		require.NoError(t, val.Get(&result))
		assert.Contains(t, result.Output, `"ok":true`)
		assert.Equal(t, i == 1, result.Replayed, "execution %d", i)
	}

	actions, err := acts.Ledger.ListActions(context.Background(), "default-test-workflow-id")
	require.NoError(t, err)
	require.Len(t, actions, 1, "both executions share one idempotency key")
	assert.Equal(t, "completed", actions[0].Status)
	require.Len(t, server.keys, 1)
	for key, n := range server.keys {
		assert.Equal(t, actions[0].Key, key, "the tool received the ledger's key as Idempotency-Key")
		assert.Equal(t, 1, n, "a completed key must not reach the tool again")
	}
}

func TestCallToolRejectsBadArgumentsBeforeTheLedger(t *testing.T) {
	t.Parallel()
	acts := &activities.Activities{Ledger: ledgertest.NewStore(t)}
	env := newEnv(t, acts)
	tool := agentsagatype.ToolSpec{Name: "search", Kind: agentsagatype.ToolKindHTTP, URL: "http://127.0.0.1:1/",
		Parameters: []byte(`{"type":"object","properties":{"q":{"type":"string"}},"required":["q"]}`)}

	for args, want := range map[string]string{
		`{"q": `:   "not valid JSON",
		`{"q": 7}`: "do not match its schema",
		`{}`:       "do not match its schema",
	} {
		_, err := env.ExecuteActivity(acts.CallTool, wire.ToolCallRequest{Tool: tool, Arguments: args})
		require.Error(t, err, args)
		assert.Contains(t, err.Error(), want)
		var appErr *temporal.ApplicationError
		require.True(t, errors.As(err, &appErr))
		assert.True(t, appErr.NonRetryable())
	}
	actions, err := acts.Ledger.ListActions(context.Background(), "default-test-workflow-id")
	require.NoError(t, err)
	assert.Empty(t, actions)
}

func TestCallToolClassifiesHTTPFailures(t *testing.T) {
	t.Parallel()
	for status, retryable := range map[int]bool{400: false, 403: false, 503: true, 429: true} {
		server := &countingServer{keys: map[string]int{}, status: status}
		ts := httptest.NewServer(server)
		acts := &activities.Activities{Ledger: ledgertest.NewStore(t)}
		env := newEnv(t, acts)
		_, err := env.ExecuteActivity(acts.CallTool, wire.ToolCallRequest{
			Tool: agentsagatype.ToolSpec{Name: "t", Kind: agentsagatype.ToolKindHTTP, URL: ts.URL}, Arguments: `{}`})
		ts.Close()
		var appErr *temporal.ApplicationError
		require.True(t, errors.As(err, &appErr), "status %d", status)
		assert.Equal(t, retryable, !appErr.NonRetryable(), "status %d", status)
		assert.Contains(t, err.Error(), fmt.Sprintf("HTTP %d", status))

		actions, lerr := acts.Ledger.ListActions(context.Background(), "default-test-workflow-id")
		require.NoError(t, lerr)
		require.Len(t, actions, 1)
		want := "failed"
		if !retryable {
			want = "rejected"
		}
		assert.Equal(t, want, actions[0].Status, "status %d", status)
	}
}

func TestGoToolAndLeafCalls(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	box := activities.NewToolbox()
	box.Register("add", func(_ context.Context, call activities.ToolInvocation) (string, error) {
		calls.Add(1)
		return "5 for " + call.Key, nil
	})
	acts := &activities.Activities{Ledger: ledgertest.NewStore(t), Toolbox: box}
	env := newEnv(t, acts)
	val, err := env.ExecuteActivity(acts.CallTool, wire.ToolCallRequest{
		Tool: agentsagatype.ToolSpec{Name: "add", Kind: agentsagatype.ToolKindGo}, Arguments: `{"a":2,"b":3}`})
	require.NoError(t, err)
	var result wire.ToolResult
	require.NoError(t, val.Get(&result))
	assert.Contains(t, result.Output, "5 for default-test-workflow-id/")

	_, err = env.ExecuteActivity(acts.CallTool, wire.ToolCallRequest{
		Tool: agentsagatype.ToolSpec{Name: "missing", Kind: agentsagatype.ToolKindGo}, Arguments: `{}`})
	assert.ErrorContains(t, err, "no Go function of that name")

	leaves, err := acts.Ledger.ListLeafCalls(context.Background(), "default-test-workflow-id")
	require.NoError(t, err)
	require.Len(t, leaves, 1)
	assert.Equal(t, "ok", leaves[0].Outcome)
	assert.Equal(t, int32(1), calls.Load())
}

// A 200 whose body means "no" is a refusal: stored, never retried.
func TestCallToolRefusalIsNeverRetried(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		fmt.Fprint(w, `{"status":"declined","reason":"insufficient funds"}`)
	}))
	defer ts.Close()
	acts := &activities.Activities{Ledger: ledgertest.NewStore(t)}
	tool := agentsagatype.ToolSpec{Name: "charge", Kind: agentsagatype.ToolKindHTTP, URL: ts.URL,
		Refusal: []agentsagatype.RefusalRule{{Field: "status", Equals: "declined"}}}
	require.NoError(t, toolcheck.Validate(tool))
	for range 2 {
		_, err := newEnv(t, acts).ExecuteActivity(acts.CallTool, wire.ToolCallRequest{Tool: tool, Arguments: `{"amount": 5}`})
		var appErr *temporal.ApplicationError
		require.True(t, errors.As(err, &appErr))
		assert.True(t, appErr.NonRetryable())
		assert.Contains(t, appErr.Message(), `refused: field status = "declined"`)
	}
	assert.Equal(t, int32(1), calls.Load(), "the refusal is stored; the second attempt gets it from the ledger")
	actions, err := acts.Ledger.ListActions(context.Background(), "default-test-workflow-id")
	require.NoError(t, err)
	require.Len(t, actions, 1)
	assert.Equal(t, "rejected", actions[0].Status)
}

package activities_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"

	"github.com/agentsaga/agentsaga/activities"
	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/budget"
	"github.com/agentsaga/agentsaga/internal/ledgertest"
	"github.com/agentsaga/agentsaga/internal/wire"
)

// capturedLog is the worker's log, every level, as slog text lines.
type capturedLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (c *capturedLog) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf.Write(p)
}

// lines returns the lines logged at level ("WARN", "ERROR").
func (c *capturedLog) lines(level string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var found []string
	for _, line := range strings.Split(c.buf.String(), "\n") {
		if strings.Contains(line, "level="+level+" ") {
			found = append(found, line)
		}
	}
	return found
}

// hookEnv is an activity environment with the retry hook on store, whose
// logger (the SDK's and the hook's) writes into the returned log.
func hookEnv(store activities.RetryStore, ctx context.Context) (*testsuite.TestActivityEnvironment, *capturedLog) {
	captured := &capturedLog{}
	var suite testsuite.WorkflowTestSuite
	suite.SetLogger(log.NewStructuredLogger(slog.New(slog.NewTextHandler(captured, &slog.HandlerOptions{Level: slog.LevelDebug}))))
	env := suite.NewTestActivityEnvironment()
	env.SetWorkerOptions(worker.Options{DeadlockDetectionTimeout: tolerantDeadlock, BackgroundActivityContext: ctx, Interceptors: []interceptor.WorkerInterceptor{
		activities.NewRetryHook(store, activities.RetryHookConfig{Bucket: "fleet", BucketConfig: budget.DefaultBucket, Breaker: budget.DefaultBreaker}),
	}})
	return env, captured
}

// An expected, classified failure is one WARN line from the retry hook,
// with the key, the status and the decision, and nothing at ERROR: the
// SDK's "Activity error." goes to DEBUG because the error is benign. An
// unclassified one stays ERROR.
func TestClassifiedFailuresLogOneWarnAndNoError(t *testing.T) {
	t.Parallel()
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/503":
			http.Error(w, `{"error":"warming up"}`, http.StatusServiceUnavailable)
		case "/400":
			http.Error(w, `{"error":"malformed filter"}`, http.StatusBadRequest)
		case "/404":
			http.Error(w, `{"error":"no such refund"}`, http.StatusNotFound)
		}
	}))
	t.Cleanup(ts.Close)
	plan := agentsagatype.RetryPlan{Tool: "t", Dependency: "tool:t", MaxAttempts: 3, ToolRetryCap: 6, RunAllowance: 5,
		BackoffBase: 500 * time.Millisecond, BackoffCap: 8 * time.Second}
	box := activities.NewToolbox()
	box.Register("flaky", func(context.Context, activities.ToolInvocation) (string, error) {
		return "", errors.New("inventory: try again in a moment")
	})
	box.Register("declines", func(context.Context, activities.ToolInvocation) (string, error) {
		return "", activities.Permanent(errors.New("no stock for that item"))
	})
	box.Register("buggy", func(context.Context, activities.ToolInvocation) (string, error) {
		var stock map[string]*int
		return fmt.Sprint(*stock["item"]), nil // a nil pointer: the tool has a bug
	})
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close() // connection refused

	for _, tc := range []struct {
		name, path string
		store      *fakeRetryStore
		plan       agentsagatype.RetryPlan
		tool       agentsagatype.ToolSpec // when set, instead of an http tool at path
		want       []string               // in the WARN line; nil for none
		wantErrors int                    // ERROR lines
	}{
		{name: "503 retried", path: "/503", store: &fakeRetryStore{breaker: "closed", decision: budget.Granted}, plan: plan,
			want: []string{"status=503", `decision="retry in `, "type=HTTPError"}},
		{name: "503 denied by the run's budget", path: "/503", store: &fakeRetryStore{breaker: "closed", decision: budget.DenyRunRatio}, plan: plan,
			want: []string{"status=503", `decision="denied: RunRetryBudgetSpent"`}},
		{name: "400 not retried", path: "/400", store: &fakeRetryStore{breaker: "closed", decision: budget.Granted}, plan: plan,
			want: []string{"status=400", `decision="not retryable"`}},
		{name: "circuit open", path: "/503", store: &fakeRetryStore{breaker: "open"}, plan: plan,
			want: []string{"type=CircuitOpen", `decision="denied: CircuitOpen"`}},
		{name: "a compensation finds nothing to undo", path: "/404", store: &fakeRetryStore{breaker: "closed"},
			want: []string{"status=404", "type=NotFound", `decision="not retryable"`}},
		// A Go tool's error is the tool's own answer: expected, retried,
		// WARN. Before, it was an SDK "Activity error." at ERROR on every
		// attempt.
		{name: "a Go tool's retryable error", tool: agentsagatype.ToolSpec{Name: "flaky", Kind: agentsagatype.ToolKindGo},
			store: &fakeRetryStore{breaker: "closed", decision: budget.Granted}, plan: plan,
			want: []string{"type=Transient", `decision="retry in `, "try again in a moment"}},
		{name: "a Go tool's Permanent error", tool: agentsagatype.ToolSpec{Name: "declines", Kind: agentsagatype.ToolKindGo},
			store: &fakeRetryStore{breaker: "closed", decision: budget.Granted}, plan: plan,
			want: []string{"type=Rejected", `decision="not retryable"`}},
		{name: "a Go tool's panic stays ERROR", tool: agentsagatype.ToolSpec{Name: "buggy", Kind: agentsagatype.ToolKindGo},
			store: &fakeRetryStore{breaker: "closed", decision: budget.Granted}, plan: plan, wantErrors: 1},
		{name: "unclassified stays ERROR", tool: agentsagatype.ToolSpec{Name: "t", Kind: agentsagatype.ToolKindHTTP, URL: closed.URL},
			store: &fakeRetryStore{breaker: "closed", decision: budget.Granted}, plan: plan,
			want: []string{"type=Transient", `decision="retry in `, "connection refused"}, wantErrors: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			env, logs := hookEnv(tc.store, context.Background())
			acts := &activities.Activities{Ledger: ledgertest.NewStore(t), Toolbox: box}
			activities.Register(env, acts, true)
			tool := tc.tool
			if tool.Name == "" {
				tool = agentsagatype.ToolSpec{Name: "t", Kind: agentsagatype.ToolKindHTTP, URL: ts.URL + tc.path}
			}
			_, err := env.ExecuteActivity(acts.CallTool, wire.ToolCallRequest{Tool: tool, Arguments: `{}`, Retry: tc.plan})
			require.Error(t, err)

			errorLines := logs.lines("ERROR")
			assert.Len(t, errorLines, tc.wantErrors, "ERROR lines:\n%s", strings.Join(errorLines, "\n"))
			warns := logs.lines("WARN")
			if tc.want == nil {
				// A panic unwinds through the hook: the SDK's "Activity
				// panic." is its one line.
				assert.Empty(t, warns)
				require.Len(t, errorLines, 1)
				assert.Contains(t, errorLines[0], "Activity panic.")
				var panicErr *temporal.PanicError
				assert.ErrorAs(t, err, &panicErr)
				return
			}
			require.Len(t, warns, 1, "one WARN line per failed attempt:\n%s", strings.Join(warns, "\n"))
			assert.Contains(t, warns[0], "key=default-test-workflow-id/")
			for _, want := range tc.want {
				assert.Contains(t, warns[0], want)
			}
			var appErr *temporal.ApplicationError
			require.True(t, errors.As(err, &appErr))
			assert.Equal(t, tc.wantErrors == 0, appErr.Category() == temporal.ApplicationErrorCategoryBenign, "benign exactly when expected")
		})
	}
}

// A cancelled attempt (a run cancelled, a worker stopping) logs nothing at
// ERROR: not the SDK's "Activity error.", and not the retry hook's "could
// not pay for a retry ... context canceled", which it logged when it went on
// to pay on a context that had ended.
func TestACancelledAttemptLogsNothingAtError(t *testing.T) {
	t.Parallel()
	store := ledgertest.NewStore(t)
	require.NoError(t, store.EnsureBucket(t.Context(), "fleet", budget.DefaultBucket))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	release := make(chan struct{})
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cancel() // the run is cancelled while its call is out
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer ts.Close()
	defer close(release) // before Close, which waits for the handler

	env, logs := hookEnv(store, ctx)
	acts := &activities.Activities{Ledger: store}
	activities.Register(env, acts, true)
	_, err := env.ExecuteActivity(acts.CallTool, wire.ToolCallRequest{Arguments: `{}`,
		Tool:  agentsagatype.ToolSpec{Name: "slow", Kind: agentsagatype.ToolKindHTTP, URL: ts.URL},
		Retry: agentsagatype.RetryPlan{Tool: "slow", Dependency: "tool:slow", MaxAttempts: 3, ToolRetryCap: 6, RunAllowance: 5, BackoffBase: time.Second, BackoffCap: time.Second}})
	require.Error(t, err)
	assert.Empty(t, logs.lines("ERROR"), "a cancel is not an operator's problem")
	assert.Empty(t, logs.lines("WARN"))
	infos := logs.lines("INFO")
	require.NotEmpty(t, infos)
	assert.Contains(t, strings.Join(infos, "\n"), "retry hook: the attempt was cancelled")
}

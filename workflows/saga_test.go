package workflows_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/testsuite"

	"github.com/agentsaga/agentsaga/activities"
	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/budget"
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/internal/ledgertest"
	"github.com/agentsaga/agentsaga/workflows"
)

// brokenRefunds charges fine, and answers refunds with status (500 when
// zero) while broken.
type brokenRefunds struct {
	broken  atomic.Bool
	status  int
	mu      sync.Mutex
	refunds map[string]int
}

func (b *brokenRefunds) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/charge" {
		fmt.Fprint(w, `{"id": "ch_1"}`)
		return
	}
	if b.broken.Load() {
		status := b.status
		if status == 0 {
			status = http.StatusInternalServerError
		}
		http.Error(w, `{"error":"refund service down"}`, status)
		return
	}
	b.mu.Lock()
	b.refunds[r.Header.Get("Idempotency-Key")]++
	b.mu.Unlock()
	fmt.Fprint(w, `{"refunded": "ch_1"}`)
}

const failingRunSpec = `
goal: charge, then fail
budget: {steps: 5}
compensation_attempts: 2
model:
  provider: scripted
  script:
    - tool_calls: [{name: charge, arguments: {amount: 10}}]
tools:
  - {name: charge, kind: http, url: "%[1]s/charge", compensate: {tool: refund, arguments: {charge_id: "{{result.id}}"}}}
  - {name: refund, kind: http, url: "%[1]s/refund"}
`

// runFailingSaga runs a charge whose run then fails, with the refund
// broken, and lets decide act (through Updates) once the compensation has
// escalated.
func runFailingSaga(t *testing.T, decide func(env *testsuite.TestWorkflowEnvironment, desk *brokenRefunds)) (workflows.RunResult, *brokenRefunds, *ledgerdb.Store) {
	t.Helper()
	return runFailingSagaAnswering(t, http.StatusInternalServerError, decide)
}

// runFailingSagaAnswering is runFailingSaga with the broken refunds
// answering status.
func runFailingSagaAnswering(t *testing.T, status int, decide func(env *testsuite.TestWorkflowEnvironment, desk *brokenRefunds)) (workflows.RunResult, *brokenRefunds, *ledgerdb.Store) {
	t.Helper()
	desk := &brokenRefunds{refunds: map[string]int{}, status: status}
	desk.broken.Store(true)
	server := httptest.NewServer(desk)
	t.Cleanup(server.Close)
	store := ledgertest.NewStore(t)
	env := newEnv()
	registerWithRetryHook(t, env, store)
	activities.Register(env, &activities.Activities{Ledger: store}, false)
	env.RegisterDelayedCallback(func() { decide(env, desk) }, time.Hour)
	env.ExecuteWorkflow(workflows.AgentRun, mustSpec(t, fmt.Sprintf(failingRunSpec, server.URL)))
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
	var result workflows.RunResult
	require.NoError(t, env.GetWorkflowResult(&result))
	return result, desk, store
}

var updateIDs atomic.Int64

// update sends an Update; the test environment answers it later, so the
// returned pointer holds the rejection (or nil) once the run has ended.
func update(env *testsuite.TestWorkflowEnvironment, name string, args ...any) *error {
	rejected := new(error)
	id := fmt.Sprintf("%s-%d", name, updateIDs.Add(1)) // a reused ID would return the first answer
	env.UpdateWorkflow(name, id, &testsuite.TestUpdateCallback{
		OnReject: func(err error) { *rejected = err }, OnAccept: func() {}, OnComplete: func(any, error) {},
	}, args...)
	return rejected
}

func TestFailingCompensationEscalatesAndSkipResolvesIt(t *testing.T) {
	t.Parallel()
	var wrongUpdate, noReason, skip *error
	result, desk, store := runFailingSaga(t, func(env *testsuite.TestWorkflowEnvironment, _ *brokenRefunds) {
		wrongUpdate = update(env, workflows.UpdateResume, workflows.ResumeInput{Message: "go on"})
		noReason = update(env, workflows.UpdateSkip, workflows.ReasonInput{})
		skip = update(env, workflows.UpdateSkip, workflows.ReasonInput{Reason: "alice refunded ch_1 by hand"})
	})
	assert.ErrorContains(t, *wrongUpdate, "waiting on a failed compensation (retry, skip or abort), where resume does not apply")
	assert.ErrorContains(t, *noReason, "a reason is required")
	assert.NoError(t, *skip)
	assert.Equal(t, agentsagatype.RunNeedsAttention, result.Status)
	assert.Contains(t, result.Reason, "resolved by a human")
	assert.Contains(t, result.Reason, "alice refunded ch_1 by hand")
	assert.Empty(t, desk.refunds)
	stack, err := store.CompensationStack(t.Context(), "default-test-workflow-id")
	require.NoError(t, err)
	require.Len(t, stack, 1)
	assert.Equal(t, agentsagatype.CompensationSkipped, stack[0].Status)
	assert.Equal(t, "alice refunded ch_1 by hand", stack[0].Reason)
}

func TestFailingCompensationEscalatesAndRetryCompensates(t *testing.T) {
	t.Parallel()
	var retry *error
	result, desk, store := runFailingSaga(t, func(env *testsuite.TestWorkflowEnvironment, desk *brokenRefunds) {
		desk.broken.Store(false) // the refund service recovered
		retry = update(env, workflows.UpdateRetry)
	})
	assert.NoError(t, *retry)
	assert.Equal(t, agentsagatype.RunCompensated, result.Status, result.Reason)
	// The human's retry has a key of its own: the first key's stored answer
	// (a 500 here, but a 4xx would be stored for good) is not handed back.
	assert.Equal(t, map[string]int{"default-test-workflow-id/step-001-call-1-charge/compensate/retry-1": 1}, desk.refunds)
	stack, err := store.CompensationStack(t.Context(), "default-test-workflow-id")
	require.NoError(t, err)
	require.Len(t, stack, 1)
	assert.Equal(t, agentsagatype.CompensationDone, stack[0].Status)
	actions, err := store.ListActions(t.Context(), "default-test-workflow-id")
	require.NoError(t, err)
	statuses := map[string]string{}
	for _, a := range actions {
		statuses[a.Key] = a.Status
	}
	assert.Equal(t, map[string]string{
		"default-test-workflow-id/step-001-call-1-charge":                    agentsagatype.ActionCompleted,
		"default-test-workflow-id/step-001-call-1-charge/compensate":         agentsagatype.ActionFailed,
		"default-test-workflow-id/step-001-call-1-charge/compensate/retry-1": agentsagatype.ActionCompleted,
	}, statuses, "the ledger keeps both compensation rows")
}

// A backoff that would outlive the run's deadline fails now.
func TestBackoffPastTheDeadlineFailsNow(t *testing.T) {
	t.Parallel()
	var requests atomic.Int32
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		w.Header().Set("Retry-After", "30")
		http.Error(w, `{"error":"come back in 30 s"}`, http.StatusServiceUnavailable)
	}))
	defer server.Close()
	spec := mustSpec(t, fmt.Sprintf(`
goal: call a slow service with 5 seconds to spare
budget: {steps: 3, seconds: 5}
model:
  provider: scripted
  script:
    - tool_calls: [{name: slow, arguments: {}}]
    - content: gave up in time
tools:
  - {name: slow, kind: http, url: %q}
`, server.URL))
	result, err, _ := runAgent(t, spec)
	require.NoError(t, err)
	slow := result.Trace[1]
	assert.Equal(t, budget.DenyDeadline, slow.Denial)
	assert.Contains(t, slow.Error, "the backoff would outlive the run's deadline")
	assert.Equal(t, 1, slow.Attempts)
	assert.Equal(t, int32(1), requests.Load(), "no nap past the deadline, no second request")
	assert.Equal(t, agentsagatype.RunCompleted, result.Status)
}

// A permission error, and the Nth failure of one tool, pause the run for a
// human; abort then compensates what the run had done.
func TestEscalationTriggers(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		status  int
		extra   string
		wantWhy string
	}{
		"permission error":  {status: http.StatusForbidden, wantWhy: "was denied permission"},
		"repeated failures": {status: http.StatusBadRequest, extra: "escalate: {after_tool_failures: 2}", wantWhy: "has failed 2 times"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var refunds atomic.Int32
			server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				switch r.URL.Path {
				case "/charge":
					fmt.Fprint(w, `{"id": "ch_1"}`)
				case "/refund":
					refunds.Add(1)
					fmt.Fprint(w, `{}`)
				default:
					w.WriteHeader(tc.status)
				}
			}))
			defer server.Close()
			spec := mustSpec(t, fmt.Sprintf(`
goal: charge, then use a tool that keeps failing
budget: {steps: 6}
%s
model:
  provider: scripted
  script:
    - tool_calls: [{name: charge, arguments: {}}]
    - tool_calls: [{name: crm, arguments: {}}]
    - tool_calls: [{name: crm, arguments: {}}]
    - content: never reached
tools:
  - {name: charge, kind: http, url: "%[2]s/charge", compensate: {tool: refund, arguments: {id: "{{result.id}}"}}}
  - {name: refund, kind: http, url: "%[2]s/refund"}
  - {name: crm, kind: http, url: "%[2]s/crm"}
`, tc.extra, server.URL))
			store := ledgertest.NewStore(t)
			env := newEnv()
			registerWithRetryHook(t, env, store)
			activities.Register(env, &activities.Activities{Ledger: store}, false)
			var abort *error
			env.RegisterDelayedCallback(func() {
				abort = update(env, workflows.UpdateAbort, workflows.ReasonInput{Reason: "ops: the CRM is off limits"})
			}, time.Hour)
			env.ExecuteWorkflow(workflows.AgentRun, spec)
			require.NoError(t, env.GetWorkflowError())
			var result workflows.RunResult
			require.NoError(t, env.GetWorkflowResult(&result))
			require.NoError(t, *abort)
			assert.Equal(t, agentsagatype.RunCompensated, result.Status)
			assert.Contains(t, result.Reason, "aborted by a human while escalated: ops: the CRM is off limits")
			assert.Contains(t, result.Reason, tc.wantWhy)
			assert.Equal(t, int32(1), refunds.Load(), "the charge was refunded once")
		})
	}
}

// With on_budget_exhausted: compensate, a run that runs out rolls back,
// keeping its partial answer and handoff note.
func TestBudgetExhaustedCompensatesWhenTheSpecSaysSo(t *testing.T) {
	t.Parallel()
	var refunds atomic.Int32
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/refund" {
			refunds.Add(1)
		}
		fmt.Fprint(w, `{"id": "ch_1"}`)
	}))
	defer server.Close()
	spec := mustSpec(t, fmt.Sprintf(`
goal: charge twice
budget: {steps: 2}
on_budget_exhausted: compensate
model:
  provider: scripted
  script:
    - {content: "charging ann", tool_calls: [{name: charge, arguments: {who: ann}}]}
    - {content: "charging bob", tool_calls: [{name: charge, arguments: {who: bob}}]}
tools:
  - {name: charge, kind: http, url: "%[1]s/charge", compensate: {tool: refund, arguments: {id: "{{result.id}}"}}}
  - {name: refund, kind: http, url: "%[1]s/refund"}
`, server.URL))
	result, err, _ := runAgent(t, spec)
	require.NoError(t, err)
	assert.Equal(t, agentsagatype.RunCompensated, result.Status)
	assert.Contains(t, result.Reason, "the steps budget is spent")
	assert.Equal(t, "charging bob", result.Answer)
	assert.Contains(t, result.HandoffNote, "Tool calls that succeeded")
	assert.Equal(t, int32(2), refunds.Load())
}

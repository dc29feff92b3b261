package workflows_test

// Regression tests for the holes found in review of the fences work: each
// failed on the code before it. They run with the real activities and a
// real ledger.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/agentsaga/agentsaga/activities"
	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/internal/ledgertest"
	"github.com/agentsaga/agentsaga/internal/wire"
	"github.com/agentsaga/agentsaga/workflows"
)

// runWithTools runs spec with the Go tools of box, human acting (through
// Updates) an hour in, and returns how the run ended, a failed run's
// result included, and the environment, for queries.
func runWithTools(t *testing.T, spec workflows.RunSpec, box *activities.Toolbox, human func(env *testsuite.TestWorkflowEnvironment)) (workflows.RunResult, *ledgerdb.Store, *testsuite.TestWorkflowEnvironment) {
	t.Helper()
	store := ledgertest.NewStore(t)
	env := newEnv()
	registerWithRetryHook(t, env, store)
	activities.Register(env, &activities.Activities{Ledger: store, Toolbox: box}, false)
	if human != nil {
		env.RegisterDelayedCallback(func() { human(env) }, time.Hour)
	}
	env.ExecuteWorkflow(workflows.AgentRun, spec)
	require.True(t, env.IsWorkflowCompleted())
	var result workflows.RunResult
	if err := env.GetWorkflowError(); err != nil {
		var appErr *temporal.ApplicationError
		require.True(t, errors.As(err, &appErr), "%v", err)
		require.Equal(t, workflows.ErrTypeRunFailed, appErr.Type(), "%v", err)
		require.NoError(t, appErr.Details(&result))
	} else {
		require.NoError(t, env.GetWorkflowResult(&result))
	}
	return result, store, env
}

// traceEntry returns the run's trace entry for activityID.
func traceEntry(t *testing.T, result workflows.RunResult, activityID string) workflows.TraceEntry {
	t.Helper()
	for _, e := range result.Trace {
		if e.ActivityID == activityID {
			return e
		}
	}
	require.Failf(t, "no trace entry", "%s is not in the trace: %+v", activityID, result.Trace)
	return workflows.TraceEntry{}
}

// payments charges (answering {"id": "ch_<who>"}) and records every
// refund's Idempotency-Key and charge_id in the order they arrive.
type payments struct {
	mu        sync.Mutex
	refunds   []string // Idempotency-Keys
	refundIDs []string // charge_ids
}

func (p *payments) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var args map[string]string
	_ = json.NewDecoder(r.Body).Decode(&args)
	switch r.URL.Path {
	case "/charge":
		fmt.Fprintf(w, `{"id": "ch_%s"}`, args["who"])
	case "/refund":
		p.mu.Lock()
		p.refunds = append(p.refunds, r.Header.Get("Idempotency-Key"))
		p.refundIDs = append(p.refundIDs, args["charge_id"])
		p.mu.Unlock()
		fmt.Fprint(w, `{"refunded": true}`)
	default:
		http.NotFound(w, r)
	}
}

// A parent's rollback undoes what its sub-agents did too: the walk covers
// the whole tree, newest first, each under the forward key + /compensate.
func TestParentRollbackCompensatesSubAgentActions(t *testing.T) {
	t.Parallel()
	desk := &payments{}
	server := httptest.NewServer(desk)
	t.Cleanup(server.Close)
	spec := mustSpec(t, fmt.Sprintf(`
goal: charge ann, have a helper charge bob, charge cy, then fail
budget: {steps: 20}
model:
  provider: scripted
  script:
    - tool_calls: [{name: charge, arguments: {who: ann}}]
    - tool_calls: [{name: payer, arguments: {task: "charge bob"}}]
    - tool_calls: [{name: charge, arguments: {who: cy}}]
agents:
  payer:
    tools: [charge]
    model:
      provider: scripted
      script:
        - tool_calls: [{name: charge, arguments: {who: bob}}]
        - content: charged bob
tools:
  - {name: payer, kind: agent, parameters: {type: object, properties: {task: {type: string}}, required: [task]}}
  - {name: charge, kind: http, url: "%[1]s/charge", compensate: {tool: refund, arguments: {charge_id: "{{result.id}}"}}}
  - {name: refund, kind: http, url: "%[1]s/refund"}
`, server.URL))
	result, store, _ := runWithTools(t, spec, nil, nil)

	child := workflowID + "/step-002-call-1-payer"
	childRun, err := store.GetRun(context.Background(), child)
	require.NoError(t, err)
	require.Equal(t, agentsagatype.RunCompleted, childRun.Status, "the sub-agent itself succeeded, so only the parent's walk can undo its charge")
	childCharge := child + "/step-001-call-1-charge"
	assert.Equal(t, []string{
		workflowID + "/step-003-call-1-charge/compensate",
		childCharge + "/compensate",
		workflowID + "/step-001-call-1-charge/compensate",
	}, desk.refunds, "every charge of the tree refunded once, newest first, the child's under its own forward key")
	assert.Equal(t, []string{"ch_cy", "ch_bob", "ch_ann"}, desk.refundIDs)
	assert.Equal(t, agentsagatype.RunCompensated, result.Status, result.Reason)
	assert.Contains(t, result.Reason, "compensated 3 actions")
	refund, err := store.GetAction(context.Background(), childCharge+"/compensate")
	require.NoError(t, err)
	assert.Equal(t, agentsagatype.ActionCompleted, refund.Status)
}

// updateOutcome is what became of one Update: refused by its validator,
// or accepted and completed (with an error when its handler refused it).
type updateOutcome struct {
	rejected, failed error
	completed        bool
}

// sendUpdate sends an Update and records every way it can end, so an
// Update that is accepted and then dropped shows as neither failed nor
// acted on.
func sendUpdate(env *testsuite.TestWorkflowEnvironment, name string, args ...any) *updateOutcome {
	out := &updateOutcome{}
	id := fmt.Sprintf("%s-%d", name, updateIDs.Add(1))
	env.UpdateWorkflow(name, id, &testsuite.TestUpdateCallback{
		OnReject:   func(err error) { out.rejected = err },
		OnAccept:   func() {},
		OnComplete: func(_ any, err error) { out.completed, out.failed = true, err },
	}, args...)
	return out
}

func (o *updateOutcome) err() error { return errors.Join(o.rejected, o.failed) }

// Two Updates that reach an escalated run before it acted on either (here
// both arrive while it records its escalated status): the first is acted
// on, the second is refused with an error naming the first, and neither is
// lost without its caller hearing of it.
func TestSecondUpdateBeforeTheRunActsIsRefusedNotLost(t *testing.T) {
	t.Parallel()
	spec := mustSpec(t, `
goal: do something delicate
budget: {steps: 2}
model:
  provider: scripted
  script:
    - refusal: "I can't do that without approval."
    - content: done, with approval
`)
	store := ledgertest.NewStore(t)
	env := newEnv()
	registerWithRetryHook(t, env, store)
	activities.Register(env, &activities.Activities{Ledger: store}, false)
	var resume, abort *updateOutcome
	// A delayed callback would not do: the test environment runs a
	// workflow task after each Update, and the run takes the first in
	// before the second arrives. The listener runs on the environment's
	// main loop while the escalated status is being recorded, so both
	// Updates are handled before the run can act on the first.
	env.SetOnActivityStartedListener(func(info *activity.Info, _ context.Context, args converter.EncodedValues) {
		var status wire.RunStatus
		if info.ActivityType.Name != agentsagatype.NamePrefix+"SetRunStatus" || args.Get(&status) != nil || status.Status != agentsagatype.RunEscalated || resume != nil {
			return
		}
		resume = sendUpdate(env, workflows.UpdateResume, workflows.ResumeInput{Message: "approved by the account owner", AddSteps: 3})
		abort = sendUpdate(env, workflows.UpdateAbort, workflows.ReasonInput{Reason: "ops: stop it"})
	})
	env.ExecuteWorkflow(workflows.AgentRun, spec)
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
	var result workflows.RunResult
	require.NoError(t, env.GetWorkflowResult(&result))

	require.NotNil(t, resume, "the run escalated")
	require.NoError(t, resume.err(), "the first Update is accepted")
	assert.True(t, resume.completed)
	if refused := abort.err(); assert.Error(t, refused, "the second Update is refused, and its caller hears so") {
		assert.Contains(t, refused.Error(), "refused")
		assert.Contains(t, refused.Error(), workflows.UpdateResume, "the refusal names the input that is pending")
	}

	assert.Equal(t, agentsagatype.RunCompleted, result.Status, "the run acted on resume, not on the refused abort: %s", result.Reason)
	assert.Equal(t, "done, with approval", result.Answer)
	last := result.Trace[len(result.Trace)-1]
	assert.Contains(t, last.Note, "4 steps", "2 steps + 3 added by resume - 1 used: resume's add_steps was applied")
}

// resume with add_usd on a run with no USD limit leaves it unlimited.
func TestResumeAddUSDKeepsAnUnlimitedRunUnlimited(t *testing.T) {
	t.Parallel()
	spec := mustSpec(t, `
goal: add two and three, with approval
budget: {steps: 5}
prices: {tools: {add: 1}}
model:
  provider: scripted
  script:
    - refusal: "I need approval first."
    - tool_calls: [{name: add, arguments: {a: 2, b: 3}}]
    - content: "2 + 3 = 5"
`+addTool)
	box := activities.NewToolbox()
	box.Register("add", func(context.Context, activities.ToolInvocation) (string, error) { return "5", nil })
	var resume *error
	result, _, env := runWithTools(t, spec, box, func(env *testsuite.TestWorkflowEnvironment) {
		resume = update(env, workflows.UpdateResume, workflows.ResumeInput{Message: "approved", AddUSD: 0.01})
	})
	require.NoError(t, *resume)
	assert.Equal(t, agentsagatype.RunCompleted, result.Status, "a $1 call must not exhaust a run that has no USD limit: %s", result.Reason)
	assert.Equal(t, "2 + 3 = 5", result.Answer)
	assert.InDelta(t, 1.0, result.Usage.USD, 1e-9)

	encoded, err := env.QueryWorkflow(workflows.QueryBudget)
	require.NoError(t, err)
	var view workflows.BudgetView
	require.NoError(t, encoded.Get(&view))
	assert.Zero(t, view.Limits.USD, "still no USD limit (0 means unlimited)")
}

// A compensation answered with a 4xx is stored as rejected for its key; a
// human retry, once the service is fixed, gets a fresh key and succeeds,
// and the ledger keeps both rows.
func TestHumanRetryOfARejectedCompensationGetsAFreshKey(t *testing.T) {
	t.Parallel()
	var retry, skip *error
	result, desk, store := runFailingSagaAnswering(t, http.StatusUnprocessableEntity, func(env *testsuite.TestWorkflowEnvironment, desk *brokenRefunds) {
		desk.broken.Store(false) // the refund service was fixed
		retry = update(env, workflows.UpdateRetry)
		// Should the retry get the stored 422 back, the run escalates
		// again; the skip then ends it, so the test reports that.
		env.RegisterDelayedCallback(func() {
			skip = update(env, workflows.UpdateSkip, workflows.ReasonInput{Reason: "test: the retry did not go through"})
		}, time.Hour)
	})
	require.NoError(t, *retry)
	if skip != nil { // the fallback fired: the run must not have been waiting for it
		assert.Error(t, *skip, "no second escalation: the retry went through")
	}
	forward := workflowID + "/step-001-call-1-charge"
	assert.Equal(t, map[string]int{forward + "/compensate/retry-1": 1}, desk.refunds, "the retry went out under a key of its own")
	assert.Equal(t, agentsagatype.RunCompensated, result.Status, result.Reason)

	first, err := store.GetAction(context.Background(), forward+"/compensate")
	require.NoError(t, err)
	assert.Equal(t, agentsagatype.ActionRejected, first.Status, "the 422 stays stored for the first key")
	assert.Contains(t, first.Error, "HTTP 422")
	second, err := store.GetAction(context.Background(), forward+"/compensate/retry-1")
	require.NoError(t, err)
	assert.Equal(t, agentsagatype.ActionCompleted, second.Status)
	stack, err := store.CompensationStack(context.Background(), workflowID)
	require.NoError(t, err)
	require.Len(t, stack, 1)
	assert.Equal(t, agentsagatype.CompensationDone, stack[0].Status)
}

// An irreversible action that happened is named when its run is rolled
// back, and the run needs attention; one the far side rejected is not.
func TestRollbackPastAnIrreversibleActionNeedsAttention(t *testing.T) {
	t.Parallel()
	desk := &payments{}
	var emails atomic.Int32
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/email" {
			desk.ServeHTTP(w, r)
			return
		}
		body, _ := io.ReadAll(r.Body)
		if strings.Contains(string(body), "bob") {
			http.Error(w, `{"error":"no such mailbox"}`, http.StatusBadRequest)
			return
		}
		emails.Add(1)
		fmt.Fprint(w, `{"sent": true}`)
	}))
	t.Cleanup(server.Close)
	spec := mustSpec(t, fmt.Sprintf(`
goal: charge ann, email ann and bob, then fail
budget: {steps: 5}
model:
  provider: scripted
  script:
    - tool_calls:
        - {name: charge, arguments: {who: ann}}
        - {name: email, arguments: {to: ann}}
        - {name: email, arguments: {to: bob}}
tools:
  - {name: charge, kind: http, url: "%[1]s/charge", compensate: {tool: refund, arguments: {charge_id: "{{result.id}}"}}}
  - {name: refund, kind: http, url: "%[1]s/refund"}
  - {name: email, kind: http, url: "%[1]s/email", irreversible: true, approval: never}
`, server.URL))
	// approval: never switches off the approval an irreversible tool needs
	// by default (issue 24): this test is about the rollback.
	result, _, _ := runWithTools(t, spec, nil, nil)

	sent, rejected := workflowID+"/step-001-call-2-email", workflowID+"/step-001-call-3-email"
	require.Equal(t, int32(1), emails.Load())
	assert.Equal(t, []string{workflowID + "/step-001-call-1-charge/compensate"}, desk.refunds, "the charge is still refunded")
	assert.Equal(t, agentsagatype.RunNeedsAttention, result.Status, result.Reason)
	assert.Contains(t, result.Reason, sent, "the reason names the irreversible action that happened")
	assert.NotContains(t, result.Reason, rejected)
	require.NotNil(t, result.Saga)
	require.Len(t, result.Saga.Irreversible, 1, "only the email that was sent: %v", result.Saga.Irreversible)
	assert.Contains(t, result.Saga.Irreversible[0], sent)
}

// A call whose last attempt timed out is counted as the attempts it made:
// the trace and the run's leaf calls agree with the ledger.
func TestTimedOutCallCountsEveryAttempt(t *testing.T) {
	t.Parallel()
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Agentsaga-Attempt") != "3" {
			http.Error(w, `{"error":"busy"}`, http.StatusServiceUnavailable)
			return
		}
		select { // the third attempt outlives its 1 s timeout
		case <-time.After(3 * time.Second):
		case <-r.Context().Done():
		}
		fmt.Fprint(w, `{"late": true}`)
	}))
	t.Cleanup(server.Close)
	spec := mustSpec(t, fmt.Sprintf(`
goal: call a slow service
budget: {steps: 3}
retry: {max_attempts: 3}
model:
  provider: scripted
  script:
    - tool_calls: [{name: slow, arguments: {}}]
    - content: the service did not answer
tools:
  - {name: slow, kind: http, url: %q, timeout_seconds: 1}
`, server.URL))
	result, store, _ := runWithTools(t, spec, nil, nil)

	key := workflowID + "/step-001-call-1-slow"
	leaves, err := store.ListLeafCalls(context.Background(), workflowID)
	require.NoError(t, err)
	ofKey := 0
	for _, l := range leaves {
		if l.Key == key {
			ofKey++
		}
	}
	require.Equal(t, 3, ofKey, "the ledger holds the three attempts that left the process")
	slow := traceEntry(t, result, "step-001-call-1-slow")
	assert.NotEmpty(t, slow.Error)
	assert.Equal(t, ofKey, slow.Attempts, "the trace counts every attempt, the timed-out one included")
	assert.Equal(t, len(leaves), result.Usage.LeafCalls, "the run's leaf calls are the ledger's (2 model calls + 3 tool attempts)")
	assert.Equal(t, 2, result.Retries.Retries)
}

// A call whose attempt did the work but failed as an activity (it
// finished past its timeout) is reported to the model as the success the
// ledger recorded, not as a failure.
func TestModelHearsOfALateSuccessAfterAGiveUp(t *testing.T) {
	t.Parallel()
	var sends atomic.Int32
	box := activities.NewToolbox()
	box.Register("send", func(context.Context, activities.ToolInvocation) (string, error) {
		sends.Add(1)
		time.Sleep(1500 * time.Millisecond) // past its 1 s timeout, ignoring the context
		return `{"message_id": "m_1"}`, nil
	})
	spec := mustSpec(t, `
goal: send a message
budget: {steps: 3}
model:
  provider: scripted
  script:
    - tool_calls: [{name: send, arguments: {to: ann}}]
    - content: sent
tools:
  - {name: send, kind: go, timeout_seconds: 1}
`)
	result, store, _ := runWithTools(t, spec, box, nil)

	require.Equal(t, int32(1), sends.Load())
	action, err := store.GetAction(context.Background(), workflowID+"/step-001-call-1-send")
	require.NoError(t, err)
	require.Equal(t, agentsagatype.ActionCompleted, action.Status, "the attempt stored its result although the activity timed out")
	send := traceEntry(t, result, "step-001-call-1-send")
	assert.Empty(t, send.Error, "the model is not told that a call failed whose effect the ledger knows happened")
	assert.Equal(t, `{"message_id": "m_1"}`, send.Output, "the model reads the stored result")
	assert.Equal(t, agentsagatype.RunCompleted, result.Status, result.Reason)
}

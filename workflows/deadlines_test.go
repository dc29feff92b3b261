package workflows_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/testsuite"

	"github.com/agentsaga/agentsaga/activities"
	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/internal/ledgertest"
	"github.com/agentsaga/agentsaga/internal/runevents"
	"github.com/agentsaga/agentsaga/internal/wire"
	"github.com/agentsaga/agentsaga/workflows"
)

// Deadlines on every wait for a person (issue 44), on the time-skipping
// test environment: the timers are workflow timers, so a wait of hours
// takes milliseconds, and each test checks the workflow's clock as the
// wait goes.

// gatedAdd is addTool needing approval under rule (the YAML of the
// approval object).
func gatedAdd(rule string) string {
	return `
tools:
  - name: add
    kind: go
    parameters: {type: object, properties: {a: {type: number}, b: {type: number}}, required: [a, b]}
    approval: ` + rule + `
`
}

// deadlineRun runs spec with the add tool (counting its calls) on a fresh
// ledger; at each offset from the start, check runs against the run's
// approvals query. prepare, if given, sets up the environment first (a
// mock of one of the activities).
func deadlineRun(t *testing.T, spec workflows.RunSpec, checks map[time.Duration]func(env *testsuite.TestWorkflowEnvironment, store *ledgerdb.Store),
	prepare ...func(*testsuite.TestWorkflowEnvironment, *activities.Activities)) (workflows.RunResult, error, *ledgerdb.Store, *int) {
	t.Helper()
	store := ledgertest.NewStore(t)
	box := activities.NewToolbox()
	adds := new(int)
	box.Register("add", func(_ context.Context, call activities.ToolInvocation) (string, error) {
		*adds++
		return "5", nil
	})
	env := newEnv()
	registerWithRetryHook(t, env, store)
	acts := &activities.Activities{Ledger: store, Toolbox: box}
	activities.Register(env, acts, false)
	for _, p := range prepare {
		p(env, acts)
	}
	for at, check := range checks {
		env.RegisterDelayedCallback(func() { check(env, store) }, at)
	}
	env.ExecuteWorkflow(workflows.AgentRun, spec)
	require.True(t, env.IsWorkflowCompleted())
	var result workflows.RunResult
	err := env.GetWorkflowError()
	if err == nil {
		require.NoError(t, env.GetWorkflowResult(&result))
	}
	return result, err, store, adds
}

// waitEvents are the run's reminder and timeout events, in order.
func waitEvents(t *testing.T, store *ledgerdb.Store) (kinds []string, data []wire.WaitEvent) {
	t.Helper()
	events, err := runevents.New(store.Pool()).Read(context.Background(), workflowID, 0, 1000)
	require.NoError(t, err)
	for _, e := range events {
		if !strings.Contains(e.Kind, "reminder") && !strings.Contains(e.Kind, "timed_out") {
			continue
		}
		var d wire.WaitEvent
		require.NoError(t, json.Unmarshal(e.Data, &d))
		kinds, data = append(kinds, e.Kind), append(data, d)
	}
	return kinds, data
}

// approvalsWaiting asks the run which calls wait for approval.
func approvalsWaiting(t *testing.T, env *testsuite.TestWorkflowEnvironment) []workflows.ApprovalWait {
	t.Helper()
	answer, err := env.QueryWorkflow(workflows.QueryApprovals)
	require.NoError(t, err)
	var waiting []workflows.ApprovalWait
	require.NoError(t, answer.Get(&waiting))
	return waiting
}

// Nobody decides: the call waits 30m from its request, reminds at 10m and
// 20m, and is denied by default when the 30m pass, naming the timeout and
// what was published; the run goes on, and the same call asked again is
// refused at once. The wait costs the run no wall clock.
func TestApprovalTimeoutDeniesByDefault(t *testing.T) {
	t.Parallel()
	spec := mustSpec(t, `
goal: add two and three
budget: {steps: 5, seconds: 600}
model:
  provider: scripted
  script:
    - tool_calls: [{name: add, arguments: {a: 2, b: 3}}]
    - tool_calls: [{name: add, arguments: {a: 2, b: 3}}]
    - content: "I could not add them"
`+gatedAdd(`{when: always, timeout: 30m, remind_every: 10m}`))
	var before, after []workflows.ApprovalWait
	result, err, store, adds := deadlineRun(t, spec, map[time.Duration]func(*testsuite.TestWorkflowEnvironment, *ledgerdb.Store){
		29 * time.Minute: func(env *testsuite.TestWorkflowEnvironment, _ *ledgerdb.Store) { before = approvalsWaiting(t, env) },
		31 * time.Minute: func(env *testsuite.TestWorkflowEnvironment, _ *ledgerdb.Store) { after = approvalsWaiting(t, env) },
	})
	require.NoError(t, err)
	require.Equal(t, agentsagatype.RunCompleted, result.Status, "the 30m wait was given back to a run of 10m: %s", result.Reason)
	require.Zero(t, *adds, "nothing is sent without a human's yes")

	require.Len(t, before, 1, "still waiting at 29m")
	w := before[0]
	assert.Equal(t, w.Since.Add(30*time.Minute), w.Deadline, "the deadline is fixed from the request")
	assert.Equal(t, agentsagatype.OnTimeoutDeny, w.OnTimeout, "an unresolved spec's approval denies by default")
	assert.Equal(t, 2, w.Reminded)
	var waiting runevents.Event
	events, err := runevents.New(store.Pool()).Read(context.Background(), workflowID, 0, 1000)
	require.NoError(t, err)
	for _, e := range events {
		if e.Kind == runevents.AwaitingApproval {
			waiting = e
		}
	}
	var published agentsagatype.Approval
	require.NoError(t, json.Unmarshal(waiting.Data, &published))
	assert.Equal(t, w.Deadline, published.Deadline, "approval.waiting says when it times out")
	assert.Equal(t, agentsagatype.OnTimeoutDeny, published.OnTimeout)
	assert.Empty(t, after, "denied at 30m")

	errs := toolErrorsOf(result)
	require.Len(t, errs, 2)
	assert.Contains(t, errs[0], "waited 30m0s for approval")
	assert.Contains(t, errs[0], "approval.waiting and 2 reminders were published as run events")
	assert.Contains(t, errs[0], "denied by default (on_timeout: deny)")
	assert.Contains(t, errs[1], "this call was denied before (nobody decided within 30m0s", "asked again: refused at once")

	kinds, data := waitEvents(t, store)
	require.Equal(t, []string{runevents.ApprovalReminder, runevents.ApprovalReminder, runevents.ApprovalTimedOut}, kinds)
	assert.Equal(t, 1, data[0].Reminder)
	assert.Equal(t, 2, data[1].Reminder)
	timedOut := data[2]
	assert.Equal(t, w.Call, timedOut.Call)
	assert.Equal(t, "add", timedOut.Tool)
	assert.Equal(t, w.Key, timedOut.CallKey)
	assert.Equal(t, w.Deadline, timedOut.Deadline)
	assert.Equal(t, "30m0s", timedOut.Timeout)
	assert.Equal(t, "denied", timedOut.Action)
	assert.Equal(t, 2, timedOut.Reminders)
	assert.Contains(t, timedOut.Reason, "denied by default")

	approvals, err := store.RunApprovals(context.Background(), workflowID)
	require.NoError(t, err)
	require.Len(t, approvals, 1)
	assert.Equal(t, agentsagatype.ApprovalTimedOut, approvals[0].Status)
	assert.Equal(t, "agentsaga", approvals[0].DecidedBy)
	assert.Contains(t, approvals[0].Reason, "denied by default")
}

// on_timeout: abort aborts the run, which compensates what it did; the
// calls after the timed-out one in the same turn are not sent.
func TestApprovalTimeoutAbortsTheRun(t *testing.T) {
	t.Parallel()
	spec := mustSpec(t, `
goal: add two and three
budget: {steps: 5}
model:
  provider: scripted
  script:
    - tool_calls: [{name: add, arguments: {a: 2, b: 3}}, {name: add, arguments: {a: 1, b: 1}}]
    - content: never reached
`+gatedAdd(`{when: "a > 1", timeout: 1h, on_timeout: abort}`))
	result, err, store, adds := deadlineRun(t, spec, nil)
	require.NoError(t, err)
	require.Equal(t, agentsagatype.RunCompensated, result.Status, result.Reason)
	assert.Contains(t, result.Reason, "waited 1h0m0s for approval")
	assert.Contains(t, result.Reason, "approval.waiting was published as a run event")
	assert.Contains(t, result.Reason, "the run is aborted (on_timeout: abort)")
	assert.Zero(t, *adds, "the second call, which needed no approval, was not sent either")
	errs := toolErrorsOf(result)
	require.Len(t, errs, 2)
	assert.Contains(t, errs[1], "not sent: call step-001-call-1-add")

	kinds, data := waitEvents(t, store)
	require.Equal(t, []string{runevents.ApprovalTimedOut}, kinds)
	assert.Equal(t, "aborted", data[0].Action)
	assert.Equal(t, agentsagatype.OnTimeoutAbort, data[0].OnTimeout)
}

// A human who decides before the deadline is heard: the reminders stop and
// no timeout is published.
func TestApprovalDecidedBeforeItsDeadline(t *testing.T) {
	t.Parallel()
	spec := mustSpec(t, addTwoAndThree(gatedAdd(`{when: always, timeout: 1h, remind_every: 15m}`)))
	var approve *error
	result, err, store, adds := deadlineRun(t, spec, map[time.Duration]func(*testsuite.TestWorkflowEnvironment, *ledgerdb.Store){
		20 * time.Minute: func(env *testsuite.TestWorkflowEnvironment, _ *ledgerdb.Store) {
			w := approvalsWaiting(t, env)
			require.Len(t, w, 1)
			approve = update(env, workflows.UpdateApprove, workflows.ApprovalInput{Call: w[0].Call, By: "alice"})
		},
	})
	require.NoError(t, err)
	require.NoError(t, *approve)
	require.Equal(t, agentsagatype.RunCompleted, result.Status, result.Reason)
	require.Equal(t, 1, *adds)
	kinds, _ := waitEvents(t, store)
	assert.Equal(t, []string{runevents.ApprovalReminder}, kinds, "one reminder at 15m, then alice approved at 20m")
}

// An escalation nobody answers: by default (a new spec) the run waits 24h,
// then aborts and compensates.
func TestEscalationTimeoutAbortsByDefault(t *testing.T) {
	t.Parallel()
	spec := mustSpec(t, `
goal: do something delicate
budget: {steps: 5}
model:
  provider: scripted
  script:
    - refusal: "I can't do that."
    - content: never reached
`)
	var at23h string
	result, err, store, _ := deadlineRun(t, spec, map[time.Duration]func(*testsuite.TestWorkflowEnvironment, *ledgerdb.Store){
		23 * time.Hour: func(_ *testsuite.TestWorkflowEnvironment, store *ledgerdb.Store) {
			run, err := store.GetRun(context.Background(), workflowID)
			require.NoError(t, err)
			at23h = run.Status
		},
	})
	require.NoError(t, err)
	require.Equal(t, agentsagatype.RunEscalated, at23h, "still escalated at 23h")
	require.Equal(t, agentsagatype.RunCompensated, result.Status, result.Reason)
	assert.Contains(t, result.Reason, "nobody answered the escalation (The model refused at step 1: I can't do that.) within 24h0m0s")
	assert.Contains(t, result.Reason, "run.escalated was published as a run event")
	assert.Contains(t, result.Reason, "the run is aborted (escalate.on_timeout: abort)")
	kinds, data := waitEvents(t, store)
	require.Equal(t, []string{runevents.EscalationTimedOut}, kinds)
	assert.Equal(t, "aborted", data[0].Action)
	assert.Equal(t, data[0].Since.Add(24*time.Hour), data[0].Deadline)
}

// escalate.on_timeout: resume goes on as if a human had resumed, with no
// budget added: the model reads that nobody answered. Reminders each
// remind_every, bounded by the timeout.
func TestEscalationTimeoutResumes(t *testing.T) {
	t.Parallel()
	spec := mustSpec(t, `
goal: do something delicate
budget: {steps: 5}
escalate: {timeout: 1h, on_timeout: resume, remind_every: 20m}
model:
  provider: scripted
  script:
    - refusal: "I can't do that."
    - content: done without a human
`)
	result, err, store, _ := deadlineRun(t, spec, nil)
	require.NoError(t, err)
	require.Equal(t, agentsagatype.RunCompleted, result.Status, result.Reason)
	assert.Equal(t, "done without a human", result.Answer)
	assert.Equal(t, 2, result.Usage.Steps, "no budget added")
	kinds, data := waitEvents(t, store)
	require.Equal(t, []string{runevents.EscalationReminder, runevents.EscalationReminder, runevents.EscalationTimedOut}, kinds)
	assert.Equal(t, "resumed", data[2].Action)
	assert.Equal(t, 2, data[2].Reminders)
	assert.Contains(t, data[2].Reason, "run.escalated and 2 reminders were published as run events")
	messages, err := store.Messages(context.Background(), workflowID, 1000, ledgerdb.MessageWindow{})
	require.NoError(t, err)
	var told bool
	for _, m := range messages {
		told = told || strings.Contains(m.Content, "Nobody answered the escalation within 1h0m0s")
	}
	assert.True(t, told, "the model is told nobody answered")
}

// escalate.on_timeout: finish ends the run with a partial answer and a
// handoff note that name the timeout.
func TestEscalationTimeoutFinishes(t *testing.T) {
	t.Parallel()
	spec := mustSpec(t, `
goal: do something delicate
budget: {steps: 5}
escalate: {timeout: 2h, on_timeout: finish}
model:
  provider: scripted
  script:
    - refusal: "I can't do that."
`)
	result, err, _, _ := deadlineRun(t, spec, nil)
	require.NoError(t, err)
	require.Equal(t, agentsagatype.RunPartial, result.Status, result.Reason)
	assert.NotEmpty(t, result.HandoffNote)
	assert.Contains(t, result.Reason, "within 2h0m0s")
	assert.Contains(t, result.Reason, "(escalate.on_timeout: finish)")
}

// A run's own deadline comes before the escalation's: the run ends on its
// wall clock, as before, and says what was published.
func TestEscalationMeetsTheRunsDeadlineFirst(t *testing.T) {
	t.Parallel()
	spec := mustSpec(t, `
goal: do something delicate
budget: {steps: 5, seconds: 1800}
escalate: {timeout: 2h, remind_every: 10m}
model:
  provider: scripted
  script:
    - refusal: "I can't do that."
    - content: never reached
`)
	result, err, store, _ := deadlineRun(t, spec, nil)
	require.NoError(t, err)
	require.Equal(t, agentsagatype.RunPartial, result.Status, result.Reason)
	assert.Contains(t, result.Reason, "the deadline passed while escalated")
	kinds, data := waitEvents(t, store)
	require.Len(t, kinds, 3, "two reminders in the 30m the run had left, and its end")
	assert.Equal(t, runevents.EscalationTimedOut, kinds[2])
	assert.Equal(t, "ended at the run's deadline", data[2].Action)
}

// A resolved spec carries its defaults: a new spec denies and aborts; a
// spec resolved at version 3 keeps escalating (its runs in flight too).
func TestDeadlineDefaultsResolve(t *testing.T) {
	t.Parallel()
	spec := mustSpec(t, `
goal: pay
budget: {steps: 5}
model: {provider: scripted, script: [{content: x}]}
`+gatedAdd(`{when: always, timeout_seconds: 60}`))
	resolved, err := spec.Resolve()
	require.NoError(t, err)
	assert.Equal(t, agentsagatype.OnTimeoutDeny, resolved.Tools[0].Approval.OnTimeout)
	assert.Empty(t, spec.Tools[0].Approval.OnTimeout, "the caller's spec is not changed")
	assert.Equal(t, "24h0m0s", resolved.Escalate.Timeout)
	assert.Equal(t, agentsagatype.OnTimeoutAbort, resolved.Escalate.OnTimeout)
	assert.Equal(t, time.Minute, resolved.Tools[0].Approval.Timeout())
}

// Each field is checked, and named, before the run starts.
func TestDeadlineFieldsAreValidated(t *testing.T) {
	t.Parallel()
	head := "goal: g\nbudget: {steps: 3}\nmodel: {provider: scripted, script: [{content: x}]}\n"
	for name, c := range map[string]struct{ yaml, want string }{
		"approval resume":     {gatedAdd(`{when: always, on_timeout: resume}`), `approval.on_timeout: "resume" applies to an escalation`},
		"approval unknown":    {gatedAdd(`{when: always, on_timeout: shrug}`), `approval.on_timeout: "shrug" is not "deny"`},
		"approval bad time":   {gatedAdd(`{when: always, timeout: soon}`), `approval.timeout: "soon" is not a duration`},
		"approval both":       {gatedAdd(`{when: always, timeout: 1m, timeout_seconds: 60}`), `both set`},
		"approval zero":       {gatedAdd(`{when: always, timeout: 0s}`), `approval.timeout: "0s" must be positive`},
		"too many reminders":  {gatedAdd(`{when: always, remind_every: 1m}`), `approval.remind_every: 1m against a timeout of 24h0m0s is 1440 reminders; at most 48`},
		"escalation deny":     {"escalate: {on_timeout: deny}\n", `escalate.on_timeout: "deny" applies to an approval`},
		"escalation reminder": {"escalate: {timeout: 1h, remind_every: -5m}\n", `escalate.remind_every: "-5m" must be positive`},
	} {
		_, err := workflows.ParseSpec([]byte(head + c.yaml))
		require.Error(t, err, name)
		assert.Contains(t, err.Error(), c.want, name)
	}
	_, err := workflows.ParseSpec([]byte(head + gatedAdd(`{when: always, timeout: 30m, on_timeout: abort, remind_every: 10m}`) + "escalate: {timeout: 4h, on_timeout: finish, remind_every: 1h}\n"))
	require.NoError(t, err)
}

func toolErrorsOf(result workflows.RunResult) []string {
	var errs []string
	for _, e := range result.Trace {
		if e.Kind == "tool" && e.Error != "" {
			errs = append(errs, e.Error)
		}
	}
	return errs
}

// The ledger lists a call as awaiting approval as soon as its request is
// written, before the run has seen the request recorded: an operator who
// approves the call at once (here, while the request takes a minute to
// record) finds it waiting, and the decision waits for the request
// instead of being refused with "waiting: none". The run's approvals
// query lists the call once its request is recorded, as the ledger does.
func TestApprovalDecidedWhileItsRequestIsRecorded(t *testing.T) {
	t.Parallel()
	spec := mustSpec(t, addTwoAndThree(gatedAdd(`{when: always, timeout: 1h}`)))
	var listed []workflows.ApprovalWait
	var approve *error
	result, err, store, adds := deadlineRun(t, spec, map[time.Duration]func(*testsuite.TestWorkflowEnvironment, *ledgerdb.Store){
		30 * time.Second: func(env *testsuite.TestWorkflowEnvironment, _ *ledgerdb.Store) {
			listed = approvalsWaiting(t, env)
			approve = update(env, workflows.UpdateApprove, workflows.ApprovalInput{Call: "step-001-call-1-add", By: "alice"})
		},
	}, func(env *testsuite.TestWorkflowEnvironment, acts *activities.Activities) {
		env.OnActivity(agentsagatype.NamePrefix+wire.ActivityRequestApproval, mock.Anything, mock.Anything).After(time.Minute).Return(func(ctx context.Context, req agentsagatype.ApprovalRequest) (agentsagatype.Approval, error) {
			// The activity's own work: the request written to the ledger.
			approval, err := acts.Ledger.RequestApproval(ctx, req)
			approval.Deadline, approval.OnTimeout = req.Deadline, req.OnTimeout
			return approval, err
		})
	})
	require.NoError(t, err)
	assert.Empty(t, listed, "the query lists the call once its request is recorded")
	require.NoError(t, *approve, "the decision waits for the request")
	require.Equal(t, agentsagatype.RunCompleted, result.Status, result.Reason)
	assert.Equal(t, 1, *adds, "approved, the call went out once")
	approvals, err := store.RunApprovals(context.Background(), workflowID)
	require.NoError(t, err)
	require.Len(t, approvals, 1)
	assert.Equal(t, agentsagatype.ApprovalApproved, approvals[0].Status)
	assert.Equal(t, "alice", approvals[0].DecidedBy)
}

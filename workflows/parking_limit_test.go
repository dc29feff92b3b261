package workflows_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/agentsaga/agentsaga/budget"
	"github.com/agentsaga/agentsaga/internal/wire"
	"github.com/agentsaga/agentsaga/workflows"
)

// waitOut runs WaitOutBreaker against a CRM that refuses as refusals says,
// one per send, then answers; it returns the outcome and how long the call
// waited in workflow time.
func waitOut(t *testing.T, limit time.Duration, refusals ...wire.CallFailure) (workflows.BreakerOutcome, time.Duration) {
	t.Helper()
	return waitOutWith(t, workflows.BreakerWait{Limit: limit}, refusals...)
}

// waitOutWith is waitOut with the whole of BreakerWait.
func waitOutWith(t *testing.T, wait workflows.BreakerWait, refusals ...wire.CallFailure) (workflows.BreakerOutcome, time.Duration) {
	t.Helper()
	sends := 0
	callCRM := func(ctx context.Context) (string, error) {
		sends++
		if sends <= len(refusals) {
			return "", temporal.NewNonRetryableApplicationError("circuit breaker for tool:crm is open", budget.DenyCircuitOpen, nil, refusals[sends-1])
		}
		return "updated", nil
	}
	type result struct {
		Outcome workflows.BreakerOutcome
		Waited  time.Duration
	}
	run := func(ctx workflow.Context) (result, error) {
		send := func(ctx workflow.Context, activityID string) workflow.Future {
			return workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, workflow.ActivityOptions{ActivityID: activityID,
				StartToCloseTimeout: time.Minute, RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: 1}}), "callCRM")
		}
		start := workflow.Now(ctx)
		err := send(ctx, "crm").Get(ctx, nil)
		_, outcome := workflows.WaitOutBreaker(ctx, err, wait,
			func(ctx workflow.Context, n int) workflow.Future {
				return send(ctx, fmt.Sprintf("crm/after-breaker-%d", n))
			}, nil)
		return result{outcome, workflow.Now(ctx).Sub(start)}, nil
	}
	var suite testsuite.WorkflowTestSuite
	suite.SetLogger(log.NewStructuredLogger(slog.New(slog.DiscardHandler)))
	env := suite.NewTestWorkflowEnvironment()
	env.SetWorkerOptions(tolerantWorker)
	env.SetStartTime(parkStart)
	env.RegisterActivityWithOptions(callCRM, activity.RegisterOptions{Name: "callCRM"})
	env.RegisterWorkflowWithOptions(run, workflow.RegisterOptions{Name: "run"})
	env.ExecuteWorkflow("run")
	require.NoError(t, env.GetWorkflowError())
	var r result
	require.NoError(t, env.GetWorkflowResult(&r))
	return r.Outcome, r.Waited
}

var parkStart = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

func refusal(retryAt, openSince time.Time) wire.CallFailure {
	return wire.CallFailure{Attempt: 1, Denial: budget.DenyCircuitOpen, AtGate: true, RetryAt: retryAt, OpenSince: openSince}
}

// The threshold measures the outage, not the queue. A call whose release
// slot lies past escalate.after_breaker_open_seconds, behind a long queue
// after a short outage, waits for it; a call refused once the breaker has
// been open longer than the threshold stops waiting, and the run asks a
// human. A refusal that does not say since when (a hook of an older build,
// or a history recorded before it said) is decided as it was: by the
// call's own wait.
func TestWaitOutBreakerMeasuresTheOutageNotTheQueue(t *testing.T) {
	t.Parallel()
	limit := 5 * time.Minute
	opened := parkStart.Add(-10 * time.Second)

	outcome, waited := waitOut(t, limit, refusal(parkStart.Add(8*time.Minute), opened))
	assert.Empty(t, outcome.Stopped, "a slot past the threshold after a 10 s outage is waited for")
	assert.Equal(t, 1, outcome.Parks)
	assert.Equal(t, 8*time.Minute, waited)

	outcome, waited = waitOut(t, limit, refusal(parkStart.Add(6*time.Minute), opened), refusal(parkStart.Add(7*time.Minute), opened))
	assert.Equal(t, workflows.StoppedLimit, outcome.Stopped, "refused again once the breaker had been open for more than the threshold")
	assert.Equal(t, 1, outcome.Parks)
	assert.Equal(t, 6*time.Minute, waited, "the human is asked at that refusal, not after another wait")
	assert.Equal(t, opened, outcome.OpenSince.UTC())

	outcome, waited = waitOut(t, limit, refusal(parkStart.Add(8*time.Minute), time.Time{}))
	assert.Equal(t, workflows.StoppedLimit, outcome.Stopped, "without OpenSince, the call's own wait is the measure")
	assert.Zero(t, outcome.Parks)
	assert.Zero(t, waited)
}

// A call released at its slot as the breaker's probe, which fails and
// reopens the breaker, is refused by that failure rather than at the gate,
// and the refusal does not say since when the breaker has been open. The
// wait keeps the outage's start that the gate's refusal gave: the run asks
// a human once the outage has lasted the threshold, not once its own wait
// would. Runs from before agentsaga-commands 1 (ForgetOpenSince) decided
// by the wait, and asked early.
func TestWaitOutBreakerKeepsTheOutageStartAcrossAFailedProbe(t *testing.T) {
	t.Parallel()
	limit := 4 * time.Second
	opened := parkStart.Add(-500 * time.Millisecond)
	atGate := refusal(parkStart.Add(2*time.Second), opened)
	failedProbe := wire.CallFailure{Attempt: 1, Denial: budget.DenyCircuitOpen, RetryAt: parkStart.Add(5 * time.Second)}

	outcome, waited := waitOut(t, limit, atGate, failedProbe)
	assert.Empty(t, outcome.Stopped, "the outage had lasted 2.5 s of the 4 s when the probe failed")
	assert.Equal(t, 2, outcome.Parks)
	assert.Equal(t, 5*time.Second, waited, "waited for the gate's slot, then for the next probe")

	outcome, waited = waitOutWith(t, workflows.BreakerWait{Limit: limit, ForgetOpenSince: true}, atGate, failedProbe)
	assert.Equal(t, workflows.StoppedLimit, outcome.Stopped, "the old rule measured the call's own wait, 5 s")
	assert.Equal(t, 1, outcome.Parks)
	assert.Equal(t, 2*time.Second, waited)
}

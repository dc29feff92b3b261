package activities

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/temporal"

	"github.com/agentsaga/agentsaga/budget"
	"github.com/agentsaga/agentsaga/ledger"
)

// RetryPlan is what the workflow tells each model and tool call about its
// retries. The workflow computes it when it schedules the call, so the
// allowance reflects the run's logical calls so far, and the run's shared
// counters (retries, per-tool retries) live in Postgres where parallel
// calls of one turn pay against them atomically.
type RetryPlan struct {
	// Tool is the per-tool cap's key; model calls use "model".
	Tool string `json:"tool"`
	// Dependency is the circuit breaker's key, shared by the fleet.
	Dependency   string  `json:"dependency"`
	MaxAttempts  int     `json:"max_attempts"`
	ToolRetryCap int     `json:"tool_retry_cap"`
	RunAllowance float64 `json:"run_allowance"`
	// BackoffBase and BackoffCap shape full-jitter backoff.
	BackoffBase time.Duration `json:"backoff_base"`
	BackoffCap  time.Duration `json:"backoff_cap"`
	// Deadline is the run's absolute deadline; zero means none.
	Deadline time.Time `json:"deadline,omitempty"`
}

// planned is implemented by the activity inputs that carry a RetryPlan.
type planned interface{ retryPlan() RetryPlan }

func (c ModelCall) retryPlan() RetryPlan       { return c.Retry }
func (r ToolCallRequest) retryPlan() RetryPlan { return r.Retry }

// CallFailure travels as the details of every error the retry hook
// returns, so the workflow learns how many leaf calls a failed call took
// and which budget, if any, refused it.
type CallFailure struct {
	Attempt int    `json:"attempt"`
	Denial  string `json:"denial,omitempty"`
}

// RetryStore is the shared state the hook pays with: the ledger in
// production.
type RetryStore interface {
	DecideRetry(ctx context.Context, req ledger.RetryRequest) (string, error)
	RecordSuccess(ctx context.Context, chargeKey, bucket string, bonus float64, dependency string, probe bool) error
	BreakerAllow(ctx context.Context, dependency string, cfg budget.BreakerConfig) (string, error)
	BreakerRecord(ctx context.Context, dependency string, success, probe bool, cfg budget.BreakerConfig) (string, error)
}

// RetryHookConfig names the fleet bucket and shapes the breakers.
type RetryHookConfig struct {
	Bucket       string
	BucketConfig budget.BucketConfig
	Breaker      budget.BreakerConfig
	// Random returns a float in [0, 1) for jitter; nil means math/rand/v2.
	Random func() float64
	// Now is the wall clock, for the deadline check; nil means time.Now.
	Now func() time.Time
	// Observe, when set, is told every decision (for metrics and tests).
	Observe func(plan RetryPlan, decision string)
}

// RetryHook is the activity interceptor that makes every retry pay. It is
// the only place a retry is decided: Temporal's retry policy is the loop,
// and this hook turns each failure into either a retry with a jittered
// delay, paid for by every budget in order, or a non-retryable error whose
// type names the budget that said no.
type RetryHook struct {
	interceptor.WorkerInterceptorBase
	store RetryStore
	cfg   RetryHookConfig
}

// NewRetryHook returns the hook; register it in worker.Options.Interceptors.
func NewRetryHook(store RetryStore, cfg RetryHookConfig) *RetryHook {
	if cfg.Random == nil {
		cfg.Random = rand.Float64
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &RetryHook{store: store, cfg: cfg}
}

// InterceptActivity implements interceptor.WorkerInterceptor.
func (h *RetryHook) InterceptActivity(_ context.Context, next interceptor.ActivityInboundInterceptor) interceptor.ActivityInboundInterceptor {
	in := &retryInbound{hook: h}
	in.Next = next
	return in
}

type retryInbound struct {
	interceptor.ActivityInboundInterceptorBase
	hook *RetryHook
}

// ErrTypeLedgerUnavailable marks an attempt that failed because the shared
// retry state could not be read. No leaf call left the process for it.
const ErrTypeLedgerUnavailable = "LedgerUnavailable"

func (i *retryInbound) ExecuteActivity(ctx context.Context, in *interceptor.ExecuteActivityInput) (any, error) {
	var plan RetryPlan
	found := false
	for _, arg := range in.Args {
		if p, ok := arg.(planned); ok {
			plan, found = p.retryPlan(), true
		}
	}
	if !found || plan.Dependency == "" {
		return i.Next.ExecuteActivity(ctx, in)
	}
	h, info := i.hook, activity.GetInfo(ctx)
	attempt := int(info.Attempt)
	chargeKey := fmt.Sprintf("%s/%s/%d", info.WorkflowExecution.ID, info.ActivityID, attempt)

	state, err := h.store.BreakerAllow(ctx, plan.Dependency, h.cfg.Breaker)
	if err != nil {
		return nil, temporal.NewApplicationErrorWithOptions(err.Error(), ErrTypeLedgerUnavailable,
			temporal.ApplicationErrorOptions{Details: []any{CallFailure{Attempt: attempt}}})
	}
	if state == budget.BreakerOpen {
		h.observe(plan, budget.DenyCircuitOpen)
		return nil, i.deny(attempt, budget.DenyCircuitOpen,
			fmt.Sprintf("circuit breaker for %s is open; the call was not made", plan.Dependency))
	}
	probe := state == ledger.BreakerProbe

	result, err := i.Next.ExecuteActivity(ctx, in)
	if err == nil {
		if err := h.store.RecordSuccess(context.WithoutCancel(ctx), chargeKey, h.cfg.Bucket, h.cfg.BucketConfig.SuccessBonus, plan.Dependency, probe); err != nil {
			activity.GetLogger(ctx).Warn("retry hook: could not deposit the success bonus", "key", chargeKey, "error", err)
		}
		return result, nil
	}

	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) && appErr.NonRetryable() {
		// The request itself is wrong (or refused): not the dependency's
		// fault, so the breaker does not count it, and nothing is paid.
		return nil, temporal.NewNonRetryableApplicationError(appErr.Message(), appErr.Type(), nil, CallFailure{Attempt: attempt})
	}
	errType, message := ErrTypeTransient, err.Error()
	var retryAfter time.Duration
	if appErr != nil {
		errType, message, retryAfter = appErr.Type(), appErr.Message(), appErr.NextRetryDelay()
	}
	if blamesDependency(errType) {
		if _, err := h.store.BreakerRecord(context.WithoutCancel(ctx), plan.Dependency, false, probe, h.cfg.Breaker); err != nil {
			activity.GetLogger(ctx).Warn("retry hook: could not report a failure to the breaker", "dependency", plan.Dependency, "error", err)
		}
	}

	decision, delay, payErr := i.pay(ctx, plan, attempt, chargeKey, retryAfter)
	if payErr != nil {
		// The shared state is unreachable, so nobody can pay. The attempt
		// fails retryably: while the ledger is down no later attempt can
		// leave the process either (the breaker gate and the action claim
		// come first), so this retry adds no load downstream.
		activity.GetLogger(ctx).Error("retry hook: could not pay for a retry", "key", chargeKey, "error", payErr)
		return nil, temporal.NewApplicationErrorWithOptions(message, ErrTypeLedgerUnavailable, temporal.ApplicationErrorOptions{
			NextRetryDelay: delay, Details: []any{CallFailure{Attempt: attempt}},
		})
	}
	h.observe(plan, decision)
	if decision != budget.Granted {
		return nil, i.deny(attempt, decision, message)
	}
	return nil, temporal.NewApplicationErrorWithOptions(message, errType, temporal.ApplicationErrorOptions{
		NextRetryDelay: delay, Details: []any{CallFailure{Attempt: attempt}},
	})
}

// blamesDependency says whether a retryable failure of this type is the
// dependency's, for its circuit breaker. A ledger that could not be reached
// or a key held by another attempt says nothing about the tool: nothing
// was sent to it.
func blamesDependency(errType string) bool {
	return errType != ErrTypeLedgerUnavailable && errType != ErrTypeInFlight
}

// pay asks each budget in order: the per-call cap, the deadline against
// the backoff (checked before paying, so a refused nap costs no token),
// then in one atomic ledger call the per-tool cap, the run ratio, the open
// breaker and the fleet bucket.
func (i *retryInbound) pay(ctx context.Context, plan RetryPlan, attempt int, chargeKey string, retryAfter time.Duration) (string, time.Duration, error) {
	h := i.hook
	if attempt >= plan.MaxAttempts {
		return budget.DenyCallAttempts, 0, nil
	}
	backoff := budget.Backoff{Base: plan.BackoffBase, Cap: plan.BackoffCap}
	timeLeft := time.Duration(-1)
	if !plan.Deadline.IsZero() {
		timeLeft = max(0, plan.Deadline.Sub(h.cfg.Now())) // negative would read as "no deadline"
	}
	delay, fits := budget.RetryDelay(backoff.FullJitter(attempt-1, h.cfg.Random), retryAfter, timeLeft)
	if !fits {
		return budget.DenyDeadline, 0, nil
	}
	delay = max(delay, time.Millisecond) // zero would mean "use the policy's interval"
	decision, err := h.store.DecideRetry(ctx, ledger.RetryRequest{
		ChargeKey: chargeKey, WorkflowID: activity.GetInfo(ctx).WorkflowExecution.ID, Tool: plan.Tool,
		ToolCap: plan.ToolRetryCap, RunAllowance: plan.RunAllowance, Bucket: h.cfg.Bucket, Dependency: plan.Dependency,
	})
	return decision, delay, err
}

var denialText = map[string]string{
	budget.DenyCallAttempts: "the per-call attempt cap is reached",
	budget.DenyToolCap:      "the tool's retry cap for this run is reached",
	budget.DenyRunRatio:     "the run's retry budget (ratio of calls, with a floor) is spent",
	budget.DenyCircuitOpen:  "the dependency's circuit breaker is open",
	budget.DenyFleetBucket:  "the fleet-wide retry budget is exhausted",
	budget.DenyDeadline:     "the backoff would outlive the run's deadline",
}

func (i *retryInbound) deny(attempt int, reason, cause string) error {
	return temporal.NewNonRetryableApplicationError(
		fmt.Sprintf("retry denied: %s: %s", denialText[reason], cause), reason, nil,
		CallFailure{Attempt: attempt, Denial: reason})
}

func (h *RetryHook) observe(plan RetryPlan, decision string) {
	if h.cfg.Observe != nil {
		h.cfg.Observe(plan, decision)
	}
}

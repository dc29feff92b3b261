package activities

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/temporal"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/budget"
	"github.com/agentsaga/agentsaga/internal/keyed"
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/internal/retrydelay"
	"github.com/agentsaga/agentsaga/internal/textclip"
	"github.com/agentsaga/agentsaga/internal/wire"
)

// retryStore is the shared state the hook pays with: the ledger in
// production.
type retryStore interface {
	DecideRetry(ctx context.Context, req ledgerdb.RetryRequest) (string, error)
	DepositUnlessFull(ctx context.Context, bucket string, amount float64) (bool, error)
	BreakerGate(ctx context.Context, dependency string, cfg budget.BreakerConfig) (ledgerdb.Gate, error)
	BreakerGateFirstSend(ctx context.Context, dependency string, cfg budget.BreakerConfig) (ledgerdb.Gate, error)
	BreakerReport(ctx context.Context, dependency string, success, probe bool, cfg budget.BreakerConfig) (ledgerdb.BreakerReport, error)
	BreakerPace(ctx context.Context, dependency string, cfg budget.BreakerConfig, successes int) (time.Time, error)
}

// RetryHookConfig names the fleet bucket and shapes the breakers.
type RetryHookConfig struct {
	Bucket       string
	BucketConfig budget.BucketConfig
	Breaker      budget.BreakerConfig
	// Random returns a float in [0, 1) for jitter; nil means math/rand/v2.
	Random func() float64
	// Now is the wall clock, for the deadline check and the age of a
	// closed breaker's answer; nil means time.Now.
	Now func() time.Time
	// Observe, when set, is told every decision (for metrics and tests).
	Observe func(plan agentsagatype.RetryPlan, decision string)
}

// RetryHook is the activity interceptor that makes every retry pay. It is
// the only place a retry is decided: Temporal's retry policy is the loop,
// and this hook turns each failure into either a retry with a jittered
// delay, paid for by every budget in order, or a non-retryable error whose
// type names the budget that said no.
type RetryHook struct {
	interceptor.WorkerInterceptorBase
	store    retryStore
	cfg      RetryHookConfig
	deposits *depositor
	closed   *closedBreakers
	released *releasedSuccesses
}

// NewRetryHook returns the hook; register it in worker.Options.Interceptors.
func NewRetryHook(store retryStore, cfg RetryHookConfig) *RetryHook {
	if cfg.Random == nil {
		cfg.Random = rand.Float64
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &RetryHook{store: store, cfg: cfg, deposits: newDepositor(store.DepositUnlessFull, depositLag),
		closed: newClosedBreakers(breakerStaleness, cfg.Now), released: &releasedSuccesses{}}
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

func (i *retryInbound) ExecuteActivity(ctx context.Context, in *interceptor.ExecuteActivityInput) (any, error) {
	var plan agentsagatype.RetryPlan
	found := false
	for _, arg := range in.Args {
		// A call sent again after waiting for a breaker carries the
		// idempotency key of its first activity.
		if p, firstKey, ok := wire.CallPlan(arg); ok {
			plan, found = p, true
			ctx = keyed.WithCallKey(ctx, firstKey)
		}
	}
	if found && recordedCall(in.Args) {
		return i.recorded(ctx, in)
	}
	if !found || plan.Dependency == "" {
		result, err := i.Next.ExecuteActivity(ctx, in)
		return result, i.unpaid(ctx, found, err)
	}
	h, info := i.hook, activity.GetInfo(ctx)
	attempt := int(info.Attempt)
	chargeKey := fmt.Sprintf("%s/%s/%d", info.WorkflowExecution.ID, info.ActivityID, attempt)

	gate, err := h.gate(ctx, plan)
	if err != nil {
		f := failure{attempt: attempt, errType: wire.ErrTypeLedgerUnavailable, message: err.Error(), decision: "retry: the circuit breaker could not be read"}
		return nil, i.fail(ctx, f, temporal.ApplicationErrorOptions{})
	}
	if gate.State == budget.BreakerOpen {
		h.observe(plan, budget.DenyCircuitOpen)
		// The call was not made: as expected as the failures that opened it.
		// Its release slot is its own (the gate hands out one per refusal),
		// so it needs no jitter: the slots already spread the calls parked
		// behind this breaker.
		f := failure{attempt: attempt, errType: budget.DenyCircuitOpen, benign: true, atGate: true,
			message: fmt.Sprintf("circuit breaker for %s is open; the call was not made", plan.Dependency),
			retryAt: gate.RetryAt, openSince: gate.OpenSince}
		return nil, i.deny(ctx, f, budget.DenyCircuitOpen)
	}
	probe := gate.State == ledgerdb.BreakerProbe
	paced := plan.Released && gate.State == budget.BreakerClosed
	if paced {
		h.awaitPace(ctx, plan)
	}

	result, err := i.Next.ExecuteActivity(ctx, in)
	if err == nil {
		h.deposits.add(h.cfg.Bucket, h.cfg.BucketConfig.SuccessBonus)
		if paced {
			// Evidence for the adaptive release rate, carried by this
			// worker's next booking in the line: no statement of its own.
			h.released.add(plan.Dependency)
		}
		if probe || gate.Failures > 0 {
			// The probe's success closes the breaker, and any success ends
			// a streak of failures that would otherwise judge a flapping
			// dependency down: at once, not with the deposits. A healthy
			// dependency's successes cost no statement.
			if _, err := h.store.BreakerReport(context.WithoutCancel(ctx), plan.Dependency, true, probe, h.cfg.Breaker); err != nil {
				activity.GetLogger(ctx).Warn("retry hook: could not report a success to the breaker", "key", chargeKey, "error", err)
			} else {
				h.closed.remember(plan.Dependency, false)
			}
		}
		return result, nil
	}

	c := classify(err)
	f := failure{attempt: attempt, errType: c.errType, message: c.message, status: c.status}
	retryAfter := c.retryAfter
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) {
		f.benign = isBenign(appErr) || expected(appErr.Type())
	}
	if errors.Is(ctx.Err(), context.Canceled) {
		// The run was cancelled or the worker is stopping: not the
		// dependency's failure, and there is nothing to pay for.
		f.cancelled, f.benign, f.decision = true, true, "none: the attempt was cancelled"
		return nil, i.fail(ctx, f, temporal.ApplicationErrorOptions{NonRetryable: appErr != nil && appErr.NonRetryable()})
	}
	if appErr != nil && appErr.Type() == budget.DenyQuota {
		// The provider's quota had no room: not the dependency's failure,
		// so the breaker does not count it, and the workflow waits for the
		// quota instead of a retry, which nobody pays for.
		f.benign = true
		if wait := (*keyed.QuotaWaitError)(nil); errors.As(err, &wait) {
			f.retryAt, f.atGate = wait.RetryAt, !wait.Sent
		}
		return nil, i.deny(ctx, f, budget.DenyQuota)
	}
	if appErr != nil && appErr.Type() == budget.DenySpendCap {
		// The account's cap cannot pay for the turn or tool call: nothing was sent, the
		// dependency is not to blame, and the run does what the cap says.
		f.benign, f.atGate = true, true
		if capped := (*keyed.SpendCapWaitError)(nil); errors.As(err, &capped) {
			f.retryAt, f.spend = capped.Refusal.Resets, &capped.Refusal
		}
		return nil, i.deny(ctx, f, budget.DenySpendCap)
	}
	if appErr != nil && appErr.NonRetryable() {
		// The request itself is wrong (or refused): not the dependency's
		// fault, so the breaker does not count it, and nothing is paid.
		f.decision = "not retryable"
		return nil, i.fail(ctx, f, temporal.ApplicationErrorOptions{NonRetryable: true})
	}
	breakerOpen, probeAt := false, time.Time{}
	if blamesDependency(f.errType) {
		report, err := h.store.BreakerReport(context.WithoutCancel(ctx), plan.Dependency, false, probe, h.cfg.Breaker)
		if err != nil {
			activity.GetLogger(ctx).Warn("retry hook: could not report a failure to the breaker", "dependency", plan.Dependency, "error", err)
		}
		switch {
		case err != nil:
		case report.State == budget.BreakerClosed:
			// A streak of failures has begun or grown: this worker's next
			// success ends it.
			h.closed.remember(plan.Dependency, true)
		default:
			h.closed.forget(plan.Dependency) // this worker's next call asks the ledger
		}
		breakerOpen, probeAt = report.State == budget.BreakerOpen, report.RetryAt
		// The outage's start, so that a call that waits alone (it meets
		// only its own failed probes, never the gate) is measured against
		// escalate.after_breaker_open_seconds by the outage, as parked
		// calls are.
		f.openSince = report.OpenSince
	}
	if ctx.Err() != nil {
		// The attempt timed out. Temporal's policy retries it (the SDK
		// drops what the attempt returns), and the ledger cannot be asked
		// on a context that has ended.
		f.benign, f.decision = true, "none: the attempt timed out; Temporal's retry policy decides"
		return nil, i.fail(ctx, f, temporal.ApplicationErrorOptions{})
	}

	decision, delay, payErr := i.pay(ctx, plan, attempt, chargeKey, retryAfter, breakerOpen)
	if payErr != nil {
		// The shared state is unreachable, so nobody can pay. The attempt
		// fails retryably: while the ledger is down no later attempt can
		// leave the process either (the breaker gate and the action claim
		// come first), so this retry adds no load downstream.
		f.errType, f.benign, f.decision = wire.ErrTypeLedgerUnavailable, false, "retry: the retry budget could not be read"
		f.payErr = payErr
		return nil, i.fail(ctx, f, temporal.ApplicationErrorOptions{NextRetryDelay: delay})
	}
	h.observe(plan, decision)
	if decision == budget.DenyCircuitOpen {
		// The call waits for the breaker's next probe: the report says when
		// (a probe interval after its last opening, which grows while the
		// outage lasts, so that a failed probe's call does not come back
		// every cooldown for nothing); without it (the report failed, or
		// the bucket's statement found the breaker open), a cooldown, the
		// shortest interval, from now.
		back := h.cfg.Now().Add(h.cfg.Breaker.Cooldown)
		if !probeAt.IsZero() {
			back = probeAt
		}
		f.retryAt = back.Add(h.releaseJitter())
	}
	if decision != budget.Granted {
		return nil, i.deny(ctx, f, decision)
	}
	f.decision = "retry in " + delay.Round(time.Millisecond).String()
	return nil, i.fail(ctx, f, temporal.ApplicationErrorOptions{NextRetryDelay: delay})
}

// failure is one failed attempt as the hook reports it: one log line, and
// the error Temporal gets.
type failure struct {
	attempt   int
	errType   string
	status    int // the HTTP status, when there was one
	message   string
	decision  string
	benign    bool // expected: logged at WARN, and benign for the SDK
	cancelled bool // logged at INFO
	payErr    error
	denial    string             // the budget that refused a retry: the error's type
	retryAt   time.Time          // when a call refused by an open breaker may go out
	openSince time.Time          // when the outage opened the breaker that refused it
	atGate    bool               // the breaker refused the attempt before it was made
	spend     *wire.SpendRefusal // the spend cap that refused a turn
}

// fail logs the attempt's one line and returns its error, with the attempt
// in its details and benign when the failure was expected.
func (i *retryInbound) fail(ctx context.Context, f failure, opts temporal.ApplicationErrorOptions) error {
	i.report(ctx, f)
	opts.Details = []any{wire.CallFailure{Attempt: f.attempt, Denial: f.denial, RetryAt: f.retryAt, AtGate: f.atGate,
		OpenSince: f.openSince, Spend: f.spend}}
	if f.benign {
		opts.Category = temporal.ApplicationErrorCategoryBenign
	}
	message, errType := f.message, f.errType
	if f.denial != "" {
		message, errType = fmt.Sprintf("retry denied: %s: %s", denialText[f.denial], f.message), f.denial
	}
	return temporal.NewApplicationErrorWithOptions(message, errType, opts)
}

// report logs one line for a failed attempt: at INFO when it was
// cancelled, at ERROR when the retry budget could not be read (an
// operator should look at the ledger), at WARN otherwise. An unexpected
// failure is also logged at ERROR by the SDK ("Activity error.").
func (i *retryInbound) report(ctx context.Context, f failure) {
	fields := []any{"key", keyed.CallKey(ctx), "attempt", f.attempt, "type", f.errType}
	if f.status != 0 {
		fields = append(fields, "status", f.status)
	}
	fields = append(fields, "decision", f.decision, "error", textclip.Clip(f.message, 300))
	log := activity.GetLogger(ctx)
	switch {
	case f.cancelled:
		log.Info("retry hook: the attempt was cancelled", fields...)
	case f.payErr != nil:
		log.Error("retry hook: could not pay for a retry", append(fields, "ledger_error", f.payErr)...)
	default:
		log.Warn("retry hook: the call failed", fields...)
	}
}

// unpaid handles the failure of an activity the hook does not pay for: a
// call without a dependency (a compensation, which has its own retry
// policy) gets its one line, and any activity that was cancelled, or that
// failed as expected, is benign for the SDK.
func (i *retryInbound) unpaid(ctx context.Context, call bool, err error) error {
	if err == nil {
		return nil
	}
	cancelled := errors.Is(ctx.Err(), context.Canceled)
	if call || cancelled {
		c := classify(err)
		f := failure{attempt: int(activity.GetInfo(ctx).Attempt), errType: c.errType, message: c.message, status: c.status, cancelled: cancelled}
		f.decision = "retry by the activity's retry policy"
		if !c.retryable {
			f.decision = "not retryable"
		}
		if cancelled {
			f.decision = "none: the attempt was cancelled"
		}
		i.report(ctx, f)
	}
	return quiet(err, cancelled)
}

// statusOf is the HTTP status an activity error carries in its details,
// or 0.
func statusOf(appErr *temporal.ApplicationError) int {
	var status int
	if !appErr.HasDetails() || appErr.Details(&status) != nil {
		return 0
	}
	return status
}

// blamesDependency says whether a retryable failure of this type is the
// dependency's, for its circuit breaker. A ledger that could not be reached
// or a key held by another attempt says nothing about the tool: nothing
// was sent to it.
func blamesDependency(errType string) bool {
	return errType != wire.ErrTypeLedgerUnavailable && errType != wire.ErrTypeInFlight
}

// pay asks each budget in order: the per-call cap, the deadline against
// the backoff (checked before paying, so a refused nap costs no token),
// then in one atomic ledger call the per-tool cap, the run ratio, the open
// breaker and the fleet bucket. A dependency that is down (this failure
// opened its breaker, or found it open) comes before all of them: the call
// waits for the dependency (the workflow parks it) instead of failing
// against it, whatever its attempts or the run's ratio would have said, and
// waiting costs no retry token.
func (i *retryInbound) pay(ctx context.Context, plan agentsagatype.RetryPlan, attempt int, chargeKey string, retryAfter time.Duration, breakerOpen bool) (string, time.Duration, error) {
	h := i.hook
	if breakerOpen {
		return budget.DenyCircuitOpen, 0, nil
	}
	if attempt >= plan.MaxAttempts {
		return budget.DenyCallAttempts, 0, nil
	}
	backoff := budget.Backoff{Base: plan.BackoffBase, Cap: plan.BackoffCap}
	timeLeft := time.Duration(-1)
	if !plan.Deadline.IsZero() {
		timeLeft = max(0, plan.Deadline.Sub(h.cfg.Now())) // negative would read as "no deadline"
	}
	delay, fits := retrydelay.Fit(retrydelay.FullJitter(backoff, attempt-1, h.cfg.Random), retryAfter, timeLeft)
	if !fits {
		return budget.DenyDeadline, 0, nil
	}
	delay = max(delay, time.Millisecond) // zero would mean "use the policy's interval"
	decision, err := h.store.DecideRetry(ctx, ledgerdb.RetryRequest{
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
	budget.DenyQuota:        "the model's quota has no room; the turn waits for it",
	budget.DenySpendCap:     "the account's spend cap cannot pay for the call",
}

// deny fails the call with the budget that said no as its type. It is as
// benign as the failure it refused to retry.
func (i *retryInbound) deny(ctx context.Context, f failure, reason string) error {
	markDenial(ctx, reason)
	f.denial, f.decision = reason, "denied: "+reason
	return i.fail(ctx, f, temporal.ApplicationErrorOptions{NonRetryable: true})
}

func (h *RetryHook) observe(plan agentsagatype.RetryPlan, decision string) {
	if h.cfg.Observe != nil {
		h.cfg.Observe(plan, decision)
	}
}

// releaseJitter spreads the retries an opening breaker refused (the calls
// that were in flight when it opened) over half its cooldown after the
// probe; at the gate they take release slots like every parked call.
func (h *RetryHook) releaseJitter() time.Duration {
	return time.Duration(h.cfg.Random() * float64(h.cfg.Breaker.Cooldown/2))
}

// awaitPace holds a call released from an open breaker's queue, now that
// the breaker has closed, until its place in the dependency's paced line
// (ledgerdb.Store.BreakerPace): a worker that lagged would otherwise send
// the calls of several release slots at once, more than the dependency
// takes, and open the breaker again. The booking carries the released
// calls this worker saw succeed since its last one, which raise the
// dependency's adaptive release rate. It heartbeats while it waits, and
// never waits past the attempt's deadline. Pacing is a courtesy: when the
// line cannot be read, the call goes, and the successes wait for the next
// booking.
func (h *RetryHook) awaitPace(ctx context.Context, plan agentsagatype.RetryPlan) {
	cfg := h.cfg.Breaker
	cfg.Release = plan.ReleaseInterval
	successes := h.released.take(plan.Dependency)
	at, err := h.store.BreakerPace(ctx, plan.Dependency, cfg, successes)
	if err != nil {
		h.released.addN(plan.Dependency, successes)
		activity.GetLogger(ctx).Warn("retry hook: could not read the dependency's paced line; the released call goes at once", "dependency", plan.Dependency, "error", err)
		return
	}
	until := at
	if deadline, ok := ctx.Deadline(); ok {
		until = minTime(until, deadline.Add(-time.Second))
	}
	for wait := until.Sub(h.cfg.Now()); wait > 0; wait = until.Sub(h.cfg.Now()) {
		activity.RecordHeartbeat(ctx)
		select {
		case <-ctx.Done():
			return
		case <-time.After(min(wait, time.Second)):
		}
	}
}

// releasedSuccesses counts, per dependency, the released calls (ones that
// took a place in the paced line) that succeeded on this worker since its
// last booking in that line, which reports them (ledgerdb.Store.BreakerPace).
// The successes after a worker's last booking of a drain wait for its
// next booking, in a later drain, and count only if calls wait in the line
// then: the adaptive rate rises slower than the evidence allows, never
// faster.
type releasedSuccesses struct {
	mu sync.Mutex
	n  map[string]int
}

func (r *releasedSuccesses) add(dependency string) { r.addN(dependency, 1) }

func (r *releasedSuccesses) addN(dependency string, n int) {
	if n <= 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.n == nil {
		r.n = map[string]int{}
	}
	r.n[dependency] += n
}

// take returns the dependency's count and starts it again from zero.
func (r *releasedSuccesses) take(dependency string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := r.n[dependency]
	delete(r.n, dependency)
	return n
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// gate asks the dependency's breaker whether the call may go out. A closed
// answer is remembered for breakerStaleness, so that the calls of a healthy
// dependency cost no statement for it; an open or probing breaker is asked
// every time. A closed breaker whose dependency is in a streak of failures
// is remembered as such, so that the next success here ends the streak.
func (h *RetryHook) gate(ctx context.Context, plan agentsagatype.RetryPlan) (ledgerdb.Gate, error) {
	dependency := plan.Dependency
	if fresh, streak := h.closed.fresh(dependency); fresh {
		gate := ledgerdb.Gate{State: budget.BreakerClosed}
		if streak {
			gate.Failures = 1 // at least: enough to report the next success
		}
		return gate, nil
	}
	// A dependency that declares its rate gets its parked calls back at it.
	cfg := h.cfg.Breaker
	cfg.Release = plan.ReleaseInterval
	ask := h.store.BreakerGate
	if !plan.Released {
		// A first send that an open breaker refuses is fresh demand, which
		// the backlog's release slots leave room for.
		ask = h.store.BreakerGateFirstSend
	}
	gate, err := ask(ctx, dependency, cfg)
	if err == nil && gate.State == budget.BreakerClosed {
		h.closed.remember(dependency, gate.Failures > 0)
	}
	return gate, err
}

// recordedCall says whether the activity is a call of a recorded tool.
func recordedCall(args []any) bool {
	for _, arg := range args {
		switch req := arg.(type) {
		case wire.ToolCallRequest:
			return req.Tool.Kind == agentsagatype.ToolKindRecorded
		case *wire.ToolCallRequest:
			return req != nil && req.Tool.Kind == agentsagatype.ToolKindRecorded
		}
	}
	return false
}

// recorded runs a call of a recorded tool (a replay's): it reaches no
// dependency, so no breaker gates it and it pays and earns no retry
// tokens, and its failure, read from the recording, is never retried. The
// attempts it took in the recording travel in the failure's details, as a
// paid call's do.
func (i *retryInbound) recorded(ctx context.Context, in *interceptor.ExecuteActivityInput) (any, error) {
	result, err := i.Next.ExecuteActivity(ctx, in)
	if err == nil {
		return result, nil
	}
	c := classify(err)
	f := failure{attempt: int(activity.GetInfo(ctx).Attempt), errType: c.errType, message: c.message, benign: true,
		decision: "not retryable: answered from a recording"}
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) {
		f.errType, f.message = appErr.Type(), appErr.Message()
	}
	if recorded := (*recordedFailure)(nil); errors.As(err, &recorded) {
		f.attempt = max(recorded.attempts, 1)
	}
	return nil, i.fail(ctx, f, temporal.ApplicationErrorOptions{NonRetryable: true})
}

// Package keyed owns keyed execution: one attempt of a call that must take
// effect once per idempotency key claims the key in the ledger (waiting
// while another attempt holds it), runs under its lease, and stores its
// outcome, or hands back what an earlier attempt stored; and the attempt's
// idempotency key ([CallKey]). Package activities imports it, and supplies
// the call and the function that classifies the call's errors for
// Temporal's retry; the root package only reads the key (agentsaga.CallKey).
package keyed

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/budget"
	"github.com/agentsaga/agentsaga/internal/lease"
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/internal/runevents"
	"github.com/agentsaga/agentsaga/internal/wire"
)

// Call is one attempt of a call that must take effect once per
// idempotency key: a tool call or a model turn.
type Call struct {
	Action       ledgerdb.ActionRequest
	Kind, Target string // the leaf call's
	// Turn, for a model turn, is what its claim writes and reads: the
	// messages the workflow appends, and the conversation it sends.
	Turn *ledgerdb.TurnRead
	// Run makes the call under the attempt's lease, given the claim (for a
	// model turn, the conversation it read). It returns the output to store
	// and, optionally, the conversation message to record with it.
	Run func(ctx context.Context, claim ledgerdb.Claim) (string, *ledgerdb.Message, error)
	// Refused, when set, reads a successful output as a refusal: a 200
	// whose meaning is "no", stored like a 4xx and never retried.
	Refused func(output string) (string, bool)
	// Published, when set, is read once the call returned: an event of
	// the call for a successful attempt's settle to publish in its own
	// statement (a streamed reply's last text, ledgerdb.AttemptEnd).
	Published func() *runevents.Event
	// Quota, for a model turn admitted on a quota (Turn.Quota), is what
	// the turn's response said of it, given the admission and the call's
	// error: settled with the attempt.
	Quota func(admission ledgerdb.Admission, callErr error) *ledgerdb.QuotaAnswer
	// Spend, for a model turn charged to an account (Turn.Spend), is what
	// the attempt cost by the usage the provider reported (0 when it
	// reported none): settled with the attempt.
	Spend func(callErr error) float64
}

// SpendCapRefusal is the refusal of a model turn its account's spend cap
// cannot pay for: not retryable (the run does what the cap says), and
// saying which cap and when it resets (its cause, a *SpendCapWaitError,
// which the retry hook reads).
func SpendCapRefusal(message string, refusal wire.SpendRefusal) error {
	return temporal.NewNonRetryableApplicationError(message, budget.DenySpendCap, &SpendCapWaitError{Refusal: refusal})
}

// SpendCapWaitError carries the cap that refused a turn.
type SpendCapWaitError struct{ Refusal wire.SpendRefusal }

func (e *SpendCapWaitError) Error() string { return e.Refusal.Reason() }

// settlesSpend says whether c's settle settles a reservation, and what
// the attempt cost.
func (c Call) settlesSpend(callErr error) (bool, float64) {
	if c.Turn == nil || c.Turn.Spend == nil || c.Spend == nil {
		return false, 0
	}
	return true, c.Spend(callErr)
}

// QuotaWait is the refusal of a model turn its quota had no room for: not
// retryable by Temporal (the workflow waits for it), and saying when to
// come back (its cause, a *QuotaWaitError, which the retry hook reads).
// sent says whether a request left (answered 429) or not (refused at
// admission).
func QuotaWait(message string, retryAt time.Time, sent bool) error {
	return temporal.NewNonRetryableApplicationError(message, budget.DenyQuota, &QuotaWaitError{RetryAt: retryAt, Sent: sent})
}

// QuotaWaitError says when a turn its quota refused may go out again, and
// whether the refused attempt sent a request.
type QuotaWaitError struct {
	RetryAt time.Time
	Sent    bool
}

func (e *QuotaWaitError) Error() string {
	return "the quota has room at " + e.RetryAt.UTC().Format(time.RFC3339Nano)
}

// quotaAnswer is what c's response said of its admitted quota, or nil.
func (c Call) quotaAnswer(claim ledgerdb.Claim, callErr error) *ledgerdb.QuotaAnswer {
	if c.Quota == nil || !claim.Quota.Admitted {
		return nil
	}
	return c.Quota(claim.Quota, callErr)
}

// Once executes c at most once for its key: it claims the key (waiting,
// heartbeating, while another attempt's lease is live), holds the lease
// while the call runs, and stores the outcome, or returns what an earlier
// attempt stored (replayed). Its errors are activity errors, typed.
//
// A successful attempt costs two statements: the claim, which also records
// the attempt's leaf call (and, for a model turn, writes the appended
// messages and reads the conversation), and the completion, which also ends
// the leaf call (and records the conversation message). A call that
// outlives a third of its lease adds one renewal per third.
//
// classify turns the call's own error into the activity error Temporal
// retries by (or does not).
func Once(ctx context.Context, store *ledgerdb.Store, c Call, classify func(error) error) (output string, replayed bool, err error) {
	info := activity.GetInfo(ctx)
	log := activity.GetLogger(ctx)
	key := c.Action.Key
	leaseFor := lease.Length(info)
	leaf := ledgerdb.LeafCall{WorkflowID: info.WorkflowExecution.ID, ActivityID: info.ActivityID, Key: key,
		Attempt: int(info.Attempt), Kind: c.Kind, Target: c.Target}
	claimedAt := time.Now()
	claim, err := claimKey(ctx, store, c, leaf, leaseFor)
	switch {
	case errors.Is(err, ledgerdb.ErrConflict):
		return "", false, temporal.NewNonRetryableApplicationError(err.Error(), wire.ErrTypeConflict, nil)
	case errors.Is(err, ledgerdb.ErrFenced):
		// The retry hook logs the refusal at WARN, once, with its decision.
		log.Debug("call: the key is fenced; nothing is sent", "key", key, "attempt", info.Attempt, "error", err)
		return "", false, temporal.NewNonRetryableApplicationError(err.Error(), wire.ErrTypeFenced, nil)
	case errors.Is(err, ledgerdb.ErrInFlight):
		return "", false, temporal.NewApplicationError(err.Error(), wire.ErrTypeInFlight)
	case errors.Is(err, ledgerdb.ErrQuotaWait):
		return "", false, QuotaWait(err.Error(), claim.Quota.RetryAt, false)
	case errors.Is(err, ledgerdb.ErrSpendCap):
		var capped *ledgerdb.SpendCapError
		errors.As(err, &capped)
		return "", false, SpendCapRefusal(err.Error(), capped.Reservation.Refusal(capped.USD))
	case errors.Is(err, ledgerdb.ErrQuotaTooLarge):
		return "", false, temporal.NewNonRetryableApplicationError(err.Error(), wire.ErrTypeModelConfig, nil)
	case err != nil:
		return "", false, temporal.NewApplicationError(err.Error(), wire.ErrTypeLedgerUnavailable)
	}
	if !claim.Execute {
		return storedOutcome(claim.Action)
	}

	held := lease.Hold(ctx, store, key, claim.Action.Attempts, leaseFor, claimedAt)
	defer held.Stop()
	if err := held.Confirm(); err != nil {
		// Paused between the claim and the call for longer than the lease:
		// another attempt may hold the key now, so nothing is sent, and the
		// leaf call the claim recorded did not happen.
		log.Warn("call: the attempt lost its key before the call; nothing is sent", "key", key, "attempt", info.Attempt, "error", err)
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		if err := store.DropLeafCall(dctx, claim.LeafCallID); err != nil {
			log.Warn("ledger: could not drop the leaf call of an attempt that sent nothing", "key", key, "error", err)
		}
		cancel()
		if errors.Is(err, ledgerdb.ErrLeaseLost) {
			return "", false, temporal.NewNonRetryableApplicationError(err.Error(), wire.ErrTypeFenced, nil)
		}
		return "", false, temporal.NewApplicationError(err.Error(), wire.ErrTypeLedgerUnavailable)
	}

	output, msg, callErr := c.Run(held.Context(), claim)
	if callErr != nil {
		if cause := context.Cause(held.Context()); held.Context().Err() != nil && ctx.Err() == nil && cause != nil {
			callErr = fmt.Errorf("%w (the attempt stopped: %w)", callErr, cause)
		}
		activityErr := classify(callErr)
		errType, permanent := "", false
		var appErr *temporal.ApplicationError
		if errors.As(activityErr, &appErr) {
			// A quota wait is not the call's outcome: the turn goes out
			// again under its key once the quota has room.
			errType, permanent = appErr.Type(), appErr.NonRetryable() && appErr.Type() != budget.DenyQuota
		}
		// Recorded even when the attempt was cancelled, so the next attempt
		// can claim the key at once instead of waiting out the lease.
		end := ledgerdb.FailedAttempt(callErr.Error(), errType, permanent)
		end.LeafCallID, end.CallErr, end.Quota = claim.LeafCallID, callErr, c.quotaAnswer(claim, callErr)
		end.Spend, end.SpendUSD = c.settlesSpend(callErr)
		if _, err := store.SettleAttempt(context.WithoutCancel(ctx), key, claim.Action.Attempts, end); err != nil {
			logRefusedWrite(log, key, err)
		}
		return "", false, activityErr
	}
	if c.Refused != nil {
		if message, refused := c.Refused(output); refused {
			end := ledgerdb.FailedAttempt(message, wire.ErrTypeRefusal, true)
			end.LeafCallID = claim.LeafCallID // the call itself succeeded
			if err := recordAfterEffect(ctx, key, func(ctx context.Context) error {
				_, err := store.SettleAttempt(ctx, key, claim.Action.Attempts, end)
				return err
			}); err != nil {
				logRefusedWrite(log, key, err)
			}
			return "", false, temporal.NewNonRetryableApplicationError(message, wire.ErrTypeRefusal, nil)
		}
	}
	var stored agentsagatype.Action
	settles, cost := c.settlesSpend(nil)
	var published *runevents.Event
	if c.Published != nil {
		published = c.Published()
	}
	err = recordAfterEffect(ctx, key, func(ctx context.Context) (err error) {
		stored, err = store.SettleAttempt(ctx, key, claim.Action.Attempts, ledgerdb.AttemptEnd{
			Status: agentsagatype.ActionCompleted, Result: output, Message: msg, LeafCallID: claim.LeafCallID,
			Quota: c.quotaAnswer(claim, nil), Spend: settles, SpendUSD: cost, Publish: published})
		return err
	})
	switch {
	case errors.Is(err, ledgerdb.ErrLeaseLost) && stored.Status == agentsagatype.ActionCompleted:
		// Another attempt completed the key first: its result is the one.
		logRefusedWrite(log, key, err)
		return stored.Result, true, nil
	case errors.Is(err, ledgerdb.ErrLeaseLost):
		logRefusedWrite(log, key, err)
		return "", false, temporal.NewNonRetryableApplicationError(err.Error(), wire.ErrTypeFenced, nil)
	case err != nil:
		// The call ran but its result is not stored. The next attempt waits
		// out this lease and runs it again under the same key, which an
		// HTTP tool deduplicates by its Idempotency-Key header.
		return "", false, temporal.NewApplicationError(err.Error(), wire.ErrTypeLedgerUnavailable)
	}
	return stored.Result, false, nil
}

// storedOutcome is what the first attempt that settled a key returned: its
// result, or its definitive error with the type it had (a refusal replays
// as a Refusal, so a duplicate delivery escalates too).
func storedOutcome(action agentsagatype.Action) (string, bool, error) {
	if action.Status == agentsagatype.ActionRejected {
		errType := action.ErrorType
		if errType == "" {
			errType = wire.ErrTypeRejected
		}
		return "", false, temporal.NewNonRetryableApplicationError(action.Error, errType, nil)
	}
	return action.Result, true, nil
}

// logRefusedWrite reports a ledger write after a tool call that did not
// land: refused because the attempt was superseded or fenced (a WARN: the
// ledger kept the truth of the attempt that holds the key), or failed.
func logRefusedWrite(log interface{ Warn(string, ...any) }, key string, err error) {
	if errors.Is(err, ledgerdb.ErrLeaseLost) {
		log.Warn("ledger: write refused: this attempt no longer holds the key", "key", key, "error", err)
		return
	}
	log.Warn("ledger: could not record a tool's outcome", "key", key, "error", err)
}

// recordAfterEffect makes a ledger write that follows a tool's side
// effect, retrying it while this attempt lasts. The effect has happened;
// an attempt that gave up at the first error would count against the
// call's attempts although the call succeeded, and a Postgres restart of a
// couple of seconds used up all three of a call that had executed
// (TestFaults/PostgresRestart found it), so the model was told a charge
// failed that had gone through. A write refused because the attempt lost
// its key is final.
func recordAfterEffect(ctx context.Context, key string, write func(context.Context) error) error {
	delay := 100 * time.Millisecond
	for {
		// Each write gets its own bound, so an unreachable host cannot
		// hold the attempt past its deadline.
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		err := write(wctx)
		cancel()
		if err == nil || errors.Is(err, ledgerdb.ErrLeaseLost) {
			return err
		}
		activity.GetLogger(ctx).Warn("ledger: could not record a tool's outcome; retrying while the attempt lasts", "key", key, "error", err)
		select {
		case <-ctx.Done():
			return err
		case <-time.After(delay):
		}
		delay = min(2*delay, 2*time.Second)
	}
}

// claimKey takes the key, waiting while another attempt holds it: a duplicate
// delivery should not spend one of the call's attempts. It heartbeats while
// it waits, so Temporal knows the attempt is alive, and a waiting attempt
// that Temporal has given up on (a heartbeat answered "not found", a paused
// worker that woke past its deadline) has its context cancelled and stops
// at once, with ErrInFlight. The claim records leaf, and a model turn's
// claim writes and reads its conversation (c.Turn), in the same statement.
func claimKey(ctx context.Context, store *ledgerdb.Store, c Call, leaf ledgerdb.LeafCall, lease time.Duration) (ledgerdb.Claim, error) {
	const poll = 250 * time.Millisecond
	for {
		var claim ledgerdb.Claim
		var err error
		if c.Turn != nil {
			claim, err = store.ClaimTurn(ctx, c.Action, leaf, lease, *c.Turn)
		} else {
			claim, err = store.ClaimCall(ctx, c.Action, leaf, lease)
		}
		if !errors.Is(err, ledgerdb.ErrInFlight) || ctx.Err() != nil {
			return claim, err
		}
		activity.RecordHeartbeat(ctx)
		select {
		case <-ctx.Done():
			return ledgerdb.Claim{}, err
		case <-time.After(poll):
		}
	}
}

package ledgerdb

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/coalesce"
	"github.com/agentsaga/agentsaga/internal/runevents"
	"github.com/agentsaga/agentsaga/internal/wire"
	"github.com/jackc/pgx/v5"
)

var (
	// ErrConflict: a different request was sent under an existing key.
	ErrConflict = errors.New("idempotency key reused with a different request")
	// ErrInFlight: another attempt holds the key and its lease is live. The
	// caller should fail retryably and try again later.
	ErrInFlight = errors.New("another attempt of this idempotency key is in flight")
	// ErrFenced: the key may not be claimed any more, by any attempt: the
	// workflow gave up on the call, the run's rollback reached it, or the
	// run ended. The error names which.
	ErrFenced = errors.New("idempotency key is fenced")
	// ErrLeaseLost: the attempt no longer holds the key (another attempt
	// took it over, or a rollback settled it after its lease lapsed), so it
	// may not act on it or write its outcome.
	ErrLeaseLost = errors.New("the attempt no longer holds the idempotency key")
)

// Why a key was fenced (Action.FenceReason).
const (
	FenceGivenUp  = "given-up"  // the workflow gave up on the call
	FenceRollback = "rollback"  // the run's compensation walk reached it
	FenceRunEnded = "run-ended" // the run ended (refused claims only; not stored)
)

// ActionRequest is a forward action about to be executed.
type ActionRequest struct {
	Key        string // workflow ID + "/" + activity ID
	WorkflowID string
	ActivityID string
	Tool       string
	Arguments  string
	// Compensation, when set, is registered in the same statement that
	// first claims the key: before the action is attempted.
	Compensation *wire.CompensationRequest
	// Compensates is the forward key this action undoes, for a
	// compensating action. A rollback fences forward actions, not these.
	Compensates string
	// Kind is ActionTool (the default) or ActionModel: a model turn, kept
	// under its key like a call so its reply is paid for once.
	Kind string
}

// Action kinds.
const (
	ActionTool  = "tool"
	ActionModel = "model"
)

// Fingerprint identifies the request: the tool and its arguments with JSON
// object keys in canonical order, so re-encoding the same arguments does not
// read as a different request, and numbers compared by value.
func (r ActionRequest) Fingerprint() string {
	args := r.Arguments
	if canonical, ok := canonicalArguments(args); ok {
		args = canonical
	}
	sum := sha256.Sum256([]byte(r.Tool + "\x00" + args))
	return hex.EncodeToString(sum[:])
}

// Claim is the outcome of ClaimAction.
type Claim struct {
	Action agentsagatype.Action
	// Execute is true when the caller now holds the key and must run the
	// action, then settle it with SettleAttempt under Action.Attempts, which
	// ends the attempt's leaf call (LeafCallID) and writes its message in
	// the same statement, as the activities do. CompleteAction and
	// FailAction are SettleAttempt without a leaf call or a message.
	// When false, Action holds the stored outcome (completed or rejected)
	// and the action must not run again.
	Execute bool
	// LeafCallID is the leaf call the claim recorded for the attempt
	// (ClaimCall, ClaimTurn), to be ended by SettleAttempt; 0 when none.
	LeafCallID int64
	// Conversation is what a model turn's claim read for its request
	// (ClaimTurn, when Execute): the messages it sends, in order, each cut
	// output read only in part (Bytes holds its whole length), and the plan
	// that chose them.
	Conversation []Message
	Plan         FitPlan
	// Quota is what a turn's quota said (TurnRead.Quota): an admitted
	// turn settles it with AttemptEnd.Quota; a refused one (ErrQuotaWait)
	// may ask again at Quota.RetryAt.
	Quota Admission
	// SpendUSD is what the claim reserved on the turn's account
	// (TurnRead.Spend); the settle spends what the turn cost
	// (AttemptEnd.SpendUSD) and gives the rest back.
	SpendUSD float64
	// SpendCap, for a turn reserved on an account with caps, is the cap
	// with the least room left once the turn held its part.
	SpendCap SpendReservation
}

// actionColumns lists an action's columns, for a query that names the
// actions table "a", in the order scanAction reads them.
const actionColumns = `a.id, a.idempotency_key, a.workflow_id, a.activity_id, a.tool, a.arguments, a.request_fingerprint,
	a.status, coalesce(a.result, ''), a.error, a.error_type, a.attempts, a.compensation_id, coalesce(a.compensates, ''),
	a.locked_until, a.fenced_at, a.fence_reason, a.created_at, a.completed_at`

// actionFields are scanAction's destinations, for queries that scan an
// action beside other columns.
func actionFields(a *agentsagatype.Action) []any {
	return []any{&a.ID, &a.Key, &a.WorkflowID, &a.ActivityID, &a.Tool, &a.Arguments, &a.Fingerprint,
		&a.Status, &a.Result, &a.Error, &a.ErrorType, &a.Attempts, &a.CompensationID, &a.Compensates,
		&a.LockedUntil, &a.FencedAt, &a.FenceReason, &a.CreatedAt, &a.CompletedAt}
}

func scanAction(row pgx.Row) (agentsagatype.Action, error) {
	var a agentsagatype.Action
	err := row.Scan(actionFields(&a)...)
	return a, err
}

// ClaimAction takes the key for one attempt, holding it for lease; the
// holder renews the lease with RenewLease while it lives. A new key is
// inserted; a key whose last attempt failed, or whose holder's lease ran out
// (a worker lost mid-call), is taken over, and the lost attempt's leaf call
// is marked lost. A completed or rejected key returns its stored outcome
// with Execute false. A live lease returns ErrInFlight, a different request
// under the key ErrConflict, and a fence ErrFenced: a fenced key, a forward
// action of a run whose rollback began, or any action of a run that ended.
//
// The claim reads the run's row FOR SHARE, so it serializes with CloseRun
// and FinishRun: a claim either commits before the run is closed (and the
// rollback sees and waits for it) or sees the close and is refused.
// ClaimCall is the same claim that also records the attempt's leaf call.
func (s *Store) ClaimAction(ctx context.Context, req ActionRequest, lease time.Duration) (Claim, error) {
	return s.ClaimCall(ctx, req, LeafCall{}, lease)
}

var fenceText = map[string]string{
	FenceGivenUp:  "the workflow gave up on this call",
	FenceRollback: "the run's rollback reached this action",
	FenceRunEnded: "the run has ended",
}

// runFence says why the run refuses claims, or "" when it does not.
func (s *Store) runFence(ctx context.Context, workflowID string, compensating bool) (string, error) {
	var finished, closing bool
	var forkedInto string
	err := s.pool.QueryRow(ctx, `SELECT finished_at IS NOT NULL, closing_at IS NOT NULL, coalesce(forked_into, '') FROM runs WHERE workflow_id = $1`,
		workflowID).Scan(&finished, &closing, &forkedInto)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return "", nil
	case err != nil:
		return "", err
	case finished:
		return fenceText[FenceRunEnded], nil
	case closing && !compensating && forkedInto != "":
		return "the run was forked into " + forkedInto + ", which goes on in its place", nil
	case closing && !compensating:
		return "the run's rollback has begun", nil
	}
	return "", nil
}

// RenewLease extends the lease of the attempt holding key under claim
// number attempt, from now. It returns ErrLeaseLost when that attempt no
// longer holds the key. A fenced key's holder may still renew: it is alive,
// and a rollback waits for it to settle. The key's spend hold, if it has
// one, lives as long: a model turn slower than its first lease keeps its
// reservation until it settles, instead of having it spent in full by the
// next reservation while it still runs.
func (s *Store) RenewLease(ctx context.Context, key string, attempt int, lease time.Duration) error {
	var renewed int
	err := s.pool.QueryRow(ctx, `
		WITH renewed AS (
			UPDATE actions SET locked_until = clock_timestamp() + $3 * interval '1 millisecond'
			WHERE idempotency_key = $1 AND attempts = $2 AND status = 'started'
			RETURNING locked_until
		), held AS (
			UPDATE spend_holds h SET lease_until = greatest(h.lease_until, r.locked_until)
			FROM renewed r WHERE h.idempotency_key = $1
		)
		SELECT count(*) FROM renewed`, key, attempt, lease.Milliseconds()).Scan(&renewed)
	if err != nil {
		return fmt.Errorf("ledger: renew lease of %s (claim %d): %w", key, attempt, err)
	}
	if renewed == 0 {
		return fmt.Errorf("ledger: renew lease of %s (claim %d): %w", key, attempt, ErrLeaseLost)
	}
	return nil
}

// CompleteAction stores the result of the attempt that holds the key. If
// that attempt lost the key meanwhile, the write is refused: the stored
// action is returned with ErrLeaseLost, and the first stored result (if
// another attempt completed) stays.
func (s *Store) CompleteAction(ctx context.Context, key string, attempt int, result string) (agentsagatype.Action, error) {
	return s.SettleAttempt(ctx, key, attempt, AttemptEnd{Status: agentsagatype.ActionCompleted, Result: result})
}

// failAction records a failed attempt and the error type it failed with.
// A permanent failure is stored as rejected and returned to every later
// attempt; otherwise the key is freed for the next attempt. An attempt
// that lost the key gets ErrLeaseLost, as for CompleteAction.
func (s *Store) failAction(ctx context.Context, key string, attempt int, cause, errType string, permanent bool) (agentsagatype.Action, error) {
	return s.SettleAttempt(ctx, key, attempt, FailedAttempt(cause, errType, permanent))
}

// FailedAttempt is how a failed attempt settles its action, for
// SettleAttempt: rejected (stored and returned to every later attempt) when
// the failure is permanent, failed (the key freed for the next attempt)
// otherwise.
func FailedAttempt(cause, errType string, permanent bool) AttemptEnd {
	status := agentsagatype.ActionFailed
	if permanent {
		status = agentsagatype.ActionRejected
	}
	return AttemptEnd{Status: status, Cause: cause, ErrorType: errType}
}

// AttemptEnd is how one attempt ended, as SettleAttempt writes it.
type AttemptEnd struct {
	// Status is ActionCompleted, ActionFailed or ActionRejected.
	Status    string
	Result    string
	Cause     string // the error of a failed or rejected attempt
	ErrorType string
	// Message, when set, is written into the run's conversation with the
	// action's outcome: a tool's output or a model's reply.
	Message *Message
	// LeafCallID is the attempt's leaf call (Claim.LeafCallID), ended in the
	// same statement: ok when CallErr is nil, error with its text
	// otherwise. 0: none.
	LeafCallID int64
	CallErr    error
	// Quota, for a model call on a quota, is what its response said,
	// settled in the same statement. An attempt that lost its key settles
	// nothing: its quota errs toward admitting less.
	Quota *QuotaAnswer
	// SpendUSD, for a turn that reserved on its account (Claim.SpendUSD
	// of a TurnRead.Spend claim), is what it cost by the usage the
	// provider reported, settled in the same statement when Spend is set.
	Spend    bool
	SpendUSD float64
	// Publish, when set, is an event of the call that the settle's own
	// statement appends to the run's log (internal/runevents), before the
	// attempt's end: a streamed reply's last text, so that a reply that
	// streams in one batch costs no statement of its own.
	Publish *runevents.Event
}

// SettleAttempt writes how the attempt holding key under claim number
// attempt ended, and the end of its leaf call, in one statement. An attempt
// that no longer holds the key gets the stored action and ErrLeaseLost;
// its leaf call is ended all the same (it did leave the process).
func (s *Store) SettleAttempt(ctx context.Context, key string, attempt int, end AttemptEnd) (agentsagatype.Action, error) {
	var m Message
	var toolCalls *string
	msg := end.Message
	if msg != nil {
		m = *msg
		if len(m.ToolCalls) > 0 {
			calls := string(m.ToolCalls)
			toolCalls = &calls
		}
	}
	// The message (when there is one) is the row's stored result or, for a
	// model's reply, the text the workflow's conversation shows. A reply
	// that only calls tools has no text: its stored result is the turn's
	// JSON, which the model would otherwise read back in every later
	// request (bench ratelimit found requests 43% larger, and their token
	// estimate short of what the provider counted).
	content := m.Content
	if msg != nil && content == "" && m.Role != "assistant" {
		content = end.Result
	}
	leafOutcome, leafError := "ok", ""
	if end.CallErr != nil {
		leafOutcome, leafError = "error", storable(end.CallErr.Error())
	}
	status := end.Status
	var published runevents.Event
	if end.Publish != nil {
		published = *end.Publish
	}
	args := []any{key, attempt, status, storable(end.Result), storable(end.Cause), end.ErrorType,
		msg != nil, m.Seq, m.Role, storable(content), toolCalls, m.ToolCallID, m.Name, m.Tokens,
		end.LeafCallID, leafOutcome, leafError, published.Key, published.Kind, []byte(published.Data)}
	var action agentsagatype.Action
	var err error
	if q := end.Quota; q != nil {
		var closedUntil *time.Time
		if !q.ClosedUntil.IsZero() {
			closedUntil = &q.ClosedUntil
		}
		args = append(append(args, q.Admission.Key, q.Admission.Admitted, q.Admission.Reserved.Input, q.Admission.Reserved.Output,
			q.Used.Input, q.Used.Output), append(observedArgs(q.Observed), closedUntil)...)
	}
	if end.Spend {
		args = append(args, end.SpendUSD)
	}
	switch {
	case end.Quota != nil && end.Spend:
		action, err = coalesce.Row(ctx, s.calls, key, settleQuotaSpendSQL, args, scanAction)
	case end.Quota != nil:
		action, err = coalesce.Row(ctx, s.calls, key, settleQuotaSQL, args, scanAction)
	case end.Spend:
		action, err = coalesce.Row(ctx, s.calls, key, settleSpendSQL, args, scanAction)
	default:
		action, err = coalesce.Row(ctx, s.calls, key, settleSQL, args, scanAction)
	}
	if errors.Is(err, pgx.ErrNoRows) {
		// Another attempt took the key over, or a rollback settled it.
		stored, err := s.GetAction(ctx, key)
		if err != nil {
			return agentsagatype.Action{}, fmt.Errorf("ledger: record %s as %s: %w", key, status, err)
		}
		return stored, fmt.Errorf("ledger: record %s as %s (claim %d; the ledger holds claim %d, %s): %w",
			key, status, attempt, stored.Attempts, stored.Status, ErrLeaseLost)
	}
	if err != nil {
		return agentsagatype.Action{}, fmt.Errorf("ledger: record %s as %s: %w", key, status, err)
	}
	return action, nil
}

// settleSQL settles an attempt (SettleAttempt); settleQuotaSQL adds what
// its response said of its quota, settleSpendSQL what it cost its
// account, and settleQuotaSpendSQL both. The settled row is one row,
// so each function runs once, in the same statement (migrations 00016,
// 00022).
const (
	settleSQL = `
		WITH settled AS (
			UPDATE actions a SET status = $3, result = NULLIF($4, ''), error = $5, error_type = $6, locked_until = NULL,
			       updated_at = clock_timestamp(),
			       completed_at = CASE WHEN $3 IN ('completed', 'rejected') THEN clock_timestamp() END
			WHERE idempotency_key = $1 AND attempts = $2 AND status = 'started'
			RETURNING ` + actionColumns + `
		), recorded AS (
			INSERT INTO messages (workflow_id, seq, role, content, tool_calls, tool_call_id, name, source_key, tokens)
			SELECT settled.workflow_id, $8, $9, $10, $11::jsonb, $12, $13, $1, $14 FROM settled WHERE $7
			ON CONFLICT (workflow_id, seq) DO NOTHING
		), ended AS (
			UPDATE leaf_calls SET outcome = $16, error = $17, finished_at = clock_timestamp() WHERE id = $15
		), published AS (
			INSERT INTO run_event_inbox (workflow_id, event_key, kind, call_key, data)
			SELECT settled.workflow_id, $18, $19, $1, $20::jsonb FROM settled WHERE $18 <> ''
		)
		SELECT * FROM settled`
	quotaAnswered  = `agentsaga_quota_answered($21, $22, $23, $24, $25, $26, $27, $28, $29, $30, $31, $32, $33, $34, $35)`
	settleQuotaSQL = settleSQL + `
		WHERE ` + quotaAnswered
	settleSpendSQL = settleSQL + `
		WHERE agentsaga_spend_answered($1, $21)`
	settleQuotaSpendSQL = settleQuotaSQL + `
		  AND agentsaga_spend_answered($1, $36)`
)

// Fenced is what FenceAction found.
type Fenced struct {
	Action agentsagatype.Action
	// Live reports that an attempt still holds a live lease: the caller
	// waits and asks again, so that what it reports (or compensates) is
	// what that attempt did.
	Live bool
	// LeafCalls counts the key's attempts that left the process, lost
	// ones included: the truth about a call whose attempts timed out.
	LeafCalls int
}

// FenceAction stops req.Key from accepting claims, for reason
// (FenceGivenUp or FenceRollback), and reports what the ledger holds for
// it. A key no attempt claimed yet is recorded, fenced, so a late attempt
// cannot claim it. A started key whose lease lapsed is settled as failed
// (its outcome is unknown) and its leaf call marked lost. Fencing is
// idempotent: the first fence's time and reason stay.
func (s *Store) FenceAction(ctx context.Context, req ActionRequest, reason string) (Fenced, error) {
	row := s.pool.QueryRow(ctx, `
		WITH fenced AS (
			INSERT INTO actions AS a (idempotency_key, workflow_id, activity_id, tool, arguments, request_fingerprint,
			                     status, attempts, error, fenced_at, fence_reason)
			VALUES ($1, $2, $3, $4, $5, $6, 'failed', 0, 'no attempt claimed the key before it was fenced', clock_timestamp(), $7)
			ON CONFLICT (idempotency_key) DO UPDATE
			SET fenced_at = coalesce(a.fenced_at, clock_timestamp()),
			    fence_reason = CASE WHEN a.fenced_at IS NULL THEN EXCLUDED.fence_reason ELSE a.fence_reason END,
			    status = CASE WHEN `+lapsed+` THEN 'failed' ELSE a.status END,
			    error = CASE WHEN `+lapsed+` THEN '`+lapsedError+`' ELSE a.error END,
			    locked_until = CASE WHEN `+lapsed+` THEN NULL ELSE a.locked_until END,
			    updated_at = clock_timestamp()
			RETURNING `+actionColumns+`
		), lost AS (
			UPDATE leaf_calls SET outcome = 'lost', finished_at = clock_timestamp(), error = '`+lapsedError+`'
			WHERE idempotency_key = $1 AND outcome = 'in-flight'
			  AND EXISTS (SELECT 1 FROM fenced WHERE status <> 'started')
		)
		SELECT *, (SELECT count(*) FROM leaf_calls WHERE workflow_id = $2 AND idempotency_key = $1) FROM fenced`,
		req.Key, req.WorkflowID, req.ActivityID, req.Tool, req.Arguments, req.Fingerprint(), reason)
	var f Fenced
	if err := row.Scan(append(actionFields(&f.Action), &f.LeafCalls)...); err != nil {
		return Fenced{}, fmt.Errorf("ledger: fence %s: %w", req.Key, err)
	}
	f.Live = f.Action.Status == agentsagatype.ActionStarted
	return f, nil
}

// lapsed is true of an actions row (alias a) whose holder's lease ran out.
const lapsed = `(a.status = 'started' AND a.locked_until < clock_timestamp())`

const lapsedError = `the attempt holding the key was lost (its lease lapsed): outcome unknown`

// GetAction reads one action by idempotency key.
func (s *Store) GetAction(ctx context.Context, key string) (agentsagatype.Action, error) {
	action, err := scanAction(s.pool.QueryRow(ctx, `SELECT `+actionColumns+` FROM actions a WHERE idempotency_key = $1`, key))
	if errors.Is(err, pgx.ErrNoRows) {
		return agentsagatype.Action{}, fmt.Errorf("ledger: get action %s: %w", key, ErrNotFound)
	}
	if err != nil {
		return agentsagatype.Action{}, fmt.Errorf("ledger: get action %s: %w", key, err)
	}
	return action, nil
}

// ListModelTurns returns a run's model turns, each stored under its key,
// in the order they were first claimed.
func (s *Store) ListModelTurns(ctx context.Context, workflowID string) ([]agentsagatype.Action, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+actionColumns+` FROM actions a WHERE workflow_id = $1 AND kind = 'model' ORDER BY id`, workflowID)
	if err != nil {
		return nil, fmt.Errorf("ledger: list model turns of %s: %w", workflowID, err)
	}
	turns, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (agentsagatype.Action, error) { return scanAction(row) })
	if err != nil {
		return nil, fmt.Errorf("ledger: list model turns of %s: %w", workflowID, err)
	}
	return turns, nil
}

// ListActions returns a run's actions on the outside world (not its model
// turns) in the order they were first claimed.
func (s *Store) ListActions(ctx context.Context, workflowID string) ([]agentsagatype.Action, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+actionColumns+` FROM actions a WHERE workflow_id = $1 AND kind = 'tool' ORDER BY id`, workflowID)
	if err != nil {
		return nil, fmt.Errorf("ledger: list actions of %s: %w", workflowID, err)
	}
	actions, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (agentsagatype.Action, error) { return scanAction(row) })
	if err != nil {
		return nil, fmt.Errorf("ledger: list actions of %s: %w", workflowID, err)
	}
	return actions, nil
}

package ledger

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Action statuses.
const (
	// ActionStarted: an attempt holds the key until its lease runs out.
	ActionStarted = "started"
	// ActionCompleted: the first completed result is stored for good.
	ActionCompleted = "completed"
	// ActionFailed: the last attempt failed retryably; the next may claim it.
	ActionFailed = "failed"
	// ActionRejected: the tool answered a definitive "no" (a 4xx); like
	// Stripe, the answer is stored and every later attempt gets it back.
	ActionRejected = "rejected"
)

var (
	// ErrConflict: a different request was sent under an existing key.
	ErrConflict = errors.New("idempotency key reused with a different request")
	// ErrInFlight: another attempt holds the key and its lease is live. The
	// caller should fail retryably and try again later.
	ErrInFlight = errors.New("another attempt of this idempotency key is in flight")
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
	Compensation *CompensationRequest
}

// CompensationRequest pairs a forward action with the tool that undoes it.
type CompensationRequest struct {
	Tool              string `json:"tool"`
	ArgumentsTemplate string `json:"arguments_template"`
}

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

// Action is one row of the action ledger.
type Action struct {
	ID             int64      `json:"id"`
	Key            string     `json:"idempotency_key"`
	WorkflowID     string     `json:"workflow_id"`
	ActivityID     string     `json:"activity_id"`
	Tool           string     `json:"tool"`
	Arguments      string     `json:"arguments"`
	Fingerprint    string     `json:"request_fingerprint"`
	Status         string     `json:"status"`
	Result         string     `json:"result,omitempty"`
	Error          string     `json:"error,omitempty"`
	Attempts       int        `json:"attempts"`
	CompensationID *int64     `json:"compensation_id,omitempty"`
	CreatedAt      time.Time  `json:"created_at"`
	CompletedAt    *time.Time `json:"completed_at,omitempty"`
}

// Claim is the outcome of ClaimAction.
type Claim struct {
	Action Action
	// Execute is true when the caller now holds the key and must run the
	// action, then call CompleteAction or FailAction with Action.Attempts.
	// When false, Action holds the stored outcome (completed or rejected)
	// and the action must not run again.
	Execute bool
}

const actionColumns = `id, idempotency_key, workflow_id, activity_id, tool, arguments, request_fingerprint,
	status, coalesce(result, ''), error, attempts, compensation_id, created_at, completed_at`

func scanAction(row pgx.Row) (Action, error) {
	var a Action
	err := row.Scan(&a.ID, &a.Key, &a.WorkflowID, &a.ActivityID, &a.Tool, &a.Arguments, &a.Fingerprint,
		&a.Status, &a.Result, &a.Error, &a.Attempts, &a.CompensationID, &a.CreatedAt, &a.CompletedAt)
	return a, err
}

// ClaimAction takes the key for one attempt, holding it for lease. A new key
// is inserted; a key whose last attempt failed, or whose holder's lease ran
// out (a worker lost mid-call), is taken over. A completed or rejected key
// returns its stored outcome with Execute false. A live lease returns
// ErrInFlight, a different request under the key ErrConflict.
func (s *Store) ClaimAction(ctx context.Context, req ActionRequest, lease time.Duration) (Claim, error) {
	fingerprint := req.Fingerprint()
	var compTool, compArgs string
	if req.Compensation != nil {
		compTool, compArgs = req.Compensation.Tool, req.Compensation.ArgumentsTemplate
	}
	row := s.pool.QueryRow(ctx, `
		WITH claimed AS (
			INSERT INTO actions (idempotency_key, workflow_id, activity_id, tool, arguments, request_fingerprint,
			                     status, locked_until)
			VALUES ($1, $2, $3, $4, $5, $6, 'started', clock_timestamp() + $7 * interval '1 millisecond')
			ON CONFLICT (idempotency_key) DO UPDATE
			SET status = 'started', attempts = actions.attempts + 1, error = '',
			    locked_until = EXCLUDED.locked_until, updated_at = clock_timestamp()
			WHERE actions.request_fingerprint = EXCLUDED.request_fingerprint
			  AND (actions.status = 'failed' OR (actions.status = 'started' AND actions.locked_until < clock_timestamp()))
			RETURNING `+actionColumns+`
		), registered AS (
			INSERT INTO compensations (forward_key, workflow_id, forward_activity_id, tool, arguments_template)
			SELECT idempotency_key, workflow_id, activity_id, $8, $9 FROM claimed WHERE $8 <> ''
			ON CONFLICT (forward_key) DO NOTHING
		)
		SELECT * FROM claimed`,
		req.Key, req.WorkflowID, req.ActivityID, req.Tool, req.Arguments, fingerprint, lease.Milliseconds(), compTool, compArgs)
	action, err := scanAction(row)
	if err == nil {
		return Claim{Action: action, Execute: true}, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return Claim{}, fmt.Errorf("ledger: claim %s: %w", req.Key, err)
	}
	// The key exists and could not be taken: say why.
	existing, err := s.GetAction(ctx, req.Key)
	if err != nil {
		return Claim{}, fmt.Errorf("ledger: claim %s: %w", req.Key, err)
	}
	switch {
	case existing.Fingerprint != fingerprint:
		return Claim{}, fmt.Errorf("ledger: claim %s (stored %s %s, got %s %s): %w",
			req.Key, existing.Tool, existing.Arguments, req.Tool, req.Arguments, ErrConflict)
	case existing.Status == ActionCompleted || existing.Status == ActionRejected:
		return Claim{Action: existing}, nil
	default:
		return Claim{}, fmt.Errorf("ledger: claim %s: %w", req.Key, ErrInFlight)
	}
}

// CompleteAction stores the result of the attempt that holds the key. If
// that attempt lost the key meanwhile (its lease ran out and another attempt
// completed first), the first stored result wins and is returned.
func (s *Store) CompleteAction(ctx context.Context, key string, attempt int, result string) (Action, error) {
	return s.settle(ctx, key, attempt, ActionCompleted, result, "")
}

// FailAction records a failed attempt. A permanent failure is stored as
// rejected and returned to every later attempt; otherwise the key is freed
// for the next attempt.
func (s *Store) FailAction(ctx context.Context, key string, attempt int, cause string, permanent bool) (Action, error) {
	status := ActionFailed
	if permanent {
		status = ActionRejected
	}
	return s.settle(ctx, key, attempt, status, "", cause)
}

func (s *Store) settle(ctx context.Context, key string, attempt int, status, result, cause string) (Action, error) {
	action, err := scanAction(s.pool.QueryRow(ctx, `
		UPDATE actions SET status = $3, result = NULLIF($4, ''), error = $5, locked_until = NULL,
		       updated_at = clock_timestamp(),
		       completed_at = CASE WHEN $3 IN ('completed', 'rejected') THEN clock_timestamp() END
		WHERE idempotency_key = $1 AND attempts = $2 AND status = 'started'
		RETURNING `+actionColumns, key, attempt, status, storable(result), storable(cause)))
	if errors.Is(err, pgx.ErrNoRows) {
		// Another attempt took the key over; report what the ledger holds.
		return s.GetAction(ctx, key)
	}
	if err != nil {
		return Action{}, fmt.Errorf("ledger: record %s as %s: %w", key, status, err)
	}
	return action, nil
}

// GetAction reads one action by idempotency key.
func (s *Store) GetAction(ctx context.Context, key string) (Action, error) {
	action, err := scanAction(s.pool.QueryRow(ctx, `SELECT `+actionColumns+` FROM actions WHERE idempotency_key = $1`, key))
	if errors.Is(err, pgx.ErrNoRows) {
		return Action{}, fmt.Errorf("ledger: get action %s: %w", key, ErrNotFound)
	}
	if err != nil {
		return Action{}, fmt.Errorf("ledger: get action %s: %w", key, err)
	}
	return action, nil
}

// ListActions returns a run's actions in the order they were first claimed.
func (s *Store) ListActions(ctx context.Context, workflowID string) ([]Action, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+actionColumns+` FROM actions WHERE workflow_id = $1 ORDER BY id`, workflowID)
	if err != nil {
		return nil, fmt.Errorf("ledger: list actions of %s: %w", workflowID, err)
	}
	actions, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Action, error) { return scanAction(row) })
	if err != nil {
		return nil, fmt.Errorf("ledger: list actions of %s: %w", workflowID, err)
	}
	return actions, nil
}

package ledger

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Compensation statuses.
const (
	CompensationRegistered = "registered"  // paired, not yet run
	CompensationDone       = "compensated" // the compensating action completed
	CompensationNotNeeded  = "not-needed"  // the forward action never took effect
	CompensationFailed     = "failed"      // it ran out of attempts; a human is needed
	CompensationSkipped    = "skipped"     // a human took responsibility
)

// Compensation is one entry of a run's saga stack, with the forward action
// it undoes.
type Compensation struct {
	ID                int64     `json:"id"`
	ForwardKey        string    `json:"forward_key"`
	ForwardActivityID string    `json:"forward_activity_id"`
	Tool              string    `json:"tool"`
	ArgumentsTemplate string    `json:"arguments_template"`
	Status            string    `json:"status"`
	Error             string    `json:"error,omitempty"`
	Reason            string    `json:"reason,omitempty"`
	Forward           Action    `json:"forward"`
	UpdatedAt         time.Time `json:"updated_at"`
}

// CompensationStack returns a run's compensations newest first: the order
// they are walked in.
func (s *Store) CompensationStack(ctx context.Context, workflowID string) ([]Compensation, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT c.id, c.forward_key, c.forward_activity_id, c.tool, c.arguments_template, c.status, c.error, c.reason,
		       c.updated_at, a.id, a.idempotency_key, a.workflow_id, a.activity_id, a.tool, a.arguments,
		       a.request_fingerprint, a.status, coalesce(a.result, ''), a.error, a.attempts, a.compensation_id,
		       a.created_at, a.completed_at
		FROM compensations c JOIN actions a ON a.idempotency_key = c.forward_key
		WHERE c.workflow_id = $1 ORDER BY c.id DESC`, workflowID)
	if err != nil {
		return nil, fmt.Errorf("ledger: compensation stack of %s: %w", workflowID, err)
	}
	stack, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Compensation, error) {
		var c Compensation
		a := &c.Forward
		err := row.Scan(&c.ID, &c.ForwardKey, &c.ForwardActivityID, &c.Tool, &c.ArgumentsTemplate, &c.Status, &c.Error,
			&c.Reason, &c.UpdatedAt, &a.ID, &a.Key, &a.WorkflowID, &a.ActivityID, &a.Tool, &a.Arguments, &a.Fingerprint,
			&a.Status, &a.Result, &a.Error, &a.Attempts, &a.CompensationID, &a.CreatedAt, &a.CompletedAt)
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("ledger: compensation stack of %s: %w", workflowID, err)
	}
	return stack, nil
}

// SettleCompensation records what became of a compensation. A compensation
// is marked compensated only by its caller, after the compensating action
// completed; one already settled as compensated stays so.
func (s *Store) SettleCompensation(ctx context.Context, forwardKey, status, cause, reason string) error {
	tag, err := s.pool.Exec(ctx, `
		UPDATE compensations SET status = $2, error = $3, reason = $4, updated_at = clock_timestamp()
		WHERE forward_key = $1 AND status <> 'compensated'`, forwardKey, status, storable(cause), storable(reason))
	if err != nil {
		return fmt.Errorf("ledger: settle compensation of %s as %s: %w", forwardKey, status, err)
	}
	if tag.RowsAffected() == 0 {
		if _, err := s.GetAction(ctx, forwardKey); err != nil {
			return fmt.Errorf("ledger: settle compensation of %s: %w", forwardKey, err)
		}
	}
	return nil
}

// SetRunStatus records a status a run passes through (escalated,
// needs-attention) and what it is waiting for.
func (s *Store) SetRunStatus(ctx context.Context, workflowID, status, detail string) error {
	tag, err := s.pool.Exec(ctx, `UPDATE runs SET status = $2, status_detail = $3 WHERE workflow_id = $1`, workflowID, status, storable(detail))
	if err != nil {
		return fmt.Errorf("ledger: set status of %s to %s: %w", workflowID, status, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("ledger: set status of %s: %w", workflowID, ErrNotFound)
	}
	return nil
}

package ledgerdb

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Leaf call kinds.
const (
	LeafModel        = "model"
	LeafTool         = "tool"
	LeafCompensation = "compensation"
)

// LeafCall is one attempt that left the process.
type LeafCall struct {
	ID         int64      `json:"id"`
	WorkflowID string     `json:"workflow_id"`
	ActivityID string     `json:"activity_id"`
	Key        string     `json:"idempotency_key"`
	Attempt    int        `json:"attempt"`
	Kind       string     `json:"kind"`
	Target     string     `json:"target"`
	Outcome    string     `json:"outcome"`
	Error      string     `json:"error,omitempty"`
	StartedAt  time.Time  `json:"started_at"`
	FinishedAt *time.Time `json:"finished_at,omitempty"`
}

// beginLeafCall records an attempt before it leaves the process, so an
// attempt whose worker dies mid-call is still counted (as in-flight).
func (s *Store) beginLeafCall(ctx context.Context, call LeafCall) (int64, error) {
	var id int64
	err := s.pool.QueryRow(ctx, `
		INSERT INTO leaf_calls (workflow_id, activity_id, idempotency_key, attempt, kind, target)
		VALUES ($1, $2, $3, $4, $5, $6) RETURNING id`,
		call.WorkflowID, call.ActivityID, call.Key, call.Attempt, call.Kind, call.Target).Scan(&id)
	if err != nil {
		return 0, fmt.Errorf("ledger: begin leaf call %s attempt %d: %w", call.Key, call.Attempt, err)
	}
	return id, nil
}

// endLeafCall records how the attempt ended; a nil callErr is success.
func (s *Store) endLeafCall(ctx context.Context, id int64, callErr error) error {
	outcome, message := "ok", ""
	if callErr != nil {
		outcome, message = "error", storable(callErr.Error())
	}
	_, err := s.pool.Exec(ctx, `
		UPDATE leaf_calls SET outcome = $2, error = $3, finished_at = clock_timestamp() WHERE id = $1`,
		id, outcome, message)
	if err != nil {
		return fmt.Errorf("ledger: end leaf call %d: %w", id, err)
	}
	return nil
}

// ListLeafCalls returns a run's leaf calls in the order they started.
func (s *Store) ListLeafCalls(ctx context.Context, workflowID string) ([]LeafCall, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT id, workflow_id, activity_id, idempotency_key, attempt, kind, target, outcome, error, started_at, finished_at
		FROM leaf_calls WHERE workflow_id = $1 ORDER BY id`, workflowID)
	if err != nil {
		return nil, fmt.Errorf("ledger: list leaf calls of %s: %w", workflowID, err)
	}
	calls, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (LeafCall, error) {
		var c LeafCall
		err := row.Scan(&c.ID, &c.WorkflowID, &c.ActivityID, &c.Key, &c.Attempt, &c.Kind, &c.Target,
			&c.Outcome, &c.Error, &c.StartedAt, &c.FinishedAt)
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("ledger: list leaf calls of %s: %w", workflowID, err)
	}
	return calls, nil
}

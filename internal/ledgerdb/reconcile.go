package ledgerdb

import (
	"context"
	"fmt"
	"time"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/jackc/pgx/v5"
)

// AbandonedCandidates lists up to limit runs that have not ended (finished_at
// unset, whatever their status) and started more than olderThan ago, ordered
// by workflow ID, after the workflow ID after ("" for the first page): the
// runs the reconciler asks Temporal about. A run the engine ended itself is
// never among them.
func (s *Store) AbandonedCandidates(ctx context.Context, olderThan time.Duration, after string, limit int) ([]agentsagatype.Run, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT `+runColumns+`, spec
		FROM runs
		WHERE finished_at IS NULL AND workflow_id > $1
		  AND started_at <= clock_timestamp() - make_interval(secs => $2)
		ORDER BY workflow_id LIMIT $3`, after, olderThan.Seconds(), limit)
	if err != nil {
		return nil, fmt.Errorf("ledger: list runs that have not ended: %w", err)
	}
	runs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (agentsagatype.Run, error) { return scanRun(row, true) })
	if err != nil {
		return nil, fmt.Errorf("ledger: list runs that have not ended: %w", err)
	}
	return runs, nil
}

// MarkTerminated records that a run's workflow ended outside the engine, with
// Temporal's reason: its status becomes terminated and its rollback begins
// (closing_at), so no forward action of it may be claimed any more. Only a
// run that has not ended and is not marked yet is marked; marked says
// whether this call did it, so of several reconcilers that find the same
// run exactly one marks it. A run that does not exist is ErrNotFound.
func (s *Store) MarkTerminated(ctx context.Context, workflowID, reason string) (marked bool, err error) {
	tag, err := s.pool.Exec(ctx, `
		UPDATE runs SET status = 'terminated', reason = $2, status_detail = '',
		       closing_at = coalesce(closing_at, clock_timestamp())
		WHERE workflow_id = $1 AND finished_at IS NULL AND status <> 'terminated'`, workflowID, storable(reason))
	if err != nil {
		return false, fmt.Errorf("ledger: mark run %s terminated: %w", workflowID, err)
	}
	if tag.RowsAffected() == 1 {
		return true, nil
	}
	var exists bool
	if err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM runs WHERE workflow_id = $1)`, workflowID).Scan(&exists); err != nil {
		return false, fmt.Errorf("ledger: mark run %s terminated: %w", workflowID, err)
	}
	if !exists {
		return false, fmt.Errorf("ledger: mark run %s terminated: %w", workflowID, ErrNotFound)
	}
	return false, nil
}

// FinishSubRuns ends the sub-agents (to any depth) of a run whose rollback
// walked their stacks with its own, when they have not ended themselves: a
// terminated run's sub-agents are terminated with it and never record their
// end. Like FinishRun, it counts their leaf calls and marks the ones still
// in flight lost. It returns how many runs it ended.
func (s *Store) FinishSubRuns(ctx context.Context, workflowID, status, reason string) (int, error) {
	tag, err := s.pool.Exec(ctx, `
		WITH `+runTree+`, ending AS (
			SELECT workflow_id FROM runs
			WHERE workflow_id IN (SELECT workflow_id FROM tree) AND workflow_id <> $1 AND finished_at IS NULL
		), lost AS (
			UPDATE leaf_calls SET outcome = 'lost', finished_at = clock_timestamp(),
			       error = 'the attempt was lost: its run ended while it was in flight'
			WHERE workflow_id IN (SELECT workflow_id FROM ending) AND outcome = 'in-flight'
		)
		UPDATE runs r SET status = $2, reason = $3, status_detail = '',
		       leaf_calls = (SELECT count(*) FROM leaf_calls l WHERE l.workflow_id = r.workflow_id),
		       finished_at = clock_timestamp()
		WHERE r.workflow_id IN (SELECT workflow_id FROM ending)`, workflowID, status, storable(reason))
	if err != nil {
		return 0, fmt.Errorf("ledger: end the sub-agents of run %s: %w", workflowID, err)
	}
	return int(tag.RowsAffected()), nil
}

package ledgerdb

import (
	"context"
	"fmt"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/wire"
	"github.com/jackc/pgx/v5"
)

// runTree is a CTE naming a run ($1) and its sub-agents, to any depth,
// linked by parent_workflow_id.
const runTree = `RECURSIVE tree AS (
			SELECT $1::text AS workflow_id
			UNION
			SELECT r.workflow_id FROM runs r JOIN tree t ON r.parent_workflow_id = t.workflow_id
		)`

// CompensationStack returns the compensations of a run and of its
// sub-agents, newest first: the order they are walked in.
func (s *Store) CompensationStack(ctx context.Context, workflowID string) ([]agentsagatype.Compensation, error) {
	rows, err := s.pool.Query(ctx, `
		WITH `+runTree+`
		SELECT c.id, c.forward_key, c.forward_activity_id, c.tool, c.arguments_template, c.status, c.error, c.reason,
		       c.updated_at, `+actionColumns+`
		FROM compensations c JOIN actions a ON a.idempotency_key = c.forward_key
		WHERE c.workflow_id IN (SELECT workflow_id FROM tree) ORDER BY c.id DESC`, workflowID)
	if err != nil {
		return nil, fmt.Errorf("ledger: compensation stack of %s: %w", workflowID, err)
	}
	stack, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (agentsagatype.Compensation, error) {
		var c agentsagatype.Compensation
		err := row.Scan(append([]any{&c.ID, &c.ForwardKey, &c.ForwardActivityID, &c.Tool, &c.ArgumentsTemplate, &c.Status,
			&c.Error, &c.Reason, &c.UpdatedAt}, actionFields(&c.Forward)...)...)
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("ledger: compensation stack of %s: %w", workflowID, err)
	}
	return stack, nil
}

// irreversibleActions lists the actions of a run and its sub-agents, newest
// first, made with one of tools (the ones that cannot be undone) that
// happened or may have happened: completed, or attempted with an unknown
// outcome. A rejected action took no effect and is left out.
func (s *Store) irreversibleActions(ctx context.Context, workflowID string, tools []string) ([]agentsagatype.Action, error) {
	if len(tools) == 0 {
		return nil, nil
	}
	rows, err := s.pool.Query(ctx, `
		WITH `+runTree+`
		SELECT `+actionColumns+` FROM actions a
		WHERE a.workflow_id IN (SELECT workflow_id FROM tree) AND a.compensates IS NULL AND a.tool = ANY($2)
		  AND (a.status = 'completed' OR (a.status IN ('started', 'failed') AND a.attempts > 0))
		ORDER BY a.id DESC`, workflowID, tools)
	if err != nil {
		return nil, fmt.Errorf("ledger: irreversible actions of %s: %w", workflowID, err)
	}
	actions, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (agentsagatype.Action, error) { return scanAction(row) })
	if err != nil {
		return nil, fmt.Errorf("ledger: irreversible actions of %s: %w", workflowID, err)
	}
	return actions, nil
}

// Plan reads a run's RollbackPlan; irreversibleTools names the tools whose
// effects cannot be undone.
func (s *Store) Plan(ctx context.Context, workflowID string, irreversibleTools []string) (wire.RollbackPlan, error) {
	stack, err := s.CompensationStack(ctx, workflowID)
	if err != nil {
		return wire.RollbackPlan{}, err
	}
	irreversible, err := s.irreversibleActions(ctx, workflowID, irreversibleTools)
	if err != nil {
		return wire.RollbackPlan{}, err
	}
	return wire.RollbackPlan{Stack: stack, Irreversible: irreversible}, nil
}

// CloseRun begins a run's rollback: the run and its sub-agents refuse
// claims of forward actions from now on (their compensations may still be
// claimed), and every forward action of theirs is fenced (FenceRollback).
// A started action whose lease lapsed is settled as failed and its leaf
// call marked lost. It returns how many forward actions an attempt still
// holds under a live lease: the caller waits until none is left, so the
// walk compensates what those attempts did, not a guess made while they
// were still at work. Calling it again is harmless.
//
// It is two statements on purpose. The first closes the runs, waiting for
// every claim in progress (a claim reads its run's row FOR SHARE); the
// second fences and counts with a snapshot taken after that, so it sees
// every action claimed before the close. One statement would miss a claim
// that committed while it waited.
func (s *Store) CloseRun(ctx context.Context, workflowID string) (live int, err error) {
	if _, err := s.pool.Exec(ctx, `
		WITH `+runTree+`
		UPDATE runs SET closing_at = coalesce(closing_at, clock_timestamp())
		WHERE workflow_id IN (SELECT workflow_id FROM tree)`, workflowID); err != nil {
		return 0, fmt.Errorf("ledger: close run %s for its rollback: %w", workflowID, err)
	}
	err = s.pool.QueryRow(ctx, `
		WITH `+runTree+`, settled AS (
			UPDATE actions a
			SET fenced_at = coalesce(a.fenced_at, clock_timestamp()),
			    fence_reason = CASE WHEN a.fenced_at IS NULL THEN '`+FenceRollback+`' ELSE a.fence_reason END,
			    status = CASE WHEN `+lapsed+` THEN 'failed' ELSE a.status END,
			    error = CASE WHEN `+lapsed+` THEN '`+lapsedError+`' ELSE a.error END,
			    locked_until = CASE WHEN `+lapsed+` THEN NULL ELSE a.locked_until END,
			    updated_at = clock_timestamp()
			WHERE a.workflow_id IN (SELECT workflow_id FROM tree) AND a.compensates IS NULL
			  AND (a.fenced_at IS NULL OR `+lapsed+`)
			RETURNING a.idempotency_key, a.status
		), lost AS (
			UPDATE leaf_calls SET outcome = 'lost', finished_at = clock_timestamp(), error = '`+lapsedError+`'
			WHERE outcome = 'in-flight' AND idempotency_key IN (SELECT idempotency_key FROM settled WHERE status <> 'started')
		)
		SELECT count(*) FROM actions a
		WHERE a.workflow_id IN (SELECT workflow_id FROM tree) AND a.compensates IS NULL
		  AND a.status = 'started' AND a.locked_until >= clock_timestamp()`, workflowID).Scan(&live)
	if err != nil {
		return 0, fmt.Errorf("ledger: fence the actions of run %s for its rollback: %w", workflowID, err)
	}
	return live, nil
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

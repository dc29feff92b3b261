package ledgerdb

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/wire"
)

// ErrDecided is returned when a decision is recorded for an approval that
// another decision settled first. The error names who decided.
var ErrDecided = errors.New("already decided")

// ErrSuperseded is returned for a decision on a request that a fork of its
// run closed (ForkRun): the fork asks again for the call, under its own
// key, and is where it is decided. errors.Is(err, ErrDecided) holds too:
// the request is settled.
var ErrSuperseded error = superseded{}

type superseded struct{}

func (superseded) Error() string        { return "the run was forked" }
func (superseded) Is(target error) bool { return target == ErrDecided }

const approvalColumns = `idempotency_key, workflow_id, call_id, tool, arguments, why, status, decided_by, reason, requested_at, coalesce(decided_at, 'epoch'::timestamptz)`

const requestApprovalSQL = `
	WITH inserted AS (
		INSERT INTO approvals (idempotency_key, workflow_id, call_id, tool, arguments, why)
		VALUES ($1, $2, $3, $4, $5, $6)
		ON CONFLICT (idempotency_key) DO NOTHING
		RETURNING ` + approvalColumns + `
	)
	SELECT * FROM inserted
	UNION ALL
	SELECT ` + approvalColumns + ` FROM approvals WHERE idempotency_key = $1 AND NOT EXISTS (SELECT 1 FROM inserted)`

// RequestApproval records that a call waits for a human, under its key,
// before anything is sent. Recording it again (an activity delivered
// twice, the model asking for the same call after an escalation) returns
// the request as it stands, decision included.
func (s *Store) RequestApproval(ctx context.Context, req agentsagatype.ApprovalRequest) (agentsagatype.Approval, error) {
	a, err := scanApproval(s.pool.QueryRow(ctx, requestApprovalSQL,
		req.Key, req.WorkflowID, req.Call, req.Tool, storable(req.Arguments), storable(req.Why)))
	if err != nil {
		return agentsagatype.Approval{}, fmt.Errorf("ledger: request approval %s: %w", req.Key, err)
	}
	return a, nil
}

const decideApprovalSQL = `
	WITH decided AS (
		UPDATE approvals SET status = $2, decided_by = $3, reason = $4, decided_at = clock_timestamp()
		WHERE idempotency_key = $1 AND status = 'awaiting-approval'
		RETURNING ` + approvalColumns + `
	)
	SELECT true, * FROM decided
	UNION ALL
	SELECT false, ` + approvalColumns + ` FROM approvals WHERE idempotency_key = $1 AND NOT EXISTS (SELECT 1 FROM decided)`

// DecideApproval records a decision (approved, denied or timed-out) on an
// awaiting request. The same decision recorded again by the same person
// is returned as it stands (a retried activity); any other decision on a
// decided request fails with ErrDecided, naming the first, and one on a
// request a fork closed with ErrSuperseded, naming the fork.
func (s *Store) DecideApproval(ctx context.Context, key, status, by, reason string) (agentsagatype.Approval, error) {
	var changed bool
	var a agentsagatype.Approval
	row := s.pool.QueryRow(ctx, decideApprovalSQL, key, status, storable(by), storable(reason))
	err := row.Scan(append([]any{&changed}, approvalTargets(&a)...)...)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return agentsagatype.Approval{}, fmt.Errorf("ledger: decide approval %s: %w", key, ErrNotFound)
	case err != nil:
		return agentsagatype.Approval{}, fmt.Errorf("ledger: decide approval %s: %w", key, err)
	}
	undecidedIsZero(&a)
	switch {
	case !changed && a.Status == agentsagatype.ApprovalSuperseded:
		return a, fmt.Errorf("ledger: approval %s: %w into %s, which asks again for the call: decide the fork's request", key, ErrSuperseded, a.DecidedBy)
	case !changed && (a.Status != status || a.DecidedBy != by):
		return a, fmt.Errorf("ledger: decide approval %s: %w: %s by %s at %s", key, ErrDecided, a.Status, a.DecidedBy, a.DecidedAt.UTC().Format(time.RFC3339))
	}
	return a, nil
}

const getApprovalSQL = `SELECT ` + approvalColumns + ` FROM approvals WHERE idempotency_key = $1`

// GetApproval is the approval request under a call's key, with its
// decision (who, when, why) once made: what a decision that came second
// is told of the one that came first. A key with no request is
// ErrNotFound.
func (s *Store) GetApproval(ctx context.Context, key string) (agentsagatype.Approval, error) {
	a, err := scanApproval(s.pool.QueryRow(ctx, getApprovalSQL, key))
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return agentsagatype.Approval{}, fmt.Errorf("ledger: approval %s: %w", key, ErrNotFound)
	case err != nil:
		return agentsagatype.Approval{}, fmt.Errorf("ledger: approval %s: %w", key, err)
	}
	return a, nil
}

const awaitingApprovalsSQL = `
	SELECT ` + approvalColumns + ` FROM approvals a
	WHERE a.status = 'awaiting-approval'
	  AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.workflow_id = a.workflow_id AND r.finished_at IS NOT NULL)
	ORDER BY a.requested_at, a.idempotency_key
	LIMIT $1`

// AwaitingApprovals lists the calls waiting for a human across the fleet,
// oldest first, at most limit of them. A request of a run that ended
// (terminated, aborted while escalated) waits for nobody and is left out.
func (s *Store) AwaitingApprovals(ctx context.Context, limit int) ([]agentsagatype.Approval, error) {
	rows, err := s.pool.Query(ctx, awaitingApprovalsSQL, limit)
	return collectApprovals("awaiting approvals", rows, err)
}

const awaitingApprovalsUnderSQL = `
	SELECT ` + approvalColumns + ` FROM approvals a
	WHERE a.status = 'awaiting-approval'
	  AND EXISTS (SELECT 1 FROM runs r WHERE r.workflow_id = a.workflow_id AND r.finished_at IS NULL
	              AND (r.account = $2 OR starts_with(r.account, $2 || '/')))
	ORDER BY a.requested_at, a.idempotency_key
	LIMIT $1`

// AwaitingApprovalsUnder is AwaitingApprovals for the runs an account's
// tree holds (the account's and its sub-accounts'), what an API key bound
// to it sees; "" is every run's. A request whose run has no row yet is
// nobody's, so only an account-free listing shows it.
func (s *Store) AwaitingApprovalsUnder(ctx context.Context, account string, limit int) ([]agentsagatype.Approval, error) {
	if account == "" {
		return s.AwaitingApprovals(ctx, limit)
	}
	rows, err := s.pool.Query(ctx, awaitingApprovalsUnderSQL, limit, account)
	return collectApprovals("awaiting approvals of "+account, rows, err)
}

const runApprovalsSQL = `SELECT ` + approvalColumns + ` FROM approvals WHERE workflow_id = $1 ORDER BY requested_at, idempotency_key`

// RunApprovals lists one run's approval requests and their decisions, in
// the order they were asked for.
func (s *Store) RunApprovals(ctx context.Context, workflowID string) ([]agentsagatype.Approval, error) {
	rows, err := s.pool.Query(ctx, runApprovalsSQL, workflowID)
	return collectApprovals("approvals of "+workflowID, rows, err)
}

func collectApprovals(what string, rows pgx.Rows, err error) ([]agentsagatype.Approval, error) {
	if err != nil {
		return nil, fmt.Errorf("ledger: %s: %w", what, err)
	}
	list, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (agentsagatype.Approval, error) { return scanApproval(row) })
	if err != nil {
		return nil, fmt.Errorf("ledger: %s: %w", what, err)
	}
	return list, nil
}

func scanApproval(row pgx.Row) (agentsagatype.Approval, error) {
	var a agentsagatype.Approval
	err := row.Scan(approvalTargets(&a)...)
	undecidedIsZero(&a)
	return a, err
}

// undecidedIsZero turns the epoch the statements give for a request not
// decided yet into the zero time.
func undecidedIsZero(a *agentsagatype.Approval) {
	if a.DecidedAt.Unix() == 0 {
		a.DecidedAt = time.Time{}
	}
}

func approvalTargets(a *agentsagatype.Approval) []any {
	return []any{&a.Key, &a.WorkflowID, &a.Call, &a.Tool, &a.Arguments, &a.Why, &a.Status, &a.DecidedBy, &a.Reason,
		&a.RequestedAt, &a.DecidedAt}
}

const holdLimitSQL = `SELECT granted, total FROM agentsaga_hold_limit($1, $2, $3, $4, $5)`

// HoldLimit counts a call against one of its run's limits, or refuses it
// when the run's total with the call would pass the limit (migration
// 00019, agentsaga_hold_limit). Holding the same call again is granted.
func (s *Store) HoldLimit(ctx context.Context, hold wire.LimitHold) (wire.LimitHeld, error) {
	var held wire.LimitHeld
	if err := s.pool.QueryRow(ctx, holdLimitSQL, hold.Key, hold.WorkflowID, hold.Limit, hold.Amount, hold.AtMost).
		Scan(&held.Granted, &held.Total); err != nil {
		return held, fmt.Errorf("ledger: hold %s against %s: %w", hold.Key, hold.Limit, err)
	}
	return held, nil
}

package ledgerdb

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/agentsaga/agentsaga/agentsagatype"
)

// Retention defaults: what Prune keeps unless told otherwise.
const (
	// DefaultRunRetention keeps a finished run's rows (its actions, leaf
	// calls, compensations, conversation and counters) this long.
	DefaultRunRetention = 30 * 24 * time.Hour
	// DefaultChargeRetention keeps the retry budget's charge records (one
	// per attempt that paid or deposited) this long: long enough for any
	// attempt to have ended, after which a charge key is never asked again.
	DefaultChargeRetention = 24 * time.Hour
	// DefaultPruneBatch bounds each delete, so a prune never holds long
	// locks or writes one huge transaction.
	DefaultPruneBatch = 500
)

// pruneLock is the advisory lock key that lets one pruner at a time work,
// fleet-wide ("agentsaga prune" as a number).
const pruneLock = 0x61676e7470726e // "agntprn"

// ErrPruneBusy is what Prune returns when another pruner holds the lock.
var ErrPruneBusy = errors.New("ledger: another prune is running")

// PruneOptions say what Prune deletes; zero fields take the defaults.
type PruneOptions struct {
	// RunsFinishedBefore deletes runs that finished before it, with all
	// their rows. Runs still running, escalated or needing attention are
	// kept however old: a human still has to act on them.
	RunsFinishedBefore time.Time
	// ChargesBefore deletes retry charges recorded before it.
	ChargesBefore time.Time
	// Batch bounds each delete.
	Batch int
}

// PruneReport counts what a prune deleted.
type PruneReport struct {
	Runs    int64 `json:"runs"`
	Charges int64 `json:"retry_charges"`
}

// prunedStates are the statuses of runs whose rows may go: runs that ended
// and need nobody.
var prunedStates = []string{agentsagatype.RunCompleted, agentsagatype.RunPartial, agentsagatype.RunCompensated, agentsagatype.RunFailed, agentsagatype.RunTerminated}

// Prune deletes what the ledger no longer needs, in bounded batches, under
// an advisory lock so that one pruner in the fleet works at a time (a
// second gets ErrPruneBusy). It stops early, with what it did so far, when
// ctx ends.
func (s *Store) Prune(ctx context.Context, opts PruneOptions) (PruneReport, error) {
	now := time.Now()
	if opts.RunsFinishedBefore.IsZero() {
		opts.RunsFinishedBefore = now.Add(-DefaultRunRetention)
	}
	if opts.ChargesBefore.IsZero() {
		opts.ChargesBefore = now.Add(-DefaultChargeRetention)
	}
	if opts.Batch <= 0 {
		opts.Batch = DefaultPruneBatch
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return PruneReport{}, fmt.Errorf("ledger: prune: %w", err)
	}
	defer conn.Release()
	var locked bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, pruneLock).Scan(&locked); err != nil {
		return PruneReport{}, fmt.Errorf("ledger: prune: take the lock: %w", err)
	}
	if !locked {
		return PruneReport{}, ErrPruneBusy
	}
	defer func() {
		_, _ = conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, pruneLock)
	}()

	var report PruneReport
	for {
		tag, err := conn.Exec(ctx, `
			DELETE FROM retry_charges WHERE charge_key IN (
				SELECT charge_key FROM retry_charges WHERE created_at < $1 LIMIT $2)`,
			opts.ChargesBefore, opts.Batch)
		if err != nil {
			return report, fmt.Errorf("ledger: prune retry charges: %w", err)
		}
		report.Charges += tag.RowsAffected()
		if tag.RowsAffected() < int64(opts.Batch) {
			break
		}
	}
	// An Idempotency-Key of the HTTP API binds its start for a day
	// (migration 00028); after that its row is only clutter.
	if _, err := conn.Exec(ctx, `DELETE FROM api_start_requests WHERE created_at < now() - interval '1 day'`); err != nil {
		return report, fmt.Errorf("ledger: prune the API's idempotency keys: %w", err)
	}
	for {
		// One batch of runs and every row of theirs, in one statement:
		// a run is gone whole or not at all.
		var deleted int64
		err := conn.QueryRow(ctx, `
			WITH doomed AS (
				SELECT workflow_id FROM runs
				WHERE finished_at < $1 AND status = ANY($2)
				ORDER BY finished_at LIMIT $3
				FOR UPDATE SKIP LOCKED
			), m AS (
				DELETE FROM messages WHERE workflow_id IN (SELECT workflow_id FROM doomed)
			), l AS (
				DELETE FROM leaf_calls WHERE workflow_id IN (SELECT workflow_id FROM doomed)
			), c AS (
				DELETE FROM compensations WHERE workflow_id IN (SELECT workflow_id FROM doomed)
			), a AS (
				DELETE FROM actions WHERE workflow_id IN (SELECT workflow_id FROM doomed)
			), k AS (
				DELETE FROM run_retry_counters WHERE workflow_id IN (SELECT workflow_id FROM doomed)
			), e AS (
				DELETE FROM run_events WHERE workflow_id IN (SELECT workflow_id FROM doomed)
			), i AS (
				DELETE FROM run_event_inbox WHERE workflow_id IN (SELECT workflow_id FROM doomed)
			), h AS (
				DELETE FROM run_event_heads WHERE workflow_id IN (SELECT workflow_id FROM doomed)
			), ad AS (
				-- A finished run's admission has ended: it teaches the
				-- estimates of its account's later runs until it is pruned.
				DELETE FROM run_admissions WHERE run_id IN (SELECT workflow_id FROM doomed) AND status IN ('ended', 'cancelled')
			), r AS (
				DELETE FROM runs WHERE workflow_id IN (SELECT workflow_id FROM doomed) RETURNING 1
			)
			SELECT count(*) FROM r`,
			opts.RunsFinishedBefore, prunedStates, opts.Batch).Scan(&deleted)
		if err != nil {
			return report, fmt.Errorf("ledger: prune finished runs: %w", err)
		}
		report.Runs += deleted
		if deleted < int64(opts.Batch) {
			return report, nil
		}
	}
}

package ledgerdb

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/jackc/pgx/v5"
)

// StartRun records that a run began. Recording the same workflow ID again
// is a no-op, because Temporal may deliver the recording activity twice.
func (s *Store) StartRun(ctx context.Context, run agentsagatype.Run) error {
	return s.startRun(ctx, run, "")
}

// StartRunBy is StartRun for a run started on someone's behalf (the HTTP
// API's key): it records who started it (runs.started_by). The API writes
// the row itself, right after the start, so that a read straight after
// finds the run; the run's first activity, which writes it too, may have
// come first, and then only started_by is filled in.
func (s *Store) StartRunBy(ctx context.Context, run agentsagatype.Run, startedBy string) error {
	return s.startRun(ctx, run, startedBy)
}

func (s *Store) startRun(ctx context.Context, run agentsagatype.Run, startedBy string) error {
	spec := run.Spec
	if len(spec) == 0 {
		spec = json.RawMessage("{}")
	}
	_, err := s.pool.Exec(ctx, `
		INSERT INTO runs (workflow_id, run_id, parent_workflow_id, goal, spec, started_by)
		VALUES ($1, $2, NULLIF($3, ''), $4, $5, $6)
		ON CONFLICT (workflow_id) DO UPDATE SET started_by = EXCLUDED.started_by
		WHERE runs.started_by = '' AND EXCLUDED.started_by <> ''`,
		run.WorkflowID, run.RunID, run.ParentWorkflowID, run.Goal, spec, startedBy)
	if err != nil {
		return fmt.Errorf("ledger: start run %s: %w", run.WorkflowID, err)
	}
	return nil
}

// FinishRun records how a run ended. The leaf-call count is taken from the
// leaf_calls table so that it counts every attempt, not just the ones the
// workflow saw; a leaf call still in flight then was lost (its worker
// died) and is marked so. From now on no claim of the run is accepted.
func (s *Store) FinishRun(ctx context.Context, workflowID string, out agentsagatype.RunOutcome) error {
	tag, err := s.pool.Exec(ctx, `
		WITH lost AS (
			UPDATE leaf_calls SET outcome = 'lost', finished_at = clock_timestamp(),
			       error = 'the attempt was lost: its run ended while it was in flight'
			WHERE workflow_id = $1 AND outcome = 'in-flight'
		)
		UPDATE runs SET status = $2, answer = $3, handoff_note = $4, reason = $5,
		       steps_used = $6, tokens_used = $7, usd_spent = $8, calls = $9, retries = $10,
		       leaf_calls = (SELECT count(*) FROM leaf_calls WHERE workflow_id = $1),
		       finished_at = coalesce(finished_at, clock_timestamp())
		WHERE workflow_id = $1`,
		workflowID, out.Status, storable(out.Answer), storable(out.HandoffNote), storable(out.Reason), out.StepsUsed, out.TokensUsed,
		out.USDSpent, out.Calls, out.Retries)
	if err != nil {
		return fmt.Errorf("ledger: finish run %s: %w", workflowID, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("ledger: finish run %s: %w", workflowID, ErrNotFound)
	}
	return nil
}

// runColumns are what GetRun and ListRuns read of a run, in scanRun's
// order; ListRuns leaves the spec out (runSpecColumn).
const runColumns = `workflow_id, run_id, parent_workflow_id, goal, status, answer, handoff_note, reason, status_detail,
	steps_used, leaf_calls, tokens_used, usd_spent, calls, retries, started_at, finished_at, account, started_by,
	coalesce(forked_from, ''), coalesce(forked_at_step, 0), forked_into`

func scanRun(row pgx.Row, withSpec bool) (agentsagatype.Run, error) {
	var r agentsagatype.Run
	var parent, forkedInto *string
	targets := []any{&r.WorkflowID, &r.RunID, &parent, &r.Goal, &r.Status, &r.Answer, &r.HandoffNote, &r.Reason, &r.StatusDetail,
		&r.StepsUsed, &r.LeafCalls, &r.TokensUsed, &r.USDSpent, &r.Calls, &r.Retries, &r.StartedAt, &r.FinishedAt, &r.Account, &r.StartedBy,
		&r.ForkedFrom, &r.ForkedAtStep, &forkedInto}
	if withSpec {
		targets = append(targets, &r.Spec)
	}
	if err := row.Scan(targets...); err != nil {
		return agentsagatype.Run{}, err
	}
	if parent != nil {
		r.ParentWorkflowID = *parent
	}
	if forkedInto != nil {
		r.Forks = []string{*forkedInto} // a run is forked once (ForkRun)
	}
	return r, nil
}

// GetRun reads one run.
func (s *Store) GetRun(ctx context.Context, workflowID string) (agentsagatype.Run, error) {
	r, err := scanRun(s.pool.QueryRow(ctx, `SELECT `+runColumns+`, spec FROM runs WHERE workflow_id = $1`, workflowID), true)
	if errors.Is(err, pgx.ErrNoRows) {
		return agentsagatype.Run{}, fmt.Errorf("ledger: get run %s: %w", workflowID, ErrNotFound)
	}
	if err != nil {
		return agentsagatype.Run{}, fmt.Errorf("ledger: get run %s: %w", workflowID, err)
	}
	return r, nil
}

// RunFilter is which runs ListRuns returns: every condition set must hold.
type RunFilter struct {
	// Status is the runs' status ("" any).
	Status string
	// Account is the account the runs are charged to, exactly ("" any).
	Account string
	// Under keeps the runs an account's tree holds: the account's and its
	// sub-accounts' ("acme" holds "acme/support", not "acme-corp"); ""
	// keeps every run. It is what an API key bound to an account sees.
	Under string
	// After continues a listing past the last run of its previous page.
	After *RunCursor
	// Limit is the most runs returned (1 to 1000).
	Limit int
}

// RunCursor is where a page of runs ended: its last run's start and ID.
type RunCursor struct {
	StartedAt  time.Time
	WorkflowID string
}

// listRunsSQL is ListRuns' one statement. Each condition the filter
// leaves unset is true whatever the row; Postgres plans the statement for
// the values it is given (its custom plans cost less than a generic one
// here), so an account filter reads the runs_by_account index and the
// others runs_by_start, newest first, until the page is full.
const listRunsSQL = `SELECT ` + runColumns + ` FROM runs
	WHERE ($1 = '' OR status = $1)
	  AND ($2 = '' OR account = $2)
	  AND ($3 = '' OR account = $3 OR starts_with(account, $3 || '/'))
	  AND ($4::timestamptz IS NULL OR (started_at, workflow_id) < ($4, $5))
	ORDER BY started_at DESC, workflow_id DESC LIMIT $6`

// ListRuns lists runs newest first (by start, then ID), without their
// specs.
func (s *Store) ListRuns(ctx context.Context, f RunFilter) ([]agentsagatype.Run, error) {
	if f.Limit < 1 || f.Limit > 1000 {
		return nil, fmt.Errorf("ledger: list runs: limit %d is not between 1 and 1000", f.Limit)
	}
	var afterAt *time.Time
	var afterID string
	if f.After != nil {
		afterAt, afterID = &f.After.StartedAt, f.After.WorkflowID
	}
	rows, err := s.pool.Query(ctx, listRunsSQL, f.Status, f.Account, f.Under, afterAt, afterID, f.Limit)
	if err != nil {
		return nil, fmt.Errorf("ledger: list runs: %w", err)
	}
	runs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (agentsagatype.Run, error) { return scanRun(row, false) })
	if err != nil {
		return nil, fmt.Errorf("ledger: list runs: %w", err)
	}
	return runs, nil
}

// LiveCounters is what a run has spent so far, read from the leaf calls and
// the shared retry counters, so it is true while the run is still going.
type LiveCounters struct {
	// Calls counts logical calls: distinct activity IDs that left the process.
	Calls         int            `json:"calls"`
	LeafCalls     int            `json:"leaf_calls"`
	Retries       int            `json:"retries"`
	ToolRetries   map[string]int `json:"tool_retries,omitempty"`
	Amplification float64        `json:"amplification"`
}

// RunLiveCounters reads a run's counters.
func (s *Store) RunLiveCounters(ctx context.Context, workflowID string) (LiveCounters, error) {
	var c LiveCounters
	err := s.pool.QueryRow(ctx, `
		SELECT count(DISTINCT activity_id), count(*) FROM leaf_calls WHERE workflow_id = $1`, workflowID).
		Scan(&c.Calls, &c.LeafCalls)
	if err != nil {
		return c, fmt.Errorf("ledger: counters of %s: %w", workflowID, err)
	}
	retries, err := s.RunRetryCounters(ctx, workflowID)
	if err != nil {
		return c, err
	}
	c.Retries, c.ToolRetries = retries.Retries, retries.ToolRetries
	if c.Calls > 0 {
		c.Amplification = float64(c.LeafCalls) / float64(c.Calls)
	}
	return c, nil
}

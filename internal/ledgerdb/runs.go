package ledgerdb

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/jackc/pgx/v5"
)

// StartRun records that a run began. Recording the same workflow ID again
// is a no-op, because Temporal may deliver the recording activity twice.
func (s *Store) StartRun(ctx context.Context, run agentsagatype.Run) error {
	spec := run.Spec
	if len(spec) == 0 {
		spec = json.RawMessage("{}")
	}
	_, err := s.pool.Exec(ctx, `
		INSERT INTO runs (workflow_id, run_id, parent_workflow_id, goal, spec)
		VALUES ($1, $2, NULLIF($3, ''), $4, $5)
		ON CONFLICT (workflow_id) DO NOTHING`,
		run.WorkflowID, run.RunID, run.ParentWorkflowID, run.Goal, spec)
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

// GetRun reads one run.
func (s *Store) GetRun(ctx context.Context, workflowID string) (agentsagatype.Run, error) {
	var r agentsagatype.Run
	var parent *string
	err := s.pool.QueryRow(ctx, `
		SELECT workflow_id, run_id, parent_workflow_id, goal, spec, status, answer, handoff_note, reason, status_detail,
		       steps_used, leaf_calls, tokens_used, usd_spent, calls, retries, started_at, finished_at
		FROM runs WHERE workflow_id = $1`, workflowID).Scan(
		&r.WorkflowID, &r.RunID, &parent, &r.Goal, &r.Spec, &r.Status, &r.Answer, &r.HandoffNote, &r.Reason, &r.StatusDetail,
		&r.StepsUsed, &r.LeafCalls, &r.TokensUsed, &r.USDSpent, &r.Calls, &r.Retries, &r.StartedAt, &r.FinishedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return agentsagatype.Run{}, fmt.Errorf("ledger: get run %s: %w", workflowID, ErrNotFound)
	}
	if err != nil {
		return agentsagatype.Run{}, fmt.Errorf("ledger: get run %s: %w", workflowID, err)
	}
	if parent != nil {
		r.ParentWorkflowID = *parent
	}
	return r, nil
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
